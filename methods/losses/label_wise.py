"""Loss terms of label-wise retrieval (Yang et al., IJCAI 2021; its public code's model/Model.py
``MultiLabelLoss``). They read the label-wise model's training outputs (methods/models/label_wise.py:
``image_label_vectors`` (U, C) and ``text_label_vectors`` (B, C), the token means p̄ of the
l2-normalised sigmoid vectors; ``word_scores`` / ``word_targets`` and ``region_scores`` /
``region_targets`` at the masked words and selected regions) and the batch's multi-hot
``image_labels`` (U, C) and ``text_labels`` (B, C).

- ``label_logistic`` (the code's loss "1"): the mean over the batch's images *and* texts of
  log(1 + exp(-<p̄, y>)), y the item's multi-hot labels. Not binary cross-entropy: it only rewards
  mass on the present labels of a unit-norm-token mean.
- ``masked_prediction`` (the code's loss "2", weighted by the paper's λ): cross-entropy of the
  masked words' vocabulary scores (mean over the masked words) plus cross-entropy of the selected
  regions' detector-class scores (mean over the selected regions). The code applies a sigmoid
  before its cross-entropy (the model's ``sigmoid_before_cross_entropy``). The code gathers the
  masks only of a batch's first min(B, sequence length) items (BackNet's loop over
  ``range(np.min([len(masklist), embedd.size(1)]))``); every item's masks count here. A part with
  no masked position adds 0; a batch without masked-prediction targets is an error.
- ``consistency`` (the supplement's η-weighted consistency loss, Figure 1: the main paper's Eq. 2 is
  not in the text we have and the code has none). Our choice: DSCMR's modality-invariance form
  (Zhen et al., CVPR 2019) on the label vectors, the mean over the batch's positive (image, text)
  pairs of ||p̄_img - p̄_txt||²₂ (``squared: true``); ``squared: false`` takes the un-squared distance,
  as DSCMR's public training code does (``((f1 - f2)**2).sum(1).sqrt().mean()``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from methods.errors import HarnessError
from methods.losses.terms import LOSS_TERMS, LossTerm


def label_logistic(label_vectors: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(N, C) mean label vectors, (N, C) multi-hot -> mean of log(1 + exp(-<p̄, y>))."""
    return F.softplus(-(label_vectors * labels.to(label_vectors.dtype)).sum(dim=-1)).mean()


def masked_cross_entropy(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the masked positions (rows); 0 when there is none."""
    if targets.numel() == 0:
        return scores.sum() * 0.0
    return F.cross_entropy(scores, targets)


def consistency(image_vectors: torch.Tensor, text_vectors: torch.Tensor, positives: torch.Tensor,
                squared: bool = True) -> torch.Tensor:
    """Mean over positive (image i, text j) pairs of ||p̄_i - p̄_j||² (or ||.||)."""
    rows, cols = positives.to(image_vectors.device).nonzero(as_tuple=True)
    diff = image_vectors[rows] - text_vectors[cols]
    sq = diff.pow(2).sum(dim=-1)
    return (sq if squared else sq.sqrt()).mean()


def _labels(batch: dict, key: str, vectors: torch.Tensor, term: str = "label_logistic") -> torch.Tensor:
    if key not in batch:
        raise HarnessError(f"loss term {term} needs the batch's '{key}': the training split has no labels")
    labels = batch[key].to(vectors.device)
    if labels.shape != vectors.shape:
        raise HarnessError(f"loss term {term}: the model predicts {vectors.shape[-1]} labels "
                           f"(model.n_classes) but the batch's {key} have shape {tuple(labels.shape)}")
    return labels


@LOSS_TERMS.register("label_logistic")
class LabelLogisticTerm(LossTerm):
    def __call__(self, outputs: dict, batch: dict, epoch: int) -> torch.Tensor:
        img, txt = outputs["image_label_vectors"], outputs["text_label_vectors"]
        vectors = torch.cat([img, txt])
        labels = torch.cat([_labels(batch, "image_labels", img), _labels(batch, "text_labels", txt)])
        return label_logistic(vectors, labels)


@LOSS_TERMS.register("masked_prediction")
class MaskedPredictionTerm(LossTerm):
    def __call__(self, outputs: dict, batch: dict, epoch: int) -> torch.Tensor:
        parts = [(outputs[f"{side}_scores"], outputs[f"{side}_targets"]) for side in ("word", "region")
                 if f"{side}_scores" in outputs]
        if not parts:
            raise HarnessError("loss term masked_prediction: the batch has no masked-prediction targets "
                               "(training.masked_prediction)")
        for scores, targets in parts:
            if targets.numel() and int(targets.max()) >= scores.shape[-1]:
                raise HarnessError(f"loss term masked_prediction: target class {int(targets.max())} but the model "
                                   f"predicts {scores.shape[-1]} classes (model.n_region_classes or the vocabulary)")
        return sum(masked_cross_entropy(s, t) for s, t in parts)


@LOSS_TERMS.register("consistency")
class ConsistencyTerm(LossTerm):
    def __call__(self, outputs: dict, batch: dict, epoch: int) -> torch.Tensor:
        return consistency(outputs["image_label_vectors"], outputs["text_label_vectors"], batch["positives"],
                           self.cfg.get("squared", True))
