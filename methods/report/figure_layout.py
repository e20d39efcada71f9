"""A figure as a reader sees it at print size: every text inside the canvas, no two text boxes
over each other, no legend over the data. Measured with matplotlib's renderer extents after a
draw; every figure job saves through ``save_figure``, which prints each problem found as a
``layout:`` line in its log (the tests read those), and a test can ask ``layout_problems``."""
from __future__ import annotations

from itertools import combinations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from methods.io import atomic_path  # noqa: E402

SLACK = 1.0    # pixels a box may cross an edge or another box by (anti-aliasing, rounding)
LAYOUT_PREFIX = "layout:"


def _shown(text: Text) -> bool:
    return text.get_visible() and bool(text.get_text().strip())


def _tick_labels(ax) -> list[Text]:
    """The tick labels drawn: those of ticks within the view limits, of an axis that is shown."""
    out = []
    for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        if not (ax.axison and axis.get_visible()):
            continue
        low, high = sorted(limits)
        out += [label for tick, label in zip(axis.get_majorticklocs(), axis.get_majorticklabels())
                if low - 1e-9 * abs(high - low) <= tick <= high + 1e-9 * abs(high - low) and _shown(label)]
    return out


def text_boxes(fig) -> list[tuple[str, Bbox, bool]]:
    """(what, display box, slanted) of every text of the figure: its own texts, and per axes the
    titles, axis labels, drawn tick labels and texts; a legend is one box. A slanted text's box
    (e.g. 45° tick labels) is the upright rectangle around it, wider than its glyphs."""
    renderer = fig.canvas.get_renderer()
    texts: list[Text] = [t for t in fig.texts if _shown(t)]
    for name in ("_suptitle", "_supxlabel", "_supylabel"):
        t = getattr(fig, name, None)
        if t is not None and _shown(t) and t not in texts:
            texts.append(t)
    boxes = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        labels = [ax.xaxis.label, ax.yaxis.label] if ax.axison else []   # an axis turned off draws none
        own = [ax.title, ax._left_title, ax._right_title, *labels, *ax.texts]
        texts += [t for t in own if _shown(t)] + _tick_labels(ax)
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            boxes.append(("legend", legend.get_window_extent(renderer)))
    legends = [lg for lg in fig.legends if lg.get_visible()]
    boxes += [("legend", lg.get_window_extent(renderer)) for lg in legends]
    return [(repr(t.get_text()[:40]), t.get_window_extent(renderer), t.get_rotation() % 90 != 0) for t in texts] \
        + [(what, box, False) for what, box in boxes]


def _overlap(a: Bbox, b: Bbox) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > SLACK) and (min(a.y1, b.y1) - max(a.y0, b.y0) > SLACK)


def _data_points(ax) -> np.ndarray:
    """The axes' plotted points (lines' vertices, scatter offsets) in display coordinates."""
    points = [line.get_xydata() for line in ax.get_lines() if isinstance(line, Line2D) and line.get_visible()]
    points += [c.get_offsets() for c in ax.collections if isinstance(c, PathCollection) and c.get_visible()]
    points = [np.asarray(p, dtype=float).reshape(-1, 2) for p in points if len(p)]
    return ax.transData.transform(np.concatenate(points)) if points else np.empty((0, 2))


def layout_problems(fig) -> list[str]:
    """What a reader would not see whole, one line each: a text outside the canvas, two text
    boxes over each other, a legend over its axes' data points."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    problems = []
    boxes = text_boxes(fig)
    for what, box, _ in boxes:
        if box.x0 < canvas.x0 - SLACK or box.y0 < canvas.y0 - SLACK or box.x1 > canvas.x1 + SLACK \
                or box.y1 > canvas.y1 + SLACK:
            problems.append(f"{what} reaches outside the canvas")
    for (a, box_a, slanted_a), (b, box_b, slanted_b) in combinations(boxes, 2):
        # two slanted texts side by side (45° tick labels): their upright boxes overlap, their glyphs not
        if _overlap(box_a, box_b) and not (slanted_a and slanted_b):
            problems.append(f"{a} and {b} overlap")
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None or not legend.get_visible():
            continue
        box = legend.get_window_extent(renderer)
        points = _data_points(ax)
        covered = int(((points[:, 0] > box.x0) & (points[:, 0] < box.x1)
                       & (points[:, 1] > box.y0) & (points[:, 1] < box.y1)).sum()) if len(points) else 0
        if covered:
            problems.append(f"a legend covers {covered} data point{'s' if covered > 1 else ''} of its axes "
                            f"({ax.get_title()[:40]!r})")
    return problems


def save_figure(fig, out: str, dpi: int = 120) -> list[str]:
    """Save ``fig`` as PNG atomically, printing each layout problem (``layout_problems``) to the log."""
    problems = layout_problems(fig)
    for problem in problems:
        print(f"{LAYOUT_PREFIX} {out}: {problem}")
    with atomic_path(out, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")
    plt.close(fig)
    return problems
