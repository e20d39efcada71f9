"""Losses as weighted terms declared in config, each a registered function of the model's
training outputs and the batch's relevance.

``loss: {kind: triplet_hardest, margin: 0.2}`` is one term (weight 1); several are listed as
``loss: {terms: [{kind: triplet_hardest, margin: 0.2}, {kind: ..., weight: 0.1}]}``. The
loss of a step is the sum of ``weight x term``. A term is a class registered in ``LOSS_TERMS``
under its ``kind``, built from its config block; it may change with the epoch (the triplet
term's mean-before-hardest warm-up), and says what it is at an epoch (``kind_at``, logged).
Terms on score matrices (``ranking`` terms) also give their per-direction function, from
which the training loop counts the negatives that receive a gradient.
"""
from __future__ import annotations

from typing import Callable, ClassVar

import torch

from methods.registry import Registry

# (scores, positives) -> loss of one query direction (rows are queries)
OneDirection = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class LossTerm:
    """A term built from its config block (``kind``, ``weight`` and its own parameters)."""

    keys: ClassVar[tuple[str, ...]]   # its parameters: every term class declares them (or overrides ``parameters``)

    @classmethod
    def parameters(cls, kind: str) -> frozenset[str]:
        """The config keys a term of ``kind`` takes besides ``kind`` and ``weight``."""
        return frozenset(cls.keys)

    @classmethod
    def family(cls, kind: str) -> str:
        """Kinds of one family give their shared parameter names the same meaning (a triplet
        margin is a margin for both triplet kinds; NT-Xent's tau is not SmoothAP's)."""
        return kind

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


LOSS_TERMS: Registry[type[LossTerm]] = Registry("loss term")


def rebase_term(inherited: dict, layer: dict) -> dict:
    """A single-term loss block after a config layer: merged key by key, except that a layer
    naming another ``kind`` keeps an inherited parameter only when the new kind takes it with the
    same meaning (same family): ``{kind: nt_xent, tau: 0.1}`` over ``{kind: triplet_hardest,
    margin: 0.2}`` leaves no margin behind to enter the config hash, ``loss.kind: triplet_sum``
    keeps the margin, and SmoothAP never inherits NT-Xent's tau."""
    kind = layer.get("kind")
    if "terms" in layer or ("terms" in inherited and kind is not None):  # one form replaces the other
        return dict(layer)
    merged = {**inherited, **layer}
    old = inherited.get("kind")
    if kind is None or kind == old or kind not in LOSS_TERMS or old not in LOSS_TERMS:
        return merged  # (an unknown kind is reported by the schema, with the file and key)
    new_term, old_term = LOSS_TERMS.get(kind), LOSS_TERMS.get(old)
    same_family = new_term.family(kind) == old_term.family(old)
    takes = new_term.parameters(kind) if same_family else frozenset()
    return {k: v for k, v in merged.items() if k in layer or k in takes or k == "weight"}


def term_configs(loss_cfg: dict) -> list[dict]:
    """The terms of a ``loss`` config block (a single term is the block itself)."""
    return list(loss_cfg["terms"]) if "terms" in loss_cfg else [loss_cfg]


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
