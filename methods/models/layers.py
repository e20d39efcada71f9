"""Small shared building blocks."""
from __future__ import annotations

import torch
from torch import nn


def l2norm(x: torch.Tensor, dim: int = -1, eps: float = 1e-8) -> torch.Tensor:
    """x / |x| in x's own dtype (fp16 stays fp16 under autocast, halving the traffic of what
    follows); the norm is summed in fp32 and kept above the dtype's smallest normal number, so
    a zero vector maps to zero, never to NaN."""
    norm = torch.linalg.vector_norm(x, dim=dim, keepdim=True, dtype=torch.float32)
    return x / norm.clamp(min=max(eps, torch.finfo(x.dtype).tiny)).to(x.dtype)


def xavier_linear(in_dim: int, out_dim: int) -> nn.Linear:
    fc = nn.Linear(in_dim, out_dim)
    nn.init.xavier_uniform_(fc.weight)
    nn.init.zeros_(fc.bias)
    return fc
