"""How many negatives give a query a non-zero gradient, per loss (the metric-learning study's
Section 5 argument: the hardest-negative triplet wins because one negative drives each update).

For query q (an image for image->text, a caption for text->image) and one of its negatives n,
the contribution is g(q, n) = ∂L_dir/∂s(q, n), where L_dir is the loss term of that direction
only: each direction is separable by query, so row q of the gradient comes from q's own term.
Two counts per query:

- ``nonzero``: negatives with g ≠ 0 exactly (triplets: violating hinges; NT-Xent: all of them;
  SmoothAP: those whose sigmoid has not underflowed);
- ``contributing``: negatives with |g| ≥ ``relative_threshold`` × the query's largest |g| over
  its negatives, a scale-free count comparable across losses (0 when no negative has a gradient).
"""
from __future__ import annotations

import torch

from methods.losses import LOSSES, loss_kwargs


def count_gradient_negatives(kind: str, cfg: dict, scores: torch.Tensor, positives: torch.Tensor,
                             relative_threshold: float) -> dict[str, dict[str, torch.Tensor]]:
    spec = LOSSES[kind]
    kw = loss_kwargs(spec, cfg)
    out = {}
    for direction, s, pos in (("i2t", scores, positives), ("t2i", scores.t(), positives.t())):
        leaf = s.detach().float().requires_grad_(True)
        with torch.enable_grad():
            (grad,) = torch.autograd.grad(spec.one_direction(leaf, pos, **kw), leaf)
        g = grad.abs().masked_fill(pos, 0.0)
        largest = g.max(dim=1, keepdim=True).values
        contributing = (g >= relative_threshold * largest) & (largest > 0) & ~pos
        out[direction] = {"nonzero": (g > 0).sum(dim=1), "contributing": contributing.sum(dim=1),
                          "negatives": (~pos).sum(dim=1)}
    return out
