"""Caption-indexed batches: each item is one caption and its image; the collate function
de-duplicates images and builds the (images x captions) positive mask for the losses."""
from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

from methods.data.karpathy import CAPTIONS_PER_IMAGE, Split
from methods.data.text import Vocabulary
from methods.features.images import ImageFiles


class CaptionPairs(Dataset):
    """Item k = (image index k // 5, token ids of caption k[, transformed image])."""

    def __init__(self, split: Split, vocab: Vocabulary, images: ImageFiles | None = None,
                 max_images: int | None = None):
        n_img = len(split) if max_images is None else min(max_images, len(split))
        self.tokens = [vocab.encode(c) for c in split.captions[: n_img * CAPTIONS_PER_IMAGE]]
        self.images = images
        self.n_images = n_img

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, k: int):
        image_index = k // CAPTIONS_PER_IMAGE
        image = self.images[image_index] if self.images is not None else None
        return image_index, self.tokens[k], image


def pad_tokens(token_lists: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(t) for t in token_lists], dtype=torch.long)
    tokens = torch.zeros(len(token_lists), int(lengths.max()), dtype=torch.long)
    for row, t in enumerate(token_lists):
        tokens[row, : len(t)] = torch.tensor(t, dtype=torch.long)
    return tokens, lengths


class PairCollator:
    """Batch dict: ``image_index`` (U,), ``pooled`` (U, C) or ``images``, ``tokens``, ``lengths``, ``positives`` (U, B)."""

    def __init__(self, pooled: np.ndarray | None):
        self.pooled = pooled  # memory-mapped (N, C) cached features, or None when images are loaded

    def __call__(self, items):
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
            batch["pooled"] = torch.from_numpy(np.asarray(self.pooled[unique.numpy()], dtype=np.float32))
        return batch


def to_device(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}
