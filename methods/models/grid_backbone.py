"""The CNN of a model that reads ResNet grid maps (``image_input = "grid"``): while the CNN is
frozen the maps come from the cached features (``methods.data.inputs.GridInput``), while it is
fine-tuned the model computes them from the batch's images. A run with no fine-tune stage builds
its model without the CNN (``BuildContext.cnn``), holding only the architecture's name.
"""
from __future__ import annotations

import torch
from torch import nn

from methods.errors import HarnessError
from methods.features.architectures import layer_channels
from methods.features.backbone import ResNetBackbone

BACKBONE_BN = ("frozen", "train")


class GridBackbone(nn.Module):
    """Mixin for grid-reading models. Subclasses set ``self.backbone`` (a ``ResNetBackbone`` or
    None), ``self.arch``, ``self.backbone_bn`` and ``self.scales`` through ``init_backbone`` and
    give the dtype of their first layer (``grid_dtype``). Their constructors take ``backbone``
    and ``scale_shapes`` (the cached maps' (H, W, C) per scale) from the build context."""

    image_arguments = {"scale_shapes": "scales"}

    @classmethod
    def context_arguments(cls, cfg: dict, ctx) -> dict:
        """Adds the model's CNN (``cfg["backbone"]``, a key of config ``backbones``), or only its
        architecture's name when the run never fine-tunes it (``ctx.cnn`` False)."""
        bb = ctx.backbones[cfg["backbone"]]
        arguments = super().context_arguments(cfg, ctx)   # the text encoder first, as the random draws were
        return {**arguments, "backbone": ResNetBackbone(bb["arch"], bb["weights"]) if ctx.cnn else bb["arch"]}

    def init_backbone(self, backbone: ResNetBackbone | str, backbone_bn: str, scales: list[str],
                      scale_shapes: dict[str, list[int]]) -> None:
        """``scale_shapes``: (H, W, C) of the cached maps per scale, checked against the CNN's channels."""
        if backbone_bn not in BACKBONE_BN:
            raise ValueError(f"backbone_bn must be one of {BACKBONE_BN}, not {backbone_bn!r}")
        arch = backbone if isinstance(backbone, str) else backbone.arch
        for s in scales:
            if scale_shapes[s][2] != layer_channels(arch, s):
                raise ValueError(f"cached {s} maps have {scale_shapes[s][2]} channels, but {arch}'s {s} has "
                                 f"{layer_channels(arch, s)}: features of another backbone?")
        self.arch = arch
        self.backbone = None if isinstance(backbone, str) else backbone
        self.backbone_bn = backbone_bn
        self.scales = list(scales)
        self.finetune = False

    def grid_dtype(self) -> torch.dtype:
        raise NotImplementedError

    def set_finetune(self, finetune: bool) -> None:
        if finetune and self.backbone is None:
            raise HarnessError(f"this {type(self).__name__} model was built without its CNN (its config has no "
                               "fine-tune stage), so it cannot fine-tune it")
        self.finetune = finetune
        for p in self.backbone.parameters() if self.backbone is not None else ():
            p.requires_grad_(finetune)

    def train(self, mode: bool = True):
        super().train(mode)
        if self.backbone is not None and (not self.finetune or self.backbone_bn == "frozen"):
            self.backbone.eval()   # as VSE++: no BN drift of a frozen CNN
        return self

    def grids(self, batch: dict) -> dict[str, torch.Tensor]:
        """(B, H, W, C) maps per scale: cached, or from the CNN on ``batch['images']``."""
        if "images" in batch:
            if self.backbone is None:
                raise HarnessError(f"this {type(self).__name__} model was built without its CNN: give it cached "
                                   "maps, not images")
            maps = self.backbone(batch["images"], tuple(self.scales))
            return {s: maps[s].permute(0, 2, 3, 1) for s in self.scales}
        dtype = self.grid_dtype()
        return {s: batch["features"][s].to(dtype) for s in self.scales}
