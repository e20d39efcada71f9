"""DSCMR's loss (Zhen et al., CVPR 2019; penghu-cs/DSCMR train_model.py ``calc_loss``), as three
registered terms that a config weights: term1 + alpha term2 + beta term3 (main.py: alpha 1e-3,
beta 1e-1). They read the DSCMR model's training outputs (methods/models/dscmr.py: the common
features ``image_features`` (U, d) / ``text_features`` (B, d) and the label-space outputs
``image_predictions`` (U, C) / ``text_predictions`` (B, C)) and the batch's multi-hot
``image_labels`` (U, C) and ``text_labels`` (B, C).

- ``dscmr_label_regression`` (term1, the discrimination loss in the label space): the mean over
  images of ||p_i - y_i||_2 plus the mean over texts of ||p_j - y_j||_2 (row norms, not squared).
- ``dscmr_label_likelihood`` (term2, the discrimination loss in the common space): for each of
  image-image, image-text and text-text, the mean over every pair of the batch of
  log(1 + exp(θ)) - S θ, θ = cos(a, b) / 2 with the norms' product clamped at 1e-6 and S = <y_a, y_b>
  the label vectors' dot product (the number of shared labels; 0/1 on the code's single-label
  data); the three means summed.
- ``dscmr_invariance`` (term3, the modality-invariance loss): the mean over the batch's matched
  (image, text) pairs of ||f_img - f_txt||_2 (not squared), the label-wise ``consistency`` term's
  un-squared form on the common features.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from methods.losses.label_wise import _labels, consistency
from methods.losses.terms import LOSS_TERMS, LossTerm

COSINE_NORM_FLOOR = 1e-6   # calc_loss: the product of the norms .clamp(min=1e-6)


def label_regression(predictions: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(N, C) label-space outputs, (N, C) multi-hot -> mean of ||p - y||_2."""
    return (predictions - labels.to(predictions.dtype)).pow(2).sum(dim=1).sqrt().mean()


def halved_cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(N, d), (M, d) -> (N, M) a b^T / max(|a| |b|^T, 1e-6) / 2."""
    norms = a.pow(2).sum(dim=1, keepdim=True).sqrt() @ b.pow(2).sum(dim=1, keepdim=True).sqrt().t()
    return a @ b.t() / norms.clamp(min=COSINE_NORM_FLOOR) / 2


def pair_likelihood(a: torch.Tensor, b: torch.Tensor, labels_a: torch.Tensor, labels_b: torch.Tensor) -> torch.Tensor:
    """Mean over the (N, M) pairs of log(1 + exp(θ)) - S θ, S = labels_a labels_b^T."""
    theta = halved_cosine(a, b)
    similarity = labels_a.to(theta.dtype) @ labels_b.to(theta.dtype).t()
    return (F.softplus(theta) - similarity * theta).mean()


@LOSS_TERMS.register("dscmr_label_regression")
class DSCMRLabelRegressionTerm(LossTerm):
    def __call__(self, outputs: dict, batch: dict, epoch: int) -> torch.Tensor:
        img, txt = outputs["image_predictions"], outputs["text_predictions"]
        return (label_regression(img, _labels(batch, "image_labels", img, "dscmr_label_regression"))
                + label_regression(txt, _labels(batch, "text_labels", txt, "dscmr_label_regression")))


@LOSS_TERMS.register("dscmr_label_likelihood")
class DSCMRLabelLikelihoodTerm(LossTerm):
    def __call__(self, outputs: dict, batch: dict, epoch: int) -> torch.Tensor:
        img, txt = outputs["image_features"], outputs["text_features"]
        y_img = _labels(batch, "image_labels", outputs["image_predictions"], "dscmr_label_likelihood")
        y_txt = _labels(batch, "text_labels", outputs["text_predictions"], "dscmr_label_likelihood")
        return (pair_likelihood(img, img, y_img, y_img) + pair_likelihood(img, txt, y_img, y_txt)
                + pair_likelihood(txt, txt, y_txt, y_txt))


@LOSS_TERMS.register("dscmr_invariance")
class DSCMRInvarianceTerm(LossTerm):
    def __call__(self, outputs: dict, batch: dict, epoch: int) -> torch.Tensor:
        return consistency(outputs["image_features"], outputs["text_features"], batch["positives"], squared=False)
