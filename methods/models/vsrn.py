"""VSRN (Li et al., ICCV 2019): without its caption decoder, as in the metric-learning study, or
with it (``caption_decoder``), as its authors train it.

Image: precomputed region features (B, N, C) -> fc C->D -> [l2] -> 4 residual GCN blocks
(visual relation reasoning) -> [l2] -> GRU over the N regions, whose last hidden state is the
image embedding (global semantic reasoning) -> BatchNorm -> l2.
Text: word embedding -> unidirectional GRU -> last valid state -> l2. Similarity: cosine.

``region_l2norm`` says which axis the region-level normalisations use: ``feature`` (each region
vector has unit norm; the evident intent) or ``region_axis``, the public code's behaviour
(its l2norm always normalises dim 1 of a (B, N, D) tensor, i.e. across regions;
KunpengLi1994/VSRN#7). ``l2norm_after_fc`` is false on Flickr30K in the public code.

``caption_decoder`` (``methods.models.caption_decoder``): the generator that learns each training
caption from its image's reasoned regions (the GCN's output, after its l2); its log-probabilities
are training outputs for the ``caption_generation`` loss term, and it plays no part in scoring.
``listed_twice``: the public code's optimizer list holds the generator's parameters twice (its
encoder and decoder, then the S2VTAttModel that wraps both), so each Adam step moves them twice
and gradient clipping counts and scales their gradients twice; false lists them once.
"""
from __future__ import annotations

import torch
from torch import nn

from methods.models.base import EmbeddingModel, register_model
from methods.models.caption_decoder import DECODER_SETTINGS, CaptionDecoder
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
                 region_l2norm: str = "feature", l2norm_after_fc: bool = True, final_bn: bool = True,
                 caption_decoder: dict | None = None):
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
        self.caption_decoder, self.decoder_listed_twice = None, False
        if caption_decoder is not None:
            unknown = sorted(set(caption_decoder) - set(DECODER_SETTINGS))
            if unknown:
                raise ValueError(f"caption_decoder takes {DECODER_SETTINGS}, not {unknown}")
            settings = {k: v for k, v in caption_decoder.items() if k != "listed_twice"}
            self.caption_decoder = CaptionDecoder(embed_dim, text.embed.num_embeddings, **settings)
            self.decoder_listed_twice = bool(caption_decoder.get("listed_twice", False))

    def generates_captions(self) -> bool:
        """Whether this forward pass feeds the caption generator (training with one)."""
        return self.caption_decoder is not None and self.training

    def encode_images(self, batch: dict) -> torch.Tensor | dict:
        """(B, D) embeddings; in training with a caption generator, with the regions it reads."""
        v = self.fc(batch["features"].to(self.fc.weight.dtype))                # (B, N, D)
        if self.l2norm_after_fc:
            v = l2norm(v, dim=self.region_axis, eps=PLAIN_L2NORM_EPS)
        v = l2norm(self.gcn(v), dim=self.region_axis, eps=PLAIN_L2NORM_EPS)
        _, hidden = self.gru(v)                                                # regions in detector order
        embedding = l2norm(self.bn(hidden[-1]), eps=PLAIN_L2NORM_EPS)
        return {"embedding": embedding, "regions": v} if self.generates_captions() else embedding

    def encode_texts(self, batch: dict) -> torch.Tensor | dict:
        embedding = self.text(batch["tokens"], batch["lengths"])
        if self.generates_captions():
            return {"embedding": embedding, "tokens": batch["tokens"], "lengths": batch["lengths"]}
        return embedding

    def score(self, img: torch.Tensor | dict, txt: torch.Tensor | dict) -> torch.Tensor:
        img = img["embedding"] if isinstance(img, dict) else img
        return super().score(img, txt["embedding"] if isinstance(txt, dict) else txt)

    def training_outputs(self, img: torch.Tensor | dict, txt: torch.Tensor | dict) -> dict:
        outputs = super().training_outputs(img, txt)
        if isinstance(img, dict):
            if img["regions"].shape[0] != txt["tokens"].shape[0]:
                raise ValueError("the caption generator decodes each caption from its own image: a training batch "
                                 "needs one image row per caption (training.batch_positives: diagonal)")
            outputs.update(self.caption_decoder(img["regions"], txt["tokens"], txt["lengths"]))
        return outputs

    def _listed(self) -> list[nn.Parameter]:
        """The trainable parameters as the optimizer and the clipping see them (``listed_twice``)."""
        params = self.trainable_parameters()
        if self.decoder_listed_twice:
            params += [p for p in self.caption_decoder.parameters() if p.requires_grad]
        return params

    def parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        return [(self._listed(), 1.0)]

    def clipped_parameters(self) -> list[nn.Parameter]:
        return self._listed()
