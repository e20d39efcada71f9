"""Uncertainty of a difference between two table rows from the test queries: a paired bootstrap
over test *images*, each resampled with all of its texts (the groundwork of claim checks).

- ``image_units``: the (N images, 6) per-image contributions to R@1/5/10 in both directions: an
  image's own image→text hit at K (0/1), and the mean of its texts' text→image hits at K. Every
  image has ``texts_per_image`` texts, so the mean of a metric over a resample of images is exactly
  the metric computed on those images' queries (with their texts): resampling the units keeps
  each image with its captions. The gallery is not resampled (a query's rank is the one it has
  against the whole test split).
- ``rsum_of``: RSUM (the six recalls in %) of a set of units, vectorised over resamples.
- ``paired_difference_interval``: ``scipy.stats.bootstrap`` (BCa by default) of statistic(A) −
  statistic(B) with ``paired=True``: both rows are scored on the same resampled images. Rows run
  with several seeds are paired by seed and image: their units are averaged over seeds first
  (``mean_over_seeds``), so the interval is that of the seed-mean difference over test images.
- ``verdict``: a claimed ordering (A above B) is ``supported`` when the interval lies above 0,
  ``contradicted`` when it lies below, else ``inconclusive``.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from scipy import stats

from methods.errors import HarnessError
from methods.metrics.retrieval import i2t_ranks, t2i_ranks

RECALL_KS = (1, 5, 10)


def image_units(scores: np.ndarray | torch.Tensor, texts_per_image: int, ks: tuple[int, ...] = RECALL_KS) -> np.ndarray:
    """(N, 2 len(ks)) float64: per image, i2t hit at each K, then the mean t2i hit at each K of its texts."""
    scores = torch.as_tensor(scores)
    image_ranks = i2t_ranks(scores, captions_per_image=texts_per_image).cpu().numpy()
    text_ranks = t2i_ranks(scores, captions_per_image=texts_per_image).cpu().numpy()
    i2t = np.stack([image_ranks < k for k in ks], axis=1).astype(np.float64)
    t2i = np.stack([(text_ranks < k).reshape(-1, texts_per_image).mean(axis=1) for k in ks], axis=1)
    return np.concatenate([i2t, t2i], axis=1)


def rsum_of(units: np.ndarray, axis: int = -1) -> np.ndarray:
    """RSUM of image units: the sum of the six recalls (each the mean over images, in %).
    ``units`` has the images on ``axis`` and the six recalls on the axis before it (scipy's
    vectorised call passes (6, n_resamples, N) with ``axis=-1``)."""
    return 100.0 * np.asarray(units).mean(axis=axis).sum(axis=0)


def mean_over_seeds(units_per_seed: list[np.ndarray]) -> np.ndarray:
    """A row's units averaged over its seeds (every seed scores the same test images)."""
    shapes = {u.shape for u in units_per_seed}
    if len(shapes) != 1:
        raise HarnessError(f"the seeds of a row score different test sets: unit shapes {sorted(shapes)}")
    return np.mean(np.stack(units_per_seed), axis=0)


def paired_difference_interval(units_a: np.ndarray, units_b: np.ndarray,
                               statistic: Callable[[np.ndarray, int], np.ndarray] = rsum_of,
                               n_resamples: int = 2000, seed: int = 0, confidence: float = 0.95,
                               method: str = "BCa") -> dict:
    """Estimate and ``confidence`` interval of statistic(A) - statistic(B) over paired resamples of
    the test images (rows of ``units_a`` / ``units_b``, the same images in the same order)."""
    a, b = np.asarray(units_a, dtype=np.float64), np.asarray(units_b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise HarnessError(f"paired bootstrap: the two rows' units have shapes {a.shape} and {b.shape}; expected "
                           f"the same (images, recalls)")
    # scipy resamples the last axis: images go last, the recalls before them
    result = stats.bootstrap((a.T, b.T), lambda x, y, axis: statistic(x, axis) - statistic(y, axis),
                             paired=True, vectorized=True, axis=-1, n_resamples=n_resamples, confidence_level=confidence,
                             method=method, rng=np.random.default_rng(seed))
    low, high = result.confidence_interval
    return {"estimate": float(statistic(a.T, -1) - statistic(b.T, -1)), "low": float(low), "high": float(high),
            "confidence": confidence, "n_resamples": n_resamples, "seed": seed, "method": method,
            "n_images": int(a.shape[0])}


def verdict(low: float, high: float) -> str:
    """The verdict on a claim that A is above B, from the interval of A - B."""
    if low > 0:
        return "supported"
    if high < 0:
        return "contradicted"
    return "inconclusive"
