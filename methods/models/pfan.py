"""PFAN (Wang, Yang, Qian, Ma, Lu, Li, Fan, IJCAI 2019): position focused attention, as
HaoYang0123/Position-Focused-Attention-Network's model_attention.py computes it
(``EncoderImagePrecomp``, ``xattn_score_t2i``, ``xattn_score_i2t``), for a block of pairs at once.

Image: each region's box gives its position. The image is split into a grid x grid of blocks
(block index row * grid + col, row from the top); a region's blocks are the ``region_blocks``
blocks it overlaps most, each weighted by its overlap area over the kept blocks' total
(``position_blocks``). A region with fewer overlapped blocks fills its slots with the padding index
grid^2 and weight 0, as the authors' released position files (N, 36, 30: 15 indices, 15 weights).
Those files are derived from the boxes by code the authors did not release; here the boxes are the
input and this rule derives them (ties at the last slot: the lower block index).

For region feature v, its blocks' embeddings e_l = E[idx_l] (nn.Embedding(grid^2 + 1, position_dim),
N(0, 1)) and weights w_l:

    a_l = softmax_l(tanh(fc_att(v) . e_l)),  b_l = softmax_l(w_l a_l),  p = sum_l b_l e_l,
    region = l2(fc([v; p]))                 (fc Xavier, bias 0; fc_att nn.Linear's default init)

Both softmaxes run over every slot, the padding slots' (weight 0) included (``padding_blocks:
attend``, the source); ``masked`` leaves them out. Text: SCAN's bi-GRU words, directions averaged, l2.

Similarity: SCAN's cross attention (``methods.models.scan_similarity``). In ``t2i`` (the README's
t-i) the score adds half the aggregate over words of each word's largest attention weight over the
regions: S = agg_j R_j + 0.5 agg_j max_r alpha_rj (``FOCUS_WEIGHT``; LSE aggregates both with
lambda_lse, as the source). ``i2t`` is SCAN's i-t unchanged.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from methods.errors import HarnessError
from methods.models.base import CrossAttentionModel, register_model
from methods.models.cross_attention import RegionFeatures, WordFeatures
from methods.models.layers import SCAN_L2NORM_EPS, at_least_float32, l2norm, xavier_linear
from methods.models.scan import EVALUATION_DTYPES, check_similarity
from methods.models.scan_similarity import aggregate_alignments, cosine, scan_pair_elements, scan_scores
from methods.models.text import GRUTextEncoder

PADDING_BLOCKS = ("attend", "masked")
FOCUS_WEIGHT = 0.5   # model_attention.py xattn_score_t2i: row_sim + 0.5 * max_attn


def position_blocks(boxes: torch.Tensor, grid: int, region_blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., 4) boxes x0, y0, x1, y1 as fractions of the image -> (..., region_blocks) block indices
    (long; grid^2 pads) and weights (the overlap areas over their sum; 0 for padding). A box of no
    area keeps the block holding its corner (x0, y0), weight 1."""
    edges = torch.arange(grid + 1, dtype=boxes.dtype, device=boxes.device) / grid
    low, high = edges[:-1], edges[1:]
    x0, y0, x1, y1 = (boxes[..., k, None] for k in range(4))
    ox = (torch.minimum(x1, high) - torch.maximum(x0, low)).clamp(min=0)        # (..., grid) columns
    oy = (torch.minimum(y1, high) - torch.maximum(y0, low)).clamp(min=0)        # (..., grid) rows
    area = (oy[..., :, None] * ox[..., None, :]).flatten(-2)                    # (..., grid^2), row-major
    corner = ((y0 * grid).floor().clamp(0, grid - 1) * grid + (x0 * grid).floor().clamp(0, grid - 1)).long()
    empty = area.sum(-1, keepdim=True) <= 0
    area = torch.where(empty, torch.zeros_like(area).scatter(-1, corner, 1.0), area)
    kept, index = torch.sort(area, dim=-1, descending=True, stable=True)
    kept, index = kept[..., :region_blocks], index[..., :region_blocks]
    overlapped = kept > 0
    weights = kept / kept.sum(-1, keepdim=True)
    return torch.where(overlapped, index, grid * grid), weights


def pfan_t2i_scores(regions: torch.Tensor, words: torch.Tensor, mask: torch.Tensor, aggregation: str,
                    lambda_softmax: float, lambda_lse: float | None) -> torch.Tensor:
    """(I, C) t-i scores of a block: SCAN's t-i alignment of each word plus FOCUS_WEIGHT times each
    word's largest attention weight over the regions, both aggregated over the caption's words."""
    i, r, d = regions.shape
    c, l, _ = words.shape
    reg, wrd = at_least_float32(regions), at_least_float32(words)
    raw = at_least_float32(regions.reshape(i * r, d) @ words.reshape(c * l, d).t()).view(i, r, c, l)
    raw = raw.permute(0, 2, 1, 3)                                             # (I, C, R, L)
    word_mask = mask[None, :, None, :]
    s = l2norm(F.leaky_relu(raw, 0.1) * word_mask, dim=3, eps=SCAN_L2NORM_EPS)   # over the caption's words
    alpha = torch.softmax(lambda_softmax * s, dim=2)                          # over regions
    sq_norm = torch.einsum("icrl,irs,icsl->icl", alpha, reg @ reg.transpose(1, 2), alpha)
    alignments = cosine((alpha * raw).sum(2), wrd.norm(dim=-1)[None], sq_norm)   # (I, C, L)
    focus = alpha.amax(dim=2)                                                 # (I, C, L)
    return (aggregate_alignments(alignments, mask, aggregation, lambda_lse)
            + FOCUS_WEIGHT * aggregate_alignments(focus, mask, aggregation, lambda_lse))


def check_settings(grid: int, region_blocks: int, position_dim: int, padding_blocks: str,
                   evaluation_dtype: str) -> None:
    if grid < 1 or region_blocks < 1 or position_dim < 1:
        raise ValueError(f"grid ({grid}), region_blocks ({region_blocks}) and position_dim ({position_dim}) "
                         f"must be positive")
    if region_blocks > grid * grid:
        raise ValueError(f"region_blocks {region_blocks} exceeds the grid's {grid * grid} blocks")
    if padding_blocks not in PADDING_BLOCKS:
        raise ValueError(f"padding_blocks must be one of {PADDING_BLOCKS}, not {padding_blocks!r}")
    if evaluation_dtype not in EVALUATION_DTYPES:
        raise ValueError(f"evaluation_dtype must be one of {EVALUATION_DTYPES}, not {evaluation_dtype!r}")


@register_model("pfan")
class PFAN(CrossAttentionModel):
    image_arguments = {"region_dim": "dim", "n_regions": "regions"}

    scoring_image_block = None   # the pair intermediates hold no embedding dimension (Gram trick)

    def __init__(self, region_dim: int, n_regions: int, embed_dim: int, text: GRUTextEncoder, similarity: dict,
                 grid: int = 16, region_blocks: int = 15, position_dim: int = 200, padding_blocks: str = "attend",
                 evaluation_dtype: str = "model"):
        """``similarity``: SCAN's block {direction, aggregation, lambda_softmax, lambda_lse (LSE only)}."""
        super().__init__()
        check_settings(grid, region_blocks, position_dim, padding_blocks, evaluation_dtype)
        self.direction, self.aggregation, self.lambda_softmax, self.lambda_lse = check_similarity(similarity)
        self.grid, self.region_blocks, self.padding_blocks = grid, region_blocks, padding_blocks
        self.evaluation_dtype = evaluation_dtype
        self.n_regions = n_regions   # sizes the scoring blocks
        self.position_embedding = nn.Embedding(grid * grid + 1, position_dim)   # N(0, 1), as the source leaves it
        self.fc_att = nn.Linear(region_dim, position_dim)
        self.fc = xavier_linear(region_dim + position_dim, embed_dim)
        self.text = text
        self.text.l2norm_eps = SCAN_L2NORM_EPS   # model_attention.py l2norm: |x| + 1e-8

    def position_features(self, regions: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        """(B, R, position_dim) position feature p of each region (the module doc)."""
        index, weights = position_blocks(boxes, self.grid, self.region_blocks)
        blocks = self.position_embedding(index)                                   # (B, R, L, P)
        logits = torch.tanh((self.fc_att(regions)[..., None, :] * blocks).sum(-1))   # (B, R, L)
        focused = weights * self._softmax(logits, index)
        return (self._softmax(focused, index)[..., None] * blocks).sum(-2)

    def _softmax(self, logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Softmax over a region's block slots: every slot (``attend``) or its overlapped blocks (``masked``)."""
        if self.padding_blocks == "masked":
            logits = logits.masked_fill(index == self.grid * self.grid, float("-inf"))
        return torch.softmax(logits, dim=-1)

    def encode_images(self, batch: dict) -> RegionFeatures:
        feats = batch["features"]
        if not isinstance(feats, dict):
            raise HarnessError("PFAN reads each region's box with its features (a dict of regions and boxes: "
                               "methods.data.region_boxes); these features come without boxes")
        regions = feats["regions"].to(self.fc.weight.dtype)
        boxes = feats["boxes"].to(self.fc.weight.dtype)
        joint = torch.cat([regions, self.position_features(regions, boxes)], dim=-1)
        regions = l2norm(self.fc(joint), eps=SCAN_L2NORM_EPS)
        return RegionFeatures(regions, regions.new_zeros(regions.shape[0], 0))   # no global vector

    def encode_texts(self, batch: dict) -> WordFeatures:
        lengths = batch["lengths"].to(batch["tokens"].device)
        words = self.text.words(batch["tokens"], lengths)
        return WordFeatures(words, lengths, words.new_zeros(words.shape[0], 0))

    def score(self, img: RegionFeatures, cap: WordFeatures) -> torch.Tensor:
        if self.direction == "t2i":
            return pfan_t2i_scores(img.regions, cap.words, cap.mask, self.aggregation, self.lambda_softmax,
                                   self.lambda_lse)
        return scan_scores(img.regions, cap.words, cap.mask, "i2t", self.aggregation, self.lambda_softmax,
                           self.lambda_lse)

    def pair_elements(self, length: int) -> int:
        """SCAN's intermediates per pair, and t-i's largest weights."""
        return scan_pair_elements(self.n_regions, length) + self.n_regions * length
