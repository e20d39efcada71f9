"""The machine form of a paper's claim (``claims.<id>.compare`` in a paper file):
``<side>.<metric> > <side>.<metric>`` (or ``<``), a side one row id or ``mean(row, row, ...)``.

``parse_comparison`` turns it into a ``Comparison`` that always reads "left above right": a claim
written with ``<`` has its sides swapped (``a.meanr < b.meanr`` is ``b.meanr > a.meanr``). The plan
reads claims with it at every Snakemake start, so it needs no pandas (``methods.report.cells``
writes the checked claims).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from methods.errors import HarnessError

_SIDE = r"(?:mean\(\s*(?P<{0}_rows>[a-z0-9_]+(?:\s*,\s*[a-z0-9_]+)*)\s*\)|(?P<{0}_row>[a-z0-9_]+))\.(?P<{0}_metric>[a-z0-9_]+)"
_FORM = re.compile(rf"^\s*{_SIDE.format('a')}\s*(?P<op>[<>])\s*{_SIDE.format('b')}\s*$")


@dataclass(frozen=True)
class Comparison:
    left: tuple[str, ...]    # rows whose mean is claimed to be above
    right: tuple[str, ...]
    metric: str

    @property
    def rows(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.left + self.right))

    def text(self) -> str:
        def side(rows):
            return rows[0] if len(rows) == 1 else f"mean({', '.join(rows)})"
        return f"{side(self.left)}.{self.metric} > {side(self.right)}.{self.metric}"


def parse_comparison(text: str, where: str) -> Comparison:
    match = _FORM.match(text)
    if match is None:
        raise HarnessError(f"{where}: '{text}' is not '<side>.<metric> > <side>.<metric>' (a side: a row id or "
                           f"mean(row, row, ...))")

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
