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

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from methods.models.layers import l2norm

# Elements of the per-pair intermediates of one block (pairs x per-pair elements). On a GPU, large blocks
# (2**28 fp32 = 1 GiB) keep the kernels busy; on a CPU, blocks that stay near the caches are
# faster (measured on 2 cores: 2**22 is 5x faster than 2**28 for the synthetic preset).
BLOCK_ELEMENTS = {"cuda": 2 ** 28, "cpu": 2 ** 22}


def default_block_elements(device: torch.device) -> int:
    return BLOCK_ELEMENTS.get(device.type, BLOCK_ELEMENTS["cpu"])


@dataclass
class RegionFeatures:
    regions: torch.Tensor   # (N, R, D)
    glob: torch.Tensor      # (N, D)

    def __len__(self) -> int:
        return self.regions.shape[0]

    def __getitem__(self, index) -> "RegionFeatures":
        return RegionFeatures(self.regions[index], self.glob[index])

    def float(self) -> "RegionFeatures":
        return RegionFeatures(self.regions.float(), self.glob.float())

    def to(self, device) -> "RegionFeatures":
        return RegionFeatures(self.regions.to(device), self.glob.to(device))

    @staticmethod
    def cat(parts: list["RegionFeatures"]) -> "RegionFeatures":
        return RegionFeatures(torch.cat([p.regions for p in parts]), torch.cat([p.glob for p in parts]))


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

    def float(self) -> "WordFeatures":
        return WordFeatures(self.words.float(), self.lengths, self.glob.float())

    def to(self, device) -> "WordFeatures":
        return WordFeatures(self.words.to(device), self.lengths.to(device), self.glob.to(device))

    @staticmethod
    def cat(parts: list["WordFeatures"]) -> "WordFeatures":
        longest = max(p.words.shape[1] for p in parts)
        words = torch.cat([F.pad(p.words, (0, 0, 0, longest - p.words.shape[1])) for p in parts])
        return WordFeatures(words, torch.cat([p.lengths for p in parts]), torch.cat([p.glob for p in parts]))


def region_word_cosines(regions: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
    """(I, R, D) x (C, L, D) -> (I, C, R, L) dot products, as one matrix product."""
    i, r, d = regions.shape
    c, l, _ = words.shape
    s = regions.reshape(i * r, d) @ words.reshape(c * l, d).t()
    return s.view(i, r, c, l).permute(0, 2, 1, 3)


def text_to_visual_attention(regions: torch.Tensor, words: torch.Tensor, mask: torch.Tensor,
                             smooth: float) -> torch.Tensor:
    """SCAN t-i attention (words attend to regions), as SGRAF uses it: for every pair and word j,
    s_rj = LeakyReLU_0.1(v_r . t_j), normalised over the caption's words (l2), alpha_rj =
    softmax_r(smooth * s_rj), a_j = l2norm(sum_r alpha_rj v_r). Returns (I, C, L, D); rows of
    padded words are meaningless and must be masked by the caller."""
    s = F.leaky_relu(region_word_cosines(regions, words), 0.1)
    s = s * mask[None, :, None, :]                                   # padded words: out of the l2 norm
    s = l2norm(s.float(), dim=3).to(s.dtype)
    alpha = torch.softmax(smooth * s.float(), dim=2).to(regions.dtype)  # over regions, fp32 exponentials
    attended = torch.einsum("icrl,ird->icld", alpha, regions)
    return l2norm(attended, dim=-1)


def visual_to_text_attention(regions: torch.Tensor, words: torch.Tensor, mask: torch.Tensor,
                             smooth: float) -> torch.Tensor:
    """SCAN i-t attention (regions attend to words): s_rj as above, normalised over regions (l2),
    alpha_rj = softmax over the caption's words of smooth * s_rj, a_r = l2norm(sum_j alpha_rj t_j).
    Returns (I, C, R, D)."""
    s = F.leaky_relu(region_word_cosines(regions, words), 0.1)
    s = l2norm(s.float(), dim=2)
    logits = (smooth * s).masked_fill(~mask[None, :, None, :], float("-inf"))
    alpha = torch.softmax(logits, dim=3).to(words.dtype)            # over words
    attended = torch.einsum("icrl,cld->icrd", alpha, words)
    return l2norm(attended, dim=-1)


def caption_blocks(lengths: torch.Tensor, n_images: int, pair_elements: Callable[[int], int], budget: int,
                   image_block: int) -> list[tuple[torch.Tensor, int]]:
    """Captions sorted by length (longest first) cut into blocks so that image_block x block size
    x pair_elements(longest length in the block) stays within budget (a block has at least one
    caption). Returns (caption indices, longest length) per block."""
    order = torch.argsort(lengths.cpu(), descending=True, stable=True)
    sorted_lengths = lengths.cpu()[order]
    images = min(image_block, n_images)
    blocks, start = [], 0
    while start < len(order):
        longest = int(sorted_lengths[start])
        size = max(1, budget // max(1, images * pair_elements(longest)))
        blocks.append((order[start:start + size], longest))
        start += size
    return blocks


@torch.no_grad()
def score_in_blocks(pair_scores: Callable[[RegionFeatures, WordFeatures], torch.Tensor],
                    img: RegionFeatures, cap: WordFeatures, pair_elements: Callable[[int], int],
                    budget: int | None = None, image_block: int = 128) -> torch.Tensor:
    """(N_img, N_cap) float32 scores on the CPU; ``pair_scores(img_block, cap_block)`` gives
    (I, C) for one block. Captions are grouped by length; results go back to their order."""
    budget = budget or default_block_elements(img.regions.device)
    out = torch.empty(len(img), len(cap), dtype=torch.float32)
    for cap_index, _ in caption_blocks(cap.lengths, len(img), pair_elements, budget, image_block):
        cap_block = cap[cap_index.to(cap.words.device)]
        for start in range(0, len(img), image_block):
            block = pair_scores(img[start:start + image_block], cap_block)
            out[start:start + image_block, cap_index] = block.float().cpu()
    return out
