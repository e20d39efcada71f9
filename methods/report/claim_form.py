"""The machine form of a paper's claim (``claims.<id>.compare`` in a paper file):

- ``<side>.<metric> > <side>.<metric>`` (or ``<``), a side one row id or ``mean(row, row, ...)``;
- ``best(row, row, ...).<metric> == <row>``: that row is the best of the set, i.e. above the best
  of the others (the highest, or for a lower-is-better metric the lowest);
- ``rank(<row> among row, row, ...).<metric> <= k``: the row is among the k best of itself and the
  others named, i.e. above the k-th best of the others (k = 1 is a best-of-set claim);
- ``|<side>.<metric> - <side>.<metric>| <= d``: the two sides are equivalent within d (a bound
  the paper file justifies in the claim's ``bound_reason``).

``parse_comparison`` turns each into a ``Comparison`` that reads "left above right" (or, for an
equivalence, "left − right within ±d"), each side reduced to one value (the mean of its rows, or
the k-th best of them: ``max``, ``max2``, ...): a claim written with ``<`` has its sides swapped
(``a.meanr < b.meanr`` is ``b.meanr > a.meanr``), and a best-of-set or rank claim on a
lower-is-better metric reads "the k-th lowest of the others above the row". The plan reads claims
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
_RANK = re.compile(r"^\s*rank\(\s*(?P<best>[a-z0-9_]+)\s+among\s+(?P<rows>[a-z0-9_]+(?:\s*,\s*[a-z0-9_]+)*)\s*\)"
                   r"\.(?P<metric>[a-z0-9_]+)\s*<=\s*(?P<k>[0-9]+)\s*$")
_EQUIVALENT = re.compile(rf"^\s*\|\s*{_SIDE.format('a')}\s*-\s*{_SIDE.format('b')}\s*\|\s*<=\s*"
                         r"(?P<bound>[0-9]+(?:\.[0-9]+)?)\s*$")
_REDUCTION = re.compile(r"^(mean|(max|min)([2-9]|[1-9][0-9]+)?)$")


def order_reduction(highest: bool, k: int) -> str:
    """The reduction to the k-th highest (``max``, ``max2``, ...) or k-th lowest (``min``, ...) row."""
    return ("max" if highest else "min") + ("" if k == 1 else str(k))


def parse_reduction(reduction: str) -> tuple[str, int]:
    """``mean`` -> ("mean", 0); ``max`` -> ("max", 1); ``min3`` -> ("min", 3)."""
    match = _REDUCTION.match(reduction)
    if match is None:
        raise HarnessError(f"reduction '{reduction}' is not mean, max[k] or min[k]")
    if match.group(1) == "mean":
        return "mean", 0
    return match.group(2), int(match.group(3) or 1)


@dataclass(frozen=True)
class Comparison:
    left: tuple[str, ...]    # rows whose reduced value is claimed to be above
    right: tuple[str, ...]
    metric: str
    left_reduce: str = "mean"
    right_reduce: str = "mean"
    best: str | None = None   # a best-of-set or rank claim: the row claimed best (or within the rank)
    members: tuple[str, ...] = ()   # ... and the set, as written (the row first in a rank claim)
    rank: int | None = None         # ... the rank claimed: 1 for best-of-set
    bound: float | None = None      # an equivalence claim: |left - right| <= bound
    ranked_form: bool = False       # written as rank(...) (not best(...))

    @property
    def rows(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.left + self.right))

    def text(self) -> str:
        if self.best is not None and self.ranked_form:
            others = [r for r in self.members if r != self.best]
            return f"rank({self.best} among {', '.join(others)}).{self.metric} <= {self.rank}"
        if self.best is not None:
            return f"best({', '.join(self.members)}).{self.metric} == {self.best}"

        def side(rows):
            return rows[0] if len(rows) == 1 else f"mean({', '.join(rows)})"
        if self.bound is not None:
            return f"|{side(self.left)}.{self.metric} - {side(self.right)}.{self.metric}| <= {self.bound:g}"
        return f"{side(self.left)}.{self.metric} > {side(self.right)}.{self.metric}"


def known_metric(metric: str, where: str) -> str:
    if metric not in METRICS:
        raise HarnessError(f"{where}: unknown metric '{metric}' (registered: {', '.join(METRICS.names())})")
    return metric


def parse_best(match: re.Match, text: str, where: str) -> Comparison:
    members = tuple(r.strip() for r in match.group("rows").split(","))
    return best_set(members, match.group("best"), known_metric(match.group("metric"), where), text, where)


def parse_rank(match: re.Match, text: str, where: str) -> Comparison:
    best, others = match.group("best"), tuple(r.strip() for r in match.group("rows").split(","))
    if best in others:
        raise HarnessError(f"{where}: '{text}' names '{best}' among the others too: list the rows it is ranked against")
    return best_set((best, *others), best, known_metric(match.group("metric"), where), text, where,
                    rank=int(match.group("k")), ranked_form=True)


def best_of(comparison: Comparison, members: list[str], where: str) -> Comparison:
    """A best-of-set or rank comparison over fewer ``members`` (the claimed row among them)."""
    return best_set(tuple(members), comparison.best, comparison.metric, comparison.text(), where,
                    rank=comparison.rank or 1, ranked_form=comparison.ranked_form)


def best_set(members: tuple[str, ...], best: str, metric: str, text: str, where: str, rank: int = 1,
             ranked_form: bool = False) -> Comparison:
    if len(members) < 2:
        raise HarnessError(f"{where}: '{text}' compares the best row with no other row")
    if len(set(members)) != len(members):
        raise HarnessError(f"{where}: '{text}' names a row twice in the set")
    if best not in members:
        raise HarnessError(f"{where}: '{text}': the row claimed best, '{best}', is not in the set")
    others = tuple(r for r in members if r != best)
    if not 1 <= rank <= len(others):
        raise HarnessError(f"{where}: '{text}': a rank of at most {rank} among {len(members)} rows "
                           f"{'holds whatever the numbers' if rank > len(others) else 'is not a rank'}: "
                           f"the rank must be 1 to {len(others)}")
    if METRICS.get(metric).direction == "higher":
        return Comparison((best,), others, metric, right_reduce=order_reduction(True, rank), best=best,
                          members=members, rank=rank, ranked_form=ranked_form)
    return Comparison(others, (best,), metric, left_reduce=order_reduction(False, rank), best=best, members=members,
                      rank=rank, ranked_form=ranked_form)


def parse_comparison(text: str, where: str) -> Comparison:
    for form, parse in ((_BEST, parse_best), (_RANK, parse_rank)):
        found = form.match(text)
        if found is not None:
            return parse(found, text, where)
    equivalent = _EQUIVALENT.match(text)
    match = equivalent or _FORM.match(text)
    if match is None:
        raise HarnessError(f"{where}: '{text}' is not '<side>.<metric> > <side>.<metric>' (a side: a row id or "
                           f"mean(row, row, ...)), 'best(row, row, ...).<metric> == <row>', "
                           f"'rank(<row> among row, ...).<metric> <= k' or '|<side>.<metric> - <side>.<metric>| <= d'")

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
    if equivalent is not None:
        bound = float(equivalent.group("bound"))
        if not bound > 0:
            raise HarnessError(f"{where}: '{text}': an equivalence bound must be positive")
        return Comparison(a, b, known_metric(match.group("a_metric"), where), bound=bound)
    left, right = (a, b) if match.group("op") == ">" else (b, a)
    return Comparison(left, right, match.group("a_metric"))
