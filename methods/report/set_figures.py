"""Figures of the set-embedding paper (Kim, Kim, Kwak, CVPR 2023).

- ``setting_panels``: RSUM against one varied setting per panel (Table 4: K, T, alpha), the
  reproduced mean over seeds with its std and the single seeds, and the paper's values on a
  second axis (on synthetic data the two scales differ).
- ``element_projection``: the test set elements of a few trained models projected to 2-D by
  PCA (each model's image and text elements together), coloured by slot, images as circles and
  texts as crosses (appendix Figure A1 uses t-SNE; PCA keeps the figure deterministic and free of
  a tuning parameter). MIL leaves slots untrained (tight same-slot clusters), MP collapses a set
  (its elements overlap), smooth-Chamfer spreads each set's elements.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from methods.job_records import FigureRowSpec, RowAggregate


def setting_panels(keys: list[str], rows: list[FigureRowSpec], aggregates: dict[str, RowAggregate], protocol: str, labels: dict[str, str]):
    """One panel per key; a row is drawn in the panel of the key it overrides (a row without
    overrides, the default, in every panel) at its value of that key."""
    # room beside each panel for its legend, and under them for the notes on what ran
    fig, axes = plt.subplots(1, len(keys), figsize=(6.2 * len(keys) + 0.6, 5.2), squeeze=False)
    for ax, key in zip(axes[0], keys):
        points = sorted(((float(r.details["setting"][key]), r) for r in rows if set(r.details["overrides"]) <= {key}),
                        key=lambda p: p[0])
        xs = [x for x, _ in points]
        stats = [aggregates[r.id].protocols[protocol]["rsum"] for _, r in points]
        ax.errorbar(xs, [s["mean"] for s in stats], yerr=[s["std"] for s in stats], marker="o", capsize=3,
                    label="reproduced (mean ± std)")
        for x, s in zip(xs, stats):
            ax.scatter(np.full(len(s["values"]), x), s["values"], s=8, color="black", zorder=3)
        reported = [(x, r.details["reported"].get(protocol, {}).get("metrics", {}).get("rsum")) for x, r in points]
        reported = [(x, v) for x, v in reported if v is not None]
        if reported:
            twin = ax.twinx()
            twin.plot(*zip(*reported), marker="s", linestyle="--", color="tab:red", label="paper")
            twin.set_ylabel("paper RSUM", color="tab:red", fontsize=8)
            twin.tick_params(axis="y", labelcolor="tab:red", labelsize=8)
        if xs and max(xs) / max(min(xs), 1e-9) >= 16:
            ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.set_xlabel(labels.get(key, key))
        ax.set_ylabel(f"RSUM ({protocol})")
        handles, names = ax.get_legend_handles_labels()
        if reported:
            more = twin.get_legend_handles_labels()
            handles, names = handles + more[0], names + more[1]
        # beside the panel (past the paper's axis where it has one), off the data
        ax.legend(handles, names, fontsize=7, loc="upper left", bbox_to_anchor=(1.25 if reported else 1.02, 1.0))
    return fig


def pca_2d(points: np.ndarray) -> np.ndarray:
    """(n, d) -> (n, 2): the first two principal components (SVD of the centred points)."""
    centred = points - points.mean(axis=0, keepdims=True)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return centred @ vt[:2].T


def element_projection(models: dict[str, tuple[np.ndarray, np.ndarray]]):
    """``models``: label -> (image sets (N, K, D), text sets (M, K, D)), unit elements."""
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models) + 0.6, 4.2), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (label, (img, txt)) in zip(axes[0], models.items()):
        k = img.shape[1]
        flat = pca_2d(np.concatenate([img.reshape(-1, img.shape[-1]), txt.reshape(-1, txt.shape[-1])]))
        image_xy, text_xy = flat[:img.shape[0] * k], flat[img.shape[0] * k:]
        for slot in range(k):
            colour = colours[slot % len(colours)]
            ax.scatter(*image_xy[slot::k].T, s=9, color=colour, marker="o", alpha=0.6,
                       label=f"slot {slot + 1}")
            ax.scatter(*text_xy[slot::k].T, s=9, color=colour, marker="x", alpha=0.4)
        ax.set_title(label, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    # one legend for every panel (the slots' colours are the same), beside the last one, off the data
    axes[0][-1].legend(fontsize=7, markerscale=1.5, title="o image  x text", title_fontsize=7,
                       loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return fig
