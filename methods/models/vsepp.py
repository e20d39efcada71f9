"""VSE++ (Faghri et al., BMVC 2018): ResNet pooled feature -> fc -> l2; GRU caption -> l2; cosine.

``image_l2norm: false`` leaves the image embedding unnormalised, as fartashf/vsepp's
``--no_imgnorm`` (its README's VSE0 runs): a score is then the image embedding's dot product
with the unit caption vector, so the image's norm weighs its scores against other images'.

The frozen stage reads cached pooled features (a DAG output) instead of running the CNN;
the fine-tune stage runs the CNN on images. Both feed the same ``project_pooled``.
"""
from __future__ import annotations

import torch

from methods.features.backbone import ResNetBackbone
from methods.models.base import BuildContext, EmbeddingModel, register_model
from methods.models.layers import PLAIN_L2NORM_EPS, l2norm, xavier_linear
from methods.models.text import GRUTextEncoder


@register_model("vsepp")
class VSEPP(EmbeddingModel):
    def __init__(self, backbone: ResNetBackbone, embed_dim: int, text: GRUTextEncoder,
                 pre_fc_l2norm: bool = True, backbone_bn: str = "frozen", image_l2norm: bool = True):
        super().__init__()
        self.backbone = backbone
        self.fc = xavier_linear(backbone.out_dim, embed_dim)
        self.text = text
        self.pre_fc_l2norm = pre_fc_l2norm
        self.backbone_bn = backbone_bn
        self.image_l2norm = image_l2norm
        self.finetune = False

    @classmethod
    def context_arguments(cls, cfg: dict, ctx: BuildContext) -> dict:
        """The CNN: ``backbone`` names a key of config ``backbones`` (always built: the pooled
        features are its output, and a fine-tune stage trains it)."""
        bb = ctx.backbones[cfg["backbone"]]
        return {**super().context_arguments(cfg, ctx), "backbone": ResNetBackbone(bb["arch"], bb["weights"])}

    def set_finetune(self, finetune: bool) -> None:
        self.finetune = finetune
        for p in self.backbone.parameters():
            p.requires_grad_(finetune)

    def train(self, mode: bool = True) -> "VSEPP":
        super().train(mode)
        # A frozen CNN always runs in eval mode (its BN statistics must not drift, vsepp#4/#30);
        # while fine-tuning, 'frozen' BN keeps ImageNet statistics too.
        if not self.finetune or self.backbone_bn == "frozen":
            self.backbone.eval()
        return self

    def project_pooled(self, pooled: torch.Tensor) -> torch.Tensor:
        x = l2norm(pooled, eps=PLAIN_L2NORM_EPS) if self.pre_fc_l2norm else pooled
        embedded = self.fc(x)
        return l2norm(embedded, eps=PLAIN_L2NORM_EPS) if self.image_l2norm else embedded

    def encode_images(self, batch: dict) -> torch.Tensor:
        pooled = self.backbone.pooled(batch["images"]) if "images" in batch else batch["features"]
        return self.project_pooled(pooled.to(self.fc.weight.dtype))   # cached or CNN output, in the fc's dtype

    def encode_texts(self, batch: dict) -> torch.Tensor:
        return self.text(batch["tokens"], batch["lengths"])
