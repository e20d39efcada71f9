"""Uncertainty of a claimed difference between table rows from the test queries: a paired
bootstrap over test *images*, each resampled with all of its texts.

- A claim compares two sides, each one row or the mean of several rows, on one metric under one
  protocol. A row's units (``methods.metrics.query_units``: per image and base metric, the sum
  of its queries' values and their count) are averaged over the row's seeds first
  (``mean_over_seeds``): every seed scores the same test images, so the interval is that of the
  seed-mean difference over test images.
- ``side_value``: a side's metric on a set of (resampled) images: per row, the sum over the
  metric's base metrics of (sum of the images' sums / sum of their counts); then the mean over
  the side's rows. Vectorised over resamples.
- ``paired_difference_interval``: ``scipy.stats.bootstrap`` (BCa by default) of
  side_value(A) − side_value(B), paired: both sides' units and the counts are one sample, so
  both sides are scored on the same resampled images. A mean over queries has the relevance's
  counts, the same for every row; a pooled metric (micro-F1) each row's and seed's own
  denominators, so each (row, seed) is a row of its side, weighted to the seed-mean of each row.
  The random state is
  a seeded generator: the same units give the same interval, bit for bit.
- ``verdict``: a claim that A exceeds B by more than ``margin`` (0: A above B) is ``supported``
  when the interval lies above the margin, ``contradicted`` when it lies below it (with margin 0:
  the interval excludes 0 in the other direction), else ``inconclusive``; ``undetermined`` when the
  interval is not defined. ``equivalence_verdict``: a claim that |A − B| <= d, TOST on the same
  interval (supported inside (−d, d), contradicted wholly outside [−d, d]).
- ``claim_verdict``: no verdict on rows that did not train (``undetermined: <rows> did not train``,
  whatever the interval) or on a metric saturated on every compared row (``undetermined:
  saturated``: e.g. R@10 = 100 on both sides cannot tell them apart); else ``verdict``.
"""
from __future__ import annotations

import warnings

import numpy as np
from scipy import stats

from methods.errors import HarnessError
from methods.report.claim_form import parse_reduction

BOOTSTRAP_BATCH_ELEMENTS = 1 << 24   # resampled unit values held at once (bounds memory on COCO 5K)


def mean_over_seeds(sums_per_seed: list[np.ndarray]) -> np.ndarray:
    """A row's unit sums averaged over its seeds (every seed scores the same test images)."""
    shapes = {s.shape for s in sums_per_seed}
    if len(shapes) != 1:
        raise HarnessError(f"the seeds of a row score different test sets: unit shapes {sorted(shapes)}")
    return np.mean(np.stack(sums_per_seed), axis=0)


def reduce_rows(values: np.ndarray, reduce: str, weights: np.ndarray | None = None) -> np.ndarray:
    """Rows (axis 0) to one value: their mean (weighted by ``weights``, which sum to 1), or the k-th
    highest (``max``, ``max2``, ...) or k-th lowest (``min``, ``min2``, ...): the best of a set, or
    the row a rank claim's row must beat."""
    kind, k = parse_reduction(reduce)
    if kind == "mean":
        return values.mean(axis=0) if weights is None else np.tensordot(weights, values, axes=(0, 0))
    if k > values.shape[0]:
        raise HarnessError(f"the {reduce} of {values.shape[0]} rows is not defined")
    ordered = np.sort(values, axis=0)
    return ordered[-k] if kind == "max" else ordered[k - 1]


def side_value(sums: np.ndarray, counts: np.ndarray, weights: np.ndarray | None = None,
               reduce: str = "mean") -> np.ndarray:
    """``sums``: (rows, metrics, ..., images); ``counts``: (metrics, ..., images) shared by the rows,
    or (rows, metrics, ..., images) each row's own. Per row, the sum over metrics of each metric's
    ratio over the images; then over the rows ``reduce_rows``."""
    ratios = (np.sum(sums, axis=-1) / np.sum(counts, axis=-1)).sum(axis=1)   # (rows, ...)
    return reduce_rows(ratios, reduce, weights)


def paired_difference_interval(sums_a: np.ndarray, sums_b: np.ndarray, counts: np.ndarray,
                               n_resamples: int = 2000, seed: int = 0, confidence: float = 0.95,
                               margin: float = 0.0,
                               method: str = "BCa", counts_b: np.ndarray | None = None,
                               weights_a: np.ndarray | None = None, weights_b: np.ndarray | None = None,
                               reduce_a: str = "mean", reduce_b: str = "mean") -> dict:
    """Estimate and ``confidence`` interval of side_value(A) − side_value(B) over paired
    resamples of the test images. ``sums_a``: (rows of A, metrics, images), ``sums_b`` likewise;
    ``counts``: (metrics, images) shared by every row (a mean over queries: the relevance's
    counts), or, with ``counts_b``, A's rows' own (rows of A, metrics, images) and B's (a pooled
    metric such as micro-F1, whose denominators are each row's). ``weights_a`` / ``weights_b``:
    each row's weight in its side's mean (summing to 1; default equal), e.g. each (row, seed) of a
    pooled metric 1 / (rows x the row's seeds). ``reduce_a`` / ``reduce_b``: a side's value is the
    mean of its rows, or their k-th highest / lowest (``reduce_rows``; a best-of-set or rank claim: the
    best, or k-th best, of the others, on each resample); ``share_above`` is the share of resamples
    whose difference is above ``margin`` (for a best-of-set claim the bootstrap's probability that the
    claimed row is the best, for a rank claim that it is within the rank). The same images in the
    same order throughout."""
    a, b, c = (np.asarray(x, dtype=np.float64) for x in (sums_a, sums_b, counts))
    per_row = counts_b is not None
    cb = np.asarray(counts_b, dtype=np.float64) if per_row else None
    shapes_ok = a.ndim == 3 and b.ndim == 3 and a.shape[1:] == b.shape[1:] and (
        c.shape == a.shape and cb.shape == b.shape if per_row else c.shape == a.shape[1:])
    if not shapes_ok:
        raise HarnessError(f"paired bootstrap: units of shapes {a.shape}, {b.shape} and counts {c.shape}"
                           f"{'' if cb is None else f', {cb.shape}'}; expected (rows, metrics, images) twice and "
                           f"(metrics, images), or each side's (rows, metrics, images), the same metrics and images")
    rows_a, rows_b, n_metrics, n_images = a.shape[0], b.shape[0], a.shape[1], a.shape[2]
    w_a, w_b = (None if w is None else np.asarray(w, dtype=np.float64) for w in (weights_a, weights_b))
    for w, rows in ((w_a, rows_a), (w_b, rows_b)):
        if w is not None and (w.shape != (rows,) or not np.isclose(w.sum(), 1.0)):
            raise HarnessError(f"paired bootstrap: row weights {w.tolist()} for {rows} rows; expected one per row, "
                               f"summing to 1")
    # one sample, so that every resample draws the same images for both sides and the counts:
    # (A's units, B's units, then the shared counts or A's and B's), scipy's resamples before the images
    parts = [a, b, c, cb] if per_row else [a, b, c[None]]
    sizes = np.cumsum([p.shape[0] * n_metrics for p in parts])[:-1]

    def difference(units, axis=-1):
        x, y, *z = (u.reshape(-1, n_metrics, *u.shape[1:]) for u in np.split(units, sizes))
        count_a, count_b = (z[0], z[1]) if per_row else (z[0][0], z[0][0])
        return side_value(x, count_a, w_a, reduce_a) - side_value(y, count_b, w_b, reduce_b)

    units = np.concatenate([p.reshape(-1, n_images) for p in parts])
    with warnings.catch_warnings():   # a degenerate distribution (handled below) warns, and divides 0 by 0
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        result = stats.bootstrap((units,), difference, vectorized=True, axis=-1, n_resamples=n_resamples,
                                 confidence_level=confidence, method=method, rng=np.random.default_rng(seed),
                                 batch=max(1, BOOTSTRAP_BATCH_ELEMENTS // units.size))
    low, high = result.confidence_interval
    estimate = float(difference(units))
    if np.ptp(result.bootstrap_distribution) == 0:   # every resample gives one value (e.g. identical rows):
        low = high = estimate                         # scipy's BCa is undefined (NaN); the interval is that point
    return {"estimate": estimate, "low": float(low), "high": float(high),
            "confidence": confidence, "n_resamples": n_resamples, "seed": seed, "method": method,
            "n_images": int(n_images), "share_above": float(np.mean(result.bootstrap_distribution > margin))}


VERDICTS = ("supported", "contradicted", "inconclusive", "undetermined")


def verdict(low: float, high: float, margin: float = 0.0) -> str:
    """The verdict on a claim that A − B exceeds ``margin``, from the interval of A − B;
    ``undetermined`` when the interval is not defined (e.g. a resample with no counted query)."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return "undetermined"
    if low > margin:
        return "supported"
    if high < margin:
        return "contradicted"
    return "inconclusive"


def equivalence_verdict(low: float, high: float, bound: float) -> str:
    """The verdict on a claim that |A − B| <= ``bound``, as two one-sided tests (TOST) read off the
    same interval as ``verdict``'s: ``supported`` when the interval lies inside (−bound, bound)
    (A − B is shown above −bound and below bound, each at the level ``verdict`` shows a difference),
    ``contradicted`` when it lies wholly above bound or below −bound, else ``inconclusive`` (a wide
    interval: the data cannot tell equivalence from a difference)."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return "undetermined"
    if -bound < low and high < bound:
        return "supported"
    if low > bound or high < -bound:
        return "contradicted"
    return "inconclusive"


def claim_verdict(low: float, high: float, margin: float, untrained_rows: list[str], saturated: bool,
                  bound: float | None = None) -> str:
    """A claim's verdict: ``undetermined: <rows> did not train`` when a compared row did not train,
    ``undetermined: saturated`` when every compared row's value is saturated, else ``verdict`` (or
    ``equivalence_verdict`` for an equivalence claim within ``bound``)."""
    if untrained_rows:
        return f"undetermined: {', '.join(untrained_rows)} did not train"
    if saturated:
        return "undetermined: saturated"
    return verdict(low, high, margin) if bound is None else equivalence_verdict(low, high, bound)


def verdict_kind(text: str) -> str:
    """The verdict of a claims table's cell without its reason or note (one of ``VERDICTS``)."""
    return next(kind for kind in VERDICTS if text.startswith(kind))
