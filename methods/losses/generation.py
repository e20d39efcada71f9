"""The caption-generation term of VSRN's objective (KunpengLi1994/VSRN misc/utils.py
LanguageModelCriterion): the negative log-likelihood of each training caption's next ids under the
model's generator (``caption_log_probs``, ``caption_targets`` and ``caption_mask`` of the training
outputs: ``methods.models.caption_decoder``), summed over the masked positions and divided by the
number of captions."""
from __future__ import annotations

import torch

from methods.losses.terms import LOSS_TERMS, LossTerm


def caption_nll(log_probs: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log_probs (B, S, V), targets and mask (B, S) -> sum of the masked NLLs / B."""
    picked = log_probs.gather(2, targets[..., None]).squeeze(-1)
    return -(picked * mask).sum() / log_probs.shape[0]


@LOSS_TERMS.register("caption_generation")
class CaptionGenerationTerm(LossTerm):
    def __call__(self, outputs: dict, batch: dict, epoch: int) -> torch.Tensor:
        if "caption_log_probs" not in outputs:
            raise ValueError("loss term caption_generation needs a model with a caption generator "
                             "(model.caption_decoder)")
        return caption_nll(outputs["caption_log_probs"], outputs["caption_targets"], outputs["caption_mask"])
