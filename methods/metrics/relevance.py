"""What counts as a correct answer when ranking: a relevance description beside the score matrix.

- ``CaptionsOfImage``: caption k belongs to image k // captions_per_image (the Karpathy
  protocols: Flickr30K, COCO, the synthetic set). Scores are (N images, c·N captions).
- ``SharedLabels``: images and texts carry multi-hot label vectors; an (image, text) pair is
  relevant when they share a label, and its graded relevance is the number of labels they share
  (label-wise retrieval: MIRFlickr-25K, NUS-WIDE, COCO with its 80 object labels).
- ``ExtendedPositives``: a boolean (N images, c·N captions) matrix of every (image, caption) pair
  the caption truly describes, a superset of the Karpathy pairs (ECCV Caption / CxC style
  false-negative-aware evaluation; ``methods.data.positives`` reads it).

- ``PlausibleMatches``: each image carries the multi-hot set of object categories annotated in
  it; an (image, caption) pair is a plausible match at threshold t when the two images' sets differ
  in at most t categories (PCME's PMRP on COCO instance annotations). Scores are (N, c·N).

All can be cut into consecutive folds (COCO 1K = five folds of the 5K test set).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np
import torch

from methods.errors import HarnessError


def check_finite(scores: torch.Tensor) -> None:
    if not torch.isfinite(scores).all():
        raise HarnessError("score matrix contains NaN or inf")


def image_fold(n_images: int, captions_per_image: int, fold: int, n_folds: int) -> tuple[slice, slice]:
    """The rows (images) and columns (their captions) of fold ``fold`` of ``n_folds`` consecutive
    image blocks of an (N, c·N) score matrix."""
    size, c = n_images // n_folds, captions_per_image
    return slice(fold * size, (fold + 1) * size), slice(fold * size * c, (fold + 1) * size * c)


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
        rows, cols = image_fold(scores.shape[0], self.captions_per_image, fold, n_folds)
        return scores[rows, cols], self


# how the label ranking metrics order a query's candidates among equal scores
# (``methods.metrics.label_ranking.ranked_order``)
TIE_ORDERS = ("against_model", "argsort_reversed")
# the NDCG discount: log2(rank + 1) for every query; or, for text queries, the label-wise code's
# COCO t2i (utils/evaluation.py t2i): log2(5 (rank - 1) + c + 2), c the query's caption index within its image
NDCG_DISCOUNTS = ("rank", "coco_t2i_code")


@dataclass(frozen=True, eq=False)
class SharedLabels:
    image_labels: np.ndarray   # (N, L) multi-hot
    text_labels: np.ndarray    # (M, L) multi-hot
    # the score-matrix columns of these texts when they are a subset of a split's texts (the unique
    # tag sets of a tag dataset, ``methods.metrics.evaluation.split_labels``); None: every column
    text_columns: np.ndarray | None = None
    # the image (row) each of these texts belongs to; None: texts in image order, an equal number per image
    text_owners: np.ndarray | None = None
    # each image's own texts among these (N, texts per image) when they are not the texts it owns
    # (unique tag sets: the one equal to its own); None: the texts whose owner it is
    image_texts: np.ndarray | None = None
    tie_order: str = "against_model"       # TIE_ORDERS
    ndcg_discount: str = "rank"            # NDCG_DISCOUNTS
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
        if self.tie_order not in TIE_ORDERS or self.ndcg_discount not in NDCG_DISCOUNTS:
            raise HarnessError(f"shared-label relevance: tie order {self.tie_order!r} (one of {', '.join(TIE_ORDERS)}), "
                               f"NDCG discount {self.ndcg_discount!r} (one of {', '.join(NDCG_DISCOUNTS)})")

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

    def own_keys(self, scores: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """(image keys (N, k), text keys (M,)): text t is image i's own when its key is among the
        image's (the label-wise code's R@K: the image's own captions, or its own tag set)."""
        if self.image_texts is not None:
            return np.asarray(self.image_texts).reshape(len(self.image_labels), -1), np.arange(len(self.text_labels))
        return np.arange(len(self.image_labels))[:, None], self.text_images(scores)

    def fold(self, scores: torch.Tensor, fold: int, n_folds: int) -> tuple[torch.Tensor, "SharedLabels"]:
        if n_folds == 1:
            return scores, self
        if self.text_columns is not None or self.image_texts is not None:
            raise HarnessError("shared-label relevance: a subset of the texts (unique tag sets) cannot be folded")
        n, m = scores.shape[0] // n_folds, scores.shape[1] // n_folds
        rows, cols = slice(fold * n, (fold + 1) * n), slice(fold * m, (fold + 1) * m)
        return scores[rows, cols], SharedLabels(self.image_labels[rows], self.text_labels[cols],
                                                tie_order=self.tie_order, ndcg_discount=self.ndcg_discount)


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
        rows, cols = image_fold(scores.shape[0], self.captions_per_image, fold, n_folds)
        return scores[rows, cols], ExtendedPositives(self.positives[rows, cols], self.captions_per_image)


# what a plausible-match ranking leaves out besides unannotated items: nothing ("kept"), or each
# query's last-ranked item of the whole split ("dropped": naver-ai/pcme extract_rankings_coco.py
# keeps ``[:topk]`` of each ranking with its default topk=-1, which cuts the last item off)
LAST_RANKED = ("kept", "dropped")


def last_ranked(scores: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """Per row (``dim`` 1) or column (``dim`` 0), the item ranked last: the lowest score; among
    equal lowest scores the last one (where a stable descending sort puts it)."""
    lowest, first = torch.min(scores, dim=dim)
    tied = torch.nonzero((scores == lowest.unsqueeze(dim)).sum(dim=dim) > 1).squeeze(1)
    for i in tied.tolist():   # rare with real-valued scores: the last of the equal lowest
        line = scores[i] if dim == 1 else scores[:, i]
        first[i] = torch.nonzero(line == lowest[i]).max()
    return first


@dataclass(frozen=True, eq=False)
class PlausibleMatches:
    """Image i's annotated object categories are ``categories[i]`` (multi-hot; all zero: no instance
    annotation, and the image's items are neither queries nor ranked, as PCME's evaluation leaves
    them out); caption k belongs to image k // c. A gallery item is a plausible match of a query
    at threshold t when their images' category sets differ in at most t categories (Hamming
    distance; t in ``thresholds``). ``last``: ``LAST_RANKED``; ``dropped``: per direction, each
    query's dropped gallery column within this matrix (-1: none here), set when a fold was cut
    from a whole split whose last-ranked items it names; None: this matrix is the whole split."""
    categories: np.ndarray     # (N, C) uint8 multi-hot
    captions_per_image: int = 5
    thresholds: tuple[int, ...] = (0, 1, 2)
    last: str = "kept"
    dropped: dict | None = None   # {"i2t": (N,) int64, "t2i": (cN,) int64}
    # the whole split's dropped items of the last matrix folded (weakly held), found once for its folds
    _whole: list = field(default_factory=list, repr=False)
    kind = "plausible_matches"

    def __post_init__(self) -> None:
        value = np.asarray(self.categories)
        if value.ndim != 2 or not np.isin(value, (0, 1)).all():
            raise HarnessError(f"plausible-match relevance: categories must be a multi-hot (images, categories) "
                               f"matrix, got shape {value.shape}")
        if self.last not in LAST_RANKED:
            raise HarnessError(f"plausible-match relevance: last {self.last!r} (one of {', '.join(LAST_RANKED)})")
        object.__setattr__(self, "categories", value.astype(np.uint8))

    def check(self, scores: torch.Tensor) -> None:
        c = self.captions_per_image
        if scores.ndim != 2 or tuple(scores.shape) != (len(self.categories), c * len(self.categories)):
            raise HarnessError(f"score matrix has shape {tuple(scores.shape)}; the categories give "
                               f"({len(self.categories)}, {c * len(self.categories)}) (images x captions, caption k "
                               f"of image k // {c})")
        check_finite(scores)

    def n_images(self, scores: torch.Tensor) -> int:
        return scores.shape[0]

    def text_images(self, scores: torch.Tensor) -> np.ndarray:
        return np.arange(scores.shape[1]) // self.captions_per_image

    def dropped_columns(self, scores: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per direction, the gallery column each query's ranking leaves out (-1: none)."""
        if self.last == "kept":
            return {"i2t": torch.full((scores.shape[0],), -1), "t2i": torch.full((scores.shape[1],), -1)}
        if self.dropped is not None:
            return {d: torch.as_tensor(v) for d, v in self.dropped.items()}
        if self._whole and self._whole[0]() is scores:
            return self._whole[1]
        found = {"i2t": last_ranked(scores, dim=1), "t2i": last_ranked(scores, dim=0)}
        self._whole[:] = [weakref.ref(scores), found]
        return found

    def fold(self, scores: torch.Tensor, fold: int, n_folds: int) -> tuple[torch.Tensor, "PlausibleMatches"]:
        """Fold ``fold`` of ``n_folds`` consecutive image blocks with their captions; a dropped
        item is the last of the whole split's ranking, so it is found before the cut (PCME ranks the
        5K test set, then keeps a fold's items)."""
        if n_folds == 1:
            return scores, self
        c = self.captions_per_image
        rows, cols = image_fold(scores.shape[0], c, fold, n_folds)
        whole = self.dropped_columns(scores)
        local = {"i2t": whole["i2t"][rows] - cols.start, "t2i": whole["t2i"][cols] - rows.start}
        sizes = {"i2t": cols.stop - cols.start, "t2i": rows.stop - rows.start}
        local = {d: torch.where((v >= 0) & (v < sizes[d]), v, -1) for d, v in local.items()}
        return scores[rows, cols], PlausibleMatches(self.categories[rows], c, self.thresholds, self.last,
                                                    {d: v.numpy() for d, v in local.items()})
