"""Poolings of a variable-length set of feature vectors into one vector: ``(B, L, D)`` features, the
first ``lengths[b]`` of row b valid, to ``(B, D)``. Registered by name (``POOLINGS``) so that any
embedding model can pool its regions, grid cells or words with any of them.

``gpo``: the Generalized Pooling Operator of VSE-infinity (Chen et al., CVPR 2021), as
woodfrog/vse_infty ``lib/modules/aggr/gpo.py`` computes it. Each dimension's values are sorted in
descending order over the valid elements, and the k-th largest gets weight θ_k; the weights come
from a bi-GRU over a sine positional encoding of the ranks 0..n-1, so they depend on the number n
of valid elements only (not on the features):

    pe[k, 2i] = sin(k / 10000^(2i/d_pe)),  pe[k, 2i+1] = cos(k / 10000^(2i/d_pe))
    h_k = (→h_k + ←h_k) / 2                 bi-GRU(d_pe -> d_hidden) over pe[0..n-1], directions averaged
    θ = softmax_k(w·h_k / 0.1)              w: d_hidden -> 1, no bias; padded ranks get -10000 before the softmax
    pooled_d = Σ_k θ_k · sort_desc(x_{·,d})_k

Padded elements are placed after every valid value by the sort (filled with -10000 first) and then
zeroed, as the source does. It runs the same in training and at inference (no dropout, no
statistics); only the lengths differ (VSE-infinity drops regions or grid cells in training).

``mean`` and ``max``: the average and the largest value of each dimension over the valid elements
(the poolings VSE-infinity's Table 3 compares GPO with).
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from methods.registry import Registry

PADDED_SCORE = -10000.0   # the source's fill for padded ranks (weights) and padded values (sort)
WEIGHT_TEMPERATURE = 0.1  # the source's softmax(scores / 0.1)


def valid_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """(B, max_len) True at the valid positions."""
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


def rank_encoding(d_pe: int, length: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(length, d_pe) sine encoding of the ranks 0..length-1 (the source's positional_encoding_1d)."""
    if d_pe % 2:
        raise ValueError(f"the rank encoding needs an even dimension, not {d_pe}")
    position = torch.arange(length, device=device, dtype=dtype)[:, None]
    frequency = torch.exp(torch.arange(0, d_pe, 2, device=device, dtype=dtype) * -(math.log(10000.0) / d_pe))
    pe = torch.zeros(length, d_pe, device=device, dtype=dtype)
    pe[:, 0::2] = torch.sin(position * frequency)
    pe[:, 1::2] = torch.cos(position * frequency)
    return pe


class GPO(nn.Module):
    """Generalized Pooling Operator (see the module's text); ``d_pe`` and ``d_hidden``: 32 and 32
    in every VSE-infinity encoder."""

    def __init__(self, d_pe: int = 32, d_hidden: int = 32):
        super().__init__()
        self.d_pe = d_pe
        self.gru = nn.GRU(d_pe, d_hidden, 1, batch_first=True, bidirectional=True)
        self.linear = nn.Linear(d_hidden, 1, bias=False)

    def pool_weights(self, lengths: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, L, 1) weights θ of the ranks, zero (to float precision) beyond each length; ``mask``:
        (B, L, 1), True at the valid ranks (L = max(lengths))."""
        dtype, device, max_len = self.linear.weight.dtype, self.linear.weight.device, mask.shape[1]
        pe = rank_encoding(self.d_pe, max_len, dtype, device).expand(lengths.shape[0], -1, -1) * mask
        packed = pack_padded_sequence(pe, lengths.cpu().long(), batch_first=True, enforce_sorted=False)
        out, _ = pad_packed_sequence(self.gru(packed)[0], batch_first=True, total_length=max_len)
        half = out.shape[-1] // 2
        scores = self.linear((out[..., :half] + out[..., half:]) / 2).masked_fill(~mask, PADDED_SCORE)
        return torch.softmax(scores / WEIGHT_TEMPERATURE, dim=1)

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        max_len = int(lengths.max())
        features = features[:, :max_len]
        mask = valid_mask(lengths.to(features.device), max_len)[..., None]
        ranked = features.masked_fill(~mask, PADDED_SCORE).sort(dim=1, descending=True).values.masked_fill(~mask, 0)
        return (ranked * self.pool_weights(lengths, mask)).sum(dim=1)


class MeanPooling(nn.Module):
    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        mask = valid_mask(lengths.to(features.device), features.shape[1])[..., None]
        return (features * mask).sum(dim=1) / lengths.to(features)[:, None]


class MaxPooling(nn.Module):
    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        mask = valid_mask(lengths.to(features.device), features.shape[1])[..., None]
        return features.masked_fill(~mask, float("-inf")).max(dim=1).values


POOLINGS: Registry[Callable[[], nn.Module]] = Registry("pooling")
POOLINGS.register("gpo", GPO)
POOLINGS.register("mean", MeanPooling)
POOLINGS.register("max", MaxPooling)
