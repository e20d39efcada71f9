"""Paired differences over seeds: a row's value of a metric at each seed against the value of the
row it is compared with (``compare_to``) at the same seed; the mean and population std of the
differences, and the two-sided paired t-test's p (scipy)."""
from __future__ import annotations

import numpy as np
from scipy import stats

from methods.errors import HarnessError


def seed_pairs(row: str, compared: str, cell: dict, other: dict) -> tuple[np.ndarray, np.ndarray]:
    """The values of one metric of ``row`` and of ``compared`` (their aggregates' cells: ``values``
    and the ``seeds`` they come from), seed by seed in seed order."""
    if "seeds" not in cell or "seeds" not in other:
        raise HarnessError(f"the aggregates of rows '{row}' and '{compared}' do not say "
                           f"which seed each value comes from (written by an older version): "
                           f"re-aggregate them (delete results/<dataset>/rows/)")
    mine, theirs = dict(zip(cell["seeds"], cell["values"])), dict(zip(other["seeds"], other["values"]))
    if set(mine) != set(theirs):
        raise HarnessError(f"row '{row}' compares to '{compared}' but their seeds differ "
                           f"({sorted(mine)} vs {sorted(theirs)})")
    seeds = sorted(mine)
    return (np.array([mine[s] for s in seeds], dtype=float),
            np.array([theirs[s] for s in seeds], dtype=float))


def paired_statistics(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float | None]:
    """Mean and population std of ``a - b``, and the two-sided paired t-test p (None when
    undefined: one seed, or the same difference for every seed)."""
    diff = a - b
    p = None
    if len(a) > 1 and np.ptp(diff) > 0:
        p = float(stats.ttest_rel(a, b).pvalue)
    return float(np.mean(diff)), float(np.std(diff)), p
