"""Batches for training and validation.

Two batchings, chosen by ``training.batching``:
- ``captions``: each item is one caption and its image (VSE++/VSRN/SCAN style; an image may
  appear with several of its captions, or once);
- ``images``: each item is one image with all 5 of its captions (the ranking batches the
  metric-learning study uses for SmoothAP: B images x 5B captions).
The collate function builds the image rows of the batch and the (image rows x captions)
positive mask the losses take, as ``training.batch_positives`` says:
- ``diagonal``: one image row per caption, even when two captions of a batch share an image,
  and only the diagonal is positive (the public VSE++, VSRN, SCAN and SGRAF code: the second
  caption of an image and the repeated image row are negatives);
- ``same_image``: each image once, positive with every caption of it in the batch (the only
  meaning image batches can have).
"""
from __future__ import annotations

import torch
from torch.utils.data import Dataset

from methods.data.caption_augment import CaptionAugmentation
from methods.data.inputs import CachedGridFeatures, CachedImageFeatures
from methods.data.karpathy import CAPTIONS_PER_IMAGE
from methods.data.text import Vocabulary, pad_tokens
from methods.features.images import ImageFiles


class CaptionPairs(Dataset):
    """Item k = (image index k // 5, token ids of caption k[, transformed image])."""

    def __init__(self, captions: list[str], vocab: Vocabulary, images: ImageFiles | None = None,
                 max_images: int | None = None, augment: CaptionAugmentation | None = None):
        n_img = len(captions) // CAPTIONS_PER_IMAGE
        n_img = n_img if max_images is None else min(max_images, n_img)
        self.tokens = [vocab.encode(c) for c in captions[: n_img * CAPTIONS_PER_IMAGE]]
        self.images = images
        self.n_images = n_img
        self.augment = augment   # drawn anew each time a caption is read (training only)

    def caption(self, k: int) -> list[int]:
        return self.tokens[k] if self.augment is None else self.augment(self.tokens[k])

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, k: int):
        image_index = k // CAPTIONS_PER_IMAGE
        image = self.images[image_index] if self.images is not None else None
        return image_index, self.caption(k), image


class ImagesWithCaptions(CaptionPairs):
    """Item i = image i with each of its 5 captions (the image itself is loaded once)."""

    def __len__(self) -> int:
        return self.n_images

    def __getitem__(self, i: int):
        image = self.images[i] if self.images is not None else None
        base = i * CAPTIONS_PER_IMAGE
        return [(i, self.caption(base + j), image if j == 0 else None) for j in range(CAPTIONS_PER_IMAGE)]


def make_train_dataset(batching: str, captions: list[str], vocab: Vocabulary, images: ImageFiles | None,
                       augment: CaptionAugmentation | None = None):
    if batching == "images":
        return ImagesWithCaptions(captions, vocab, images, augment=augment)
    return CaptionPairs(captions, vocab, images, augment=augment)


BATCH_POSITIVES = ("diagonal", "same_image")


class PairCollator:
    """Batch dict: ``image_index`` (U,), ``features`` (U, ...) or ``images``, ``tokens``, ``lengths``,
    ``positives`` (U, B): U = B image rows (``diagonal``) or the batch's distinct images."""

    def __init__(self, features: CachedImageFeatures | CachedGridFeatures | None, positives: str):
        if positives not in BATCH_POSITIVES:
            raise ValueError(f"batch positives '{positives}': expected one of {', '.join(BATCH_POSITIVES)}")
        self.features = features  # cached features, or None when images are loaded
        self.positives = positives

    def __call__(self, items):
        if isinstance(items[0], list):  # image batching: flatten each image's captions
            if self.positives != "same_image":
                raise ValueError("image batches (training.batching: images) need batch_positives: same_image")
            items = [pair for group in items for pair in group]
        image_index = torch.tensor([it[0] for it in items], dtype=torch.long)
        tokens, lengths = pad_tokens([it[1] for it in items])
        if self.positives == "diagonal":
            rows, positives = image_index, torch.eye(len(items), dtype=torch.bool)
            first = torch.arange(len(items))
        else:
            rows, inverse = torch.unique(image_index, return_inverse=True)
            first = torch.full((len(rows),), len(items), dtype=torch.long).scatter_reduce(
                0, inverse, torch.arange(len(items)), reduce="amin")
            positives = inverse[None, :] == torch.arange(len(rows))[:, None]
        batch = {"image_index": rows, "tokens": tokens, "lengths": lengths, "positives": positives}
        if items[0][2] is not None:
            # diagonal: each caption's own image item (augmented independently, as in the public code)
            batch["images"] = torch.stack([items[int(i)][2] for i in first])
        else:
            batch["features"] = self.features.take(rows.numpy())
        return batch
