"""VSRN (Li et al., ICCV 2019) without its caption decoder, as in the metric-learning study.

Image: precomputed region features (B, N, C) -> fc C->D -> [l2] -> 4 residual GCN blocks
(visual relation reasoning) -> [l2] -> GRU over the N regions, whose last hidden state is the
image embedding (global semantic reasoning) -> BatchNorm -> l2.
Text: word embedding -> unidirectional GRU -> last valid state -> l2. Similarity: cosine.

``region_l2norm`` says which axis the region-level normalisations use: ``feature`` (each region
vector has unit norm; the evident intent) or ``region_axis``, the public code's behaviour
(its l2norm always normalises dim 1 of a (B, N, D) tensor, i.e. across regions;
KunpengLi1994/VSRN#7). ``l2norm_after_fc`` is false on Flickr30K in the public code.
"""
from __future__ import annotations

import torch
from torch import nn

from methods.models.base import EmbeddingModel, register_model
from methods.models.layers import PLAIN_L2NORM_EPS, l2norm, xavier_linear
from methods.models.text import GRUTextEncoder


class ResidualGCN(nn.Module):
    """One relation-reasoning block: V* = V + BN(W (R g(V))), R = θ(V) φ(V)ᵀ / N (no softmax).

    The BatchNorm's scale and shift start at zero, so every block starts as the identity.
    θ, φ, g and W are 1x1 convolutions over regions, i.e. linear maps of each region vector.
    """

    def __init__(self, dim: int):
        super().__init__()
        self.g, self.theta, self.phi, self.w = (nn.Linear(dim, dim) for _ in range(4))
        self.bn = nn.BatchNorm1d(dim)
        nn.init.zeros_(self.bn.weight)
        nn.init.zeros_(self.bn.bias)

    def affinity(self, v: torch.Tensor) -> torch.Tensor:
        return self.theta(v) @ self.phi(v).transpose(1, 2) / v.shape[1]

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        y = self.affinity(v) @ self.g(v)                                       # (B, N, D)
        return v + self.bn(self.w(y).transpose(1, 2)).transpose(1, 2)


@register_model("vsrn")
class VSRN(EmbeddingModel):
    image_arguments = {"region_dim": "dim"}

    def __init__(self, region_dim: int, embed_dim: int, text: GRUTextEncoder, gcn_blocks: int = 4,
                 region_l2norm: str = "feature", l2norm_after_fc: bool = True, final_bn: bool = True):
        super().__init__()
        if region_l2norm not in ("feature", "region_axis"):
            raise ValueError(f"region_l2norm must be 'feature' or 'region_axis', not {region_l2norm!r}")
        self.fc = xavier_linear(region_dim, embed_dim)
        self.gcn = nn.Sequential(*(ResidualGCN(embed_dim) for _ in range(gcn_blocks)))
        self.gru = nn.GRU(embed_dim, embed_dim, batch_first=True)
        self.bn = nn.BatchNorm1d(embed_dim) if final_bn else nn.Identity()
        self.text = text
        self.region_axis = 2 if region_l2norm == "feature" else 1
        self.l2norm_after_fc = l2norm_after_fc

    def encode_images(self, batch: dict) -> torch.Tensor:
        v = self.fc(batch["features"].to(self.fc.weight.dtype))                # (B, N, D)
        if self.l2norm_after_fc:
            v = l2norm(v, dim=self.region_axis, eps=PLAIN_L2NORM_EPS)
        v = l2norm(self.gcn(v), dim=self.region_axis, eps=PLAIN_L2NORM_EPS)
        _, hidden = self.gru(v)                                                # regions in detector order
        return l2norm(self.bn(hidden[-1]), eps=PLAIN_L2NORM_EPS)

    def encode_texts(self, batch: dict) -> torch.Tensor:
        return self.text(batch["tokens"], batch["lengths"])
