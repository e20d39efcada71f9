"""Losses as functions of the (images x captions) score matrix and the positive mask.

Named by mechanism: ``triplet_sum`` (all negatives), ``triplet_hardest`` (VSE++ max violation).
"""
from __future__ import annotations

from typing import Callable

import torch

from methods.errors import HarnessError
from methods.losses.triplet import triplet_hardest, triplet_sum

LOSSES: dict[str, Callable[..., torch.Tensor]] = {
    "triplet_sum": triplet_sum,
    "triplet_hardest": triplet_hardest,
}


def loss_kind_at(cfg: dict, epoch: int) -> str:
    """The loss used in ``epoch``; ``warmup_sum_epochs`` swaps hardest-negative mining for the sum at first."""
    kind = cfg["kind"]
    if kind not in LOSSES:
        raise HarnessError(f"unknown loss '{kind}'; known: {', '.join(sorted(LOSSES))}")
    if kind == "triplet_hardest" and epoch < cfg.get("warmup_sum_epochs", 0):
        return "triplet_sum"
    return kind


def build_loss(cfg: dict, epoch: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    fn, margin = LOSSES[loss_kind_at(cfg, epoch)], cfg["margin"]
    return lambda scores, positives: fn(scores, positives, margin=margin)
