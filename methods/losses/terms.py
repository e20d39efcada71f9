"""Loss terms: each a registered function of the model's training outputs and the batch's relevance
(the weighted sum of a config's terms is ``methods.losses.weighted_sum.Loss``).

``loss: {kind: triplet_hardest, margin: 0.2}`` is one term (weight 1); several are listed as
``loss: {terms: [{kind: triplet_hardest, margin: 0.2}, {kind: ..., weight: 0.1}]}``. The
loss of a step is the sum of ``weight x term``. A term is a class registered in ``LOSS_TERMS``
under its ``kind``, built from its config block; it may change with the epoch (the triplet
term's mean-before-hardest warm-up), and says what it is at an epoch (``kind_at``, logged).
Terms on score matrices (``ranking`` terms) also give their per-direction function, from
which the training loop counts the negatives that receive a gradient.
"""
from __future__ import annotations

from typing import Callable

import torch

from methods.losses.term_kinds import TERM_KINDS
from methods.registry import Registry

# (scores, positives) -> loss of one query direction (rows are queries)
OneDirection = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class LossTerm:
    """A term built from its config block (``kind``, ``weight`` and the parameters its kind declares:
    ``methods.losses.term_kinds``)."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.weight = float(cfg.get("weight", 1.0))

    def kind_at(self, epoch: int) -> str:
        return self.cfg["kind"]

    def __call__(self, outputs: dict, batch: dict, epoch: int) -> torch.Tensor:
        """The (unweighted) term of one batch: ``outputs`` from ``model.training_outputs``,
        ``batch`` holds the relevance (``positives``: images x texts)."""
        raise NotImplementedError

    def one_direction_at(self, epoch: int) -> OneDirection | None:
        """For ranking terms, the loss of one query direction on a score matrix; else None."""
        return None

    def direction_share(self) -> float:
        """How a direction enters the term: 1 when the two directions are summed, 1/2 when averaged."""
        return 1.0


LOSS_TERMS: Registry[type[LossTerm]] = Registry("loss term", declared=TERM_KINDS)
