"""R@K, median and mean rank for image->text and text->image retrieval.

Layout: ``scores`` is (N_images, 5 * N_images); caption k belongs to image k // 5.

Tie rule (fixed, independent of sort algorithm): a negative whose score equals the best
ground-truth score is ranked *above* it, i.e. ties count against the model. A model that
outputs constant scores therefore gets the worst rank, never a perfect one. Ties among the
ground-truth captions of one image do not matter (only the best one counts).

Ranks are 0-based; R@K = 100 * mean(rank < K); medr = floor(median(rank)) + 1;
meanr = mean(rank) + 1 (the SCAN/SGRAF/VSE++ convention, with numpy's median of an even count).
RSUM is recomputed from the six recalls (the public 5-fold scripts print a wrong one).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from methods.data.karpathy import CAPTIONS_PER_IMAGE
from methods.errors import HarnessError

RECALL_KS = (1, 5, 10)
METRIC_NAMES = ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum",
                "i2t_medr", "i2t_meanr", "t2i_medr", "t2i_meanr")


def _check_layout(scores: torch.Tensor) -> None:
    if scores.ndim != 2 or scores.shape[1] != CAPTIONS_PER_IMAGE * scores.shape[0]:
        raise HarnessError(f"score matrix has shape {tuple(scores.shape)}; expected (N, {CAPTIONS_PER_IMAGE}N) "
                           f"with caption k belonging to image k // {CAPTIONS_PER_IMAGE}")
    if not torch.isfinite(scores).all():
        raise HarnessError("score matrix contains NaN or inf")


def i2t_ranks(scores: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
    """0-based rank of the best ground-truth caption of each image, ties against the model."""
    _check_layout(scores)
    n = scores.shape[0]
    ranks = torch.empty(n, dtype=torch.long, device=scores.device)
    for start in range(0, n, chunk):
        block = scores[start:start + chunk]  # (b, 5N)
        rows = torch.arange(start, start + block.shape[0], device=scores.device)
        gt_cols = rows[:, None] * CAPTIONS_PER_IMAGE + torch.arange(CAPTIONS_PER_IMAGE, device=scores.device)
        best = block.gather(1, gt_cols).max(dim=1, keepdim=True).values
        is_gt = torch.zeros_like(block, dtype=torch.bool).scatter_(1, gt_cols, True)
        above = (block > best).sum(dim=1)
        tied_negatives = ((block == best) & ~is_gt).sum(dim=1)
        ranks[start:start + block.shape[0]] = above + tied_negatives
    return ranks


def t2i_ranks(scores: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """0-based rank of the ground-truth image of each caption, ties against the model."""
    _check_layout(scores)
    n_cap = scores.shape[1]
    ranks = torch.empty(n_cap, dtype=torch.long, device=scores.device)
    for start in range(0, n_cap, chunk):
        block = scores[:, start:start + chunk]  # (N, c)
        cols = torch.arange(start, start + block.shape[1], device=scores.device)
        gt = block.gather(0, (cols // CAPTIONS_PER_IMAGE)[None, :])  # (1, c)
        ranks[start:start + block.shape[1]] = (block > gt).sum(dim=0) + (block == gt).sum(dim=0) - 1
    return ranks


def summarize_ranks(ranks: np.ndarray, prefix: str) -> dict[str, float]:
    out = {f"{prefix}_r{k}": 100.0 * float(np.mean(ranks < k)) for k in RECALL_KS}
    out[f"{prefix}_medr"] = float(math.floor(np.median(ranks)) + 1)
    out[f"{prefix}_meanr"] = float(np.mean(ranks) + 1)
    return out


def retrieval_metrics(scores: torch.Tensor | np.ndarray) -> dict[str, float]:
    """All metrics of one score matrix (one fold)."""
    scores = torch.as_tensor(scores)
    metrics = summarize_ranks(i2t_ranks(scores).cpu().numpy(), "i2t")
    metrics.update(summarize_ranks(t2i_ranks(scores).cpu().numpy(), "t2i"))
    metrics["rsum"] = sum(metrics[f"{d}_r{k}"] for d in ("i2t", "t2i") for k in RECALL_KS)
    return {k: metrics[k] for k in METRIC_NAMES}
