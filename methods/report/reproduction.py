"""A paper's reproduction report on one dataset (``reports/<paper>_<dataset>.md``), in the
structure the ML Reproducibility Challenge asks for: scope (the claims tested), what was run (the
paper's rows, their seeds and ensembles, what their runs ran, the deviation ledger, the
statistics), results (each claim: the paper's difference beside ours, interval, verdict; each
table: how many cells are within tolerance, outside, not comparable, not reported, of rows that did
not train), and what could not be reproduced and why (rows that did not train, with their main
metric against chance and the seeds; claims undetermined by them or by a saturated metric). Every
number comes from the tables and claim files it reads; nothing in it is written by hand.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd

from methods.cli import run_command
from methods.io import write_text
from methods.job_records import ReportSpec, TableRowSpec, TableSpec
from methods.report.bootstrap import VERDICTS, verdict_kind
from methods.report.cells import escape_cell, number, ours_difference
from methods.report.environment import environment_lines, split_environments
from methods.report.wording import INCOMPARABLE_DATA, SMOKE_SCOPE, data_caveat

CELL_KINDS = ("within", "outside", "not comparable", "not reported", "reported only", "did not train")
LISTED_CELLS = 25   # cells outside tolerance listed by name; the rest are counted


def _cell_kind(verdict: str) -> str:
    """A table cell's verdict without its reason (``not comparable (synthetic data)``: ``not comparable``)."""
    return next(kind for kind in CELL_KINDS if verdict.startswith(kind))


def scope(spec: ReportSpec, claims: pd.DataFrame | None) -> list[str]:
    """Section 1: the claims tested, in the paper's words, where it states them, and their machine form;
    the paper's tables the dataset's config leaves out (``skip_tables``), whose claims are not tested."""
    lines = ["## 1. Scope of reproducibility", ""]
    if spec.skipped_tables:
        lines += [f"Not built on {spec.dataset} by this configuration (`datasets.{spec.dataset}.skip_tables`), "
                  f"so neither their cells nor the claims on them are here: "
                  f"{', '.join(f'`{t}`' for t in spec.skipped_tables)}. "
                  f"`--configfile {spec.all_tables_config}` builds them.", ""]
    if claims is None:
        return lines + [f"The paper file states no claim checked on {spec.dataset}: this report compares its "
                        f"tables cell by cell only.", ""]
    first = claims.drop_duplicates("claim")
    lines += [f"The claims of {spec.paper_name} tested here ({len(first)}), each as an ordering between rows of "
              f"one table on one metric (`left > right`):", "",
              "| claim | the paper's words | where | tested as |", "|---|---|---|---|"]
    for r in first.itertuples():
        words = f"{escape_cell(r.words)} (paraphrase)" if str(r.paraphrased) == "True" else f"“{escape_cell(r.words)}”"
        lines.append(f"| {r.claim} | {words} | {escape_cell(r.where)} | `{r.compare}` ({r.table}) |")
    return lines + [""]


def _rows_named(ids: list[str], every: list[str]) -> str:
    ids = list(dict.fromkeys(ids))
    return "every row" if ids == list(dict.fromkeys(every)) else ", ".join(ids)


def ledger_lines(rows: list[TableRowSpec]) -> list[str]:
    """The deviation ledger of the rows run (each entry once, with the rows it applies to)."""
    every = [row.id for row in rows]
    switches: dict[tuple, list[str]] = {}
    deviations: dict[tuple, list[str]] = {}
    for row in rows:
        for member in row.ledger:
            for s in member.get("switches", []):
                switches.setdefault((s["key"], str(s["runs"]), str(s["source"]), s.get("behaviour", "")), []).append(row.id)
            for d in member.get("deviations", []):
                deviations.setdefault((d["name"], d["ours"], d["source"], d["why"]), []).append(row.id)
    codes = sorted({member["code"] for row in rows for member in row.ledger if member.get("code")})
    lines = ["### Deviation ledger", ""]
    if codes:
        lines += ["Source code the rows follow: " + "; ".join(codes) + ".", ""]
    for intro, header, entries in (
            ("Config switches run at a value other than the source code's:",
             ("key", "runs", "source", "source behaviour"), {(f"`{k[0]}`", *k[1:]): ids for k, ids in switches.items()}),
            ("Source behaviours not reproduced (deviations):", ("deviation", "ours", "source", "why"), deviations)):
        if entries:
            lines += [intro, "", "| " + " | ".join(header) + " | rows |", "|---" * (len(header) + 1) + "|"]
            lines += ["| " + " | ".join(escape_cell(cell) for cell in entry) + f" | {_rows_named(ids, every)} |"
                      for entry, ids in entries.items()]
            lines.append("")
    if not switches and not deviations:
        lines += ["No switch off the source's value and no deviation is declared for these rows.", ""]
    return lines


def compared_rows(claims: pd.DataFrame | None) -> set[tuple[str, str]]:
    """(table, row id) of every row the claims compare."""
    if claims is None:
        return set()
    return {(r.table, row) for r in claims.itertuples() for side in (r.left_rows, r.right_rows)
            for row in side.split("; ")}


def training_text(thresholds: dict) -> str:
    """How a row is found not to have trained, and a metric saturated (config ``training_check``)."""
    return (f"A row did not train when one of its runs (or ensemble members) gets less than "
            f"{thresholds['min_gain_share']:.0%} of the way from chance to the maximum on a protocol's main metric "
            f"(chance: its expected value under random scores), or near-constant scores (median relative range "
            f"per query below {thresholds['min_score_spread']:g}); its cells and claims are not judged. A metric is "
            f"saturated within {1 - thresholds['saturated_share']:.0%} of its best value.")


def what_was_run(spec: ReportSpec, table_specs: list[TableSpec], compared: set[tuple[str, str]]) -> list[str]:
    """Section 2: the data, the statistics, each table's rows (seeds, ensemble, what ran), the ledger."""
    b = spec.bootstrap
    lines = ["## 2. What was run", "",
             f"Dataset `{spec.dataset}` ("
             + (f"a smoke run of {spec.reported_dataset}" if spec.dataset_kind == "smoke" else
                f"{spec.dataset_kind} data"
                + (f", standing in for {spec.reported_dataset}" if spec.reported_dataset != spec.dataset else ""))
             + f"). Paper notes: {escape_cell(spec.notes) or 'none'}", "",
             f"Statistics: each row's metric is the mean (± population std) over its seeds; a claim's interval is "
             f"a {b['confidence']:.0%} {b['method']} interval from {b['n_resamples']} paired bootstrap resamples of "
             f"the test images, each with all its texts, on the seed-mean difference (bootstrap seed {b['seed']}). "
             f"Cell tolerances: " + ", ".join(f"{k} {v:g}" for k, v in spec.tolerance.items()) + ". "
             + training_text(spec.training_check), ""]
    run = {}   # each row run once, whatever tables show it
    for table in table_specs:
        # this paper's rows, and the rows of other paper files (merged tables) that its claims compare
        rows = [r for r in table.rows if r.paper == spec.paper or (table.table, r.id) in compared]
        lines += [f"### Table `{table.table}`", "", *[f"- {escape_cell(t)}" for t in table.titles], "",
                  "| row | label | seeds | ensemble | ran |", "|---|---|---|---|---|"]
        for r in rows:
            label = escape_cell(r.label) + ("" if r.paper == spec.paper else f" (paper file `{r.paper}`)")
            if r.reported_only:
                lines.append(f"| {r.id} | {label} | – | – | not run: {escape_cell(r.reported_only)} |")
            else:
                lines.append(f"| {r.id} | {label} | {' '.join(map(str, r.seeds))} | "
                             f"{r.ensemble_size} | {escape_cell(r.ran)} |")
                run[r.id] = r
        lines.append("")
    return lines + ledger_lines(list(run.values()))


def environment_section(cells: dict[str, pd.DataFrame]) -> list[str]:
    """Where this paper's rows were trained (``methods.report.environment``, from the tables'
    ``environment`` column): each environment with its rows, per table."""
    found: dict[str, list[str]] = {}
    for table, frame in cells.items():
        if "environment" not in frame:   # a table written before environments were recorded
            continue
        for row, text in frame.drop_duplicates("row")[["row", "environment"]].itertuples(index=False):
            for env in split_environments(text):
                found.setdefault(env, []).append(f"{table}/{row}")
    return environment_lines("### Environment", found, ", ")


def results(spec: ReportSpec, claims: pd.DataFrame | None, cells: dict[str, pd.DataFrame]) -> list[str]:
    """Section 3: each claim checked (paper vs ours, interval, verdict), and each table's cells by verdict."""
    lines = ["## 3. Results", "", "### Claims", ""]
    if claims is None:
        lines += ["No claim is tested on this dataset.", ""]
    else:
        verdicts = Counter(verdict_kind(v) for v in claims["verdict"])
        tally = ", ".join(f"{verdicts[v]} {v}" for v in VERDICTS if verdicts[v] or v != "undetermined")
        lines += [f"{len(claims)} check{'s' if len(claims) > 1 else ''} (claim × protocol): {tally}"
                  + (f" — on {INCOMPARABLE_DATA[spec.dataset_kind]}, which tests the harness's runs, not the paper's "
                     f"claims." if spec.dataset_kind in INCOMPARABLE_DATA else "."), "",
                  f"| claim | protocol | metric | paper Δ ({spec.reported_dataset}) | ours Δ ± seeds | interval | verdict |",
                  "|---|---|---|---|---|---|---|"]
        for r in claims.itertuples():
            lines.append(f"| {r.claim} | {r.protocol} | {r.metric} | {number(r.reported_difference, signed=True)} | "
                         f"{ours_difference(r)} | [{number(r.ci_low, signed=True)}, "
                         f"{number(r.ci_high, signed=True)}] | {r.verdict} |")
        name = f"{spec.paper}_{spec.dataset}"
        lines += ["", f"Per claim: `tables/claims_{name}.md` (and `.csv`, with the rows' values and the reported "
                      f"sources); as a figure: `figures/claims_{name}.png`.", ""]
    lines += ["### Tables", "", "Cells of this paper's rows (row × protocol × metric):", "",
              "| table | " + " | ".join(CELL_KINDS) + " |", "|---|" + "---|" * len(CELL_KINDS)]
    for name, frame in cells.items():
        counts = Counter(frame["verdict"].map(_cell_kind))
        lines.append(f"| `tables/{name}_{spec.dataset}.md` | " + " | ".join(str(counts[k]) for k in CELL_KINDS) + " |")
    return lines + [""]


def training_findings(training: pd.DataFrame) -> list[str]:
    """The rows that did not train (each with what did not: seed, protocol, main metric vs chance),
    and those whose training was not checked, each once with the tables it is a row of."""
    lines = []
    for state, said in (("no", "did not train"), ("unknown", "was not checked for training")):
        rows = training[training["trained"] == state]
        for (row, why), group in rows.groupby(["row", "training_check"], sort=False):
            tables = ", ".join(f"`{t}`" for t in dict.fromkeys(group["table"]))
            lines.append(f"- Row `{row}` (table {tables}) {said}: {why.rstrip('.')}.")
    return lines


def _not_a_reproduction(spec: ReportSpec) -> list[str]:
    """Why nothing in section 4 says whether the paper reproduces, on data not comparable with its numbers."""
    if spec.dataset_kind == "smoke":
        return [f"Nothing here says whether the paper reproduces: this is a smoke run of {spec.reported_dataset} "
                f"({SMOKE_SCOPE}), which checks that every job of its tables runs on the dataset's files; no cell "
                f"is compared with a reported number. Run the same targets without -smoke for the reproduction "
                f"itself.", ""]
    if spec.dataset_kind in INCOMPARABLE_DATA:
        return [f"Nothing here says whether the paper reproduces: the data is synthetic, standing in for "
                f"{spec.reported_dataset}, so no cell is compared with a reported number and the claims are "
                f"tested on the harness's stand-in runs. Run the same targets with {spec.reported_dataset} "
                f"configured for the reproduction itself.", ""]
    return []


def _claim_finding(spec: ReportSpec, r) -> str | None:
    """Why one claim check is not supported, as a finding (None: it is)."""
    why = _unsupported(spec, r)
    return None if why is None else f"- Claim `{r.claim}` ({r.protocol}) is {why}"


def _unsupported(spec: ReportSpec, r) -> str | None:
    """What a claim check's verdict says against it, from its interval, margin and seeds (None: nothing)."""
    interval = f"[{number(r.ci_low, signed=True)}, {number(r.ci_high, signed=True)}]"
    seeds = "seeds per row" if pd.isna(r.n_seeds) else f"{int(r.n_seeds)} seed{'s' if r.n_seeds > 1 else ''}"
    equivalence = not pd.isna(r.bound)
    if r.verdict.startswith("contradicted") and equivalence:
        return f"contradicted: the interval of the difference {interval} lies wholly outside ±{r.bound:g}."
    if r.verdict.startswith("contradicted"):
        return f"contradicted: the interval of the difference {interval} lies below the claimed margin ({r.margin:g})."
    if r.verdict.startswith("undetermined:") and "reported only" in r.verdict:
        return f"{r.verdict.split(' (')[0]}: the harness does not run it, so the claim is not tested here."
    if r.verdict.startswith("undetermined: saturated"):
        return (f"undetermined: {r.metric} is saturated on every compared row (within "
                f"{1 - spec.training_check['saturated_share']:.0%} of its best), so it cannot tell them apart.")
    if r.verdict.startswith("undetermined:"):   # "undetermined: <rows> did not train"
        rows = r.verdict.removeprefix("undetermined: ")
        for reason in INCOMPARABLE_DATA.values():
            rows = rows.removesuffix(f" ({reason})")
        return f"undetermined: {rows} (below), so its interval {interval} is not read."
    if r.verdict.startswith("undetermined"):
        return ("undetermined: its bootstrap interval is not defined (a resample of the test images had no query "
                "the metric counts).")
    if r.verdict.startswith("inconclusive") and equivalence:
        return (f"inconclusive: the interval {interval} reaches beyond ±{r.bound:g}; {r.n_images} test images and "
                f"{seeds} do not tell equivalence from a difference.")
    if r.verdict.startswith("inconclusive"):
        return (f"inconclusive: the interval {interval} contains the claimed margin ({r.margin:g}); "
                f"{r.n_images} test images and {seeds} do not tell the difference from it.")
    return None


def _row_findings(spec: ReportSpec, cells: dict[str, pd.DataFrame], table_specs: list[TableSpec]) -> list[str]:
    """Rows judged against an ensemble of another size, and this paper's rows not run or not reported."""
    findings = []
    for frame in cells.values():   # a single model is never judged against an ensemble number
        incomparable = frame[frame["verdict"].str.startswith("not comparable (ensemble")]
        for (row, why), group in incomparable.groupby(["row", "verdict"]):
            findings.append(f"- Row `{row}`: {len(group)} cells {why}.")
    for row_id, reason in dict.fromkeys(
            (r.id, f"is not run: {r.reported_only}" if r.reported_only
             else f"has cells the sources give no number for: {r.not_reported}")
            for table in table_specs for r in table.rows
            if r.paper == spec.paper and (r.reported_only or r.not_reported)):
        findings.append(f"- Row `{row_id}` {reason.rstrip('.')}.")
    return findings


def _outside_lines(outside: pd.DataFrame) -> list[str]:
    """The cells outside tolerance, the first ``LISTED_CELLS`` by name."""
    if not len(outside):
        return []
    lines = ["", f"Cells outside tolerance ({len(outside)}):", "",
             "| table | row | protocol | metric | reported | reproduced | difference |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.table} | {r.row} | {r.protocol} | {r.metric} | {r.reported} | {r.reproduced} | {r.difference} |"
              for r in outside.head(LISTED_CELLS).itertuples()]
    if len(outside) > LISTED_CELLS:
        lines.append(f"| … {len(outside) - LISTED_CELLS} more in the tables | | | | | | |")
    return lines


def not_reproduced(spec: ReportSpec, claims: pd.DataFrame | None, cells: dict[str, pd.DataFrame],
                   table_specs: list[TableSpec], training: pd.DataFrame) -> list[str]:
    """Section 4: the claims not supported, rows that did not train, cells outside tolerance or not
    comparable, rows not run or not reported, each with its reason. ``training``: ``table, row,
    trained, training_check`` of this paper's rows and the rows its claims compare."""
    lines = ["## 4. What could not be reproduced, and why", "", *_not_a_reproduction(spec)]
    findings = [] if claims is None else [
        finding for finding in (_claim_finding(spec, r) for r in claims.itertuples()) if finding]
    findings += training_findings(training)
    findings += _row_findings(spec, cells, table_specs)
    lines += findings
    outside = pd.concat([f[f["verdict"] == "outside"] for f in cells.values()]) if cells else pd.DataFrame()
    lines += _outside_lines(outside)
    if not findings and not len(outside) and spec.dataset_kind not in INCOMPARABLE_DATA:
        lines.append(("Every claim tested is supported, and every" if claims is not None else "Every")
                     + " cell compared is within tolerance.")
    return lines + [""]


def build_report(spec: ReportSpec, table_csvs: list[str], table_spec_paths: list[str], claims_csv: str | None) -> str:
    table_specs = [TableSpec.read(p) for p in table_spec_paths]
    claims = pd.read_csv(claims_csv, keep_default_na=True) if claims_csv else None
    compared = compared_rows(claims)
    cells, training = {}, []
    for path, table in zip(table_csvs, table_specs):
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        cells[table.table] = frame[frame["paper"] == spec.paper]
        if "trained" in frame:   # tables written before the training check have no column
            ours = (frame["paper"] == spec.paper) | frame["row"].map(lambda r: (table.table, r) in compared)
            training.append(frame.loc[ours, ["table", "row", "trained", "training_check"]].drop_duplicates())
    training = pd.concat(training) if training else pd.DataFrame(columns=["table", "row", "trained", "training_check"])
    title = [f"# Reproduction report: {spec.paper_name} on {spec.dataset}", "",
             "Generated by the harness from the runs behind the tables and claims below; no number in it is written "
             "by hand." + (f" **{data_caveat(spec.dataset_kind, spec.reported_dataset)}**: the verdicts describe "
                           f"the harness's runs on it, not the paper." if spec.dataset_kind in INCOMPARABLE_DATA
                           else ""), ""]
    return "\n".join(title + scope(spec, claims) + what_was_run(spec, table_specs, compared)
                     + environment_section(cells) + results(spec, claims, cells)
                     + not_reproduced(spec, claims, cells, table_specs, training))


def _report(args) -> None:
    if len(args.tables) != len(args.table_specs):
        raise ValueError("one table spec per table")
    text = build_report(ReportSpec.read(args.spec), args.tables, args.table_specs, args.claims[0] if args.claims else None)
    write_text(args.out, text)
    print(f"{Path(args.out)}: {len(text.splitlines())} lines")


def _arguments(parser) -> None:
    parser.add_argument("--spec", required=True, help="the report spec (methods.plan)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--tables", nargs="+", required=True, help="tables/<table>_<dataset>.csv of the paper")
    parser.add_argument("--table-specs", nargs="+", required=True, help="their specs, in the same order")
    parser.add_argument("--claims", nargs="*", default=[], help="tables/claims_<paper>_<dataset>.csv (none: no claims)")


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, _report, argv, dataset_config=False)


if __name__ == "__main__":
    main()
