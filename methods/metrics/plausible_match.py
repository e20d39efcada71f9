"""Plausible-match R-Precision (PMRP), with ``plausible_matches`` relevance, as PCME defines and
computes it (Chun et al., "Probabilistic Embeddings for Cross-Modal Retrieval", CVPR 2021,
Section 4; naver-ai/pcme ``evaluate_pmrp_coco.py``): a false-negative-aware R-Precision on COCO
whose positives are the gallery items whose image's annotated object categories differ from the
query's in at most t categories.

For one query and threshold t, with R the number of plausible matches among the items ranked:
R-Precision = (plausible matches in the top R) / R. ``{i2t,t2i}_pmrp`` is its mean over the
thresholds (0, 1, 2: the source's ``range(max_thres)``) and the queries, in percent; on COCO 1K
the mean of the five folds' values. As the source:

- the category sets are multi-hot over COCO's category ids (Hamming distance); an image with no
  instance annotation neither queries nor is ranked (nor are its captions);
- under ``last: dropped`` each query's ranking loses its last-ranked item of the whole split
  before a fold keeps its own items (the source's ``[:topk]`` at topk=-1, ``LAST_RANKED``).

Ties count against the model as in ``methods.metrics.eccv``: among equal scores every item farther
from the query's categories is ranked first, which puts non-matches above matches at every
threshold at once, so one sort serves the three. A query with no plausible match left at a
threshold (only when its own match is the item dropped) averages the thresholds it has; the
source's value would be NaN. Each direction is sorted once, in query chunks bounded by
``CHUNK_ELEMENTS``: no per-query Python loop.
"""
from __future__ import annotations

import numpy as np
import torch

from methods.metrics.declarations import DIRECTIONS
from methods.metrics.eccv import ranked_against_model
from methods.metrics.implementations import EvaluationContext, implement_metric

CHUNK_ELEMENTS = 1 << 22   # scores sorted at once (queries x gallery)


def category_distances(a: np.ndarray, b: np.ndarray) -> torch.Tensor:
    """(len(a), len(b)) Hamming distances between multi-hot rows, as int16 (exact: float32 holds
    every count up to 2**24)."""
    x, y = torch.from_numpy(np.asarray(a, dtype=np.float32)), torch.from_numpy(np.asarray(b, dtype=np.float32))
    return torch.round(x @ (1 - y).T + (1 - x) @ y.T).to(torch.int16)


def per_query(scores: torch.Tensor, distances: torch.Tensor, query_valid: torch.Tensor, gallery_valid: torch.Tensor,
              dropped: torch.Tensor, thresholds: tuple[int, ...], chunk: int | None = None) -> np.ndarray:
    """PMRP per query (rows of ``scores``; fractions, float64; NaN for a query left out).
    ``distances``: (queries, gallery) category distance of each pair; ``query_valid`` /
    ``gallery_valid``: annotated items; ``dropped``: per query, the gallery column its ranking
    leaves out (-1: none)."""
    n_queries, n_gallery = scores.shape
    chunk = chunk or max(1, CHUNK_ELEMENTS // max(1, n_gallery))
    out = np.full(n_queries, np.nan)
    for start in range(0, n_queries, chunk):
        rows = slice(start, min(start + chunk, n_queries))
        s = scores[rows].clone()
        d = distances[rows]
        s[:, ~gallery_valid] = -torch.inf           # not ranked: below every finite score, beyond every R
        drop = dropped[rows]
        has = drop >= 0
        s[torch.nonzero(has).squeeze(1), drop[has]] = -torch.inf
        order = ranked_against_model(s, d)   # among equal scores, farther items first
        ranked_distance, ranked = d.gather(1, order), s.gather(1, order) > -torch.inf
        values = []
        for t in thresholds:
            match = (ranked_distance <= t) & ranked
            r = match.sum(dim=1)
            hits = match.cumsum(dim=1, dtype=torch.int32).gather(1, (r - 1).clamp(min=0)[:, None]).squeeze(1)
            values.append(torch.where(r > 0, hits.double() / r.clamp(min=1), torch.nan))
        stacked = torch.stack(values, dim=1)
        counted = (~torch.isnan(stacked)).sum(dim=1)
        mean = torch.nansum(stacked, dim=1) / counted.clamp(min=1)
        mean[counted == 0] = torch.nan
        out[rows] = torch.where(query_valid[rows], mean, torch.nan).numpy()
    return out


def pmrp_per_query(context: EvaluationContext, direction: str) -> np.ndarray:
    """PMRP of each query of one direction of the context's matrix (i2t: images query captions), in percent."""
    def compute():
        relevance, scores = context.relevance, context.scores
        owners = torch.from_numpy(relevance.text_images(scores))
        annotated = torch.from_numpy(relevance.categories.any(axis=1))
        images = context.cached("image_category_distances",   # (N, N), for both directions
                                lambda: category_distances(relevance.categories, relevance.categories))
        dropped = relevance.dropped_columns(scores)[direction]
        if direction == "i2t":
            return 100.0 * per_query(scores, images[:, owners], annotated, annotated[owners], dropped,
                                     relevance.thresholds)
        return 100.0 * per_query(scores.T, images[owners], annotated[owners], annotated, dropped,
                                 relevance.thresholds)
    return context.cached(f"{direction}_pmrp_per_query", compute)


for _d in DIRECTIONS:
    implement_metric(f"{_d}_pmrp", lambda c, d=_d: float(np.nanmean(pmrp_per_query(c, d))),
                     per_query=lambda c, d=_d: pmrp_per_query(c, d))
