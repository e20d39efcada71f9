"""Batches for training and validation.

Two batchings, chosen by ``training.batching``:
- ``captions``: each item is one caption and its image (VSE++/VSRN/SCAN style; an image may
  appear with several of its captions, or once);
- ``images``: each item is one image with all 5 of its captions (the ranking batches the
  metric-learning study uses for SmoothAP: B images x 5B captions).
Either way the collate function de-duplicates images and builds the (images x captions)
positive mask the losses take.
"""
from __future__ import annotations

import torch
from torch.utils.data import Dataset

from methods.data.inputs import CachedGridFeatures, CachedImageFeatures
from methods.data.karpathy import CAPTIONS_PER_IMAGE
from methods.data.text import Vocabulary, pad_tokens
from methods.features.images import ImageFiles


class CaptionPairs(Dataset):
    """Item k = (image index k // 5, token ids of caption k[, transformed image])."""

    def __init__(self, captions: list[str], vocab: Vocabulary, images: ImageFiles | None = None,
                 max_images: int | None = None):
        n_img = len(captions) // CAPTIONS_PER_IMAGE
        n_img = n_img if max_images is None else min(max_images, n_img)
        self.tokens = [vocab.encode(c) for c in captions[: n_img * CAPTIONS_PER_IMAGE]]
        self.images = images
        self.n_images = n_img

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, k: int):
        image_index = k // CAPTIONS_PER_IMAGE
        image = self.images[image_index] if self.images is not None else None
        return image_index, self.tokens[k], image


class ImagesWithCaptions(CaptionPairs):
    """Item i = image i with each of its 5 captions (the image itself is loaded once)."""

    def __len__(self) -> int:
        return self.n_images

    def __getitem__(self, i: int):
        image = self.images[i] if self.images is not None else None
        base = i * CAPTIONS_PER_IMAGE
        return [(i, self.tokens[base + j], image if j == 0 else None) for j in range(CAPTIONS_PER_IMAGE)]


def make_train_dataset(batching: str, captions: list[str], vocab: Vocabulary, images: ImageFiles | None):
    if batching == "images":
        return ImagesWithCaptions(captions, vocab, images)
    return CaptionPairs(captions, vocab, images)


class PairCollator:
    """Batch dict: ``image_index`` (U,), ``features`` (U, ...) or ``images``, ``tokens``, ``lengths``, ``positives`` (U, B)."""

    def __init__(self, features: CachedImageFeatures | CachedGridFeatures | None):
        self.features = features  # cached features, or None when images are loaded

    def __call__(self, items):
        if isinstance(items[0], list):  # image batching: flatten each image's captions
            items = [pair for group in items for pair in group]
        image_index = torch.tensor([it[0] for it in items], dtype=torch.long)
        unique, inverse = torch.unique(image_index, return_inverse=True)
        first = torch.full((len(unique),), len(items), dtype=torch.long).scatter_reduce(
            0, inverse, torch.arange(len(items)), reduce="amin")
        tokens, lengths = pad_tokens([it[1] for it in items])
        batch = {"image_index": unique, "tokens": tokens, "lengths": lengths,
                 "positives": inverse[None, :] == torch.arange(len(unique))[:, None]}
        if items[0][2] is not None:
            batch["images"] = torch.stack([items[int(i)][2] for i in first])
        else:
            batch["features"] = self.features.take(unique.numpy())
        return batch
