"""Qualitative figures from one trained run: what it retrieves and what it attends to.

- ``text_retrieval_figure``: for a few test images, the image and the top-5 captions of its row of
  the score matrix, each marked as a true match (✓, green) or not (✗, red) — MVSA supplement
  Figs. 1-2;
- ``image_retrieval_figure``: for a few captions, the top-5 images of its column, the true images
  outlined green and the others red — Figs. 3-4;
- ``asa_attention_figure``: for a few test images, the adaptive self-attention of a few instance
  candidates (one grid cell each, outlined) over the cells of its scale, drawn over the image,
  one column per scale and candidate — the attended instances of the supplement's Section 3.

A true match is what the dataset's relevance says (``Matches``), named on the figure: on real
caption data (Karpathy) a caption matches only its own image; on synthetic data the generator's
extended positives, where another image's caption (often the same sentence) can describe the
query image exactly; on label-wise data a shared label.

Queries are spread evenly over the split (never chosen by how well they do); ranks are the
score matrix's, ties broken by the lower index as in the metrics.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.patches import Rectangle

from methods.errors import HarnessError
from methods.job_records import FigureSpec
from methods.report.wording import incomparable_note

TOP_K = 5


def spread_queries(n: int, count: int) -> list[int]:
    """``count`` indices spread evenly over ``range(n)`` (all of them when n <= count)."""
    return sorted({int(i) for i in np.linspace(0, n - 1, num=min(count, n))})


def top_k(scores: np.ndarray, k: int = TOP_K) -> np.ndarray:
    """Indices of the k highest scores, best first; ties go to the lower index (stable sort)."""
    return np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")[:k]


def _title(spec: FigureSpec, width: int, legend: str = "") -> str:
    note = incomparable_note(spec.dataset_kind)
    ran = next((r.ran for r in spec.rows if r.id == spec.row), None)
    text = textwrap.fill(f"{spec.title} ({spec.dataset}, row {spec.row}, run {spec.run.rsplit('/', 1)[-1]}{note})", width)
    return (text + ("\n" + textwrap.fill(f"ran: {ran}", width) if ran else "")
            + ("\n" + textwrap.fill(legend, width) if legend else ""))


def _outline(ax, colour: str, width: float = 5) -> None:
    for side in ax.spines.values():
        side.set_edgecolor(colour)
        side.set_linewidth(width)
    ax.set_xticks([])
    ax.set_yticks([])


@dataclass(frozen=True)
class ItemLabels:
    """Labels of a split's images and texts (label-wise datasets): a retrieved item is a match when
    it shares a label with the query (the label-wise protocols' relevance), and each item is shown
    with its label names (Yang et al., IJCAI 2021, supplement Figure 2)."""
    image_labels: np.ndarray   # (N, C) multi-hot
    text_labels: np.ndarray    # (M, C)
    names: list[str]

    def of(self, row: np.ndarray) -> str:
        # a grouped name ("shape:circle", the synthetic tags') shows its last part
        return ", ".join(self.names[c].rsplit(":", 1)[-1] for c in np.flatnonzero(row)) or "none"


@dataclass(frozen=True)
class Matches:
    """Which (image, text) pairs of a split the figures mark as true matches, and how they say so.
    With ``labels``: a shared label (label-wise protocols); with ``positives``, the (N, M) extended
    positives: every image a caption truly describes (the synthetic generator's predicates); with
    neither, Karpathy's: a caption matches only its own image (caption k of image k // texts_per_image)."""
    texts_per_image: int
    positives: np.ndarray | None = None
    labels: ItemLabels | None = None

    def __post_init__(self) -> None:
        if self.positives is not None and self.labels is not None:
            raise ValueError("a match is either a shared label or an extended positive, not both")

    def own(self, image: int, text: int) -> bool:
        return text // self.texts_per_image == image

    def __call__(self, image: int, text: int) -> bool:
        if self.labels is not None:
            return bool(self.labels.image_labels[image] @ self.labels.text_labels[text])
        if self.positives is not None:
            return bool(self.positives[image, text])
        return self.own(image, text)

    def legend(self, direction: str) -> str:
        """What the marks mean; ``direction``: 'text' (✓/✗ on captions) or 'image' (outlines)."""
        if self.labels is not None:
            what = "shares a label with the query"
        elif self.positives is not None:
            what = "the caption describes the image (generator's predicates: every image it is true of)"
        elif direction == "text":
            what = f"one of the image's own {self.texts_per_image} captions (Karpathy split; no other caption counts)"
        else:
            what = "the caption's own image (Karpathy split; no other image counts)"
        return f"✓: {what}; ✗: otherwise" if direction == "text" else f"green: {what}; red: otherwise"


def text_retrieval_figure(spec: FigureSpec, sims: np.ndarray, captions: list[str], texts_per_image: int, images,
                          n_queries: int = 4, labels: ItemLabels | None = None, positives: np.ndarray | None = None):
    """``images[i]``: image i of the split as an (H, W, 3) array; caption k is of image k // texts_per_image.
    With ``labels`` a text matches when it shares a label with the image, and its labels are shown;
    with ``positives`` (N, M) when it describes the image (``Matches``)."""
    matches = Matches(texts_per_image, positives, labels)
    queries = spread_queries(sims.shape[0], n_queries)
    fig, axes = plt.subplots(len(queries), 2, figsize=(12, 2.4 * len(queries)), squeeze=False,
                             gridspec_kw={"width_ratios": [1, 4]})
    for row, image in enumerate(queries):
        axes[row][0].imshow(images[image])
        truth = "" if labels is None else "\n" + textwrap.fill(f"labels: {labels.of(labels.image_labels[image])}", 36)
        axes[row][0].set_title(f"query: test image {image}{truth}", fontsize=8)
        axes[row][0].axis("off")
        ax = axes[row][1]
        ax.axis("off")
        for rank, cap in enumerate(top_k(sims[image])):
            correct, shown = matches(image, cap), captions[cap]
            if labels is not None:
                shown = f"[labels: {labels.of(labels.text_labels[cap])}] {captions[cap] or '(no tag)'}"
            elif positives is not None and correct and not matches.own(image, cap):
                shown += f" (caption of image {cap // texts_per_image})"   # why another image's caption is ✓
            mark = "✓" if correct else "✗"
            text = textwrap.shorten(f"{rank + 1}. {mark} {shown}", 130)
            ax.text(0.0, 1 - (rank + 0.5) / TOP_K, text, fontsize=9, va="center",
                    color="tab:green" if correct else "tab:red", transform=ax.transAxes)
    fig.suptitle(_title(spec, 130, matches.legend("text")), fontsize=9)
    return fig


def image_retrieval_figure(spec: FigureSpec, sims: np.ndarray, captions: list[str], texts_per_image: int, images,
                           n_queries: int = 4, labels: ItemLabels | None = None, top: int = TOP_K,
                           positives: np.ndarray | None = None):
    """The ``top`` images of a few text queries; the text's own image outlined green (with
    ``labels``: every image sharing a label with the text; with ``positives``: every image it
    describes), the others red."""
    matches = Matches(texts_per_image, positives, labels)
    queries = spread_queries(sims.shape[1], n_queries)
    row_height = 2.9 + (0.5 if labels is not None else 0)   # room for the images' label lines
    fig, axes = plt.subplots(len(queries), top, figsize=(2.3 * top + 0.6, row_height * len(queries) + 0.6), squeeze=False)
    for row, cap in enumerate(queries):
        for rank, image in enumerate(top_k(sims[:, cap], top)):
            ax = axes[row][rank]
            ax.imshow(images[image])
            _outline(ax, "tab:green" if matches(image, cap) else "tab:red")
            shown = "" if labels is None else "\n" + textwrap.fill(labels.of(labels.image_labels[image]), 30)
            if positives is not None and matches.own(image, cap):
                shown = " (the caption's own)"   # the other green ones are described by it, not its source
            ax.set_xlabel(f"{rank + 1}: image {image}{shown}", fontsize=8)
        query = captions[cap] or "(no tag)"
        if labels is not None:
            query = f"[labels: {labels.of(labels.text_labels[cap])}] {query}"
        # centred over the row, as the middle column's title: tight_layout fits each column around its
        # title's middle, so a left title of the first column would shrink that column and every image
        axes[row][top // 2].set_title(textwrap.shorten(f"query {cap}: {query}", 40 * top), fontsize=9)
    fig.suptitle(_title(spec, 110, matches.legend("image")), fontsize=9)
    return fig


def attended_candidates(attention: torch.Tensor, count: int) -> list[int]:
    """``count`` candidates of a scale to show: those attended to most on average (column means of
    the (N, N) attention), one per cell, highest first."""
    received = attention.mean(dim=0)
    return torch.argsort(received, descending=True, stable=True)[:count].tolist()


def asa_attention_figure(spec: FigureSpec, attention: dict[str, list[torch.Tensor]], grid_shapes: dict[str, tuple[int, int]],
                         images, image_ids: list[int], candidates_per_scale: int = 2):
    """``attention[scale][k]``: the (N, N) attention of image ``image_ids[k]`` at that scale."""
    if not attention:
        raise HarnessError(f"figure {spec.figure}: row '{spec.row}' has no adaptive self-attention (asa.blocks 0)")
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
