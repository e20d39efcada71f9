"""The loss of probabilistic embeddings (PCME; Chun et al., CVPR 2021; naver-ai/pcme
``criterions/probemb.py`` MCSoftContrastiveLoss), as terms on the model's training outputs
(``methods.models.pcme``: ``match_logits`` s of every batch pair and sample pair, ``samples``,
``logsigma``).

- ``soft_contrastive``: for every (image, caption) pair of the batch, with m = +1 for a positive
  and -1 otherwise, the negative log of the Monte-Carlo match likelihood,
  NLL = -log (1/K^2) sum_kl sigmoid(2 m s_kl) (the source's log K^2 - logsumexp(m s - logsumexp(s, -s))),
  summed over all pairs (``reduction='sum'``), and counted twice: the source adds its image-to-text
  and text-to-image losses, which pair the same samples and are equal;
- ``vib``: the KL divergence of each item's N(z_bar, exp(logsigma)) from N(0, I) as the source
  writes it, -1/2 sum (1 + logsigma - z_bar^2 - exp(logsigma)) summed over the batch and the
  dimensions, images plus captions, where z_bar is the mean of the item's samples (not mu) and
  exp(logsigma) stands for the variance although the samples use it as the standard deviation:
  both as in the source. Its weight is ``vib_beta`` (1e-5).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from methods.losses.terms import LOSS_TERMS, LossTerm


def soft_contrastive_nll(logits: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
    """logits (N, M, K, L), positives (N, M) bool -> (N, M) -log mean_kl sigmoid(2 m s)."""
    m = positives.to(logits.dtype).mul(2).sub(1)[..., None, None]
    log_match = -F.softplus(-2 * m * logits)                     # log sigmoid(2 m s)
    samples = logits.shape[2] * logits.shape[3]
    return math.log(samples) - torch.logsumexp(log_match.flatten(2), dim=2)


def vib_kl(samples: torch.Tensor, logsigma: torch.Tensor) -> torch.Tensor:
    """samples (B, K, D), logsigma (B, D) -> the source's KL term, summed."""
    mean = samples.mean(dim=1)
    return -0.5 * (1 + logsigma - mean.pow(2) - logsigma.exp()).sum()


@LOSS_TERMS.register("soft_contrastive")
class SoftContrastiveTerm(LossTerm):
    def __call__(self, outputs: dict, batch: dict, epoch: int) -> torch.Tensor:
        return 2 * soft_contrastive_nll(outputs["match_logits"], batch["positives"]).sum()


@LOSS_TERMS.register("vib")
class VIBTerm(LossTerm):
    def __call__(self, outputs: dict, batch: dict, epoch: int) -> torch.Tensor:
        (img, txt), (img_logsigma, txt_logsigma) = outputs["samples"], outputs["logsigma"]
        return vib_kl(img, img_logsigma) + vib_kl(txt, txt_logsigma)
