"""Models assembled from config: ``build_model(model_cfg, ...)`` dispatches on ``model.kind``.

``IMAGE_INPUT`` says what each model reads for an image: ``pooled`` (cached CNN features of
the configured backbone, or the images themselves while fine-tuning) or ``regions``
(precomputed region features in the BUTD layout).
"""
from __future__ import annotations

from torch import nn

from methods.errors import HarnessError

IMAGE_INPUT = {"vsepp": "pooled", "vsrn": "regions", "sgraf": "regions"}


def image_input(model_cfg: dict) -> str:
    try:
        return IMAGE_INPUT[model_cfg["kind"]]
    except KeyError:
        raise HarnessError(f"unknown model kind '{model_cfg['kind']}'; known: {', '.join(sorted(IMAGE_INPUT))}") from None


def build_model(model_cfg: dict, vocab_size: int, backbones: dict, word_vectors=None,
                image_dim: int | None = None, n_regions: int | None = None) -> nn.Module:
    """``image_dim`` / ``n_regions``: dimension and count of the region features (region models)."""
    kind = model_cfg["kind"]
    if IMAGE_INPUT.get(kind) == "regions" and image_dim is None:
        raise HarnessError(f"a {kind} model needs the region feature dimension (image_dim)")
    if kind == "vsepp":
        from methods.models.vsepp import VSEPP

        return VSEPP.from_config(model_cfg, vocab_size, backbones, word_vectors)
    if kind == "vsrn":
        from methods.models.vsrn import VSRN

        return VSRN.from_config(model_cfg, vocab_size, image_dim, word_vectors)
    if kind == "sgraf":
        from methods.models.sgraf import SGRAF

        if n_regions is None:
            raise HarnessError("an SGRAF model needs the number of regions per image (n_regions)")
        return SGRAF.from_config(model_cfg, vocab_size, image_dim, n_regions, word_vectors)
    raise HarnessError(f"unknown model kind '{kind}'; known: {', '.join(sorted(IMAGE_INPUT))}")
