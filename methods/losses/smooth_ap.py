"""SmoothAP (Brown et al., ECCV 2020) as defined in the metric-learning study's appendix (Eq. 5).

For a query with positives P and negatives N, and D_ij = s_j - s_i (candidate j scored above i
when D_ij > 0), the rank indicator is replaced by a sigmoid G(D; τ) = 1 / (1 + e^{-D/τ}):

    AP = 1/|P| Σ_{i∈P} (1 + Σ_{j∈P, j≠i} G(D_ij)) / (1 + Σ_{j≠i} G(D_ij)).

The loss of one direction is 1 - (mean AP over queries). Only positive i enter the sum, so the
tensor is (queries × max positives × candidates), never candidates × candidates: O(B·M) for a
batch of B images with all their M = 5B captions. Queries are processed in chunks so that one
chunk holds at most ``chunk_elements`` values.
"""
from __future__ import annotations

import torch


def smooth_ap_per_query(scores: torch.Tensor, positives: torch.Tensor, tau: float = 0.01,
                        chunk_elements: int = 1 << 24) -> torch.Tensor:
    """(Q,) smooth AP of each query that has at least one positive (others are dropped)."""
    scores = scores[positives.any(dim=1)]
    positives = positives[positives.any(dim=1)]
    n_q, n_c = scores.shape
    n_pos = positives.sum(dim=1)
    p_max = int(n_pos.max()) if n_q else 0
    # Column indices of each query's positives, padded with its first positive (masked below).
    order = torch.argsort(positives.to(torch.int8), dim=1, descending=True, stable=True)[:, :p_max]
    valid = torch.arange(p_max, device=scores.device)[None, :] < n_pos[:, None]        # (Q, p)
    chunk = max(1, chunk_elements // max(1, p_max * n_c))
    out = []
    for start in range(0, n_q, chunk):
        s, pos, idx, ok = (t[start:start + chunk] for t in (scores, positives, order, valid))
        s_i = torch.gather(s, 1, idx)                                                     # (q, p)
        g = torch.sigmoid((s[:, None, :] - s_i[:, :, None]) / tau)                        # (q, p, C)
        not_self = torch.ones_like(g, dtype=torch.bool).scatter_(2, idx[:, :, None], False)
        g = g * not_self
        rank_all = 1 + g.sum(dim=2)
        rank_pos = 1 + (g * pos[:, None, :]).sum(dim=2)
        ap = ((rank_pos / rank_all) * ok).sum(dim=1) / ok.sum(dim=1)
        out.append(ap)
    return torch.cat(out) if out else scores.new_zeros(0)


def smooth_ap(scores: torch.Tensor, positives: torch.Tensor, tau: float = 0.01) -> torch.Tensor:
    return 1.0 - smooth_ap_per_query(scores, positives, tau).mean()
