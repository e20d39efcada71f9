"""What every fixture maker here does to the authors' model before saving it (imported by the
make_*_fixtures.py scripts, run from this folder's path)."""
from __future__ import annotations

import torch


def randomise(module: torch.nn.Module, gen: torch.Generator) -> None:
    """Every parameter and BatchNorm statistic random (the authors' inits leave biases zero and
    LayerNorm / BatchNorm at identity or zero scale, which would hide a swapped tensor); running
    variances positive; step counters 7 (a copied counter shows)."""
    with torch.no_grad():
        for name, tensor in module.state_dict().items():
            if name.endswith("num_batches_tracked"):
                tensor.fill_(7)
            elif name.endswith("running_var"):
                tensor.copy_(torch.rand(tensor.shape, generator=gen) + 0.5)
            else:
                tensor.copy_(torch.randn(tensor.shape, generator=gen) * 0.5)
