"""Losses as functions of the (images x captions) score matrix and the positive mask.

Named by mechanism: ``triplet_sum`` (all negatives), ``triplet_hardest`` (VSE++ max violation),
``nt_xent`` (InfoNCE), ``smooth_ap``. Each is written for one query direction (rows are queries);
image->text applies it to the score matrix, text->image to its transpose, and the two are summed
(triplets, as VSE++) or averaged (NT-Xent, SmoothAP, as in the metric-learning study).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from methods.errors import HarnessError
from methods.losses.nt_xent import nt_xent
from methods.losses.smooth_ap import smooth_ap
from methods.losses.triplet import triplet_hardest, triplet_sum


@dataclass(frozen=True)
class LossSpec:
    one_direction: Callable[..., torch.Tensor]   # (scores, positives, **params) -> scalar
    params: tuple[str, ...]                      # config keys passed as keyword arguments
    combine: str                                 # how the two directions join: "sum" or "mean"


LOSSES: dict[str, LossSpec] = {
    "triplet_sum": LossSpec(triplet_sum, ("margin",), "sum"),
    "triplet_hardest": LossSpec(triplet_hardest, ("margin",), "sum"),
    "nt_xent": LossSpec(nt_xent, ("tau",), "mean"),
    "smooth_ap": LossSpec(smooth_ap, ("tau",), "mean"),
}


def loss_kind_at(cfg: dict, epoch: int) -> str:
    """The loss used in ``epoch``; ``warmup_sum_epochs`` swaps hardest-negative mining for the sum at first."""
    kind = cfg["kind"]
    if kind not in LOSSES:
        raise HarnessError(f"unknown loss '{kind}'; known: {', '.join(sorted(LOSSES))}")
    if kind == "triplet_hardest" and epoch < cfg.get("warmup_sum_epochs", 0):
        return "triplet_sum"
    return kind


def loss_kwargs(spec: LossSpec, cfg: dict) -> dict:
    missing = [p for p in spec.params if p not in cfg]
    if missing:
        raise HarnessError(f"loss '{cfg['kind']}' needs {', '.join(missing)} in the loss config")
    return {p: cfg[p] for p in spec.params}


def directional_losses(kind: str, cfg: dict, scores: torch.Tensor, positives: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(image->text, text->image) terms of loss ``kind`` on (images x captions) scores."""
    spec = LOSSES[kind]
    kw = loss_kwargs(spec, cfg)
    return spec.one_direction(scores, positives, **kw), spec.one_direction(scores.t(), positives.t(), **kw)


def build_loss(cfg: dict, epoch: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    kind = loss_kind_at(cfg, epoch)
    combine = LOSSES[kind].combine
    loss_kwargs(LOSSES[kind], cfg)  # fail now, not at the first step

    def loss(scores: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        i2t, t2i = directional_losses(kind, cfg, scores, positives)
        return i2t + t2i if combine == "sum" else (i2t + t2i) / 2

    return loss
