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
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from methods.model_kinds.imram import MODES
from methods.models.base import CrossAttentionModel, register_model
from methods.models.cross_attention import RegionFeatures, WordFeatures, region_word_cosines
from methods.models.layers import SCAN_L2NORM_EPS, at_least_float32, l2norm, xavier_linear
from methods.models.scan_similarity import SCAN_COSINE_EPS
from methods.models.text import GRUTextEncoder

DIRECTIONS = {"full": ("t2i", "i2t"), "text": ("t2i",), "image": ("i2t",)}


class MemoryDistillation(nn.Module):
    """The gated update of one direction (``gated_memory_t2i`` / ``_i2t``): two nn.Linear(2D, D)
    with torch's default initialisation, as the source's."""

    def __init__(self, dim: int):
        super().__init__()
        self.linear = nn.Linear(2 * dim, dim)
        self.gate = nn.Linear(2 * dim, dim)

    def forward(self, memory: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        # W [q; c] = W_q q + W_c c: the memory's share is computed once per caption at the first
        # step (its memory is still the caption's words), not once per pair.
        d = memory.shape[-1]
        weight = torch.cat([self.linear.weight, self.gate.weight])            # (2D, 2D): both units at once
        bias = torch.cat([self.linear.bias, self.gate.bias])
        pre = F.linear(memory, weight[:, :d]) + F.linear(attended, weight[:, d:], bias)
        candidate, gate = torch.tanh(pre[..., :d]), torch.sigmoid(pre[..., d:])
        return memory * gate + candidate * (1 - gate)


def fragment_cosines(x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
    """SCAN's ``cosine_similarity`` over the last dim: x . c / max(|x| |c|, 1e-8)."""
    dots = (x * attended).sum(-1)
    return dots / (x.norm(dim=-1) * attended.norm(dim=-1)).clamp(min=SCAN_COSINE_EPS)


def text_steps(regions: torch.Tensor, words: torch.Tensor, mask: torch.Tensor, steps: int, smooth: float,
               memory_unit: MemoryDistillation, memory_l2norm: bool) -> list[torch.Tensor]:
    """Text-IMRAM's K step scores, each (I, C): the words' memory attends to the regions.
    ``regions`` (I, R, D), ``words`` (C, L, D) zero-padded, ``mask`` (C, L)."""
    i, r, d = regions.shape
    c, l, _ = words.shape
    word_mask = mask[None, :, :, None]                                       # (1, C, L, 1)
    memory = words[None]                                                     # (1, C, L, D): q_0, shared by the images
    scores = []
    for step in range(steps):
        if step == 0:
            raw = region_word_cosines(regions, words).transpose(2, 3)        # (I, C, L, R), one GEMM
        else:
            raw = torch.bmm(memory.reshape(i, c * l, d), regions.transpose(1, 2)).view(i, c, l, r)
        s = l2norm(at_least_float32(F.leaky_relu(raw, 0.1)) * word_mask, dim=2, eps=SCAN_L2NORM_EPS)  # over words
        alpha = torch.softmax(smooth * s, dim=3)                             # over regions
        attended = torch.bmm(alpha.to(regions.dtype).reshape(i, c * l, r), regions).view(i, c, l, d)
        cosines = fragment_cosines(words[None], attended)                    # (I, C, L)
        scores.append((cosines * mask).sum(-1) / mask.sum(-1))
        if step + 1 < steps:   # the source's update after the last step is never read
            memory = memory_unit(memory, attended)
            if memory_l2norm:
                memory = l2norm(memory, eps=SCAN_L2NORM_EPS)
    return scores


def image_steps(regions: torch.Tensor, words: torch.Tensor, mask: torch.Tensor, steps: int, smooth: float,
                memory_unit: MemoryDistillation, memory_l2norm: bool) -> list[torch.Tensor]:
    """Image-IMRAM's K step scores, each (I, C): the regions' memory attends to the caption's words."""
    word_mask = mask[None, :, None, :]                                       # (1, C, 1, L)
    memory = regions[:, None]                                                # (I, 1, R, D): q_0, shared by the captions
    scores = []
    for step in range(steps):
        if step == 0:
            raw = region_word_cosines(regions, words)                        # (I, C, R, L), one GEMM
        else:
            raw = memory @ words.transpose(1, 2)[None]                       # (I, C, R, D) @ (1, C, D, L)
        s = l2norm(at_least_float32(F.leaky_relu(raw, 0.1)), dim=2, eps=SCAN_L2NORM_EPS)   # over regions
        alpha = torch.softmax((smooth * s).masked_fill(~word_mask, float("-inf")), dim=3)  # over the words
        attended = alpha.to(words.dtype) @ words[None]                       # (I, C, R, D)
        scores.append(fragment_cosines(regions[:, None], attended).mean(-1))   # every region
        if step + 1 < steps:
            memory = memory_unit(memory, attended)
            if memory_l2norm:
                memory = l2norm(memory, eps=SCAN_L2NORM_EPS)
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

    def step_scores(self, img: RegionFeatures, cap: WordFeatures) -> dict[str, list[torch.Tensor]]:
        """Each direction's K step scores F_k, (I, C) each."""
        return {direction: STEPS[direction](img.regions, cap.words, cap.mask, self.steps, self.lambda_softmax,
                                            self.memory[direction], self.memory_l2norm)
                for direction in self.memory}

    def score(self, img: RegionFeatures, cap: WordFeatures) -> torch.Tensor:
        return sum(sum(scores) for scores in self.step_scores(img, cap).values())

    def pair_elements(self, length: int) -> int:
        """Per pair and step: the attention's products, activations and weights (3 x regions x
        words), and the attended vectors, the two units' pre-activations, the gate, the candidate
        and the new memory (about 9 x fragments x D)."""
        fragments = {"t2i": length, "i2t": self.n_regions}
        return sum(3 * self.n_regions * length + 9 * fragments[d] * self.embed_dim for d in self.memory)
