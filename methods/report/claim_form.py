"""The machine form of a paper's claim (``claims.<id>.compare`` in a paper file):

- ``<side>.<metric> > <side>.<metric>`` (or ``<``), a side one row id or ``mean(row, row, ...)``;
- ``best(row, row, ...).<metric> == <row>``: that row is the best of the set, i.e. above the best
  of the others (the highest, or for a lower-is-better metric the lowest).

``parse_comparison`` turns either into a ``Comparison`` that always reads "left above right", each
side reduced to one value (the mean of its rows, or the best of them): a claim written with ``<``
has its sides swapped (``a.meanr < b.meanr`` is ``b.meanr > a.meanr``), and a best-of-set claim on
a lower-is-better metric reads "the lowest of the others above the row". The plan reads claims
with it at every Snakemake start, so it needs no pandas (``methods.report.cells`` writes the
checked claims).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from methods.errors import HarnessError
from methods.metrics.declarations import METRICS

_SIDE = r"(?:mean\(\s*(?P<{0}_rows>[a-z0-9_]+(?:\s*,\s*[a-z0-9_]+)*)\s*\)|(?P<{0}_row>[a-z0-9_]+))\.(?P<{0}_metric>[a-z0-9_]+)"
_FORM = re.compile(rf"^\s*{_SIDE.format('a')}\s*(?P<op>[<>])\s*{_SIDE.format('b')}\s*$")
_BEST = re.compile(r"^\s*best\(\s*(?P<rows>[a-z0-9_]+(?:\s*,\s*[a-z0-9_]+)+)\s*\)\.(?P<metric>[a-z0-9_]+)\s*==\s*"
                   r"(?P<best>[a-z0-9_]+)\s*$")
REDUCTIONS = ("mean", "max", "min")   # how a side's rows give its value


@dataclass(frozen=True)
class Comparison:
    left: tuple[str, ...]    # rows whose reduced value is claimed to be above
    right: tuple[str, ...]
    metric: str
    left_reduce: str = "mean"
    right_reduce: str = "mean"
    best: str | None = None   # a best-of-set claim: the row claimed best
    members: tuple[str, ...] = ()   # ... and the set, as written

    @property
    def rows(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.left + self.right))

    def text(self) -> str:
        if self.best is not None:
            return f"best({', '.join(self.members)}).{self.metric} == {self.best}"

        def side(rows):
            return rows[0] if len(rows) == 1 else f"mean({', '.join(rows)})"
        return f"{side(self.left)}.{self.metric} > {side(self.right)}.{self.metric}"


def parse_best(match: re.Match, text: str, where: str) -> Comparison:
    members = tuple(r.strip() for r in match.group("rows").split(","))
    best, metric = match.group("best"), match.group("metric")
    if metric not in METRICS:
        raise HarnessError(f"{where}: unknown metric '{metric}' (registered: {', '.join(METRICS.names())})")
    return best_set(members, best, metric, text, where)


def best_of(comparison: Comparison, members: list[str], where: str) -> Comparison:
    """A best-of-set comparison over fewer ``members`` (the claimed best among them)."""
    return best_set(tuple(members), comparison.best, comparison.metric, comparison.text(), where)


def best_set(members: tuple[str, ...], best: str, metric: str, text: str, where: str) -> Comparison:
    if len(members) < 2:
        raise HarnessError(f"{where}: '{text}' compares the best row with no other row")
    if len(set(members)) != len(members):
        raise HarnessError(f"{where}: '{text}' names a row twice in the set")
    if best not in members:
        raise HarnessError(f"{where}: '{text}': the row claimed best, '{best}', is not in the set")
    others = tuple(r for r in members if r != best)
    if METRICS.get(metric).direction == "higher":
        return Comparison((best,), others, metric, right_reduce="max", best=best, members=members)
    return Comparison(others, (best,), metric, left_reduce="min", best=best, members=members)


def parse_comparison(text: str, where: str) -> Comparison:
    best = _BEST.match(text)
    if best is not None:
        return parse_best(best, text, where)
    match = _FORM.match(text)
    if match is None:
        raise HarnessError(f"{where}: '{text}' is not '<side>.<metric> > <side>.<metric>' (a side: a row id or "
                           f"mean(row, row, ...)) or 'best(row, row, ...).<metric> == <row>'")

    def rows(name: str) -> tuple[str, ...]:
        listed = match.group(f"{name}_rows")
        return tuple(r.strip() for r in listed.split(",")) if listed else (match.group(f"{name}_row"),)
    a, b = rows("a"), rows("b")
    if match.group("a_metric") != match.group("b_metric"):
        raise HarnessError(f"{where}: '{text}' compares {match.group('a_metric')} with {match.group('b_metric')}; "
                           f"both sides need the same metric")
    for side in (a, b):
        if len(set(side)) != len(side):
            raise HarnessError(f"{where}: '{text}' names a row twice in one mean")
    if set(a) & set(b):
        raise HarnessError(f"{where}: '{text}' has row(s) {sorted(set(a) & set(b))} on both sides")
    left, right = (a, b) if match.group("op") == ">" else (b, a)
    return Comparison(left, right, match.group("a_metric"))
