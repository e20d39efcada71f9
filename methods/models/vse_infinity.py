"""VSE-infinity (Chen, Deng, Wang, Hong, CVPR 2021, "Learning the Best Pooling Strategy for Visual
Semantic Embedding") on precomputed regions with a bi-GRU, as woodfrog/vse_infty (branch ``bigru``,
``lib/encoders.py``) computes it, or with BERT (branch master):

- image: x (B, N, C) regions -> fc(x) + MLP(x), the MLP C -> D/2 -> BatchNorm (over every position
  of the batch, padded ones included) -> ReLU -> D (EncoderImageAggr with precomp_enc_type basic);
  pooled over the regions (GPO, ``methods.models.pooling``) -> l2. The fc is Xavier-uniform with a
  zero bias, the MLP keeps nn.Linear's initialisation. In training a fraction ``region_drop`` of
  each image's regions is removed first (the data loader's size augmentation), the kept ones first
  and the batch padded to the most any image kept (its collate_fn), so the pooling sees the kept
  count;
- text: word embeddings (uniform in [-0.1, 0.1]) -> bi-GRU of D units, the directions averaged per
  word -> pooled over the words -> l2 (EncoderText);
- or text: BERT's last hidden states of [CLS], the pieces and [SEP], each projected to D
  (``methods.models.bert_text``) -> pooled over the tokens -> l2 (master's EncoderText);
- score: the cosine (dot product of the unit vectors).

The normalisation is |x| + 1e-8 (its l2norm), ``SCAN_L2NORM_EPS``.
"""
from __future__ import annotations

import torch
from torch import nn

from methods.models.base import EmbeddingModel, register_model
from methods.models.bert_text import BertTextEncoder
from methods.models.layers import SCAN_L2NORM_EPS, l2norm, xavier_linear
from methods.models.pooling import POOLINGS
from methods.models.set_embedding import drop_regions
from methods.models.text import GRUTextEncoder


class ResidualRegionMLP(nn.Module):
    """fc(x) + MLP(x): VSE-infinity's EncoderImageAggr before its pooling (its MLP with num_layers 2)."""

    def __init__(self, in_dim: int, embed_dim: int):
        super().__init__()
        self.fc = xavier_linear(in_dim, embed_dim)
        self.mlp_in = nn.Linear(in_dim, embed_dim // 2)
        self.bn = nn.BatchNorm1d(embed_dim // 2)
        self.mlp_out = nn.Linear(embed_dim // 2, embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.mlp_in(x)
        hidden = self.bn(hidden.reshape(-1, hidden.shape[-1])).reshape(hidden.shape)
        return self.fc(x) + self.mlp_out(torch.relu(hidden))


@register_model("vse_infinity")
class VSEInfinity(EmbeddingModel):
    image_arguments = {"region_dim": "dim"}

    def __init__(self, region_dim: int, embed_dim: int, text: GRUTextEncoder | BertTextEncoder, pooling: str = "gpo",
                 region_drop: float = 0.0):
        super().__init__()
        if isinstance(text, BertTextEncoder):
            if text.out_dim != embed_dim:
                raise ValueError(f"VSE-infinity projects BERT's tokens to embed_dim: text.out_dim {text.out_dim} "
                                 f"is not embed_dim {embed_dim}")
        elif not text.bidirectional:
            raise ValueError("VSE-infinity's text encoder is a bi-GRU (text.bidirectional: true) or a BERT")
        elif text.gru.hidden_size != embed_dim:
            raise ValueError(f"VSE-infinity's bi-GRU has embed_dim units: text.hidden_dim {text.gru.hidden_size} "
                             f"is not embed_dim {embed_dim}")
        self.region = ResidualRegionMLP(region_dim, embed_dim)
        self.image_pool = POOLINGS.get(pooling)()
        self.text = text
        self.text_pool = POOLINGS.get(pooling)()
        self.region_drop = region_drop

    def encode_images(self, batch: dict) -> torch.Tensor:
        regions = batch["features"].to(self.region.fc.weight.dtype)
        if self.training and self.region_drop > 0:
            regions, lengths = drop_regions(regions, self.region_drop, padding="batch_longest")
        else:
            lengths = torch.full((regions.shape[0],), regions.shape[1], device=regions.device)
        return l2norm(self.image_pool(self.region(regions), lengths), eps=SCAN_L2NORM_EPS)

    def encode_texts(self, batch: dict) -> torch.Tensor:
        tokens, lengths = batch["tokens"], batch["lengths"]
        words = self.text.word_states(tokens, lengths)
        return l2norm(self.text_pool(words, lengths.to(words.device)), eps=SCAN_L2NORM_EPS)

    def parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        """One group at the stage's rate, or with a BERT, the BERT at its factor (lib/vse.py's groups:
        the text encoder but BERT and the image encoder at the rate, BERT at x0.1)."""
        if not isinstance(self.text, BertTextEncoder):
            return super().parameter_groups()
        (projection, _), (bert, factor) = self.text.parameter_groups()
        rest = [p for p in self.parameters() if p.requires_grad and all(p is not q for q in bert)]
        return [(rest, 1.0), (bert, factor)]
