"""Hinge triplet losses on a score matrix with an arbitrary positive mask.

``scores[i, c]`` is the similarity of image i and caption c; ``positives[i, c]`` is True when
caption c describes image i (several captions per image, or an image repeated in a batch, are
handled by the mask instead of assuming a diagonal). For every positive pair (i, c):

- image->text hinges  [m - s(i, c) + s(i, c')]_+  over captions c' that are negatives of i,
- text->image hinges  [m - s(i, c) + s(i', c)]_+  over images i' that are negatives of c.

``triplet_sum`` adds all hinges; ``triplet_hardest`` keeps the largest hinge per positive pair
and direction (VSE++ "max violation"). Both are summed over the batch, as in VSE++.
With one caption per image (diagonal mask) both reduce exactly to the VSE++ losses.
"""
from __future__ import annotations

import torch


def _hinges(scores: torch.Tensor, positives: torch.Tensor, margin: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hinge tensors (P, n_captions) for i2t and (P, n_images) for t2i, zero on non-negatives."""
    pos_i, pos_c = positives.nonzero(as_tuple=True)
    pos_scores = scores[pos_i, pos_c]  # (P,)
    i2t = (margin - pos_scores[:, None] + scores[pos_i, :]).clamp(min=0)
    i2t = i2t.masked_fill(positives[pos_i, :], 0.0)
    t2i = (margin - pos_scores[:, None] + scores[:, pos_c].t()).clamp(min=0)
    t2i = t2i.masked_fill(positives[:, pos_c].t(), 0.0)
    return i2t, t2i, pos_scores


def triplet_sum(scores: torch.Tensor, positives: torch.Tensor, margin: float = 0.2) -> torch.Tensor:
    i2t, t2i, _ = _hinges(scores, positives, margin)
    return i2t.sum() + t2i.sum()


def triplet_hardest(scores: torch.Tensor, positives: torch.Tensor, margin: float = 0.2) -> torch.Tensor:
    i2t, t2i, _ = _hinges(scores, positives, margin)
    return i2t.max(dim=1).values.sum() + t2i.max(dim=1).values.sum()
