"""Label prediction of label-wise models: micro-F1 of each modality's predicted labels (Yang et al.,
IJCAI 2021, supplement Table 1; its public code imports scikit-learn's f1_score but never calls it).

A model with a label head gives per-item label scores in [0, 1] (``RetrievalModel.label_predictions``;
the label-wise model's are each label's share of the item's strongest, methods/models/label_wise.py);
an item predicts label c when its score is >= ``threshold`` (0.5). micro-F1 pools the true
positives, false positives and false negatives of every (item, label): 2 TP / (2 TP + FP + FN), 0 when
nothing is predicted or present (scikit-learn's ``f1_score(average="micro", zero_division=0)``).

Each item's part of it, (2 TP, 2 TP + FP + FN) of its own labels, is its per-query pair: summed over
the items they give micro-F1 (``methods.metrics.query_units``: the claims' per-image units, a text's
counted with its image).

The metrics are computed from a ``LabelPredictions`` relevance (kind ``label_predictions``), not from
the score matrix: ``evaluate_protocol(scores, protocol, LabelPredictions(...))`` checks that the score
matrix is (images x texts) and cuts the predictions into the protocol's folds with it (consecutive
image and text blocks, as ``SharedLabels``). The metrics are declared in
``methods.metrics.declarations``; this module implements them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from methods.errors import HarnessError
from methods.metrics.implementations import EvaluationContext, implement_metric
from methods.metrics.relevance import check_finite

THRESHOLD = 0.5


def micro_f1(scores: np.ndarray, labels: np.ndarray, threshold: float = THRESHOLD) -> float:
    """(N, C) label scores and (N, C) multi-hot labels -> micro-F1 in [0, 1]."""
    predicted = np.asarray(scores) >= threshold
    truth = np.asarray(labels).astype(bool)
    if predicted.shape != truth.shape:
        raise HarnessError(f"micro-F1: predictions of shape {predicted.shape}, labels of shape {truth.shape}")
    tp = int(np.sum(predicted & truth))
    fp = int(np.sum(predicted & ~truth))
    fn = int(np.sum(~predicted & truth))
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0


def micro_f1_parts(scores: np.ndarray, labels: np.ndarray, threshold: float = THRESHOLD) -> np.ndarray:
    """(N, 2): each item's (2 TP, 2 TP + FP + FN) over its labels; Σ column 0 / Σ column 1 is micro-F1."""
    predicted = np.asarray(scores) >= threshold
    truth = np.asarray(labels).astype(bool)
    if predicted.shape != truth.shape:
        raise HarnessError(f"micro-F1: predictions of shape {predicted.shape}, labels of shape {truth.shape}")
    both = 2.0 * np.sum(predicted & truth, axis=1)
    return np.stack([both, both + np.sum(predicted ^ truth, axis=1)], axis=1)


@dataclass(frozen=True, eq=False)
class LabelPredictions:
    """Label scores and true labels of a split's images (N, C) and texts (M, C)."""
    image_scores: np.ndarray
    image_labels: np.ndarray
    text_scores: np.ndarray
    text_labels: np.ndarray
    kind = "label_predictions"

    def __post_init__(self) -> None:
        for side in ("image", "text"):
            probs, labels = (np.asarray(getattr(self, f"{side}_{k}")) for k in ("scores", "labels"))
            if probs.ndim != 2 or probs.shape != labels.shape:
                raise HarnessError(f"label predictions: {side} scores of shape {probs.shape} and labels of "
                                   f"shape {labels.shape}; expected the same (items, labels)")
            object.__setattr__(self, f"{side}_scores", probs)
            object.__setattr__(self, f"{side}_labels", labels)

    def check(self, scores: torch.Tensor) -> None:
        expected = (len(self.image_labels), len(self.text_labels))
        if tuple(scores.shape) != expected:
            raise HarnessError(f"score matrix has shape {tuple(scores.shape)}; the label predictions give {expected} "
                               f"(images x texts)")
        check_finite(torch.as_tensor(self.image_scores))
        check_finite(torch.as_tensor(self.text_scores))

    def n_images(self, scores: torch.Tensor) -> int:
        return scores.shape[0]

    def text_images(self, scores: torch.Tensor) -> np.ndarray:
        """The image each text belongs to: consecutive equal blocks of texts per image, as ``fold`` cuts them."""
        n, m = scores.shape
        if m % n:
            raise HarnessError(f"label predictions: {m} texts are not an equal number per each of {n} images")
        return np.arange(m) // (m // n)

    def fold(self, scores: torch.Tensor, fold: int, n_folds: int) -> tuple[torch.Tensor, "LabelPredictions"]:
        n, m = scores.shape[0] // n_folds, scores.shape[1] // n_folds
        rows, cols = slice(fold * n, (fold + 1) * n), slice(fold * m, (fold + 1) * m)
        return scores[rows, cols], LabelPredictions(self.image_scores[rows], self.image_labels[rows],
                                                    self.text_scores[cols], self.text_labels[cols])


def _micro_f1(side: str, parts: bool):
    def compute(context: EvaluationContext):
        rel = context.relevance
        return (micro_f1_parts if parts else micro_f1)(getattr(rel, f"{side}_scores"), getattr(rel, f"{side}_labels"))
    return compute


for _side in ("image", "text"):
    implement_metric(f"{_side}_micro_f1", _micro_f1(_side, parts=False), per_query=_micro_f1(_side, parts=True))
