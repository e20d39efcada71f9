"""What counts as a correct answer when ranking: a relevance description beside the score matrix.

- ``CaptionsOfImage``: caption k belongs to image k // captions_per_image (the Karpathy
  protocols: Flickr30K, COCO, the synthetic set). Scores are (N images, c·N captions).
- ``SharedLabels``: images and texts carry multi-hot label vectors; an (image, text) pair is
  relevant when they share a label, and its graded relevance is the number of labels they share
  (label-wise retrieval: MIRFlickr-25K, NUS-WIDE, COCO with its 80 object labels).
- ``ExtendedPositives``: a boolean (N images, c·N captions) matrix of every (image, caption) pair
  the caption truly describes, a superset of the Karpathy pairs (ECCV Caption / CxC style
  false-negative-aware evaluation; ``methods.data.positives`` reads it).

All can be cut into consecutive folds (COCO 1K = five folds of the 5K test set).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from methods.errors import HarnessError


def check_finite(scores: torch.Tensor) -> None:
    if not torch.isfinite(scores).all():
        raise HarnessError("score matrix contains NaN or inf")


@dataclass(frozen=True)
class CaptionsOfImage:
    captions_per_image: int = 5
    kind = "captions_of_image"

    def check(self, scores: torch.Tensor) -> None:
        c = self.captions_per_image
        if scores.ndim != 2 or scores.shape[1] != c * scores.shape[0]:
            raise HarnessError(f"score matrix has shape {tuple(scores.shape)}; expected (N, {c}N) "
                               f"with caption k belonging to image k // {c}")
        check_finite(scores)

    def n_images(self, scores: torch.Tensor) -> int:
        return scores.shape[0]

    def text_images(self, scores: torch.Tensor) -> np.ndarray:
        """The image (row) each text (column) belongs to."""
        return np.arange(scores.shape[1]) // self.captions_per_image

    def fold(self, scores: torch.Tensor, fold: int, n_folds: int) -> tuple[torch.Tensor, "CaptionsOfImage"]:
        """Fold ``fold`` of ``n_folds`` consecutive image blocks, with their captions."""
        size = scores.shape[0] // n_folds
        c = self.captions_per_image
        return scores[fold * size:(fold + 1) * size, fold * size * c:(fold + 1) * size * c], self


@dataclass(frozen=True, eq=False)
class SharedLabels:
    image_labels: np.ndarray   # (N, L) multi-hot
    text_labels: np.ndarray    # (M, L) multi-hot
    # the score-matrix columns of these texts when they are a subset of a split's texts (the unique
    # tag sets of a tag dataset, ``methods.metrics.protocols.split_labels``); None: every column
    text_columns: np.ndarray | None = None
    # the image (row) each of these texts belongs to; None: texts in image order, an equal number per image
    text_owners: np.ndarray | None = None
    kind = "shared_labels"

    def __post_init__(self) -> None:
        for name in ("image_labels", "text_labels"):
            value = np.asarray(getattr(self, name))
            if value.ndim != 2:
                raise HarnessError(f"shared-label relevance: {name} must be (items, labels), got shape {value.shape}")
            object.__setattr__(self, name, value)
        if self.image_labels.shape[1] != self.text_labels.shape[1]:
            raise HarnessError(f"shared-label relevance: images have {self.image_labels.shape[1]} labels, "
                               f"texts {self.text_labels.shape[1]}")

    def check(self, scores: torch.Tensor) -> None:
        expected = (len(self.image_labels), len(self.text_labels))
        if tuple(scores.shape) != expected:
            raise HarnessError(f"score matrix has shape {tuple(scores.shape)}; the labels give {expected} "
                               f"(images x texts)")
        check_finite(scores)

    def n_images(self, scores: torch.Tensor) -> int:
        return scores.shape[0]

    def text_images(self, scores: torch.Tensor) -> np.ndarray:
        """The image (row) each text (column) belongs to."""
        if self.text_owners is not None:
            return np.asarray(self.text_owners)
        n, m = scores.shape
        if m % n:
            raise HarnessError(f"shared-label relevance: {m} texts are not an equal number per each of {n} images, "
                               f"and the relevance names no image of each text")
        return np.arange(m) // (m // n)

    def graded(self) -> np.ndarray:
        """(N, M) number of labels each (image, text) pair shares."""
        return self.image_labels.astype(np.float64) @ self.text_labels.astype(np.float64).T

    def fold(self, scores: torch.Tensor, fold: int, n_folds: int) -> tuple[torch.Tensor, "SharedLabels"]:
        n, m = scores.shape[0] // n_folds, scores.shape[1] // n_folds
        rows, cols = slice(fold * n, (fold + 1) * n), slice(fold * m, (fold + 1) * m)
        return scores[rows, cols], SharedLabels(self.image_labels[rows], self.text_labels[cols])


@dataclass(frozen=True, eq=False)
class ExtendedPositives:
    """Caption k is relevant to every image i with ``positives[i, k]``; the Karpathy pair
    (image k // c, caption k) is always one of them. Scores are (N images, c·N captions)."""
    positives: np.ndarray      # (N, cN) bool
    captions_per_image: int = 5
    kind = "extended_positives"

    def __post_init__(self) -> None:
        value = np.asarray(self.positives)
        if value.ndim != 2 or value.dtype != np.bool_:
            raise HarnessError(f"extended-positives relevance: expected a boolean (images, captions) matrix, "
                               f"got {value.dtype} of shape {value.shape}")
        object.__setattr__(self, "positives", value)

    def check(self, scores: torch.Tensor) -> None:
        c = self.captions_per_image
        if scores.ndim != 2 or scores.shape[1] != c * scores.shape[0]:
            raise HarnessError(f"score matrix has shape {tuple(scores.shape)}; expected (N, {c}N) "
                               f"with caption k belonging to image k // {c}")
        if tuple(scores.shape) != self.positives.shape:
            raise HarnessError(f"score matrix has shape {tuple(scores.shape)}; the extended positives are "
                               f"{self.positives.shape} (images x captions)")
        check_finite(scores)
        captions = np.arange(self.positives.shape[1])
        missing = np.flatnonzero(~self.positives[captions // c, captions])
        if missing.size:
            raise HarnessError(f"extended positives: {missing.size} caption(s) are not positive for their own "
                               f"image, e.g. caption {missing[0]} of image {missing[0] // c}")

    def n_images(self, scores: torch.Tensor) -> int:
        return scores.shape[0]

    def text_images(self, scores: torch.Tensor) -> np.ndarray:
        """The image (row) each caption (column) belongs to (its Karpathy image)."""
        return np.arange(scores.shape[1]) // self.captions_per_image

    def fold(self, scores: torch.Tensor, fold: int, n_folds: int) -> tuple[torch.Tensor, "ExtendedPositives"]:
        """Fold ``fold`` of ``n_folds`` consecutive image blocks, with their captions (positives
        pointing outside the block are left out with the rest of the gallery)."""
        size = scores.shape[0] // n_folds
        c = self.captions_per_image
        rows, cols = slice(fold * size, (fold + 1) * size), slice(fold * size * c, (fold + 1) * size * c)
        return scores[rows, cols], ExtendedPositives(self.positives[rows, cols], c)
