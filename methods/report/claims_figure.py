"""The claims of a paper on a dataset as a figure: per claim and protocol, our difference
(left − right, seed mean) with its bootstrap interval, coloured by verdict; the paper's own
difference as a marker where its reported numbers give one; the claimed margin (an equivalence
claim's ±bound, dashed) and zero as lines; a claim with a side the harness does not run has the
paper's marker only.
Claims on metrics of different scales (percentages, a 0-1 micro-F1) get a panel each."""
from __future__ import annotations

import matplotlib
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from methods.cli import run_command  # noqa: E402
from methods.errors import HarnessError  # noqa: E402
from methods.metrics.declarations import METRICS  # noqa: E402
from methods.report.figure_layout import save_figure  # noqa: E402

COLOURS = {"supported": "tab:green", "contradicted": "tab:red", "inconclusive": "tab:gray", "undetermined": "tab:purple"}


# the x axis of a panel: claims on metrics of one scale share it (a percentage and a 0-1 F1 do not)
SCALE_AXES = {"percent": "percentage points", "percent_sum": "percentage points",
              "rank": "ranks", "unit": "the metric's units (0–1 scale)"}


def draw_claims(ax, frame: pd.DataFrame) -> None:
    """One panel: each claim's difference, its interval, the paper's difference and the margin."""
    ys = list(range(len(frame)))[::-1]   # first claim on top
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
        if not pd.isna(r.bound):   # an equivalence claim: the interval must lie inside ±bound
            for end in (-r.bound, r.bound):
                ax.plot([end, end], [y - 0.35, y + 0.35], color="tab:orange", lw=1.2, ls="--")
    ax.axvline(0.0, color="black", lw=0.8)
    ax.set_ylim(-0.6, len(frame) - 0.4)
    ax.set_yticks(ys, [f"{r.claim} [{r.metric}, {r.protocol}]" for r in frame.itertuples()], fontsize=8)


def plot_claims(claims_csv: str, out: str) -> int:
    frame = pd.read_csv(claims_csv, keep_default_na=True)
    if frame.empty:
        raise HarnessError(f"{claims_csv} has no claim to plot")
    axis = frame["metric"].map(lambda m: SCALE_AXES[METRICS.get(m).scale])
    panels = [(label, frame[axis == label]) for label in dict.fromkeys(axis)]   # in the claims' order
    n = len(frame)
    fig, axes = plt.subplots(len(panels), 1, squeeze=False, figsize=(10.0, 1.8 + 0.45 * n + 0.6 * (len(panels) - 1)),
                             gridspec_kw={"height_ratios": [len(p) for _, p in panels]})
    for ax, (label, part) in zip(axes[:, 0], panels):
        draw_claims(ax, part)
        ax.set_xlabel(f"difference, left − right, in {label}", fontsize=9)
    first = frame.iloc[0]
    synthetic = first["data"] == "synthetic"
    axes[0, 0].set_title(f"Claims of {first['paper']} on {first['dataset']}{' (synthetic data)' if synthetic else ''}\n"
                         f"ours: seed mean with its {first['confidence']:.0%} {first['interval_method']} interval over "
                         f"test images", fontsize=9)
    handles = [plt.Line2D([], [], color=c, marker="o", ls="none", label=v) for v, c in COLOURS.items()]
    handles.append(plt.Line2D([], [], marker="D", mfc="none", mec="black", ls="none",
                              label=f"paper's difference{f' ({first.reported_dataset})' if synthetic else ''}"))
    if (frame["margin"].fillna(0) != 0).any():
        handles.append(plt.Line2D([], [], color="tab:orange", lw=1.2, label="claimed margin"))
    if frame["bound"].notna().any():
        handles.append(plt.Line2D([], [], color="tab:orange", lw=1.2, ls="--", label="equivalence bound ±d"))
    axes[0, 0].legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))   # beside, off the data
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
