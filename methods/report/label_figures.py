"""Figures of the label-wise paper (Yang et al., IJCAI 2021, supplement).

- ``training_curves``: per-epoch validation curves of a few rows, one panel for classification
  (micro-F1 of each modality's label prediction) and one for retrieval (NDCG@500 per direction);
  the first row solid, the others dotted, one colour per quantity (Figure 1: consistency+ solid,
  consistency- dotted). The paper plots classification error; micro-F1 is what the harness
  measures of a label prediction (Table 1's metric), so the panel shows it, higher is better.
- ``ndcg_against_weight``: NDCG@500 of rows that differ in one loss term's weight (Figure 3:
  lambda of the masked-prediction term), T2I solid and I2T dotted, mean over seeds with the seed
  spread and the single seeds; the weights sit at evenly spaced positions labelled with their
  values (0 and 0.001 ... 10 share no log axis).
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

CLASSIFICATION = {"image_micro_f1": ("image", "tab:purple"), "text_micro_f1": ("text", "tab:blue")}
RETRIEVAL = {"i2t_ndcg500": ("I2T", "tab:green"), "t2i_ndcg500": ("T2I", "tab:olive")}
LINE_STYLES = ("-", ":", "--", "-.")


def training_curves(curves: dict[str, list[list[dict]]]):
    """``curves``: row id -> per seed, the validation metrics of each epoch (``val`` of the
    training log's history). Each quantity is the mean over seeds at an epoch (the shortest
    run's epochs)."""
    fig, axes = plt.subplots(1, 2, figsize=(11.0, 4.8), squeeze=False)
    for ax, quantities, ylabel in ((axes[0][0], CLASSIFICATION, "micro-F1 of label prediction"),
                                   (axes[0][1], RETRIEVAL, "NDCG@500 (%)")):
        for style, (label, seeds) in zip(LINE_STYLES, curves.items()):
            length = min(len(epochs) for epochs in seeds)
            x = np.arange(1, length + 1)
            for metric, (name, colour) in quantities.items():
                values = np.array([[epoch[metric] for epoch in epochs[:length]] for epochs in seeds])
                ax.plot(x, values.mean(axis=0), linestyle=style, color=colour, marker="o", markersize=3,
                        label=f"{name}: {label}")
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        # under the panel, not over the curves
        ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.22))
    return fig


def ndcg_against_weight(points: list[tuple[float, dict]], term: str, protocol: str):
    """``points``: (weight of ``term``, the row's aggregate under ``protocol``: metric -> {mean,
    std, values}) per row, any order."""
    points = sorted(points, key=lambda p: p[0])
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    x = np.arange(len(points))
    for metric, style in (("t2i_ndcg500", "-"), ("i2t_ndcg500", ":")):
        stats = [cell[metric] for _, cell in points]
        ax.errorbar(x, [s["mean"] for s in stats], yerr=[s["std"] for s in stats], linestyle=style, marker="o",
                    capsize=3, label=f"{metric[:3].upper()} (mean ± std over seeds)")
        for xi, s in zip(x, stats):
            ax.scatter(np.full(len(s["values"]), xi), s["values"], s=8, color="black", zorder=3)
    ax.set_xticks(x, [f"{w:g}" for w, _ in points])
    ax.set_xlabel(f"weight of the {term} term (lambda)")
    ax.set_ylabel(f"NDCG@500 (%, {protocol})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=2)   # under the axes, off the data
    return fig
