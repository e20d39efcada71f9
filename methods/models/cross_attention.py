"""Cross-attention between region and word features, vectorised over (image block x caption block).

Cross-attention models (SCAN, SGRAF) score every (image, caption) pair with a learned pairwise
function, so no embedding index exists. Their encoders therefore return feature sets instead of
vectors: ``RegionFeatures`` (regions + a global vector per image) and ``WordFeatures`` (words,
lengths + a global vector per caption). Each side is computed once per split; the pair
functions then work on one (I images x C captions) block at a time, with a length mask instead
of a Python loop over captions. ``score_in_blocks`` drives a whole score matrix: captions
sorted by length (so a block pads to its own longest caption) and block sizes from an element
budget (the model says how many elements one pair needs at a given caption length).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from methods.models.layers import SCAN_L2NORM_EPS, ItemTensors, at_least_float32, l2norm

# Elements of the per-pair intermediates of one block (pairs x per-pair elements); the DAG's jobs take
# config scoring.block_elements (the same values by default), the API these. On a GPU, large blocks keep
# the kernels busy (H100, 1K x 5K SGR under fp16 autocast: 2**29 is 11% faster than 2**28) but a COCO 5K
# evaluation must fit a 16 GB card; on a CPU, blocks that stay near the caches are faster (2 cores:
# 2**22 is 5x faster than 2**28).
BLOCK_ELEMENTS = {"cuda": 2 ** 28, "cpu": 2 ** 22}


def default_block_elements(device: torch.device) -> int:
    return BLOCK_ELEMENTS.get(device.type, BLOCK_ELEMENTS["cpu"])


@dataclass
class RegionFeatures(ItemTensors):
    regions: torch.Tensor   # (N, R, D)
    glob: torch.Tensor      # (N, D)


@dataclass
class WordFeatures:
    words: torch.Tensor     # (N, L, D), zero beyond each caption's length
    lengths: torch.Tensor   # (N,) on the same device as words
    glob: torch.Tensor      # (N, D)

    def __len__(self) -> int:
        return self.words.shape[0]

    @property
    def mask(self) -> torch.Tensor:
        return torch.arange(self.words.shape[1], device=self.words.device)[None, :] < self.lengths[:, None]

    def __getitem__(self, index) -> "WordFeatures":
        lengths = self.lengths[index]
        longest = int(lengths.max()) if lengths.numel() else 0
        return WordFeatures(self.words[index][:, :longest], lengths, self.glob[index])

    def at_least_float32(self) -> "WordFeatures":
        return WordFeatures(at_least_float32(self.words), self.lengths, at_least_float32(self.glob))

    def to(self, device) -> "WordFeatures":
        return WordFeatures(self.words.to(device), self.lengths.to(device), self.glob.to(device))

    def double(self) -> "WordFeatures":
        return WordFeatures(self.words.double(), self.lengths, self.glob.double())

    def packed(self) -> "PackedWordFeatures":
        """These captions stored by length, without their padding."""
        return PackedWordFeatures(self.words[self.mask], self.lengths, self.glob)


@dataclass
class PackedWordFeatures:
    """A split's word features stored by length: every caption's words back to back, so their
    memory grows with the words, not with captions x the longest caption (COCO 5K, 25,000 captions
    of 13.9 tokens on average and up to ~50, at 1,024 float32 values a word: 1.4 GB instead of
    5.1 GB). ``[index]`` gives those captions as WordFeatures padded to their own longest, the
    blocks ``score_in_blocks`` scores; a block's values are those of the padded encoding."""

    words: torch.Tensor     # (sum of lengths, D): caption k's words at rows starts[k] .. starts[k] + lengths[k]
    lengths: torch.Tensor   # (N,), on the same device as words
    glob: torch.Tensor      # (N, D)

    def __post_init__(self) -> None:
        self.starts = torch.cumsum(self.lengths, 0) - self.lengths

    def __len__(self) -> int:
        return self.lengths.shape[0]

    def __getitem__(self, index) -> WordFeatures:
        rows = torch.arange(len(self), device=self.lengths.device)[index].reshape(-1)   # an int: one caption
        lengths = self.lengths[rows]
        longest = int(lengths.max()) if lengths.numel() else 0
        steps = torch.arange(longest, device=self.lengths.device)
        valid = steps[None, :] < lengths[:, None]
        positions = torch.where(valid, self.starts[rows][:, None] + steps[None, :], 0)
        words = self.words[positions].masked_fill(~valid[..., None], 0)
        return WordFeatures(words, lengths, self.glob[rows])

    def at_least_float32(self) -> "PackedWordFeatures":
        return PackedWordFeatures(at_least_float32(self.words), self.lengths, at_least_float32(self.glob))

    def to(self, device) -> "PackedWordFeatures":
        return PackedWordFeatures(self.words.to(device), self.lengths.to(device), self.glob.to(device))

    def double(self) -> "PackedWordFeatures":
        return PackedWordFeatures(self.words.double(), self.lengths, self.glob.double())

    @staticmethod
    def cat(parts: list["PackedWordFeatures"]) -> "PackedWordFeatures":
        return PackedWordFeatures(*(torch.cat([getattr(p, name) for p in parts])
                                    for name in ("words", "lengths", "glob")))


def region_word_cosines(regions: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
    """(I, R, D) x (C, L, D) -> (I, C, R, L) dot products, as one matrix product."""
    i, r, d = regions.shape
    c, l, _ = words.shape
    s = regions.reshape(i * r, d) @ words.reshape(c * l, d).t()
    return s.view(i, r, c, l).permute(0, 2, 1, 3)


def attended_norm(sq_norm: torch.Tensor) -> torch.Tensor:
    """The l2norm denominator |a| + 1e-8 (SCAN/SGRAF) of attended vectors from their squared norms
    (Gram trick); rounding can leave a squared norm slightly below zero."""
    return sq_norm.clamp(min=0).sqrt() + SCAN_L2NORM_EPS


def text_to_visual_attention(regions: torch.Tensor, words: torch.Tensor, mask: torch.Tensor,
                             smooth: float) -> torch.Tensor:
    """SCAN t-i attention (words attend to regions), as SGRAF uses it: for every pair and word j,
    s_rj = LeakyReLU_0.1(v_r . t_j), normalised over the caption's words (l2), alpha_rj =
    softmax_r(smooth * s_rj), a_j = l2norm(sum_r alpha_rj v_r). Returns (I, C, L, D), contiguous;
    rows of padded words are meaningless and must be masked by the caller.

    Layout: the cosines are one GEMM giving (C, L, I, R), so the softmax runs over the contiguous
    last dim and each image's (C*L, R) weights are a strided view that the batched GEMM reads as
    is; the big (I, C, L, D) result is written once, in the layout the similarity step reads."""
    i, r, d = regions.shape
    c, l, _ = words.shape
    s = (words.reshape(c * l, d) @ regions.reshape(i * r, d).t()).view(c, l, i, r)
    s = F.leaky_relu(s, 0.1) * mask[:, :, None, None]                # padded words: out of the l2 norm
    s = l2norm(at_least_float32(s), dim=1, eps=SCAN_L2NORM_EPS)
    alpha = torch.softmax(smooth * s, dim=3)                         # over regions, (at least) fp32 exponentials
    # |sum_r alpha_r v_r|^2 = alpha^T (V V^T) alpha: each attended vector's norm from the R x R Gram
    # matrix, folded into alpha, so the big tensor needs no normalisation pass of its own.
    regions_wide = at_least_float32(regions)
    gram = regions_wide @ regions_wide.transpose(1, 2)               # (I, R, R)
    sq_norm = (torch.einsum("clir,irs->clis", alpha, gram) * alpha).sum(3)
    alpha = alpha / attended_norm(sq_norm)[..., None]
    attended = torch.bmm(alpha.view(c * l, i, r).transpose(0, 1), regions)  # (I, C*L, D); fp16 under autocast
    return attended.view(i, c, l, d)


def visual_to_text_attention(regions: torch.Tensor, words: torch.Tensor, mask: torch.Tensor,
                             smooth: float) -> torch.Tensor:
    """SCAN i-t attention (regions attend to words): s_rj as above, normalised over regions (l2),
    alpha_rj = softmax over the caption's words of smooth * s_rj, a_r = l2norm(sum_j alpha_rj t_j).
    Returns (I, C, R, D)."""
    s = F.leaky_relu(region_word_cosines(regions, words), 0.1)
    s = l2norm(at_least_float32(s), dim=2, eps=SCAN_L2NORM_EPS)
    logits = (smooth * s).masked_fill(~mask[None, :, None, :], float("-inf"))
    alpha = torch.softmax(logits, dim=3)                             # over words
    words_wide = at_least_float32(words)
    gram = torch.einsum("cld,cmd->clm", words_wide, words_wide)      # as above, per caption
    sq_norm = torch.einsum("icrl,clm,icrm->icr", alpha, gram, alpha)
    alpha = alpha / attended_norm(sq_norm)[..., None]
    return torch.einsum("icrl,cld->icrd", alpha, words)


def square_image_block(pair_elements: Callable[[int], int], budget: int, length: int, regions: int,
                       largest: int = 128) -> int:
    """Images per block such that the block's (images x regions) x (captions x words) product of
    cosines is about square, within the budget: images x captions = budget / pair_elements(length)
    pairs, and images x regions = captions x length. A model whose per-pair intermediates hold no
    embedding dimension (the Gram trick) otherwise gets blocks of 128 images and two or three
    captions, a product too thin for the BLAS (float64 on 2 cores, 4,608 x 1,024 x 57: half the
    rate of x 570)."""
    pairs = budget / max(1, pair_elements(length))
    return int(min(largest, max(1, round(math.sqrt(pairs * length / max(1, regions))))))


def caption_blocks(lengths: torch.Tensor, n_images: int, pair_elements: Callable[[int], int], budget: int,
                   image_block: int | Callable[[int], int]) -> list[tuple[torch.Tensor, int]]:
    """Captions sorted by length (longest first) cut into blocks so that image_block x block size
    x pair_elements(longest length in the block) stays within budget (a block has at least one
    caption); ``image_block`` is a number of images or gives it for the block's longest length.
    Returns (caption indices, longest length) per block."""
    return [(index, longest) for index, longest, _ in sized_caption_blocks(lengths, n_images, pair_elements, budget,
                                                                           image_block)]


def sized_caption_blocks(lengths: torch.Tensor, n_images: int, pair_elements: Callable[[int], int], budget: int,
                         image_block: int | Callable[[int], int]) -> list[tuple[torch.Tensor, int, int]]:
    """``caption_blocks`` with each block's number of images: (caption indices, longest, images)."""
    order = torch.argsort(lengths.cpu(), descending=True, stable=True)
    sorted_lengths = lengths.cpu()[order]
    blocks, start = [], 0
    while start < len(order):
        longest = int(sorted_lengths[start])
        images = max(1, min(image_block(longest) if callable(image_block) else image_block, n_images))
        size = max(1, budget // max(1, images * pair_elements(longest)))
        blocks.append((order[start:start + size], longest, images))
        start += size
    return blocks


@torch.no_grad()
def score_in_blocks(pair_scores: Callable[[RegionFeatures, WordFeatures], torch.Tensor],
                    img: RegionFeatures, cap: WordFeatures | PackedWordFeatures, pair_elements: Callable[[int], int],
                    budget: int | None = None, image_block: int | None = 128) -> torch.Tensor:
    """(N_img, N_cap) scores on the CPU, float32 (float64 for float64 features); ``pair_scores(img_block,
    cap_block)`` gives (I, C) for one block. Captions are grouped by length; results go back to their order.
    ``image_block``: images per block, or None for ``square_image_block``'s."""
    device = img.regions.device
    budget = budget or default_block_elements(device)
    dtype = torch.promote_types(img.regions.dtype, torch.float32)
    out = torch.empty(len(img), len(cap), dtype=dtype, device=device)  # one copy to the host, at the end
    if image_block is None:
        regions = img.regions.shape[1]
        image_block = lambda length: square_image_block(pair_elements, budget, length, regions)   # noqa: E731
    for cap_index, _, images in sized_caption_blocks(cap.lengths, len(img), pair_elements, budget, image_block):
        cap_index = cap_index.to(device)
        cap_block = cap[cap_index]
        for start in range(0, len(img), images):
            out[start:start + images, cap_index] = pair_scores(img[start:start + images], cap_block).to(dtype)
    return out.cpu()
