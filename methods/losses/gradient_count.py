"""How many negatives give a query a non-zero gradient, per loss (the metric-learning study's
Section 5 argument: the hardest-negative triplet wins because one negative drives each update).

For query q (an image for image->text, a caption for text->image) and one of its negatives n,
the contribution is g(q, n) = ∂L_dir/∂s(q, n), where L_dir is the loss of that direction
only: each direction is separable by query, so row q of the gradient comes from q's own term.
Two counts per query:

- ``nonzero``: negatives with g ≠ 0 exactly (triplets: violating hinges; NT-Xent: all of them;
  SmoothAP: those whose sigmoid has not underflowed);
- ``contributing``: negatives with |g| ≥ ``relative_threshold`` × the query's largest |g| over
  its negatives, a scale-free count comparable across losses (0 when no negative has a gradient).
"""
from __future__ import annotations

import torch

from methods.losses.ranking import one_direction
from methods.losses.terms import OneDirection


def count_negatives_with_gradient(loss_one_direction: OneDirection, scores: torch.Tensor, positives: torch.Tensor,
                                  relative_threshold: float) -> dict[str, dict[str, torch.Tensor]]:
    out = {}
    for direction, s, pos in (("i2t", scores, positives), ("t2i", scores.t(), positives.t())):
        leaf = s.detach().float().requires_grad_(True)
        with torch.enable_grad():
            (grad,) = torch.autograd.grad(loss_one_direction(leaf, pos), leaf)
        g = grad.abs().masked_fill(pos, 0.0)
        largest = g.max(dim=1, keepdim=True).values
        contributing = (g >= relative_threshold * largest) & (largest > 0) & ~pos
        out[direction] = {"nonzero": (g > 0).sum(dim=1), "contributing": contributing.sum(dim=1),
                          "negatives": (~pos).sum(dim=1)}
    return out


def count_gradient_negatives(kind: str, cfg: dict, scores: torch.Tensor, positives: torch.Tensor,
                             relative_threshold: float) -> dict[str, dict[str, torch.Tensor]]:
    """The counts for ranking loss ``kind`` with parameters from ``cfg``."""
    return count_negatives_with_gradient(one_direction(kind, cfg), scores, positives, relative_threshold)
