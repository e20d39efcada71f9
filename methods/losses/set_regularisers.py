"""Regularisers of set-embedding models, registered as loss terms (yalesong/pvse loss.py,
kdwonn/DivE loss.py). They read the model's training outputs ``sets`` (image and text element
sets, (B, K, D) and (C, L, D), l2-normalised) and ``residuals`` (the set module's outputs before
the global feature is added).

- ``mmd``: maximum mean discrepancy between all image and all text elements of the batch,
  mean k(x, x') - 2 mean k(x, y) + mean k(y, y') with k = exp(-gamma |x - y|), the *un-squared*
  distance as the public code computes it (``gamma`` 0.5 there, hard-coded);
- ``uniformity``: per set, the mean over its element pairs i < j of exp(-t |r_i - r_j|^2) of the
  l2-normalised residuals (t = 2), averaged over the batch's sets, image plus text;
- ``diversity`` (PVSE): per set, || G - diag(G) ||_F / K^2 with G the Gram matrix of the
  l2-normalised residuals, averaged over the batch, image plus text.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from methods.losses.terms import LOSS_TERMS, LossTerm


def rbf_kernel_mean(x: torch.Tensor, y: torch.Tensor, gamma: float) -> torch.Tensor:
    return torch.exp(-gamma * torch.cdist(x, y)).mean()


def mmd(x: torch.Tensor, y: torch.Tensor, gamma: float = 0.5) -> torch.Tensor:
    """x (P, D), y (Q, D) -> the (biased) MMD estimate with the un-squared-distance RBF kernel."""
    return rbf_kernel_mean(x, x, gamma) - 2 * rbf_kernel_mean(x, y, gamma) + rbf_kernel_mean(y, y, gamma)


def uniformity(residuals: torch.Tensor, t: float = 2.0) -> torch.Tensor:
    """residuals (B, K, D) -> mean over sets of the mean over pairs i < j of exp(-t |r_i - r_j|^2)."""
    k = residuals.shape[1]
    if k == 1:
        return residuals.new_zeros(())
    r = F.normalize(residuals, dim=-1)
    kernel = torch.exp(-t * torch.cdist(r, r).pow(2))
    upper = torch.triu(torch.ones(k, k, dtype=torch.bool, device=r.device), diagonal=1)
    return (kernel[:, upper].sum(dim=1) / (k * (k - 1) / 2)).mean()


def diversity(residuals: torch.Tensor) -> torch.Tensor:
    """residuals (B, K, D) -> mean over sets of ||Gram - diag||_F / K^2."""
    k = residuals.shape[1]
    if k == 1:
        return residuals.new_zeros(())
    r = F.normalize(residuals, dim=-1)
    gram = r @ r.transpose(1, 2)
    off = gram.masked_fill(torch.eye(k, dtype=torch.bool, device=r.device), 0.0)
    return (torch.linalg.matrix_norm(off) / k ** 2).mean()


class SetTerm(LossTerm):
    """A regulariser of the element sets or residuals (``outputs['sets']`` / ``['residuals']``)."""


@LOSS_TERMS.register("mmd")
class MMDTerm(SetTerm):
    def __call__(self, outputs: dict, batch: dict, epoch: int) -> torch.Tensor:
        img, txt = outputs["sets"]
        return mmd(img.reshape(-1, img.shape[-1]), txt.reshape(-1, txt.shape[-1]), self.cfg.get("gamma", 0.5))


@LOSS_TERMS.register("uniformity")
class UniformityTerm(SetTerm):
    def __call__(self, outputs: dict, batch: dict, epoch: int) -> torch.Tensor:
        img, txt = outputs["residuals"]
        t = self.cfg.get("t", 2.0)
        return uniformity(img, t) + uniformity(txt, t)


@LOSS_TERMS.register("diversity")
class DiversityTerm(SetTerm):
    def __call__(self, outputs: dict, batch: dict, epoch: int) -> torch.Tensor:
        img, txt = outputs["residuals"]
        return diversity(img) + diversity(txt)
