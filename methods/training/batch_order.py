"""The order of an epoch's training batches.

Every public code of the papers here draws its batches uniformly at random (a shuffled
DataLoader), so a step pays for the longest caption among ``batch_size`` random ones: on COCO a
cross-attention step costs about twice as much at 50 tokens as at 14 (the mean). Length buckets
(``training.length_buckets: P``, off by default) are the usual cure of sequence models (a
"bucket iterator"): the epoch's random order is cut into pools of P batches, each pool is
sorted by caption length and cut into batches, and the batches are shuffled. Every item is still
seen once an epoch, but a batch's captions have similar lengths, so its negatives are not a
random sample any more (length-correlated): a row that switches it on lists the switch, since no
source does it.
"""
from __future__ import annotations

from typing import Sequence

import torch


def epoch_batches(n_items: int, batch_size: int, shuffle: torch.Generator,
                  lengths: Sequence[int] | None = None, pool_batches: int | None = None) -> list[list[int]]:
    """Item indices of each batch of an epoch, in training order.

    Without ``pool_batches``: consecutive slices of one random permutation (what a shuffled
    DataLoader gives; the last batch may be short). With it: that permutation cut into pools of
    ``pool_batches * batch_size`` items, each pool sorted by ``lengths`` (stable: equal lengths
    keep their random order) and cut into batches, then the batches of all pools permuted by
    ``shuffle``. Every draw comes from ``shuffle``, so the order is a function of its seed.
    """
    order = torch.randperm(n_items, generator=shuffle).tolist()
    if pool_batches is None:
        return [order[i:i + batch_size] for i in range(0, n_items, batch_size)]
    if lengths is None or len(lengths) != n_items:
        raise ValueError(f"length buckets need one length per item ({n_items} items)")
    pool = pool_batches * batch_size
    batches = []
    for start in range(0, n_items, pool):
        chunk = sorted(order[start:start + pool], key=lengths.__getitem__)
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=shuffle).tolist()]


def training_epoch_batches(dataset, training: dict, shuffle: torch.Generator) -> list[list[int]]:
    """The batches of a training dataset (``methods.training.data``: its items' caption lengths,
    ``item_lengths``) as a method config's ``training`` block draws them; with
    ``max_batches_per_epoch`` (a smoke run), only the first of them."""
    buckets = training["length_buckets"]
    batches = epoch_batches(len(dataset), training["batch_size"], shuffle,
                            dataset.item_lengths() if buckets else None, buckets)
    return batches[:training.get("max_batches_per_epoch", len(batches))]
