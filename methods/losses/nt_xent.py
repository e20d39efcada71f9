"""NT-Xent (normalised temperature-scaled cross entropy, InfoNCE), one query direction.

For every positive pair (q, p):  -log( e^{s(q,p)/τ} / (e^{s(q,p)/τ} + Σ_{n ∈ N(q)} e^{s(q,n)/τ}) ),
where N(q) are the negatives of q; other positives of q are left out of the denominator, so
two captions of one image never compete. Averaged over positive pairs. With a diagonal mask
and both directions averaged this is the metric-learning study's loss
(½·CE over rows + ½·CE over columns of the B×B cosine matrix, τ = 0.1).
"""
from __future__ import annotations

import torch


def nt_xent(scores: torch.Tensor, positives: torch.Tensor, tau: float = 0.1) -> torch.Tensor:
    logits = scores / tau
    negatives_lse = torch.logsumexp(logits.masked_fill(positives, float("-inf")), dim=1)  # (Q,), -inf: none
    q, p = positives.nonzero(as_tuple=True)
    positive_logits = logits[q, p]
    return (torch.logaddexp(positive_logits, negatives_lse[q]) - positive_logits).mean()
