"""Build ``tables/<table>_<dataset>.csv`` (+ ``.md``): per row, protocol and metric the reproduced
value (mean, std over seeds), the reported value, their difference and a verdict.

Verdicts: ``within`` / ``outside`` the configured tolerance; ``not comparable`` when the data
is synthetic or the reported row is an ensemble of another size than the reproduced one (a
single model is never judged against an ensemble number); ``not reported`` when the sources
give no number for the cell; ``reported only`` for a row the harness does not run (the paper's
number beside ours, no reproduced value; the row's ``reported_only`` says why); ``did not train``
for every cell of a row one of whose runs (or ensemble members) did not learn
(``methods.metrics.training_check``, with the spec's ``training_check`` thresholds: its main metric
near chance, or near-constant scores). Columns ``trained`` (yes / no / unknown: evaluations written
before the check) and ``training_check`` (what did not train: seed, protocol, main metric vs
chance) say so for every cell; the markdown names those rows under each protocol's table, and the
metric columns every row of which is saturated (within ``saturated_share`` of the metric's best:
they cannot tell the rows apart).

Each row also says what its runs really ran (``ran``: the backbone or image input, the
dimensions and the schedule, from the resolved run configs; ``methods.model_kinds.description``),
beside its label, which names the paper setting it stands for; on synthetic data the two differ.
The markdown keys it to the label as a note (``[n]``) under the tables, says a verdict every
judged cell shares once above them (else a verdict column per row), groups the rows of one source
of reported numbers, and lists the environments the rows' models trained in
(``methods.report.environment``). A sum a source does not print but whose parts it prints (RSUM
from six printed recalls) is reported as their sum, marked as computed (``reported_computed``).

Each row also carries its deviation ledger (``methods.fidelity``): the config switches it runs
at a value other than the source code's, and the source behaviours not reproduced. A row that
declares ``compare_to`` gets its paired difference from that row (same seeds): mean and
population std over seeds of (row - compared row), and the paired t-test's p (scipy).

The columns of a protocol are the metrics it reports that are declared ``in_table``
(``methods.metrics``), in the protocol's order; each metric's declaration names its tolerance.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from methods.cli import run_command
from methods.errors import HarnessError
from methods.io import write_text
from methods.job_records import INCOMPARABLE_DATA, SMOKE_SCOPE, RowAggregate, TableRowSpec, TableSpec
from methods.report.cells import escape_cell
from methods.report.environment import environment_lines, row_environment_text, split_environments
from methods.metrics.protocols import CHECKED_PROTOCOLS, STATISTICS_PROTOCOL, get_protocol
from methods.metrics.declarations import METRICS, table_metrics, value_from
from methods.metrics.training_check import NOT_TRAINED, TRAINED, UNKNOWN, TrainingThresholds, row_training, saturated
from methods.report.html import write_markdown

COLUMNS = ("table", "dataset", "row", "label", "ran", "paper", "protocol", "metric", "reproduced", "reproduced_std",
           "n_seeds", "seeds", "ensemble_size", "reported", "reported_std", "reported_computed",
           "reported_ensemble_size", "difference", "tolerance",
           "verdict", "trained", "training_check", "reported_source", "run_configs", "compared_to", "paired_difference",
           "paired_difference_std", "paired_p", "non_source_switches", "source_deviations", "environment")
KEYS = ["row", "protocol", "metric"]


def tolerance_for(metric: str, tolerance: dict) -> float:
    """The configured tolerance for ``metric``: the entry its declaration names."""
    key = METRICS.get(metric).tolerance
    if key is None:
        raise HarnessError(f"metric '{metric}' is shown in tables but declares no tolerance")
    return tolerance[key]


REPORTED_ONLY = "reported only"
NOT_REPORTED = "not reported"


def verdict(reproduced: float, reported: float | None, incomparable: str | None, ens_repro: int,
            ens_reported: int | None, tol: float, reported_only: bool = False) -> str:
    """A cell's verdict; ``incomparable``: why the dataset's numbers are not the paper's (synthetic
    data, a smoke run), None for real data."""
    if reported_only:
        return REPORTED_ONLY
    if reported is None:
        return NOT_REPORTED
    if incomparable:
        return f"not comparable ({incomparable})"
    if ens_reported != ens_repro:
        return f"not comparable (ensemble of {ens_reported} vs {ens_repro})"
    return "within" if abs(reproduced - reported) <= tol + 1e-9 else "outside"


def _frame(records, columns: list[str]) -> pd.DataFrame:
    """Records as a frame of Python objects: JSON ints stay ints and floats stay floats (an int
    and a float in one column would otherwise both become floats and print differently)."""
    return pd.DataFrame(list(records), columns=columns, dtype=object)


# digits kept in the CSV and shown in the markdown, by the metric's scale (micro-F1 is a 0-1
# fraction printed to three decimals in the label-wise paper; percentages to one or two)
CSV_DIGITS, SHOWN_DIGITS = {"unit": 4}, {"unit": 3}


def _digits(metrics: pd.Series, table: dict[str, int], default: int) -> pd.Series:
    return metrics.map(lambda m: table.get(METRICS.get(m).scale, default))


def _rounded(values: pd.Series, metrics: pd.Series) -> pd.Series:
    # Python's round is correctly rounded at ...5; numpy's (and pandas') scales by 100 first and
    # rounds some of those halves the other way.
    return pd.Series([v if pd.isna(v) else round(float(v), d) for v, d in zip(values, _digits(metrics, CSV_DIGITS, 2))],
                     index=values.index, dtype=object)


def _blank(values: pd.Series) -> pd.Series:
    """Missing values as empty cells."""
    return values.astype(object).where(values.notna(), "")


def _optional(values: pd.Series) -> list:
    """Missing values as None."""
    return [None if pd.isna(v) else v for v in values]


def cells(spec: TableSpec) -> pd.DataFrame:
    """One line per row, protocol and table metric, in table order; a reported-only row has only
    the cells the sources give a number for."""
    def shown(row: TableRowSpec, protocol: str, metric: str) -> bool:
        given = (row.reported.get(protocol) or {}).get("metrics") or {}
        return not row.reported_only or given.get(metric) is not None or metric in computed_sums(given, protocol)
    return _frame(((row.id, protocol, metric) for row in spec.rows for protocol in spec.protocols
                   for metric in table_metrics(get_protocol(protocol).metrics) if shown(row, protocol, metric)), KEYS)


def spec_rows(spec: TableSpec) -> pd.DataFrame:
    """Label, what its runs ran, paper and the reason no number is reported (if given) of every row."""
    return _frame(((row.id, row.label, row.ran, row.paper, row.not_reported,
                    row.reported_only or "")
                   for row in spec.rows),
                  ["row", "label", "ran", "paper", "not_reported", "not_run"])


def reported_protocols(spec: TableSpec) -> pd.DataFrame:
    """The reported entry of each row and protocol the sources give: ensemble size and source."""
    return _frame(((row.id, protocol, True, rep["ensemble_size"], rep["source"])
                   for row in spec.rows for protocol, rep in row.reported.items() if rep),
                  ["row", "protocol", "has_reported_entry", "reported_ensemble_size", "source"])


def computed_sums(metrics: dict, protocol: str) -> dict[str, tuple[float, str]]:
    """The table's sums (RSUM) a source does not print but whose every part it prints: metric ->
    (the sum, rounded as the parts are printed, and how it was computed)."""
    out = {}
    for name in table_metrics(get_protocol(protocol).metrics):
        parts = METRICS.get(name).components
        if parts and metrics.get(name) is None and all(metrics.get(c) is not None for c in parts):
            digits = max(len(str(metrics[c]).partition(".")[2]) for c in parts)
            out[name] = (round(value_from(metrics, name), digits), f"sum of the printed {', '.join(parts)}")
    return out


def reported_values(spec: TableSpec) -> pd.DataFrame:
    """The reported numbers (and their spread where given), one line per row, protocol and metric;
    a sum the source does not print is computed from its printed parts (``reported_computed`` says so)."""
    def values(rep: dict, protocol: str):
        yield from ((m, v, (rep.get("metrics_std") or {}).get(m), "") for m, v in rep["metrics"].items()
                    if v is not None)
        yield from ((m, v, None, how) for m, (v, how) in computed_sums(rep["metrics"], protocol).items())
    return _frame(((row.id, protocol, metric, value, spread, how)
                   for row in spec.rows for protocol, rep in row.reported.items() if rep
                   for metric, value, spread, how in values(rep, protocol)),
                  [*KEYS, "reported", "reported_std", "reported_computed"])


def reproduced_values(aggregates: dict[str, RowAggregate]) -> pd.DataFrame:
    """Mean and std over seeds of every row, protocol and metric of the row aggregates."""
    return _frame(((row, protocol, metric, stats["mean"], stats["std"])
                   for row, agg in aggregates.items() for protocol, metrics in agg.protocols.items()
                   for metric, stats in metrics.items()),
                  [*KEYS, "mean", "std"])


def row_runs(aggregates: dict[str, RowAggregate]) -> pd.DataFrame:
    """Seeds, ensemble size, run configs and environments of every row aggregate."""
    return _frame(((row, len(agg.seeds), " ".join(map(str, agg.seeds)), agg.ensemble_size,
                    " ".join(agg.config_hashes), row_environment_text(agg.environments)) for row, agg in aggregates.items()),
                  ["row", "n_seeds", "seeds", "ensemble_size", "run_configs", "environment"])


TRAINED_CELLS = {TRAINED: "yes", NOT_TRAINED: "no", UNKNOWN: "unknown"}   # the ``trained`` column


def row_training_states(spec: TableSpec, aggregates: dict[str, RowAggregate]) -> pd.DataFrame:
    """Per run row: ``trained`` (yes / no / unknown) and ``training_check`` (why not, or why
    unknown), from its aggregate's training checks judged with the spec's thresholds."""
    thresholds = TrainingThresholds.from_config(spec.training_check)
    states = {row: row_training(agg.training_checks, CHECKED_PROTOCOLS, thresholds)
              for row, agg in aggregates.items()}
    return _frame(((row, TRAINED_CELLS[state.status], state.reason) for row, state in states.items()),
                  ["row", "trained", "training_check"])


def switch_text(switch: dict) -> str:
    return f"{switch['key']}={switch['runs']} (source: {switch['source']})"


def row_ledgers(spec: TableSpec) -> pd.DataFrame:
    """Per row, the switches run at non-source values and the names of the source behaviours not
    reproduced, over all its ensemble members (``; ``-separated)."""
    def joined(texts) -> str:
        return "; ".join(dict.fromkeys(texts))
    return _frame(((row.id,
                    joined(switch_text(s) for ledger in row.ledger for s in ledger["switches"]),
                    joined(d["name"] for ledger in row.ledger for d in ledger["deviations"]))
                   for row in spec.rows),
                  ["row", "non_source_switches", "source_deviations"])


def paired_differences(spec: TableSpec, aggregates: dict[str, RowAggregate]) -> pd.DataFrame:
    """For every row with ``compare_to``: per protocol and metric, mean and population std over
    seeds of (row - compared row), and the two-sided paired t-test p (None when undefined: one
    seed, or the same difference for every seed)."""
    records = []
    for row in spec.rows:
        if not row.compare_to:
            continue
        base = aggregates[row.compare_to]
        for protocol, metrics in aggregates[row.id].protocols.items():
            for metric, cell in metrics.items():
                other = base.protocols[protocol][metric]
                if "seeds" not in cell or "seeds" not in other:
                    raise HarnessError(f"the aggregates of rows '{row.id}' and '{row.compare_to}' do not say "
                                       f"which seed each value comes from (written by an older version): "
                                       f"re-aggregate them (delete results/<dataset>/rows/)")
                mine, theirs = dict(zip(cell["seeds"], cell["values"])), dict(zip(other["seeds"], other["values"]))
                if set(mine) != set(theirs):
                    raise HarnessError(f"row '{row.id}' compares to '{row.compare_to}' but their seeds differ "
                                       f"({sorted(mine)} vs {sorted(theirs)})")
                seeds = sorted(mine)
                a = np.array([mine[s] for s in seeds], dtype=float)
                b = np.array([theirs[s] for s in seeds], dtype=float)
                diff = a - b
                p = None
                if len(seeds) > 1 and np.ptp(diff) > 0:
                    p = float(stats.ttest_rel(a, b).pvalue)
                records.append((row.id, protocol, metric, row.compare_to, float(np.mean(diff)),
                                float(np.std(diff)), p))
    return _frame(records, [*KEYS, "compared_to", "paired_difference", "paired_difference_std", "paired_p"])


def _source(frame: pd.DataFrame, otherwise: str) -> pd.Series:
    """The reported entry's source; without an entry, the row's reason (if any) or ``otherwise``."""
    reason = frame["not_reported"].where(frame["not_reported"].notna() & (frame["not_reported"] != ""), otherwise)
    return frame["source"].astype(object).where(frame["has_reported_entry"].notna(), reason)


def _check_complete(frame: pd.DataFrame, column: str, what: str) -> None:
    missing = frame.loc[frame[column].isna() & ~frame["reported_only"], KEYS]
    if len(missing):
        first = missing.iloc[0]
        raise HarnessError(f"{len(missing)} table cell(s) without {what}, e.g. row '{first['row']}', "
                           f"protocol '{first['protocol']}', metric '{first['metric']}'")


def build_rows(spec: TableSpec, aggregates: dict[str, RowAggregate]) -> pd.DataFrame:
    """The table, one line per row, protocol and table metric, with ``COLUMNS`` (empty cells are "")."""
    incomparable = INCOMPARABLE_DATA.get(spec.dataset_kind)
    table = cells(spec)
    # a set model's embedding statistics describe its whole sets: an evaluation view or an ensemble has none
    no_statistics = {r.id for r in spec.rows if r.view or r.ensemble_size > 1}
    table = table[[not (p == STATISTICS_PROTOCOL and r in no_statistics)
                   for r, p in zip(table["row"], table["protocol"])]].reset_index(drop=True)
    tolerances = _frame(((m, tolerance_for(m, spec.tolerance)) for m in dict.fromkeys(table["metric"])),
                        ["metric", "tolerance"])
    df = (table
          .merge(spec_rows(spec), on="row", how="left", validate="many_to_one")
          .merge(row_runs(aggregates), on="row", how="left", validate="many_to_one")
          .merge(row_training_states(spec, aggregates), on="row", how="left", validate="many_to_one")
          .merge(reproduced_values(aggregates), on=KEYS, how="left", validate="one_to_one")
          .merge(reported_protocols(spec), on=["row", "protocol"], how="left", validate="many_to_one")
          .merge(reported_values(spec), on=KEYS, how="left", validate="one_to_one")
          .merge(tolerances, on="metric", how="left", validate="many_to_one")
          .merge(paired_differences(spec, aggregates), on=KEYS, how="left", validate="one_to_one")
          .merge(row_ledgers(spec), on="row", how="left", validate="many_to_one"))
    df["reported_only"] = df["row"].isin([r.id for r in spec.rows if r.reported_only])
    _check_complete(df, "ensemble_size", "a row aggregate")
    _check_complete(df, "mean", "a reproduced value")
    has_reported = df["reported"].notna()
    df["verdict"] = [verdict(value, reported, incomparable, ens, ens_reported, tol, only)
                     for value, reported, ens, ens_reported, tol, only
                     in zip(df["mean"], _optional(df["reported"]), df["ensemble_size"],
                            _optional(df["reported_ensemble_size"]), df["tolerance"], df["reported_only"])]
    # no verdict on the numbers of a model that did not learn
    df["verdict"] = df["verdict"].where(df["trained"] != TRAINED_CELLS[NOT_TRAINED], NOT_TRAINED)
    df["difference"] = _blank(_rounded(pd.to_numeric(df["mean"]) - pd.to_numeric(df["reported"]), df["metric"])
                              .where(has_reported & ~df["reported_only"]))
    return df.assign(table=spec.table, dataset=spec.dataset,
                     reproduced=_blank(_rounded(df["mean"], df["metric"]).where(~df["reported_only"])),
                     n_seeds=_blank(df["n_seeds"]), seeds=_blank(df["seeds"]),
                     ensemble_size=_blank(df["ensemble_size"]), run_configs=_blank(df["run_configs"]),
                     environment=_blank(df["environment"]),
                     trained=_blank(df["trained"]), training_check=_blank(df["training_check"]),
                     reproduced_std=_blank(_rounded(df["std"], df["metric"]).where(~df["reported_only"] & (df["n_seeds"] > 1))),
                     reported=_blank(df["reported"]),
                     reported_std=_blank(df["reported_std"]),
                     reported_computed=_blank(df["reported_computed"]),
                     reported_ensemble_size=_blank(df["reported_ensemble_size"]),
                     reported_source=_source(df, "no reported number in the sources"),
                     compared_to=_blank(df["compared_to"]),
                     paired_difference=_blank(_rounded(df["paired_difference"], df["metric"]).where(df["compared_to"].notna())),
                     paired_difference_std=_blank(_rounded(df["paired_difference_std"], df["metric"])
                                                  .where(df["compared_to"].notna() & (df["n_seeds"] > 1))),
                     paired_p=_blank(df["paired_p"].map(lambda v: None if v is None or pd.isna(v) else float(f"{v:.3g}"))),
                     )[list(COLUMNS)]


def to_csv(rows: pd.DataFrame | list[dict]) -> str:
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype(object).to_csv(index=False, lineterminator="\n")


COMPUTED_MARK = "Σ"   # a reported sum the source does not print, computed from its printed parts


def _cell_text(rows: pd.DataFrame) -> pd.Series:
    """``reproduced[ ± std][ / reported[ ± spread]]`` per table cell (``—`` reproduced for a
    reported-only row; a computed reported sum marked ``Σ``); the verdicts are the row's
    (``row_verdicts``)."""
    has_std, has_reported = rows["reproduced_std"] != "", rows["reported"] != ""
    digits = _digits(rows["metric"], SHOWN_DIGITS, 1)
    shown = lambda column: pd.Series([f"{v:.{d}f}" if v != "" else "" for v, d in zip(rows[column], digits)],  # noqa: E731
                                     index=rows.index)
    text = shown("reproduced").where(rows["reproduced"] != "", "—")
    text = text.where(~has_std, text + " ± " + shown("reproduced_std"))
    spread = (" ± " + rows["reported_std"].astype(str)).where(rows["reported_std"] != "", "")
    mark = pd.Series(COMPUTED_MARK, index=rows.index).where(rows["reported_computed"] != "", "")
    text = text.where(~has_reported, text + " / " + rows["reported"].astype(str) + mark + spread)
    compared = rows["compared_to"] != ""
    delta = (" (Δ " + rows["paired_difference"].map(lambda v: f"{v:+.2f}" if v != "" else "")
             + rows["paired_difference_std"].map(lambda v: f" ± {v:.2f}" if v != "" else "") + ")")
    return text.where(~compared, text + delta)


TOLERANCE_NAMES = {"recall": "R@K", "rsum": "RSUM", "rank": "medr", "ranking": "mAP/NDCG", "variance": "log circ. var.",
                   "f1": "micro-F1"}


def tolerance_text(spec: TableSpec) -> str:
    """The tolerances of the metric families the table's protocols show."""
    families = dict.fromkeys(METRICS.get(m).tolerance for p in spec.protocols
                             for m in table_metrics(get_protocol(p).metrics))
    return ", ".join(f"{TOLERANCE_NAMES.get(f, f)} ±{spec.tolerance[f]}" for f in families if f is not None)




def row_verdict(cells: pd.DataFrame) -> str:
    """One row's verdict under one protocol, from its cells: ``did not train`` for a row that did
    not train, ``reported only`` for a row the harness does not run, ``not reported`` without a
    reported number, the verdict of its cells with a reported number where they share one, else
    each verdict with its metrics (``within: i2t_r5, ...; outside: i2t_r1``)."""
    if (cells["verdict"] == REPORTED_ONLY).all():
        return REPORTED_ONLY
    if (cells["trained"] == TRAINED_CELLS[NOT_TRAINED]).any():
        return NOT_TRAINED
    judged = cells[cells["reported"] != ""]
    if judged.empty:
        return NOT_REPORTED
    groups: dict[str, list[str]] = {}
    for metric, value in zip(judged["metric"], judged["verdict"]):
        groups.setdefault(value, []).append(metric)
    if len(groups) == 1:
        return next(iter(groups))
    return "; ".join(f"{value}: {', '.join(metrics)}" for value, metrics in groups.items())


def row_verdicts(rows: pd.DataFrame) -> pd.Series:
    """``row_verdict`` per (row, protocol)."""
    return rows.groupby(["row", "protocol"], sort=False).apply(row_verdict, include_groups=False)


def table_verdicts(rows: pd.DataFrame) -> set[str]:
    """The verdicts of the table's judged cells (with a reported number, of a row the harness
    runs), and ``did not train`` where a row did not."""
    judged = (rows["reported"] != "") & (rows["verdict"] != REPORTED_ONLY)
    untrained = rows["trained"] == TRAINED_CELLS[NOT_TRAINED]
    return set(rows.loc[judged | untrained, "verdict"].where(~untrained[judged | untrained], NOT_TRAINED))


def row_notes(order: pd.DataFrame) -> tuple[dict[str, int], list[str]]:
    """What each row ran (or why it is not run) as a numbered note: row -> its note's number, and
    the notes; rows with the same text share one."""
    texts = [f"ran: {r.ran}" if r.ran else "" for r in order.itertuples()]
    texts = [f"not run: {r.not_run}" if r.not_run else t for r, t in zip(order.itertuples(), texts)]
    numbers = {text: n for n, text in enumerate(dict.fromkeys(t for t in texts if t), start=1)}
    return ({row: numbers[t] for row, t in zip(order["row"], texts) if t},
            [f"- [{n}] {text}" for text, n in numbers.items()])


def to_markdown(spec: TableSpec, rows: pd.DataFrame | list[dict]) -> str:
    rows = pd.DataFrame(rows, columns=list(COLUMNS)).astype(object)
    rows = rows.assign(cell=_cell_text(rows))
    order = spec_rows(spec)
    verdicts = row_verdicts(rows)
    given = table_verdicts(rows)   # one of them (or none): said once, no verdict column
    note_of, notes = row_notes(order)
    lines = [f"# {spec.table} on {spec.dataset}", ""]
    lines += [f"- {t}" for t in spec.titles]
    if spec.dataset_kind == "smoke":
        lines += ["", f"**A smoke run** ({SMOKE_SCOPE}): it checks that every job of the table runs on the "
                  f"dataset's files; no number here is a reproduction."]
    lines += ["", "Cells: reproduced (± std over seeds) / reported; for a row compared with another, "
              "(Δ mean ± std over seeds of the paired differences). "
              f"Tolerance: {tolerance_text(spec)}."]
    if (rows["reported_computed"] != "").any():
        lines += [f"{COMPUTED_MARK}: a sum the source does not print, computed from the parts it prints."]
    if len(given) == 1:
        lines += [f"Verdict of every reproduced cell with a reported number: **{next(iter(given))}**."]
    elif not given:
        lines += ["Verdict: none; no reproduced cell has a reported number here."]
    else:
        lines += ["Verdict: per row, in its last column (of its cells with a reported number)."]
    if notes:
        lines += ["Rows: the paper's setting the row stands for; [n] is the note under the tables on what its "
                  "runs really ran (backbone or image input, dimensions, epochs per stage and batch, from the "
                  "resolved run configs) or why it is not run."]
    lines.append("")
    reported = reported_protocols(spec)
    for protocol in spec.protocols:
        metrics = table_metrics(get_protocol(protocol).metrics)
        of_protocol = rows[rows["protocol"] == protocol]
        grid = (of_protocol.pivot(index="row", columns="metric", values="cell").reindex(columns=metrics)
                .fillna("").apply(" | ".join, axis=1, result_type="reduce"))   # a reported-only row: its cells only
        shown = order[order["row"].isin(of_protocol["row"])]   # rows with cells under this protocol
        table = (shown[["row", "label"]]
                 .merge(of_protocol.drop_duplicates("row")[["row", "seeds", "ensemble_size"]], on="row", how="left")
                 .merge(grid.rename("cells"), left_on="row", right_index=True, how="left"))
        labels = [f"{label} [{note_of[row]}]" if row in note_of else label
                  for row, label in zip(table["row"], table["label"])]
        verdict_column = [] if len(given) <= 1 else [verdicts[(row, protocol)] for row in table["row"]]
        lines += [f"## Protocol `{protocol}`", "",
                  "| row | seeds | ens. | " + " | ".join(metrics) + (" | verdict |" if verdict_column else " |"),
                  "|---|---|---|" + "---|" * (len(metrics) + bool(verdict_column))]
        lines += [f"| {escape_cell(label)} | {seeds} | {ens} | {cells} |" + (f" {verdict} |" if verdict_column else "")
                  for label, seeds, ens, cells, verdict in zip(labels, table["seeds"], table["ensemble_size"],
                                                                table["cells"], verdict_column or [""] * len(labels))]
        lines.append("")
        lines.append("Sources of reported numbers (rows with the same source together):")
        sources = shown.merge(reported[reported["protocol"] == protocol], on="row", how="left")
        by_source: dict[str, list[str]] = {}
        for label, source in zip(sources["label"], _source(sources, "none").astype(str)):
            by_source.setdefault(source, []).append(label)
        lines += [f"- {'; '.join(labels)}: {source}" for source, labels in by_source.items()]
        lines.append("")
        lines += _training_lines(spec, of_protocol)
        lines += _saturated_lines(spec, of_protocol, metrics)
        lines += _paired_lines(spec, of_protocol)
    if notes:
        lines += ["## What the rows ran", "", *notes, ""]
    lines += table_environment_lines(rows, order)
    lines += unconfigured_lines(spec)
    lines += ledger_lines(spec)
    return "\n".join(lines) + "\n"


def table_environment_lines(rows: pd.DataFrame, order: pd.DataFrame) -> list[str]:
    """Each environment the rows' models were trained in (or evaluated in, for the authors'
    weights), with the rows from it."""
    of_row = rows.drop_duplicates("row").set_index("row")["environment"]
    found: dict[str, list[str]] = {}
    for row, label in zip(order["row"], order["label"]):
        for text in split_environments(of_row.get(row, "")):
            found.setdefault(text, []).append(label)
    return environment_lines("## Environment", found, "; ")


def unconfigured_lines(spec: TableSpec) -> list[str]:
    """The rows of the authors' released weights this table leaves out, and the config keys that
    would put them in."""
    if not spec.unconfigured:
        return []
    lines = ["Rows of the authors' released weights left out (their files are not configured for this dataset):"]
    lines += [f"- {r['label']}: set {', '.join(r['keys'])}" for r in spec.unconfigured]
    return lines + [""]


def _training_lines(spec: TableSpec, of_protocol: pd.DataFrame) -> list[str]:
    """The rows under a protocol's table that did not train, and those whose training is unknown, with why."""
    t = spec.training_check
    lines = []
    for state, intro in (
            (NOT_TRAINED, f"Rows that did not train (a run's main metric below {t['min_gain_share']:.0%} of the way "
                          f"from chance to its max, or its scores' relative spread below {t['min_score_spread']:g}); "
                          f"their cells are not judged:"),
            (UNKNOWN, "Rows whose training was not checked (no check in their evaluations; not taken as trained):")):
        rows = of_protocol[of_protocol["trained"] == TRAINED_CELLS[state]].drop_duplicates("row")
        if len(rows):
            lines += [intro, *("- " + rows["label"] + ": " + rows["training_check"]).tolist(), ""]
    return lines


def _saturated_lines(spec: TableSpec, of_protocol: pd.DataFrame, metrics: list[str]) -> list[str]:
    """The metric columns of a protocol's table whose every reproduced value is saturated."""
    share = spec.training_check["saturated_share"]
    lines = []
    for name in metrics:
        metric = METRICS.get(name)
        values = of_protocol.loc[(of_protocol["metric"] == name) & (of_protocol["reproduced"] != ""), "reproduced"]
        if len(values) and all(saturated(float(v), metric.best, metric.direction, share) for v in values):
            bound = f"≥ {share * metric.best:g}" if metric.direction == "higher" else f"≤ {metric.best / share:.3g}"
            lines.append(f"- {name} ({metric.label}): every row {bound}, within {1 - share:.0%} of its best "
                         f"({metric.best:g}): this column cannot tell the rows apart.")
    return ["Saturated columns:", *lines, ""] if lines else []


def _paired_lines(spec: TableSpec, of_protocol: pd.DataFrame) -> list[str]:
    """The paired t-test p of every metric (the Δ is in the cells), one line per compared row."""
    compared = of_protocol[of_protocol["compared_to"] != ""]
    if compared.empty:
        return []
    labels = {r.id: r.label for r in spec.rows}
    lines = ["Paired t-test p per metric (Δ in the cells: row − compared row, mean ± population std over seeds):"]
    for row_id, cells in compared.groupby("row", sort=False):
        first = cells.iloc[0]
        p = " · ".join(f"{m} {v}" if v != "" else f"{m} –" for m, v in zip(cells["metric"], cells["paired_p"]))
        lines.append(f"- {first['label']} vs {labels[first['compared_to']]} ({first['n_seeds']} seeds): {p}")
    return lines + [""]


def ledger_lines(spec: TableSpec) -> list[str]:
    """The deviation ledger under the tables, one section per source code: the switches each row
    runs at a value other than that code's, what the source values do, and the behaviours not
    reproduced, each once, with the rows it concerns where not all of the section's."""
    groups: dict[str, dict] = {}
    for row in spec.rows:
        for ledger in row.ledger:
            group = groups.setdefault(ledger["code"], {"rows": {}, "behaviour": {}, "deviations": {}})
            switched = group["rows"].setdefault(row.label, {})   # an ensemble's members: each switch once
            switched.update({f"`{s['key']}` = {s['runs']} (source: {s['source']})": None for s in ledger["switches"]})
            for switch in ledger["switches"]:
                group["behaviour"].setdefault((switch["key"], repr(switch["source"])),
                                              f"`{switch['key']}` = {switch['source']}: {switch['behaviour']}")
            for d in ledger["deviations"]:
                text = f"{d['name']}. Source code: {d['source']}. Here: {d['ours']}. Why: {d['why']}."
                group["deviations"].setdefault(text, {})[row.label] = None
    lines = ["## What each row runs against its source code", ""]
    for code, group in groups.items():
        lines += [f"### {code}", "", "Switches each row runs at a value other than this code's:", ""]
        lines += [f"- {label}: " + ("; ".join(switched) or "none (every switch at the source value)")
                  for label, switched in group["rows"].items()]
        if group["behaviour"]:
            lines += ["", "What the source values do:", ""]
            lines += [f"- {text}" for text in group["behaviour"].values()]
        if group["deviations"]:
            lines += ["", "Source behaviours not reproduced (every row above unless named):", ""]
            lines += [f"- {text}" + ("" if len(labels) == len(group["rows"]) else f" Rows: {'; '.join(labels)}.")
                      for text, labels in group["deviations"].items()]
        lines.append("")
    return lines


def write_table(args) -> None:
    spec = TableSpec.read(args.spec)
    aggregates = {Path(p).stem: RowAggregate.read(p) for p in args.rows}
    rows = build_rows(spec, aggregates)
    write_text(args.out_csv, to_csv(rows))
    write_markdown(args.out_md, args.out_html, to_markdown(spec, rows))


def _arguments(parser) -> None:
    parser.add_argument("--spec", required=True)
    parser.add_argument("--out-csv", required=True)
    parser.add_argument("--out-md", required=True)
    parser.add_argument("--out-html", help="the same Markdown as a page (snakemake --report shows it inline)")
    parser.add_argument("rows", nargs="*", help="row aggregate JSONs, named <row id>.json (none for a reported-only row)")


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, write_table, argv, dataset_config=False)


if __name__ == "__main__":
    main()
