"""SCAN's image-text similarity (Lee, Chen, Hua, Hu, He, ECCV 2018), as its public code computes it
(kuanghuei/SCAN model.py ``func_attention``, ``xattn_score_t2i``, ``xattn_score_i2t``), for a
block of (image, caption) pairs at once. MVSA scores its instance features with it too.

For image instances v_r (regions, or MVSA's instance features) and words t_j, both l2-normalised,
s_rj = v_r . t_j (a cosine):

- ``t2i`` (words attend to instances): s'_rj = LeakyReLU_0.1(s_rj) l2-normalised over the
  caption's words, alpha_rj = softmax_r(lambda_softmax * s'_rj), a_j = sum_r alpha_rj v_r,
  R_j = cos(t_j, a_j), aggregated over the caption's words;
- ``i2t`` (instances attend to words): s' normalised over instances, alpha = softmax over the
  caption's words, a_r = sum_j alpha_rj t_j, R_r = cos(v_r, a_r), aggregated over instances.

Aggregation: ``avg`` (the mean) or ``lse``, (1/lambda_lse) log sum exp(lambda_lse R). The public
code computes LSE as a plain exp/log, which overflows in fp16 (e^20 > 65504); here it is
``logsumexp`` (the maximum subtracted) in at least fp32, equal in exact arithmetic.

The attended vectors are never formed: R = a . q / max(|q| |a|, 1e-8) (SCAN's cosine_similarity)
needs only a . q = sum alpha s (the cosines already computed) and |a|^2 = alpha^T G alpha with G
the Gram matrix of the attended side.
That makes a block cost O(pairs x instances x words), not x the embedding dimension.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from methods.models.layers import SCAN_L2NORM_EPS, at_least_float32, l2norm

DIRECTIONS = ("t2i", "i2t")
SCAN_COSINE_EPS = 1e-8   # kuanghuei/SCAN model.py cosine_similarity: the product of norms clamped below
AGGREGATIONS = ("avg", "lse")


def aggregate_alignments(alignments: torch.Tensor, mask: torch.Tensor, aggregation: str,
                         lambda_lse: float | None) -> torch.Tensor:
    """(I, C, N) alignments R over N valid-masked entries (mask broadcastable, e.g. (C, N)) -> (I, C)."""
    r = at_least_float32(alignments)
    mask = mask.expand_as(r)
    if aggregation == "avg":
        return (r * mask).sum(-1) / mask.sum(-1)
    if aggregation == "lse":
        return torch.logsumexp((lambda_lse * r).masked_fill(~mask, float("-inf")), dim=-1) / lambda_lse
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, not {aggregation!r}")


def cosine(dots: torch.Tensor, query_norm: torch.Tensor, attended_sq_norm: torch.Tensor) -> torch.Tensor:
    """SCAN's ``cosine_similarity``: q . a / max(|q| |a|, 1e-8), from the dot products and norms."""
    return dots / (query_norm * attended_sq_norm.clamp(min=0).sqrt()).clamp(min=SCAN_COSINE_EPS)


def scan_alignments(instances: torch.Tensor, words: torch.Tensor, mask: torch.Tensor, direction: str,
                    lambda_softmax: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Alignments R of every pair of a block: (I, C, L) per word (``t2i``) or (I, C, R) per
    instance (``i2t``), and the mask of the entries that exist ((C, L) or (1, R)).
    ``instances`` (I, R, D), ``words`` (C, L, D) zero-padded, ``mask`` (C, L) the valid words."""
    i, r, d = instances.shape
    c, l, _ = words.shape
    inst, wrd = at_least_float32(instances), at_least_float32(words)
    # (I, C, R, L) cosines as one GEMM; the softmax, the normalisations and the sums run in (at least) fp32
    raw = at_least_float32(instances.reshape(i * r, d) @ words.reshape(c * l, d).t()).view(i, r, c, l)
    raw = raw.permute(0, 2, 1, 3)
    word_mask = mask[None, :, None, :]                                      # (1, C, 1, L)
    s = F.leaky_relu(raw, 0.1)
    if direction == "t2i":
        s = l2norm(s * word_mask, dim=3, eps=SCAN_L2NORM_EPS)               # over the caption's words
        alpha = torch.softmax(lambda_softmax * s, dim=2)                    # over instances
        gram = inst @ inst.transpose(1, 2)                                  # (I, R, R)
        sq_norm = torch.einsum("icrl,irs,icsl->icl", alpha, gram, alpha)
        dots = (alpha * raw).sum(2)                                         # t_j . a_j
        return cosine(dots, wrd.norm(dim=-1)[None], sq_norm), mask
    if direction == "i2t":
        s = l2norm(s, dim=2, eps=SCAN_L2NORM_EPS)                           # over instances
        alpha = torch.softmax((lambda_softmax * s).masked_fill(~word_mask, float("-inf")), dim=3)  # over words
        gram = wrd @ wrd.transpose(1, 2)                                    # (C, L, L)
        sq_norm = torch.einsum("icrl,clm,icrm->icr", alpha, gram, alpha)
        dots = (alpha * raw).sum(3)                                         # v_r . a_r
        return cosine(dots, inst.norm(dim=-1)[:, None], sq_norm), mask.new_ones(1, r)
    raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")


def scan_scores(instances: torch.Tensor, words: torch.Tensor, mask: torch.Tensor, direction: str,
                aggregation: str, lambda_softmax: float, lambda_lse: float | None) -> torch.Tensor:
    """(I, C) SCAN similarities of a block of pairs (see the module doc)."""
    alignments, valid = scan_alignments(instances, words, mask, direction, lambda_softmax)
    return aggregate_alignments(alignments, valid, aggregation, lambda_lse)


def scan_pair_elements(instances: int, length: int) -> int:
    """Elements per pair of the intermediates above (cosines, activations, weights, products)."""
    return 5 * instances * length
