"""False-negative-aware metrics with ``extended_positives`` relevance, as ECCV Caption reports them
(Chun et al., "ECCV Caption: Correcting False Negatives by Collecting Machine-and-Human-verified
Image-Caption Associations for MS-COCO", ECCV 2022), with the definitions of Musgrave, Belongie
and Lim ("A Metric Learning Reality Check", ECCV 2020). For one query with R positives
(every item it truly matches, R >= 1) and rel(i) = 1 when the item ranked i (1-based) is one:

- ``{i2t,t2i}_rp_ext``: R-Precision = (number of positives in the top R) / R;
- ``{i2t,t2i}_map_r_ext``: mAP@R = (1/R) * sum_{i<=R} precision@i * rel(i);
- ``{i2t,t2i}_r1_ext``: R@1 = rel(1), the top item is a positive.

Each is the mean over queries, in percent; ``map_r_ext_sum`` (i2t + t2i mAP@R) is the protocol's
main metric for the training check, whose chance value ``chance_map_at_r`` gives. Ties count against the model as in
``methods.metrics.retrieval``: among equal scores every negative is ranked above every positive,
so constant scores give the worst value. Each direction's score matrix is sorted once, in query
chunks; the three metrics share that pass. The metrics are declared in
``methods.metrics.declarations``; this module implements them.
"""
from __future__ import annotations

import numpy as np
import torch

from methods.metrics.declarations import DIRECTIONS, ECCV_KINDS
from methods.metrics.implementations import EvaluationContext, implement_metric

CHUNK_ELEMENTS = 1 << 22   # scores sorted at once (queries x gallery), bounds memory on COCO-sized splits


def ranked_against_model(scores: torch.Tensor, worse: torch.Tensor) -> torch.Tensor:
    """Per row, the columns in ranked order: descending score, and among equal scores the larger
    ``worse`` first (e.g. a negative before a positive: ties count against the model), then the
    column order. Items scored -inf rank last, in no promised order among themselves. Without
    equal finite scores in a row block one sort decides; otherwise ``worse`` is sorted first and
    a stable sort by score keeps that order among equals."""
    ranked, order = torch.sort(scores, dim=1, descending=True, stable=True)
    if not bool(((ranked[:, 1:] == ranked[:, :-1]) & (ranked[:, 1:] > -torch.inf)).any()):
        return order
    worse_first = torch.argsort(worse, dim=1, descending=True, stable=True)
    return worse_first.gather(1, torch.sort(scores.gather(1, worse_first), dim=1, descending=True,
                                            stable=True).indices)


def per_query(scores: torch.Tensor, positives: torch.Tensor, chunk: int | None = None) -> dict[str, torch.Tensor]:
    """Per query (row of ``scores`` / ``positives``, gallery along columns): ``r1``, ``rp`` and
    ``map_r`` as fractions (float64). Every query needs at least one positive."""
    n_queries, n_gallery = scores.shape
    positives = torch.as_tensor(positives, device=scores.device).bool()
    n_pos = positives.sum(dim=1)
    if bool((n_pos == 0).any()):
        raise ValueError("every query needs at least one positive")
    chunk = chunk or max(1, CHUNK_ELEMENTS // max(1, n_gallery))
    out = {k: torch.empty(n_queries, dtype=torch.float64) for k in ECCV_KINDS}
    for start in range(0, n_queries, chunk):
        s, p, r = scores[start:start + chunk], positives[start:start + chunk], n_pos[start:start + chunk]
        order = ranked_against_model(s, (~p).to(torch.uint8))   # among equal scores, negatives first
        top = int(r.max())
        rel = p.gather(1, order[:, :top]).double()   # (b, top) ranked relevance
        at = torch.arange(1, top + 1, device=s.device, dtype=torch.float64)
        within = (at[None, :] <= r[:, None]).double()                               # ranks 1..R of each query
        precision = rel.cumsum(dim=1) / at[None, :]
        rows = slice(start, start + s.shape[0])
        out["r1"][rows] = rel[:, 0].cpu()
        out["rp"][rows] = ((rel * within).sum(dim=1) / r).cpu()
        out["map_r"][rows] = ((precision * rel * within).sum(dim=1) / r).cpu()
    return out


def extended_per_query(context: EvaluationContext, direction: str) -> dict[str, np.ndarray]:
    """``per_query`` of one direction of the context's matrix (i2t: images query captions)."""
    def compute():
        scores = context.scores
        positives = torch.from_numpy(context.relevance.positives).to(scores.device)
        if direction == "t2i":
            scores, positives = scores.T.contiguous(), positives.T.contiguous()
        return {k: v.numpy() for k, v in per_query(scores, positives).items()}
    return context.cached(f"{direction}_extended_per_query", compute)


for _d in DIRECTIONS:
    for _k in ECCV_KINDS:
        implement_metric(f"{_d}_{_k}_ext", lambda c, d=_d, k=_k: 100.0 * float(extended_per_query(c, d)[k].mean()),
                         per_query=lambda c, d=_d, k=_k: 100.0 * extended_per_query(c, d)[k])


def chance_map_at_r(positives: np.ndarray) -> float:
    """Expected mAP@R (%) of random scores, queries along rows of the boolean ``positives``
    (queries x gallery). A query with R positives among N: rel(i) is 1 with probability R/N, and
    with rel(i), each of the i - 1 items above is a positive with probability (R-1)/(N-1), so
    E[precision@i * rel(i)] = (R/N)(1 + (i-1)(R-1)/(N-1)) / i and, summing i = 1..R and dividing by R,
    E[AP@R] = (H_R + (R - H_R)(R-1)/(N-1)) / N, H_R the R-th harmonic number."""
    positives = np.asarray(positives, dtype=bool)
    n = positives.shape[1]
    r = positives.sum(axis=1)
    if (r == 0).any():
        raise ValueError("every query needs at least one positive")
    harmonic = np.cumsum(1.0 / np.arange(1, int(r.max()) + 1))[r - 1]
    expected = (harmonic + (r - harmonic) * (r - 1) / max(n - 1, 1)) / n
    return 100.0 * float(expected.mean())

