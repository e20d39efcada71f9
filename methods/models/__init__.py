"""Models assembled from config: ``build_model(model_cfg, ...)`` dispatches on ``model.kind``."""
from __future__ import annotations

from torch import nn

from methods.errors import HarnessError


def build_model(model_cfg: dict, vocab_size: int, backbones: dict, word_vectors=None) -> nn.Module:
    kind = model_cfg["kind"]
    if kind == "vsepp":
        from methods.models.vsepp import VSEPP

        return VSEPP.from_config(model_cfg, vocab_size, backbones, word_vectors)
    raise HarnessError(f"unknown model kind '{kind}'; known: vsepp")
