"""Hinge triplet losses, one query direction at a time.

``scores[q, c]`` is the similarity of query q and candidate c; ``positives[q, c]`` is True when
c matches q (several positives per query, or a repeated image in a batch, are handled by the
mask instead of assuming a diagonal). For every positive pair (q, p) the hinges are
``[m - s(q, p) + s(q, n)]_+`` over the negatives n of q.

``triplet_sum`` adds every hinge; ``triplet_hardest`` keeps the largest hinge of each positive
pair (VSE++ "max violation"). Summed over the batch, as in VSE++ (``reduction: sum``), or averaged
(``reduction: mean``, as PVSE and DivE: the mean over positive pairs of the hardest hinge, or
over every (positive pair, negative) hinge for ``triplet_sum``). Image->text is this function
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


REDUCTIONS = ("sum", "mean")


def triplet_sum(scores: torch.Tensor, positives: torch.Tensor, margin: float = 0.2,
                reduction: str = "sum") -> torch.Tensor:
    hinges = triplet_hinges(scores, positives, margin)
    if reduction == "sum":
        return hinges.sum()
    q, _ = positives.nonzero(as_tuple=True)
    return hinges.sum() / (~positives[q, :]).sum().clamp(min=1)   # mean over (positive pair, negative)


def triplet_hardest(scores: torch.Tensor, positives: torch.Tensor, margin: float = 0.2,
                    reduction: str = "sum") -> torch.Tensor:
    hinges = triplet_hinges(scores, positives, margin)
    if not hinges.numel():
        return hinges.sum()
    hardest = hinges.max(dim=1).values
    if reduction == "sum":
        return hardest.sum()
    q, _ = positives.nonzero(as_tuple=True)
    with_negative = (~positives[q, :]).any(dim=1)   # a pair with no negative has no hinge to average
    return hardest[with_negative].sum() / with_negative.sum().clamp(min=1)
