"""The claims of a paper on a dataset as a figure: per claim and protocol, our difference
(left − right, seed mean) with its bootstrap interval, coloured by verdict; the paper's own
difference as a marker where its reported numbers give one; the claimed margin and zero as lines."""
from __future__ import annotations

import matplotlib
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from methods.cli import run_command  # noqa: E402
from methods.errors import HarnessError  # noqa: E402
from methods.report.figure_layout import save_figure  # noqa: E402

COLOURS = {"supported": "tab:green", "contradicted": "tab:red", "inconclusive": "tab:gray", "undetermined": "tab:purple"}


def plot_claims(claims_csv: str, out: str) -> int:
    frame = pd.read_csv(claims_csv, keep_default_na=True)
    if frame.empty:
        raise HarnessError(f"{claims_csv} has no claim to plot")
    n = len(frame)
    fig, ax = plt.subplots(figsize=(10.0, 1.8 + 0.45 * n))
    ys = list(range(n))[::-1]   # first claim on top
    for y, r in zip(ys, frame.itertuples()):
        colour = next(c for v, c in COLOURS.items() if r.verdict.startswith(v))   # "undetermined: x did not train"
        # a BCa interval need not contain the estimate: the bars are the interval's ends, not lengths
        ax.errorbar(r.reproduced_difference, y, fmt="o", color=colour, ms=5)
        ax.hlines(y, r.ci_low, r.ci_high, color=colour, lw=1.5)
        ax.plot([r.ci_low, r.ci_high], [y, y], "|", color=colour, ms=8)
        if not pd.isna(r.reported_difference):
            ax.plot(r.reported_difference, y, marker="D", mfc="none", mec="black", ms=7, ls="none")
        if r.margin:
            ax.plot([r.margin, r.margin], [y - 0.35, y + 0.35], color="tab:orange", lw=1.2)
    ax.axvline(0.0, color="black", lw=0.8)
    ax.set_yticks(ys, [f"{r.claim} [{r.metric}, {r.protocol}]" for r in frame.itertuples()], fontsize=8)
    ax.set_xlabel("difference, left − right, in the metric's units")
    first = frame.iloc[0]
    synthetic = first["data"] == "synthetic"
    ax.set_title(f"Claims of {first['paper']} on {first['dataset']}{' (synthetic data)' if synthetic else ''}\n"
                 f"ours: seed mean with its {first['confidence']:.0%} {first['interval_method']} interval over test "
                 f"images", fontsize=9)
    handles = [plt.Line2D([], [], color=c, marker="o", ls="none", label=v) for v, c in COLOURS.items()]
    handles.append(plt.Line2D([], [], marker="D", mfc="none", mec="black", ls="none",
                              label=f"paper's difference{f' ({first.reported_dataset})' if synthetic else ''}"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))   # beside, off the data
    fig.tight_layout()
    save_figure(fig, out)
    return n


def _arguments(parser) -> None:
    parser.add_argument("--claims", required=True, help="tables/claims_<paper>_<dataset>.csv")
    parser.add_argument("--out", required=True)


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, lambda args: print(f"{plot_claims(args.claims, args.out)} claims plotted"),
                argv, dataset_config=False)


if __name__ == "__main__":
    main()
