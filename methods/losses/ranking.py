"""Ranking losses on the (images x texts) score matrix and the positive mask, registered as loss
terms under their names.

Named by mechanism: ``triplet_sum`` (all negatives), ``triplet_hardest`` (VSE++ max violation),
``nt_xent`` (InfoNCE), ``smooth_ap``. Each is written for one query direction (rows are queries);
image->text applies it to the score matrix, text->image to its transpose, and the two are summed
(triplets, as VSE++) or averaged (NT-Xent, SmoothAP, as in the metric-learning study). A model
with several scoring heads (SGRAF joint training) gets the sum of the term over its heads.

``triplet_hardest`` takes ``warmup_sum_epochs``: for that many epochs it is ``triplet_sum``
(mean-before-hardest warm-up).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from methods.errors import HarnessError
from methods.losses.nt_xent import nt_xent
from methods.losses.smooth_ap import smooth_ap
from methods.losses.term_kinds import TERM_KINDS
from methods.losses.terms import LOSS_TERMS, LossTerm, OneDirection
from methods.losses.triplet import triplet_hardest, triplet_sum


@dataclass(frozen=True)
class LossSpec:
    """A ranking loss: its function of one direction and how the two directions join. Its config
    parameters are its kind's declaration (``methods.losses.term_kinds.TERM_KINDS``)."""
    one_direction: Callable[..., torch.Tensor]   # (scores, positives, **params) -> scalar
    combine: str                                 # "sum" or "mean"


LOSSES: dict[str, LossSpec] = {
    "triplet_sum": LossSpec(triplet_sum, "sum"),
    "triplet_hardest": LossSpec(triplet_hardest, "sum"),
    "nt_xent": LossSpec(nt_xent, "mean"),
    "smooth_ap": LossSpec(smooth_ap, "mean"),
}


def loss_kind_at(cfg: dict, epoch: int) -> str:
    """The ranking loss used in ``epoch``; ``warmup_sum_epochs`` swaps hardest-negative mining for the sum at first."""
    kind = cfg["kind"]
    if kind not in LOSSES:
        raise HarnessError(f"unknown loss '{kind}'; known: {', '.join(sorted(LOSSES))}")
    if kind == "triplet_hardest" and epoch < cfg.get("warmup_sum_epochs", 0):
        return "triplet_sum"
    return kind


def loss_kwargs(kind: str, cfg: dict) -> dict:
    """The keyword arguments of ranking loss ``kind`` from a term config (``cfg``)."""
    spec = TERM_KINDS.get(kind)
    missing = [p for p in spec.params if p not in cfg]
    if missing:
        raise HarnessError(f"loss '{cfg['kind']}' needs {', '.join(missing)} in the loss config")
    return {p: cfg[p] for p in spec.params + spec.optional_params if p in cfg}


def one_direction(kind: str, cfg: dict) -> OneDirection:
    fn, kw = LOSSES[kind].one_direction, loss_kwargs(kind, cfg)
    return lambda scores, positives: fn(scores, positives, **kw)


def directional_losses(kind: str, cfg: dict, scores: torch.Tensor, positives: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(image->text, text->image) terms of loss ``kind`` on (images x captions) scores."""
    fn = one_direction(kind, cfg)
    return fn(scores, positives), fn(scores.t(), positives.t())


def build_loss(cfg: dict, epoch: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The ranking loss of one term config at ``epoch``, as a function of (scores, positives)."""
    kind = loss_kind_at(cfg, epoch)
    combine = LOSSES[kind].combine
    loss_kwargs(kind, cfg)  # fail now, not at the first step

    def loss(scores: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        i2t, t2i = directional_losses(kind, cfg, scores, positives)
        return i2t + t2i if combine == "sum" else (i2t + t2i) / 2

    return loss


class RankingTerm(LossTerm):
    """A ranking loss on every scoring head's (images x texts) scores (``outputs["scores"]``),
    with the batch's positive mask (``batch["positives"]``)."""

    def __init__(self, cfg: dict):
        super().__init__(cfg)
        loss_kwargs(cfg["kind"], cfg)  # a missing parameter fails when the term is built

    def kind_at(self, epoch: int) -> str:
        return loss_kind_at(self.cfg, epoch)

    def __call__(self, outputs: dict, batch: dict, epoch: int) -> torch.Tensor:
        loss = build_loss(self.cfg, epoch)
        return sum(loss(scores, batch["positives"]) for scores in outputs["scores"])

    def one_direction_at(self, epoch: int) -> OneDirection:
        return one_direction(self.kind_at(epoch), self.cfg)

    def direction_share(self) -> float:
        return 1.0 if LOSSES[self.cfg["kind"]].combine == "sum" else 0.5


for _kind in LOSSES:
    LOSS_TERMS.register(_kind, RankingTerm)
