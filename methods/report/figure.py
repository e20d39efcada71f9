"""Reproduced vs reported scatter over every table cell of a dataset that has both numbers."""
from __future__ import annotations


import matplotlib
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from methods.cli import run_command  # noqa: E402
from methods.report.figure_layout import save_figure  # noqa: E402
from methods.metrics.declarations import METRICS  # noqa: E402

EDGES = {"within": "tab:green", "outside": "tab:red"}   # a judged cell's outline; others their face colour
MARKERS = {"i2t": "o", "t2i": "^"}                       # the retrieval direction


def percent_cells(table_paths: list[str]) -> pd.DataFrame:
    """The cells of the tables that have a reported and a reproduced number (not those of a
    reported-only row), of metrics on the percent scale (R@K)."""
    cells = pd.concat([pd.read_csv(p, dtype=str, keep_default_na=False) for p in table_paths], ignore_index=True)
    percent = cells["metric"].map(lambda m: METRICS.get(m).scale == "percent").astype(bool)
    return cells[(cells["reported"] != "") & (cells["reproduced"] != "") & percent]


def scatter(table_paths: list[str], out: str, dataset: str) -> int:
    """Reproduced against reported R@K, one point per cell: its paper's colour, its direction's
    marker, outlined by its verdict where judged (green within, red outside); a dataset with no
    such cell gets a figure that says so, not empty axes."""
    cells = percent_cells(table_paths)
    if cells.empty:
        fig = plt.figure(figsize=(6.5, 1.4))
        fig.text(0.5, 0.5, f"Reproduced vs reported — {dataset}\nno table cell of this dataset has a reported R@K\n"
                           f"beside a reproduced one: nothing to compare", ha="center", va="center", fontsize=9)
        save_figure(fig, out)
        return 0
    fig, ax = plt.subplots(figsize=(8.0, 5.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    papers = list(dict.fromkeys(cells["paper"]))
    for i, paper in enumerate(papers):
        for direction, marker in MARKERS.items():
            mine = cells[(cells["paper"] == paper) & cells["metric"].str.startswith(direction)]
            if mine.empty:
                continue
            colour = colours[i % len(colours)]
            edges = [EDGES.get(v, colour) for v in mine["verdict"]]   # unjudged: no outline of its own
            ax.scatter(mine["reported"].astype(float), mine["reproduced"].astype(float), s=26, alpha=0.85,
                       color=colour, marker=marker, edgecolors=edges, linewidths=1.2,
                       label=f"{paper}, {direction} ({len(mine)})")
    ax.plot([0, 100], [0, 100], "k--", lw=0.8)
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 100)
    ax.set_aspect("equal")
    ax.set_xlabel("reported R@K (%)")
    ax.set_ylabel("reproduced R@K (%), mean over seeds")
    verdicts = sorted(set(cells["verdict"]))
    judged = "; outlined green: within tolerance, red: outside" if set(verdicts) & set(EDGES) else ""
    ax.set_title(f"Reproduced vs reported — {dataset}\nverdicts: {', '.join(verdicts)}{judged}", fontsize=9)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7, title="paper, direction (cells)",
              title_fontsize=7)   # beside the axes, off the data
    fig.tight_layout()
    save_figure(fig, out)
    return len(cells)


def _arguments(parser) -> None:
    parser.add_argument("--out", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("tables", nargs="+")


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, lambda args: print(f"{scatter(args.tables, args.out, args.dataset)} points"),
                argv, dataset_config=False)


if __name__ == "__main__":
    main()
