"""Small shared building blocks."""
from __future__ import annotations

from dataclasses import fields

import torch
from torch import nn


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """x in float32 if its dtype is narrower (fp16/bf16 under autocast), else unchanged: softmaxes,
    normalisations and sigmoids run in fp32 under fp16 autocast, and a float64 model stays float64."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


class ItemTensors:
    """Base of a dataclass of tensors that all index the same items on their first axis: the
    encodings of a model that are not one tensor. Encoding a split batches, concatenates, moves and
    upcasts them field by field (``methods.scoring``)."""

    def _map(self, fn):
        return type(self)(*(fn(getattr(self, f.name)) for f in fields(self)))

    def __len__(self) -> int:
        return getattr(self, fields(self)[0].name).shape[0]

    def __getitem__(self, index):
        return self._map(lambda t: t[index])

    def at_least_float32(self):
        return self._map(at_least_float32)

    def to(self, device):
        return self._map(lambda t: t.to(device))

    def double(self):
        return self._map(lambda t: t.double())

    @classmethod
    def cat(cls, parts: list):
        return cls(*(torch.cat([getattr(p, f.name) for p in parts]) for f in fields(cls)))


# The public code's l2norm: SCAN and SGRAF divide by sqrt(sum X^2) + 1e-8; VSE++ and VSRN by the
# norm alone. Each model passes its source's epsilon.
SCAN_L2NORM_EPS = 1e-8
PLAIN_L2NORM_EPS = 0.0


def l2norm(x: torch.Tensor, dim: int = -1, *, eps: float) -> torch.Tensor:
    """x / (|x| + eps) in x's own dtype (fp16 stays fp16 under autocast, halving the traffic of what
    follows); the norm is summed in at least fp32. A zero vector maps to zero, never to NaN: the
    denominator is kept above x's dtype's smallest normal number (the only floor when eps is 0;
    for fp16, whose 1e-8 rounds to 0, its 6.1e-5)."""
    norm = torch.linalg.vector_norm(x, dim=dim, keepdim=True, dtype=torch.promote_types(x.dtype, torch.float32))
    return x / (norm + eps).clamp(min=torch.finfo(x.dtype).tiny).to(x.dtype)


def xavier_linear(in_dim: int, out_dim: int) -> nn.Linear:
    fc = nn.Linear(in_dim, out_dim)
    nn.init.xavier_uniform_(fc.weight)
    nn.init.zeros_(fc.bias)
    return fc
