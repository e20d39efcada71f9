"""The loss of a training step: the weighted sum of the terms a ``loss`` config block lists.

Importing this module registers every term kind (the ranking losses, the set-embedding
regularisers, the label-wise terms), so a ``Loss`` finds each kind its config names.
"""
from __future__ import annotations

import torch

from methods.losses import dscmr, generation, label_wise, probabilistic, ranking, set_regularisers  # noqa: F401  (registration)
from methods.losses.term_kinds import term_configs
from methods.losses.terms import LOSS_TERMS, OneDirection


class Loss:
    """The weighted sum of the configured terms."""

    def __init__(self, loss_cfg: dict):
        self.terms = [LOSS_TERMS.get(cfg["kind"])(cfg) for cfg in term_configs(loss_cfg)]

    def kind_at(self, epoch: int) -> str:
        return "+".join(t.kind_at(epoch) for t in self.terms)

    def __call__(self, outputs: dict, batch: dict, epoch: int) -> torch.Tensor:
        return sum(t.weight * t(outputs, batch, epoch) for t in self.terms)

    def one_direction_at(self, epoch: int) -> OneDirection | None:
        """The per-direction part of the ranking terms (None when no term ranks). One ranking term
        is returned as it is (gradient counts are scale-free); several are summed with their
        weights and direction shares, so the gradients are those of the loss trained."""
        parts = [(t.weight * t.direction_share(), fn) for t in self.terms
                 if (fn := t.one_direction_at(epoch)) is not None]
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0][1]
        return lambda scores, positives: sum(w * fn(scores, positives) for w, fn in parts)
