"""BFAN (Liu, Mao, Liu, Zhang, Wang, Zhang, ACM MM 2019): bidirectional focal attention, as
CrossmodalGroup/BFAN's model.py computes it (``func_attention``, ``focal_equal``, ``focal_prob``,
``xattn_score``), for a block of (image, caption) pairs at once.

Encoders as SCAN's (the public code is built on kuanghuei/SCAN): regions -> fc (Xavier) -> l2 per
region; word embedding (uniform +-0.1) -> bi-GRU, directions averaged -> l2 per word.

For regions v_r and words t_j, s_rj = v_r . t_j. Each direction attends from its queries to its
context fragments in three steps (``func_attention``):

1. pre-assign: LeakyReLU_0.1(s) l2-normalised over the queries, a_i = softmax over the context
   of lambda_softmax times it (SCAN's attention);
2. identify the relevant fragments: fragment i is kept when F_i > 0, with
   ``equal``: F_i = sum_j (a_i - a_j) = n a_i - sum_j a_j (n the context's size: a_i above the mean);
   ``prob``:  F_i = sum_j (a_i - a_j) sqrt(a_j) = a_i sum_j sqrt(a_j) - sum_j a_j^1.5;
   the indicator carries no gradient (a ``torch.where`` of constants in the source);
3. re-assign: a'_i = H_i a_i / sum_j H_j a_j; the attended vector is sum_i a'_i (context)_i.

t-i: words attend to regions, R_j = cos(t_j, attended_j), averaged over the caption's words; i-t:
regions attend to the words, R_r = cos(v_r, attended_r), averaged over the regions. The score is
the sum of the two means. ``prob``'s double sum is formed as two sums (equal in exact arithmetic,
without the source's context x context matrix), and the attended vectors are never formed: as in
``methods.models.scan_similarity``, a cosine needs only a' . s and |attended|^2 = a'^T G a'.

Trap: when no fragment passes (all weights equal: one context fragment, as a one-word caption's
i-t attention), the source divides 0 by 0 (NaN). ``empty_focus: nan`` keeps that; ``keep_all``
keeps every fragment of such a query (its pre-assigned attention).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from methods.models.base import CrossAttentionModel, register_model
from methods.models.cross_attention import RegionFeatures, WordFeatures, region_word_cosines
from methods.models.layers import SCAN_L2NORM_EPS, at_least_float32, l2norm, xavier_linear
from methods.models.scan import EVALUATION_DTYPES
from methods.models.scan_similarity import aggregate_alignments, cosine
from methods.models.text import GRUTextEncoder

FOCAL_TYPES = ("equal", "prob")
EMPTY_FOCUS = ("nan", "keep_all")


def relevant_fragments(weights: torch.Tensor, valid: torch.Tensor, focal: str) -> torch.Tensor:
    """The focal indicator H (bool) of pre-assigned ``weights`` over the last dim (zero where not
    ``valid``): F_i > 0 for the ``equal`` or ``prob`` F of the module doc. No gradient."""
    a = weights.detach()
    if focal == "equal":
        f = a * valid.sum(-1, keepdim=True).to(a.dtype) - a.sum(-1, keepdim=True)
    elif focal == "prob":
        confidence = a.sqrt()
        f = a * confidence.sum(-1, keepdim=True) - (a * confidence).sum(-1, keepdim=True)
    else:
        raise ValueError(f"focal must be one of {FOCAL_TYPES}, not {focal!r}")
    return (f > 0) & valid


def reassign(weights: torch.Tensor, valid: torch.Tensor, focal: str, empty_focus: str,
             padded_queries: torch.Tensor | None = None) -> torch.Tensor:
    """Focal attention over the last dim: the kept weights renormalised to sum 1 (step 3). The rows
    of ``padded_queries`` (padded words) keep every fragment, so that they stay finite (their
    gradient too) for the caller to mask out."""
    keep = relevant_fragments(weights, valid, focal)
    if padded_queries is not None:
        keep = keep | (padded_queries[..., None] & valid)
    if empty_focus == "keep_all":
        keep = torch.where(keep.any(-1, keepdim=True), keep, valid)
    elif empty_focus != "nan":
        raise ValueError(f"empty_focus must be one of {EMPTY_FOCUS}, not {empty_focus!r}")
    kept = weights * keep
    return kept / kept.sum(-1, keepdim=True)   # 0/0 where nothing is kept, as the source


def bfan_scores(regions: torch.Tensor, words: torch.Tensor, mask: torch.Tensor, focal: str, lambda_softmax: float,
                empty_focus: str) -> torch.Tensor:
    """(I, C) BFAN similarities of a block: ``regions`` (I, R, D), ``words`` (C, L, D) zero-padded,
    ``mask`` (C, L) the valid words."""
    reg, wrd = at_least_float32(regions), at_least_float32(words)
    raw = at_least_float32(region_word_cosines(regions, words))             # (I, C, R, L)
    word_mask = mask[None, :, None, :]                                      # (1, C, 1, L)
    s = F.leaky_relu(raw, 0.1)

    # t-i: words attend to regions; normalised over the caption's words, softmax over regions (dim 2)
    s_t2i = l2norm(s * word_mask, dim=3, eps=SCAN_L2NORM_EPS)
    alpha = torch.softmax(lambda_softmax * s_t2i, dim=2).transpose(2, 3)    # (I, C, L, R)
    every_region = torch.ones(1, 1, 1, alpha.shape[-1], dtype=torch.bool, device=alpha.device).expand_as(alpha)
    alpha = reassign(alpha, every_region, focal, empty_focus, padded_queries=~mask[None].expand(alpha.shape[:3]))
    sq_norm = torch.einsum("iclr,irs,icls->icl", alpha, reg @ reg.transpose(1, 2), alpha)
    t2i = cosine((alpha * raw.transpose(2, 3)).sum(-1), wrd.norm(dim=-1)[None], sq_norm)   # (I, C, L)

    # i-t: regions attend to words; normalised over regions, softmax over the caption's words (dim 3)
    s_i2t = l2norm(s, dim=2, eps=SCAN_L2NORM_EPS)
    beta = torch.softmax((lambda_softmax * s_i2t).masked_fill(~word_mask, float("-inf")), dim=3)   # (I, C, R, L)
    beta = reassign(beta, word_mask.expand_as(beta), focal, empty_focus)
    sq_norm = torch.einsum("icrl,clm,icrm->icr", beta, wrd @ wrd.transpose(1, 2), beta)
    i2t = cosine((beta * raw).sum(-1), reg.norm(dim=-1)[:, None], sq_norm)                  # (I, C, R)

    return aggregate_alignments(t2i, mask, "avg", None) + aggregate_alignments(i2t, mask.new_ones(1, 1), "avg", None)


def check_settings(focal: str, lambda_softmax: float, empty_focus: str, evaluation_dtype: str) -> None:
    if focal not in FOCAL_TYPES:
        raise ValueError(f"focal must be one of {FOCAL_TYPES}, not {focal!r}")
    if lambda_softmax <= 0:
        raise ValueError(f"lambda_softmax must be positive, not {lambda_softmax}")
    if empty_focus not in EMPTY_FOCUS:
        raise ValueError(f"empty_focus must be one of {EMPTY_FOCUS}, not {empty_focus!r}")
    if evaluation_dtype not in EVALUATION_DTYPES:
        raise ValueError(f"evaluation_dtype must be one of {EVALUATION_DTYPES}, not {evaluation_dtype!r}")


@register_model("bfan")
class BFAN(CrossAttentionModel):
    image_arguments = {"region_dim": "dim", "n_regions": "regions"}

    scoring_image_block = None   # the pair intermediates hold no embedding dimension (Gram trick)

    def __init__(self, region_dim: int, n_regions: int, embed_dim: int, text: GRUTextEncoder, focal: str,
                 lambda_softmax: float, empty_focus: str = "nan", evaluation_dtype: str = "model"):
        super().__init__()
        check_settings(focal, lambda_softmax, empty_focus, evaluation_dtype)
        self.focal, self.lambda_softmax, self.empty_focus = focal, lambda_softmax, empty_focus
        self.evaluation_dtype = evaluation_dtype
        self.n_regions = n_regions   # sizes the scoring blocks
        self.fc = xavier_linear(region_dim, embed_dim)
        self.text = text
        self.text.l2norm_eps = SCAN_L2NORM_EPS   # model.py l2norm: |x| + 1e-8

    def encode_images(self, batch: dict) -> RegionFeatures:
        regions = l2norm(self.fc(batch["features"].to(self.fc.weight.dtype)), eps=SCAN_L2NORM_EPS)
        return RegionFeatures(regions, regions.new_zeros(regions.shape[0], 0))   # no global vector

    def encode_texts(self, batch: dict) -> WordFeatures:
        lengths = batch["lengths"].to(batch["tokens"].device)
        words = self.text.words(batch["tokens"], lengths)
        return WordFeatures(words, lengths, words.new_zeros(words.shape[0], 0))

    def score(self, img: RegionFeatures, cap: WordFeatures) -> torch.Tensor:
        return bfan_scores(img.regions, cap.words, cap.mask, self.focal, self.lambda_softmax, self.empty_focus)

    def pair_elements(self, length: int) -> int:
        """Per pair: the cosines, both directions' activations, weights, indicators and products."""
        return 16 * self.n_regions * length
