"""Cells of the claims table, the reproduction report and the summary: a number as shown, our
difference of a claim with its spread over seeds, text escaped for a markdown cell; the claims
table and the reports write a checked claim the same way."""
from __future__ import annotations

import pandas as pd


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
