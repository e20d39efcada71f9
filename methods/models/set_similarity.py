"""Similarities of two embedding sets, each a registered function ``(N, K, D) x (M, L, D) -> (N, M)``
of l2-normalised elements (Kim, Kim, Kwak, CVPR 2023, Section 3.3; kdwonn/DivE similarity.py).

With c(x, y) the cosine of two elements and X, Y the sets of one (image, caption) pair:

- ``smooth_chamfer`` (temperature alpha): [ 1/(alpha|X|) sum_x log sum_y e^(alpha c)
  + 1/(alpha|Y|) sum_y log sum_x e^(alpha c) ] / 2, the paper's Eq. 6 with DivE's
  ``--denominator 2``; it tends to ``chamfer`` as alpha -> infinity;
- ``chamfer``: [ 1/|X| sum_x max_y c + 1/|Y| sum_y max_x c ] / 2;
- ``mil``: max over the |X| x |Y| element pairs (PVSE's MIL similarity);
- ``mp``: mean over the element pairs of sigmoid(a c + b) (PCME's match probability).

All pairs of a block come from one matrix product of the flattened sets, viewed as
(N, K, M, L); a score matrix is computed in blocks of image sets (``set_score_matrix``) whose
size bounds the (N_block, K, M, L) intermediates, with no Python loop over items.
"""
from __future__ import annotations

from typing import Callable

import torch

from methods.registry import Registry

SetSimilarity = Callable[..., torch.Tensor]
SET_SIMILARITIES: Registry[SetSimilarity] = Registry("set similarity")

# e^(alpha c) with |c| <= 1 stays within float32's normal range (e^±80) up to this alpha, so the
# two log-sum-exps can share one exp, as the public code computes them; above it, torch.logsumexp.
DIRECT_EXP_MAX_ALPHA = 80.0


def element_cosines(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(N, K, D) x (M, L, D) unit elements -> (N, K, M, L) cosines, from one matrix product."""
    n, k, d = x.shape
    m, l, _ = y.shape
    return (x.reshape(n * k, d) @ y.reshape(m * l, d).t()).view(n, k, m, l)


@SET_SIMILARITIES.register("smooth_chamfer")
def smooth_chamfer_similarity(x: torch.Tensor, y: torch.Tensor, alpha: float = 16.0) -> torch.Tensor:
    c = element_cosines(x, y)
    k, l = x.shape[1], y.shape[1]
    if alpha <= DIRECT_EXP_MAX_ALPHA:
        e = torch.exp(alpha * c)
        x_to_y = torch.log(e.sum(dim=3)).sum(dim=1)          # (N, M): each x softly matched in Y
        y_to_x = torch.log(e.sum(dim=1)).sum(dim=2)
    else:
        scaled = alpha * c
        x_to_y = torch.logsumexp(scaled, dim=3).sum(dim=1)
        y_to_x = torch.logsumexp(scaled, dim=1).sum(dim=2)
    return (x_to_y / (alpha * k) + y_to_x / (alpha * l)) / 2


@SET_SIMILARITIES.register("chamfer")
def chamfer_similarity(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    c = element_cosines(x, y)
    return (c.amax(dim=3).mean(dim=1) + c.amax(dim=1).mean(dim=2)) / 2


@SET_SIMILARITIES.register("mil")
def mil_similarity(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return element_cosines(x, y).amax(dim=(1, 3))


@SET_SIMILARITIES.register("mp")
def match_probability_similarity(x: torch.Tensor, y: torch.Tensor, scale: float = 1.0,
                                 shift: float = 0.0) -> torch.Tensor:
    return torch.sigmoid(scale * element_cosines(x, y) + shift).mean(dim=(1, 3))


def set_similarity(name: str, params: dict) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The registered set similarity ``name`` with its parameters bound (``alpha``; ``scale``/``shift``)."""
    fn = SET_SIMILARITIES.get(name)
    return lambda x, y: fn(x, y, **params)


def set_score_matrix(similarity: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], img: torch.Tensor,
                     txt: torch.Tensor, block_elements: int) -> torch.Tensor:
    """(N_img, N_txt) scores on the CPU, in blocks of image sets holding at most ``block_elements``
    element cosines (blocks of text sets too when one image set alone exceeds it)."""
    n, k = img.shape[:2]
    m, l = txt.shape[:2]
    if n == 0 or m == 0:
        return torch.zeros(n, m, dtype=torch.promote_types(img.dtype, torch.float32))
    per_image = k * m * l
    if per_image <= block_elements:
        step = max(1, block_elements // per_image)
        return torch.cat([similarity(img[s:s + step], txt).cpu() for s in range(0, n, step)])
    text_step = max(1, block_elements // (k * l))
    return torch.cat([torch.cat([similarity(img[i:i + 1], txt[s:s + text_step]).cpu()
                                 for s in range(0, m, text_step)], dim=1) for i in range(n)])
