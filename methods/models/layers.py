"""Small shared building blocks."""
from __future__ import annotations

import torch
from torch import nn


def l2norm(x: torch.Tensor, dim: int = -1, eps: float = 1e-8) -> torch.Tensor:
    return x / x.norm(dim=dim, keepdim=True).clamp(min=eps)


def xavier_linear(in_dim: int, out_dim: int) -> nn.Linear:
    fc = nn.Linear(in_dim, out_dim)
    nn.init.xavier_uniform_(fc.weight)
    nn.init.zeros_(fc.bias)
    return fc
