"""Small shared building blocks."""
from __future__ import annotations

import torch
from torch import nn


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """x in float32 if its dtype is narrower (fp16/bf16 under autocast), else unchanged: softmaxes,
    normalisations and sigmoids run in fp32 under fp16 autocast, and a float64 model stays float64."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def l2norm(x: torch.Tensor, dim: int = -1, eps: float = 1e-8) -> torch.Tensor:
    """x / (|x| + eps) in x's own dtype (fp16 stays fp16 under autocast, halving the traffic of what
    follows); the norm is summed in at least fp32.

    eps is added to the norm as in the public SGRAF code (``l2norm``: X / (sqrt(sum X^2) + eps)).
    The public VSE++ and VSRN code divide by the norm alone, which differs from this by at most
    eps/|x| relative: below fp32 resolution for the norms these models see. A zero vector maps
    to zero, never to NaN: the denominator is also kept above x's dtype's smallest normal number
    (which matters for fp16 alone: its 6.1e-5 is above eps, and 1e-8 itself rounds to 0 in fp16)."""
    norm = torch.linalg.vector_norm(x, dim=dim, keepdim=True, dtype=torch.promote_types(x.dtype, torch.float32))
    return x / (norm + eps).clamp(min=torch.finfo(x.dtype).tiny).to(x.dtype)


def xavier_linear(in_dim: int, out_dim: int) -> nn.Linear:
    fc = nn.Linear(in_dim, out_dim)
    nn.init.xavier_uniform_(fc.weight)
    nn.init.zeros_(fc.bias)
    return fc
