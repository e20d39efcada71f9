"""What a run of the harness found on one dataset, paper by paper (``tables/summary_<dataset>.{md,csv}``):
every row the papers' tables run (once: a table several papers share lists each row under the paper
whose file declares it, and says which papers share it), its main metric (RSUM on the caption datasets, the NDCG@500 sum on
the tag datasets) against chance, whether it trained, and every claim with its verdict: whether the
paper's orderings show. Built by the DAG from the rows' aggregates and the claims tables, so the
numbers a README or a note quotes come from the run, not from a hand copy.

Torch-free: it reads JSON and CSV files.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from methods.cli import run_command
from methods.io import write_text
from methods.job_records import RowAggregate, SummarySpec
from methods.metrics.training_check import NOT_TRAINED, TRAINED, UNKNOWN, TrainingThresholds, row_training
from methods.report.bootstrap import verdict_kind
from methods.report.cells import escape_cell, number
from methods.report.html import write_markdown
from methods.report.wording import data_caveat

COLUMNS = ("dataset", "paper", "table", "row", "label", "seeds", "ensemble_size", "protocol", "main_metric", "value",
           "value_std", "chance", "times_chance", "gain_share", "trained", "training_check")


def row_main_metric(aggregate: RowAggregate, protocol: str) -> tuple[str, list[float], list[float], list[float]] | None:
    """(main metric, its value, chance and gain share per seed) of a row under ``protocol``, from the
    training checks its aggregate carries (None: the aggregate carries none for that protocol)."""
    checks = [e["check"] for e in aggregate.training_checks or []
              if e["protocol"] == protocol and e["check"] is not None]
    if not checks:
        return None
    return (checks[0]["main_metric"], [c["value"] for c in checks], [c["chance"] for c in checks],
            [c["gain_share"] for c in checks])


def summary_rows(spec: SummarySpec, aggregates: dict[str, RowAggregate]) -> pd.DataFrame:
    """One line per run row of every table of every paper (``aggregates``: aggregate path -> content)."""
    thresholds = TrainingThresholds.from_config(spec.training_check)
    protocol = spec.protocol
    records = []
    for paper in spec.papers:
        for table in paper.tables:
            for row in table.rows:
                aggregate = aggregates[row.aggregate]
                main = row_main_metric(aggregate, protocol)
                state = row_training(aggregate.training_checks, set(spec.checked_protocols), thresholds)
                metric, values, chances, shares = main if main else ("", [], [], [])
                value = float(np.mean(values)) if values else float("nan")
                chance = float(np.mean(chances)) if chances else float("nan")
                records.append({
                    "dataset": spec.dataset, "paper": paper.paper, "table": table.table, "row": row.id,
                    "label": row.label, "seeds": " ".join(str(s) for s in row.seeds),
                    "ensemble_size": row.ensemble_size, "protocol": protocol, "main_metric": metric,
                    "value": round(value, 2), "value_std": round(float(np.std(values)), 2) if len(values) > 1 else "",
                    "chance": round(chance, 2), "times_chance": round(value / chance, 1) if chance > 0 else "",
                    # what the training check judges: where chance is a large part of the maximum (NDCG
                    # on tag data: 85 %), "x chance" stays near 1 however well a row learned
                    "gain_share": round(100 * float(np.mean(shares)), 1) if shares else "",
                    "trained": state.status, "training_check": state.reason})
    return pd.DataFrame(records, columns=list(COLUMNS))


def _claims_lines(claims: pd.DataFrame) -> list[str]:
    lines = ["| claim | tested as | protocol | paper Δ | ours Δ | interval | verdict |", "|---|---|---|---|---|---|---|"]
    for r in claims.itertuples():
        interval = "–" if pd.isna(r.ci_low) else f"[{number(r.ci_low, signed=True)}, {number(r.ci_high, signed=True)}]"
        ours, paper = number(r.reproduced_difference, signed=True), number(r.reported_difference, signed=True)
        lines.append(f"| {r.claim} | `{escape_cell(r.compare)}` | {r.protocol} | {paper} | {ours} | {interval} | "
                     f"{escape_cell(r.verdict)} |")
    return lines


def _value_text(row) -> str:
    return f"{row.value:.1f}" + (f" ± {row.value_std:.1f}" if row.value_std != "" else "")


def to_markdown(spec: SummarySpec, rows: pd.DataFrame, claims: dict[str, pd.DataFrame]) -> str:
    dataset, protocol = spec.dataset, spec.protocol
    trained = rows[rows["trained"] == TRAINED]
    lowest = trained.loc[pd.to_numeric(trained["gain_share"]).idxmin()] if len(trained) else None
    kinds = Counter(verdict_kind(v) for c in claims.values() for v in c["verdict"])
    lines = [f"# What the harness found on {dataset}", "",
             f"Every row the papers' tables run on `{dataset}` ({len(rows)} rows), its main metric under `{protocol}` "
             f"(the mean over its seeds) against chance (the metric under random scores, in closed form), and "
             f"every claim with its verdict. Generated by the DAG from the rows' evaluations and the claims tables "
             f"(`tables/<table>_{dataset}.md`, `tables/claims_<paper>_{dataset}.md`, `reports/<paper>_{dataset}.md` "
             f"have the details).", ""]
    counts = Counter(rows["trained"])
    lines.append(f"- Rows: {counts[TRAINED]} trained, {counts[NOT_TRAINED]} did not train, {counts[UNKNOWN]} unknown "
                 f"(a row did not train when a run's main metric gained less than "
                 f"{spec.training_check['min_gain_share']:.0%} of the way from chance to its maximum, or its scores "
                 f"are near-constant).")
    if lowest is not None:
        lines.append(f"- Lowest trained row: {lowest['paper']} / {lowest['table']} / {lowest['row']} at "
                     f"{lowest['gain_share']} % of the way from chance to the maximum ({lowest['main_metric']} "
                     f"{lowest['value']:.1f}, chance {lowest['chance']:.1f}, {lowest['times_chance']} × chance).")
    if kinds:
        lines.append("- Claims: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + ".")
    caveat = data_caveat(spec.dataset_kind, spec.reported_dataset)
    if caveat:
        lines.append(f"- {caveat}: these numbers test the "
                     f"harness's runs on it, not the papers' claims on their data.")
    lines.append("")
    for paper in spec.papers:
        of_paper = rows[rows["paper"] == paper.paper]
        lines += [f"## {paper.paper_name}", ""]
        shared = [t for t in paper.tables if t.shared_with]
        if shared:
            lines += [f"- Table {t.table} is shared with {', '.join(t.shared_with)}: its rows are listed under the "
                      f"paper whose file declares each, this paper's here." for t in shared] + [""]
        lines += ["| table | row | seeds | main metric | × chance | % of the way from chance to the max | trained |",
                  "|---|---|---|---|---|---|---|"]
        for r in of_paper.itertuples():
            ens = f" (ensemble of {r.ensemble_size})" if r.ensemble_size > 1 else ""
            status = r.trained if r.trained == TRAINED else f"**{r.trained}**: {escape_cell(r.training_check)}"
            lines.append(f"| {r.table} | {escape_cell(r.label)}{ens} | {r.seeds} | {r.main_metric} {_value_text(r)} | "
                         f"{r.times_chance} | {r.gain_share} | {status} |")
        lines.append("")
        if paper.paper in claims:
            lines += ["Claims (does the paper's ordering show?):", ""] + _claims_lines(claims[paper.paper]) + [""]
    return "\n".join(lines)


def write_summary(args) -> None:
    spec = SummarySpec.read(args.spec)
    paths = [row.aggregate for p in spec.papers for t in p.tables for row in t.rows]
    aggregates = {path: RowAggregate.read(path) for path in dict.fromkeys(paths)}
    rows = summary_rows(spec, aggregates)
    claims = {p.paper: pd.read_csv(p.claims) for p in spec.papers if p.claims}
    write_text(args.out_csv, rows.to_csv(index=False))
    write_markdown(args.out_md, args.out_html, to_markdown(spec, rows, claims))


def _arguments(parser) -> None:
    parser.add_argument("--spec", required=True, help="the summary spec (methods.plan.Plan.summary_spec)")
    parser.add_argument("--out-csv", required=True)
    parser.add_argument("--out-md", required=True)
    parser.add_argument("--out-html", help="the same Markdown as a page (snakemake --report shows it inline)")


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, write_summary, argv, dataset_config=False)


if __name__ == "__main__":
    main()
