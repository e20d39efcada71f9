"""IMRAM (Chen, Ding, Lin, Zhao, Han, CVPR 2020): iterative matching with recurrent attention
memory, as HuiChen24/IMRAM's model.py computes it (``xattn_score_Text_IMRAM``,
``xattn_score_Image_IMRAM``, ``func_attention``, ``gated_memory_*``), for a block of pairs at once.

Image: precomputed regions -> fc (Xavier) -> l2 per region (v_r). Text: word embedding (uniform
+-0.1) -> bi-GRU, directions averaged -> l2 per word (t_j); SCAN's encoders, with SCAN's l2norm.

One direction (Text-IMRAM: query fragments x = the words, context y = the regions; Image-IMRAM:
x = the regions, y = the words) runs K steps from the memory q_0 = x:

- cross-modal attention unit (SCAN's attention with q_k as the query): s_ab = LeakyReLU_0.1(y_b . q_a)
  l2-normalised over the query fragments a, alpha_ab = softmax_b(lambda_softmax * s_ab),
  c_a = sum_b alpha_ab y_b;
- step score F_k = mean over the query fragments of cos(x_a, c_a): always the original fragments;
- memory distillation unit: z = [q_k; c], g = sigmoid(W_g z + b_g), h = tanh(W_l z + b_l),
  q_{k+1} = g * q_k + (1 - g) * h (l2-normalised only with ``memory_l2norm``).

The score is sum_k F_k; Full-IMRAM adds both directions' sums (one model, each direction with
its own memory unit). Padded words stay out of the word-axis l2, the softmax over words and the
mean over words; the memory of a padded word is carried along and never read.

Computed as the source's in exact arithmetic, with less work per pair; the attended vectors c are
never formed:

- W [q; c] = W_q q + W_c c and W_c c_a = sum_b alpha_ab (W_c y_b): the context's share is
  projected once per image (regions) or caption (words), and a pair only weights it by alpha
  (fragments x context x 2D, not fragments x D x 2D); the first memory q_0 = x is shared by the
  other side, so its share W_q x + b is once per image / caption too. From the second update on
  q_k is per pair and W_q q_k is the one per-pair product left; the source's update after the last
  step is never read, so it is skipped.
- cos(x_a, c_a) = x_a . c_a / max(|x_a| |c_a|, 1e-8) (SCAN's cosine_similarity) with
  x_a . c_a = sum_b alpha_ab (x_a . y_b), the step-0 products weighted, and |c_a|^2 = alpha_a G alpha_a^T,
  G = Y Y^T the context's Gram matrix, as ``methods.models.scan_similarity``.
- h = tanh(a) = 2 sigmoid(2a) - 1, with the candidate unit's rows doubled: one sigmoid over both
  halves of the pre-activation (torch's CPU tanh is several times slower than its sigmoid).

``score_matrix`` runs image blocks outside the caption blocks, so that the images' shares are
projected once per image block of the split, not once per caption block.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from methods.model_kinds.imram import MODES
from methods.models.base import CrossAttentionModel, register_model
from methods.models.cross_attention import (PackedWordFeatures, RegionFeatures, WordFeatures, region_word_cosines,
                                            score_in_blocks)
from methods.models.layers import SCAN_L2NORM_EPS, at_least_float32, l2norm, xavier_linear
from methods.models.scan_similarity import cosine
from methods.models.text import GRUTextEncoder
from methods.runtime import autocast

DIRECTIONS = {"full": ("t2i", "i2t"), "text": ("t2i",), "image": ("i2t",)}
IMAGE_BLOCK = 128   # images per block of score_matrix (score_in_blocks' default)


class SplitWeights(NamedTuple):
    """A memory unit's two nn.Linear(2D, D) stacked (candidate rows doubled, then gate rows) and
    split by what they read: [2 (W_l z + b_l); W_g z + b_g] = F.linear(q, memory) + F.linear(c,
    context) + bias, 2D wide. The candidate's rows are doubled (exact in binary floating point)
    for ``gated_update``'s tanh(a) = 2 sigmoid(2a) - 1."""
    memory: torch.Tensor    # (2D, D)
    context: torch.Tensor   # (2D, D)
    bias: torch.Tensor      # (2D,)


class MemoryDistillation(nn.Module):
    """The gated update of one direction (``gated_memory_t2i`` / ``_i2t``): two nn.Linear(2D, D)
    with torch's default initialisation, as the source's."""

    def __init__(self, dim: int):
        super().__init__()
        self.linear = nn.Linear(2 * dim, dim)
        self.gate = nn.Linear(2 * dim, dim)

    def split_weights(self) -> SplitWeights:
        d = self.linear.out_features
        weight = torch.cat([2 * self.linear.weight, self.gate.weight])   # both units in one product
        return SplitWeights(weight[:, :d], weight[:, d:], torch.cat([2 * self.linear.bias, self.gate.bias]))


@dataclass
class MemoryTerms:
    """What one direction's updates reuse across caption blocks: the unit's split weights and the
    images' share of the pre-activation, (I, R, 2D): W_c v (Text-IMRAM, the regions are the
    context) or W_q v + b (Image-IMRAM, the regions are the first memory)."""
    weights: SplitWeights
    image_share: torch.Tensor


def memory_terms(direction: str, unit: MemoryDistillation, regions: torch.Tensor) -> MemoryTerms:
    weights = unit.split_weights()
    if direction == "t2i":
        return MemoryTerms(weights, F.linear(regions, weights.context))
    return MemoryTerms(weights, F.linear(regions, weights.memory, weights.bias))


def gated_update(memory: torch.Tensor, weights: SplitWeights, alpha: torch.Tensor, context_share: torch.Tensor,
                 memory_share: torch.Tensor | None = None) -> torch.Tensor:
    """q * g + h * (1 - g) from pre = [2a; b] = W_q q + b + alpha @ (W_c y): ``context_share`` the
    projected context (.., context, 2D), ``memory_share`` W_q q + b where it is shared (the first
    memory), else formed here (per pair). One sigmoid covers both halves, g = sigmoid(b) and
    h = tanh(a) = 2 sigmoid(2a) - 1 (torch's CPU tanh is several times slower than its sigmoid),
    and the update is one lerp h + g (q - h). Activations and memory in at least fp32."""
    alpha = alpha.to(context_share.dtype)
    if memory_share is None:   # a fresh product: the context's share is added in place
        pre = F.linear(memory, weights.memory, weights.bias).baddbmm_(alpha, context_share)
    else:
        pre = torch.baddbmm(memory_share, alpha, context_share)
    activated = torch.sigmoid(at_least_float32(pre))
    del pre   # the sigmoid keeps its output for the backward, not its input: one 2D-wide tensor less
    d = activated.shape[-1] // 2
    candidate = (activated[..., :d] * 2).sub_(1)
    return torch.lerp(candidate, memory.to(candidate.dtype), activated[..., d:])


def text_steps(regions: torch.Tensor, words: torch.Tensor, mask: torch.Tensor, steps: int, smooth: float,
               terms: MemoryTerms | None, memory_l2norm: bool) -> list[torch.Tensor]:
    """Text-IMRAM's K step scores, each (I, C): the words' memory attends to the regions.
    ``regions`` (I, R, D), ``words`` (C, L, D) zero-padded, ``mask`` (C, L); ``terms`` from
    ``memory_terms("t2i", ...)`` on these regions (None for one step). Per-pair tensors are laid
    out (I, C * L, ...): each image's products are one batched GEMM."""
    i, r, d = regions.shape
    c, l, _ = words.shape
    wide_regions, wide_words = at_least_float32(regions), at_least_float32(words)
    word_mask = mask[None, :, :, None]                                       # (1, C, L, 1)
    region_gram = wide_regions @ wide_regions.transpose(1, 2)                # (I, R, R)
    word_norms = wide_words.norm(dim=-1)[None]                               # (1, C, L)
    words_regions = at_least_float32(region_word_cosines(regions, words)).transpose(2, 3).contiguous()  # x . y
    raw = words_regions                                                      # q_0 . y, (I, C, L, R)
    scores = []
    for step in range(steps):
        s = l2norm(F.leaky_relu(raw, 0.1) * word_mask, dim=2, eps=SCAN_L2NORM_EPS)   # over words
        alpha = torch.softmax(smooth * s, dim=3)                             # over regions
        sq_norm = torch.einsum("iclr,irs,icls->icl", alpha, region_gram, alpha)   # |c_a|^2
        cosines = cosine((alpha * words_regions).sum(-1), word_norms, sq_norm)    # (I, C, L)
        scores.append((cosines * mask).sum(-1) / mask.sum(-1))
        if step + 1 < steps:   # the source's update after the last step is never read
            memory_share = None   # from the second update on the memory is per pair: formed there
            if step == 0:         # q_0 = the words: their share once per caption, shared by the images
                memory = words.view(1, c * l, d)
                memory_share = F.linear(memory, terms.weights.memory, terms.weights.bias)  # (1, C*L, 2D)
            memory = gated_update(memory, terms.weights, alpha.view(i, c * l, r), terms.image_share,
                                  memory_share)                                          # (I, C*L, D)
            if memory_l2norm:
                memory = l2norm(memory, eps=SCAN_L2NORM_EPS)
            raw = at_least_float32(torch.bmm(memory.to(regions.dtype), regions.transpose(1, 2))).view(i, c, l, r)
    return scores


def image_steps(regions: torch.Tensor, words: torch.Tensor, mask: torch.Tensor, steps: int, smooth: float,
                terms: MemoryTerms | None, memory_l2norm: bool) -> list[torch.Tensor]:
    """Image-IMRAM's K step scores, each (I, C): the regions' memory attends to the caption's words.
    Per-pair tensors are laid out (C, I * R, ...): each caption's products are one batched GEMM."""
    i, r, d = regions.shape
    c, l, _ = words.shape
    wide_regions, wide_words = at_least_float32(regions), at_least_float32(words)
    word_mask = mask[:, None, None, :]                                       # (C, 1, 1, L)
    word_gram = wide_words @ wide_words.transpose(1, 2)                      # (C, L, L)
    region_norms = wide_regions.norm(dim=-1)                                 # (I, R)
    regions_words = at_least_float32(region_word_cosines(regions, words)).permute(1, 0, 2, 3).contiguous()
    raw = regions_words                                                      # (C, I, R, L)
    scores = []
    for step in range(steps):
        s = l2norm(F.leaky_relu(raw, 0.1), dim=2, eps=SCAN_L2NORM_EPS)      # over regions
        alpha = torch.softmax((smooth * s).masked_fill(~word_mask, float("-inf")), dim=3)  # over the words
        sq_norm = torch.einsum("cirl,clm,cirm->cir", alpha, word_gram, alpha)
        cosines = cosine((alpha * regions_words).sum(-1), region_norms, sq_norm)   # (C, I, R)
        scores.append(cosines.mean(-1).t())                                  # every region
        if step + 1 < steps:
            memory_share = None
            if step == 0:      # the words' share once per caption (zero for padding: no bias), the regions' per image
                word_context = F.linear(words, terms.weights.context)                    # (C, L, 2D)
                memory, memory_share = regions.view(1, i * r, d), terms.image_share.view(1, i * r, 2 * d)
            memory = gated_update(memory, terms.weights, alpha.view(c, i * r, l), word_context,
                                  memory_share)                                          # (C, I*R, D)
            if memory_l2norm:
                memory = l2norm(memory, eps=SCAN_L2NORM_EPS)
            raw = at_least_float32(torch.bmm(memory.to(words.dtype), words.transpose(1, 2))).view(c, i, r, l)
    return scores


STEPS = {"t2i": text_steps, "i2t": image_steps}


@register_model("imram")
class IMRAM(CrossAttentionModel):
    image_arguments = {"region_dim": "dim", "n_regions": "regions"}

    def __init__(self, region_dim: int, n_regions: int, embed_dim: int, mode: str, steps: int, lambda_softmax: float,
                 text: GRUTextEncoder, memory_l2norm: bool = False):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if steps < 1:
            raise ValueError(f"steps must be at least 1, not {steps}")
        if lambda_softmax <= 0:
            raise ValueError(f"lambda_softmax must be positive, not {lambda_softmax}")
        self.mode, self.steps, self.lambda_softmax, self.memory_l2norm = mode, steps, lambda_softmax, memory_l2norm
        self.n_regions, self.embed_dim = n_regions, embed_dim   # size the scoring blocks
        self.fc = xavier_linear(region_dim, embed_dim)
        self.text = text
        self.text.l2norm_eps = SCAN_L2NORM_EPS
        self.memory = nn.ModuleDict({direction: MemoryDistillation(embed_dim) for direction in DIRECTIONS[mode]})

    def encode_images(self, batch: dict) -> RegionFeatures:
        regions = l2norm(self.fc(batch["features"].to(self.fc.weight.dtype)), eps=SCAN_L2NORM_EPS)
        return RegionFeatures(regions, regions.new_zeros(regions.shape[0], 0))   # no global vector

    def encode_texts(self, batch: dict) -> WordFeatures:
        lengths = batch["lengths"].to(batch["tokens"].device)
        words = self.text.words(batch["tokens"], lengths)
        return WordFeatures(words, lengths, words.new_zeros(words.shape[0], 0))

    def memory_terms(self, regions: torch.Tensor) -> dict[str, MemoryTerms | None]:
        """Each direction's MemoryTerms for these regions (None: one step, no update)."""
        return {direction: memory_terms(direction, unit, regions) if self.steps > 1 else None
                for direction, unit in self.memory.items()}

    def step_scores(self, img: RegionFeatures, cap: WordFeatures,
                    terms: dict[str, MemoryTerms | None] | None = None) -> dict[str, list[torch.Tensor]]:
        """Each direction's K step scores F_k, (I, C) each; ``terms`` from ``memory_terms(img.regions)``."""
        terms = self.memory_terms(img.regions) if terms is None else terms
        return {direction: STEPS[direction](img.regions, cap.words, cap.mask, self.steps, self.lambda_softmax,
                                            terms[direction], self.memory_l2norm)
                for direction in self.memory}

    def score(self, img: RegionFeatures, cap: WordFeatures,
              terms: dict[str, MemoryTerms | None] | None = None) -> torch.Tensor:
        return sum(sum(scores) for scores in self.step_scores(img, cap, terms).values())

    def score_matrix(self, img: RegionFeatures, txt: WordFeatures | PackedWordFeatures,
                     amp: bool = False) -> torch.Tensor:
        """As the base's blocked scoring, with image blocks outside: each block of IMAGE_BLOCK images
        has its MemoryTerms (R x 2D values per image and direction) projected once, then
        score_in_blocks runs its caption blocks against that one image block (its own image loop
        runs once, so the block it passes is the one the terms were projected from)."""
        parts = []
        with autocast(self.device, amp), torch.no_grad():
            for start in range(0, max(len(img), 1), IMAGE_BLOCK):   # no images: one empty block
                images = img[start:start + IMAGE_BLOCK]
                terms = self.memory_terms(images.regions)
                parts.append(score_in_blocks(lambda block, cap: self.score(block, cap, terms), images, txt,
                                             self.pair_elements, self.block_elements, image_block=IMAGE_BLOCK))
        return torch.cat(parts)

    def pair_elements(self, length: int) -> int:
        """Peak elements per pair in blocked (no-grad) scoring, where one direction's intermediates
        are freed before the next starts: the attention's (the step-0 products, this step's, the
        activations, the weights and the two cosine products, about 6 x regions x words) and, when
        the memory is updated, the unit's (the memory, the 2D-wide pre-activation and its sigmoid,
        the candidate and the new memory: at most 6 x fragments x D)."""
        attention = 6 * self.n_regions * length
        update = 6 * self.embed_dim if self.steps > 1 else 0
        fragments = {"t2i": length, "i2t": self.n_regions}
        return max(attention + update * fragments[direction] for direction in self.memory)
