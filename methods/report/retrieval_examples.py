"""Qualitative figures from one trained run: what it retrieves and what it attends to.

- ``text_retrieval_figure``: for a few test images, the image and the top-5 captions of its row of
  the score matrix, each marked as a true match (✓, green) or not (✗, red) — MVSA supplement
  Figs. 1-2;
- ``image_retrieval_figure``: for a few captions, the top-5 images of its column, the true image
  outlined green and the others red — Figs. 3-4;
- ``asa_attention_figure``: for a few test images, the adaptive self-attention of a few instance
  candidates (one grid cell each, outlined) over the cells of its scale, drawn over the image,
  one column per scale and candidate — the attended instances of the supplement's Section 3.

Queries are spread evenly over the split (never chosen by how well they do); ranks are the
score matrix's, ties broken by the lower index as in the metrics.
"""
from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.patches import Rectangle

from methods.data.karpathy import CAPTIONS_PER_IMAGE
from methods.errors import HarnessError

TOP_K = 5


def spread_queries(n: int, count: int) -> list[int]:
    """``count`` indices spread evenly over ``range(n)`` (all of them when n <= count)."""
    return sorted({int(i) for i in np.linspace(0, n - 1, num=min(count, n))})


def top_k(scores: np.ndarray, k: int = TOP_K) -> np.ndarray:
    """Indices of the k highest scores, best first; ties go to the lower index (stable sort)."""
    return np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")[:k]


def _title(spec: dict, width: int) -> str:
    note = " — synthetic data, not comparable with the paper" if spec["dataset_kind"] == "synthetic" else ""
    ran = next((r.get("ran") for r in spec["rows"] if r["id"] == spec["row"]), None)
    text = textwrap.fill(f"{spec['title']} ({spec['dataset']}, row {spec['row']}, run {spec['run'].rsplit('/', 1)[-1]}{note})", width)
    return text + ("\n" + textwrap.fill(f"ran: {ran}", width) if ran else "")


def _outline(ax, colour: str, width: float = 5) -> None:
    for side in ax.spines.values():
        side.set_edgecolor(colour)
        side.set_linewidth(width)
    ax.set_xticks([])
    ax.set_yticks([])


def text_retrieval_figure(spec: dict, sims: np.ndarray, captions: list[str], images, n_queries: int = 4):
    """``images[i]``: image i of the split as an (H, W, 3) array."""
    queries = spread_queries(sims.shape[0], n_queries)
    fig, axes = plt.subplots(len(queries), 2, figsize=(12, 2.4 * len(queries)), squeeze=False,
                             gridspec_kw={"width_ratios": [1, 4]})
    for row, image in enumerate(queries):
        axes[row][0].imshow(images[image])
        axes[row][0].set_title(f"query: test image {image}", fontsize=8)
        axes[row][0].axis("off")
        ax = axes[row][1]
        ax.axis("off")
        for rank, cap in enumerate(top_k(sims[image])):
            correct = cap // CAPTIONS_PER_IMAGE == image
            mark = "✓" if correct else "✗"
            text = textwrap.shorten(f"{rank + 1}. {mark} {captions[cap]}", 110)
            ax.text(0.0, 1 - (rank + 0.5) / TOP_K, text, fontsize=9, va="center",
                    color="tab:green" if correct else "tab:red", transform=ax.transAxes)
    fig.suptitle(_title(spec, 130), fontsize=9)
    return fig


def image_retrieval_figure(spec: dict, sims: np.ndarray, captions: list[str], images, n_queries: int = 4):
    queries = spread_queries(sims.shape[1], n_queries)
    fig, axes = plt.subplots(len(queries), TOP_K, figsize=(2.3 * TOP_K, 2.7 * len(queries)), squeeze=False)
    for row, cap in enumerate(queries):
        truth = cap // CAPTIONS_PER_IMAGE
        for rank, image in enumerate(top_k(sims[:, cap])):
            ax = axes[row][rank]
            ax.imshow(images[image])
            _outline(ax, "tab:green" if image == truth else "tab:red")
            ax.set_xlabel(f"{rank + 1}: image {image}", fontsize=8)
        axes[row][0].set_title(textwrap.shorten(f"query {cap}: {captions[cap]}", 100), fontsize=9, loc="left")
    fig.suptitle(_title(spec, 110), fontsize=9)
    return fig


def attended_candidates(attention: torch.Tensor, count: int) -> list[int]:
    """``count`` candidates of a scale to show: those attended to most on average (column means of
    the (N, N) attention), one per cell, highest first."""
    received = attention.mean(dim=0)
    return torch.argsort(received, descending=True, stable=True)[:count].tolist()


def asa_attention_figure(spec: dict, attention: dict[str, list[torch.Tensor]], grid_shapes: dict[str, tuple[int, int]],
                         images, image_ids: list[int], candidates_per_scale: int = 2):
    """``attention[scale][k]``: the (N, N) attention of image ``image_ids[k]`` at that scale."""
    if not attention:
        raise HarnessError(f"figure {spec['figure']}: row '{spec['row']}' has no adaptive self-attention (asa.blocks 0)")
    scales = list(attention)
    columns = [(s, c) for s in scales for c in range(candidates_per_scale)]
    fig, axes = plt.subplots(len(image_ids), len(columns), figsize=(2.6 * len(columns), 2.7 * len(image_ids)),
                             squeeze=False)
    for row, image in enumerate(image_ids):
        picture = images[image]
        height, width = picture.shape[:2]
        for scale in scales:
            attn = attention[scale][row]
            gh, gw = grid_shapes[scale]
            for c, candidate in enumerate(attended_candidates(attn, candidates_per_scale)):
                ax = axes[row][columns.index((scale, c))]
                ax.imshow(picture)
                heat = attn[candidate].reshape(gh, gw).numpy()
                ax.imshow(heat, cmap="jet", alpha=0.5, extent=(0, width, height, 0), interpolation="nearest")
                cy, cx = divmod(candidate, gw)
                ax.add_patch(Rectangle((cx * width / gw, cy * height / gh), width / gw, height / gh,
                                       fill=False, edgecolor="white", linewidth=2))
                ax.set_xticks([])
                ax.set_yticks([])
                ax.set_title(f"image {image}, {scale} ({gh}x{gw}), cell {candidate}", fontsize=7)
    fig.suptitle(_title(spec, 20 * len(columns)) + "\nwhite box: the candidate; colour: its attention over the "
                 "scale's cells", fontsize=8)
    return fig
