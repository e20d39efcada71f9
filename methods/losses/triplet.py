"""Hinge triplet losses, one query direction at a time.

``scores[q, c]`` is the similarity of query q and candidate c; ``positives[q, c]`` is True when
c matches q (several positives per query, or a repeated image in a batch, are handled by the
mask instead of assuming a diagonal). For every positive pair (q, p) the hinges are
``[m - s(q, p) + s(q, n)]_+`` over the negatives n of q.

``triplet_sum`` adds every hinge; ``triplet_hardest`` keeps the largest hinge of each positive
pair (VSE++ "max violation"). Summed over the batch, as in VSE++. Image->text is this function
on the (images x captions) matrix, text->image the same on its transpose; with one caption per
image (a diagonal mask) the two directions together are exactly the VSE++ losses.
"""
from __future__ import annotations

import torch


def triplet_hinges(scores: torch.Tensor, positives: torch.Tensor, margin: float) -> torch.Tensor:
    """(P, n_candidates) hinges, one row per positive pair, zero on every non-negative."""
    q, p = positives.nonzero(as_tuple=True)
    hinges = (margin - scores[q, p][:, None] + scores[q, :]).clamp(min=0)
    return hinges.masked_fill(positives[q, :], 0.0)


def triplet_sum(scores: torch.Tensor, positives: torch.Tensor, margin: float = 0.2) -> torch.Tensor:
    return triplet_hinges(scores, positives, margin).sum()


def triplet_hardest(scores: torch.Tensor, positives: torch.Tensor, margin: float = 0.2) -> torch.Tensor:
    hinges = triplet_hinges(scores, positives, margin)
    return hinges.max(dim=1).values.sum() if hinges.numel() else hinges.sum()
