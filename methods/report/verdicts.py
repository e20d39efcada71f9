"""The verdicts of a table's cells and rows: a cell's reproduced value against the reported one
within the tolerance its metric's declaration names (``within`` / ``outside``), or why it is not
judged (``not comparable``, ``not reported``, ``reported only``, ``did not train``); a row's verdict
under a protocol from its cells; the verdicts a whole table's judged cells give."""
from __future__ import annotations

import pandas as pd

from methods.errors import HarnessError
from methods.metrics.declarations import METRICS
from methods.metrics.training_check import NOT_TRAINED, TRAINED, UNKNOWN


def tolerance_for(metric: str, tolerance: dict) -> float:
    """The configured tolerance for ``metric``: the entry its declaration names."""
    key = METRICS.get(metric).tolerance
    if key is None:
        raise HarnessError(f"metric '{metric}' is shown in tables but declares no tolerance")
    return tolerance[key]


REPORTED_ONLY = "reported only"
NOT_REPORTED = "not reported"


def verdict(reproduced: float, reported: float | None, incomparable: str | None, ens_repro: int,
            ens_reported: int | None, tol: float, reported_only: bool = False) -> str:
    """A cell's verdict; ``incomparable``: why the dataset's numbers are not the paper's (synthetic
    data, a smoke run), None for real data."""
    if reported_only:
        return REPORTED_ONLY
    if reported is None:
        return NOT_REPORTED
    if incomparable:
        return f"not comparable ({incomparable})"
    if ens_reported != ens_repro:
        return f"not comparable (ensemble of {ens_reported} vs {ens_repro})"
    return "within" if abs(reproduced - reported) <= tol + 1e-9 else "outside"


TRAINED_CELLS = {TRAINED: "yes", NOT_TRAINED: "no", UNKNOWN: "unknown"}   # the ``trained`` column


def row_verdict(cells: pd.DataFrame) -> str:
    """One row's verdict under one protocol, from its cells: ``did not train`` for a row that did
    not train, ``reported only`` for a row the harness does not run, ``not reported`` without a
    reported number, the verdict of its cells with a reported number where they share one, else
    each verdict with its metrics (``within: i2t_r5, ...; outside: i2t_r1``)."""
    if (cells["verdict"] == REPORTED_ONLY).all():
        return REPORTED_ONLY
    if (cells["trained"] == TRAINED_CELLS[NOT_TRAINED]).any():
        return NOT_TRAINED
    judged = cells[cells["reported"] != ""]
    if judged.empty:
        return NOT_REPORTED
    groups: dict[str, list[str]] = {}
    for metric, value in zip(judged["metric"], judged["verdict"]):
        groups.setdefault(value, []).append(metric)
    if len(groups) == 1:
        return next(iter(groups))
    return "; ".join(f"{value}: {', '.join(metrics)}" for value, metrics in groups.items())


def row_verdicts(rows: pd.DataFrame) -> pd.Series:
    """``row_verdict`` per (row, protocol)."""
    return rows.groupby(["row", "protocol"], sort=False).apply(row_verdict, include_groups=False)


def table_verdicts(rows: pd.DataFrame) -> set[str]:
    """The verdicts of the table's judged cells (with a reported number, of a row the harness
    runs), and ``did not train`` where a row did not."""
    judged = (rows["reported"] != "") & (rows["verdict"] != REPORTED_ONLY)
    untrained = rows["trained"] == TRAINED_CELLS[NOT_TRAINED]
    return set(rows.loc[judged | untrained, "verdict"].where(~untrained[judged | untrained], NOT_TRAINED))
