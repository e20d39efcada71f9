"""R@K, median and mean rank for image->text and text->image retrieval with
``captions_of_image`` relevance (caption k belongs to image k // c, c = 5 in the Karpathy files).

Tie rule (fixed, independent of sort algorithm): a negative whose score equals the best
ground-truth score is ranked *above* it, i.e. ties count against the model. A model that
outputs constant scores therefore gets the worst rank, never a perfect one. Ties among the
ground-truth captions of one image do not matter (only the best one counts).

Ranks are 0-based; R@K = 100 * mean(rank < K); medr = floor(median(rank)) + 1;
meanr = mean(rank) + 1 (the SCAN/SGRAF/VSE++ convention, with numpy's median of an even count).
RSUM is recomputed from the six recalls (the public 5-fold scripts print a wrong one).
The metrics are declared in ``methods.metrics.declarations``; this module implements them.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from methods.metrics.declarations import DIRECTIONS, RECALL_KS, RECALLS, RETRIEVAL_METRICS
from methods.metrics.implementations import EvaluationContext, evaluate, implement_metric
from methods.metrics.relevance import CaptionsOfImage


def i2t_ranks(scores: torch.Tensor, chunk: int = 1024, captions_per_image: int = 5) -> torch.Tensor:
    """0-based rank of the best ground-truth caption of each image, ties against the model."""
    c = captions_per_image
    CaptionsOfImage(c).check(scores)
    n = scores.shape[0]
    ranks = torch.empty(n, dtype=torch.long, device=scores.device)
    for start in range(0, n, chunk):
        block = scores[start:start + chunk]  # (b, cN)
        rows = torch.arange(start, start + block.shape[0], device=scores.device)
        gt_cols = rows[:, None] * c + torch.arange(c, device=scores.device)
        best = block.gather(1, gt_cols).max(dim=1, keepdim=True).values
        is_gt = torch.zeros_like(block, dtype=torch.bool).scatter_(1, gt_cols, True)
        above = (block > best).sum(dim=1)
        tied_negatives = ((block == best) & ~is_gt).sum(dim=1)
        ranks[start:start + block.shape[0]] = above + tied_negatives
    return ranks


def t2i_ranks(scores: torch.Tensor, chunk: int = 4096, captions_per_image: int = 5) -> torch.Tensor:
    """0-based rank of the ground-truth image of each caption, ties against the model."""
    CaptionsOfImage(captions_per_image).check(scores)
    n_cap = scores.shape[1]
    ranks = torch.empty(n_cap, dtype=torch.long, device=scores.device)
    for start in range(0, n_cap, chunk):
        block = scores[:, start:start + chunk]  # (N, c)
        cols = torch.arange(start, start + block.shape[1], device=scores.device)
        gt = block.gather(0, (cols // captions_per_image)[None, :])  # (1, c)
        ranks[start:start + block.shape[1]] = (block > gt).sum(dim=0) + (block == gt).sum(dim=0) - 1
    return ranks


def ranks(context: EvaluationContext, direction: str) -> np.ndarray:
    c = context.relevance.captions_per_image
    fn = i2t_ranks if direction == "i2t" else t2i_ranks
    return context.cached(f"{direction}_ranks",
                          lambda: fn(context.scores, captions_per_image=c).cpu().numpy())


def _recall(direction: str, k: int):
    return lambda context: 100.0 * float(np.mean(ranks(context, direction) < k))


def _hits(direction: str, k: int):
    return lambda context: 100.0 * (ranks(context, direction) < k).astype(np.float64)


def _median_rank(direction: str):
    return lambda context: float(math.floor(np.median(ranks(context, direction))) + 1)


def _mean_rank(direction: str):
    return lambda context: float(np.mean(ranks(context, direction)) + 1)


def _one_based_ranks(direction: str):
    return lambda context: ranks(context, direction).astype(np.float64) + 1


for _d in DIRECTIONS:
    for _k in RECALL_KS:
        implement_metric(f"{_d}_r{_k}", _recall(_d, _k), per_query=_hits(_d, _k))
    implement_metric(f"{_d}_medr", _median_rank(_d))
    implement_metric(f"{_d}_meanr", _mean_rank(_d), per_query=_one_based_ranks(_d))


def chance_recalls(n_images: int, captions_per_image: int = 5) -> dict[str, float]:
    """Expected R@K (%) of random scores: text->image, one true image among N: K / N;
    image->text, at least one of c true captions among the top K of cN: 1 - C(cN - c, K) / C(cN, K)."""
    c, n = captions_per_image, n_images
    out = {}
    for k in RECALL_KS:
        out[f"i2t_r{k}"] = 100.0 * (1.0 - math.comb(c * n - c, k) / math.comb(c * n, k))
        out[f"t2i_r{k}"] = 100.0 * min(k, n) / n
    out["rsum"] = sum(out[m] for m in RECALLS)
    return out


def retrieval_metrics(scores: torch.Tensor | np.ndarray, captions_per_image: int = 5) -> dict[str, float]:
    """The Karpathy protocols' metrics of one score matrix (one fold), each implemented here."""
    return evaluate(scores, CaptionsOfImage(captions_per_image), RETRIEVAL_METRICS)
