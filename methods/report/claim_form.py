"""The machine form of a paper's claim (``claims.<id>.compare`` in a paper file):
``<side>.<metric> > <side>.<metric>`` (or ``<``), a side one row id or ``mean(row, row, ...)``.

``parse_comparison`` turns it into a ``Comparison`` that always reads "left above right": a claim
written with ``<`` has its sides swapped (``a.meanr < b.meanr`` is ``b.meanr > a.meanr``).
``number``, ``ours_difference`` and ``escape_cell`` write a checked claim the same way in the claims
table and the reproduction report.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

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


def number(value, digits: int = 2, signed: bool = False) -> str:
    """A number of a claims table as shown (– when missing)."""
    if value is None or pd.isna(value):
        return "–"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def ours_difference(r) -> str:
    """Our difference, ± its spread over seeds and how many seeds' differences exceed the claimed
    margin (rows sharing two or more seeds), and the seeds."""
    if pd.isna(r.n_seeds):
        return f"{number(r.reproduced_difference, signed=True)} (seeds per row)"
    seeds = int(r.n_seeds)
    if pd.isna(r.difference_seed_std):
        return f"{number(r.reproduced_difference, signed=True)} ({seeds} seed{'s' if seeds > 1 else ''})"
    return (f"{number(r.reproduced_difference, signed=True)} ± {number(r.difference_seed_std)} ({seeds} seeds, "
            f"{int(r.seeds_above_margin)} above the margin)")


def escape_cell(text) -> str:
    """Text for a markdown table cell: pipes escaped, one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")
