"""Reproduced vs reported scatter over every table cell of a dataset that has both numbers."""
from __future__ import annotations


import matplotlib
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from methods.cli import run_command  # noqa: E402
from methods.io import atomic_path  # noqa: E402
from methods.metrics.declarations import METRICS  # noqa: E402

COLOURS = {"within": "tab:green", "outside": "tab:red"}


def percent_cells(table_paths: list[str]) -> pd.DataFrame:
    """The cells of the tables that have a reported and a reproduced number (not those of a
    reported-only row), of metrics on the percent scale (R@K)."""
    cells = pd.concat([pd.read_csv(p, dtype=str, keep_default_na=False) for p in table_paths], ignore_index=True)
    percent = cells["metric"].map(lambda m: METRICS.get(m).scale == "percent").astype(bool)
    return cells[(cells["reported"] != "") & (cells["reproduced"] != "") & percent]


def scatter(table_paths: list[str], out: str, dataset: str) -> int:
    cells = percent_cells(table_paths)
    points = list(zip(cells["reported"].astype(float), cells["reproduced"].astype(float), cells["verdict"],
                      cells["row"]))
    fig, ax = plt.subplots(figsize=(5.5, 5.5))
    for verdict in sorted({p[2] for p in points}):
        xs = [p[0] for p in points if p[2] == verdict]
        ys = [p[1] for p in points if p[2] == verdict]
        ax.scatter(xs, ys, s=22, alpha=0.8, label=f"{verdict} ({len(xs)})", color=COLOURS.get(verdict, "tab:gray"))
    ax.plot([0, 100], [0, 100], "k--", lw=0.8)
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 100)
    ax.set_xlabel("reported R@K (%)")
    ax.set_ylabel("reproduced R@K (%), mean over seeds")
    ax.set_title(f"Reproduced vs reported — {dataset}")
    if points:
        ax.legend(loc="upper left", fontsize=8)
    else:
        ax.text(50, 50, "no reported numbers for these tables", ha="center")
    fig.tight_layout()
    with atomic_path(out, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return len(points)


def _arguments(parser) -> None:
    parser.add_argument("--out", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("tables", nargs="+")


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, lambda args: print(f"{scatter(args.tables, args.out, args.dataset)} points"),
                argv, dataset_config=False)


if __name__ == "__main__":
    main()
