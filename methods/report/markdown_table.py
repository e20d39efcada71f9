"""The Markdown of a table (``tables/<table>_<dataset>.md``): a header (the papers' titles, what a
cell shows, the tolerances, the verdict every judged cell shares or a verdict column), one table
per protocol with the sources of its reported numbers, the rows that did not train, the saturated
columns and the paired t-tests under it; then what the rows ran, their environments, the released
rows left out and the deviation ledger."""
from __future__ import annotations

import pandas as pd

from methods.job_records import TableSpec
from methods.metrics.declarations import METRICS, table_metrics
from methods.metrics.protocols import get_protocol
from methods.metrics.training_check import NOT_TRAINED, UNKNOWN, saturated
from methods.report.cells import escape_cell
from methods.report.environment import environment_lines, split_environments
from methods.report.table_rows import (COLUMNS, SHOWN_DIGITS, digits_of, reported_protocols, reported_sources,
                                       spec_rows)
from methods.report.verdicts import TRAINED_CELLS, row_verdicts, table_verdicts
from methods.report.wording import SMOKE_SCOPE

COMPUTED_MARK = "Σ"   # a reported sum the source does not print, computed from its printed parts


def cell_text(rows: pd.DataFrame) -> pd.Series:
    """``reproduced[ ± std][ / reported[ ± spread]]`` per table cell (``—`` reproduced for a
    reported-only row; a computed reported sum marked ``Σ``); the verdicts are the row's
    (``row_verdicts``)."""
    has_std, has_reported = rows["reproduced_std"] != "", rows["reported"] != ""
    digits = digits_of(rows["metric"], SHOWN_DIGITS, 1)
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


def row_notes(order: pd.DataFrame) -> tuple[dict[str, int], list[str]]:
    """What each row ran (or why it is not run) as a numbered note: row -> its note's number, and
    the notes; rows with the same text share one."""
    texts = [f"ran: {r.ran}" if r.ran else "" for r in order.itertuples()]
    texts = [f"not run: {r.not_run}" if r.not_run else t for r, t in zip(order.itertuples(), texts)]
    numbers = {text: n for n, text in enumerate(dict.fromkeys(t for t in texts if t), start=1)}
    return ({row: numbers[t] for row, t in zip(order["row"], texts) if t},
            [f"- [{n}] {text}" for text, n in numbers.items()])


def header_lines(spec: TableSpec, rows: pd.DataFrame, given: set[str], has_notes: bool) -> list[str]:
    """The lines above the tables: title, the papers' titles, what a cell shows and the tolerances,
    the verdict ``given`` (the table's verdicts: one is said once, several put a verdict column in
    each table) and, with notes (``has_notes``), what the notes under the tables are."""
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
    if has_notes:
        lines += ["Rows: the paper's setting the row stands for; [n] is the note under the tables on what its "
                  "runs really ran (backbone or image input, dimensions, epochs per stage and batch, from the "
                  "resolved run configs) or why it is not run."]
    lines.append("")
    return lines


def grid_lines(protocol: str, metrics: list[str], of_protocol: pd.DataFrame, shown: pd.DataFrame,
               note_of: dict[str, int], verdicts: pd.Series | None) -> list[str]:
    """A protocol's table: per row ``shown`` (those with cells under it), its label with its note's
    number, seeds, ensemble size and cells, and its verdict where ``verdicts`` (per row and
    protocol) is given."""
    grid = (of_protocol.pivot(index="row", columns="metric", values="cell").reindex(columns=metrics)
            .fillna("").apply(" | ".join, axis=1, result_type="reduce"))   # a reported-only row: its cells only
    table = (shown[["row", "label"]]
             .merge(of_protocol.drop_duplicates("row")[["row", "seeds", "ensemble_size"]], on="row", how="left")
             .merge(grid.rename("cells"), left_on="row", right_index=True, how="left"))
    labels = [f"{label} [{note_of[row]}]" if row in note_of else label
              for row, label in zip(table["row"], table["label"])]
    verdict_column = [] if verdicts is None else [verdicts[(row, protocol)] for row in table["row"]]
    lines = [f"## Protocol `{protocol}`", "",
             "| row | seeds | ens. | " + " | ".join(metrics) + (" | verdict |" if verdict_column else " |"),
             "|---|---|---|" + "---|" * (len(metrics) + bool(verdict_column))]
    lines += [f"| {escape_cell(label)} | {seeds} | {ens} | {cells} |" + (f" {verdict} |" if verdict_column else "")
              for label, seeds, ens, cells, verdict in zip(labels, table["seeds"], table["ensemble_size"],
                                                            table["cells"], verdict_column or [""] * len(labels))]
    return lines + [""]


def source_lines(protocol: str, shown: pd.DataFrame, reported: pd.DataFrame) -> list[str]:
    """The sources of a protocol's reported numbers, each with the rows ``shown`` that it gives."""
    lines = ["Sources of reported numbers (rows with the same source together):"]
    sources = shown.merge(reported[reported["protocol"] == protocol], on="row", how="left")
    by_source: dict[str, list[str]] = {}
    for label, source in zip(sources["label"], reported_sources(sources, "none").astype(str)):
        by_source.setdefault(source, []).append(label)
    lines += [f"- {'; '.join(labels)}: {source}" for source, labels in by_source.items()]
    return lines + [""]


def protocol_lines(spec: TableSpec, protocol: str, rows: pd.DataFrame, order: pd.DataFrame, reported: pd.DataFrame,
                   note_of: dict[str, int], verdicts: pd.Series | None) -> list[str]:
    """A protocol's section: its table, its sources, and under them the rows that did not train,
    the saturated columns and the paired t-tests."""
    metrics = table_metrics(get_protocol(protocol).metrics)
    of_protocol = rows[rows["protocol"] == protocol]
    shown = order[order["row"].isin(of_protocol["row"])]   # rows with cells under this protocol
    return (grid_lines(protocol, metrics, of_protocol, shown, note_of, verdicts)
            + source_lines(protocol, shown, reported)
            + _training_lines(spec, of_protocol)
            + _saturated_lines(spec, of_protocol, metrics)
            + _paired_lines(spec, of_protocol))


def to_markdown(spec: TableSpec, rows: pd.DataFrame | list[dict]) -> str:
    """The table's Markdown, from its spec and its rows (``COLUMNS``)."""
    rows = pd.DataFrame(rows, columns=list(COLUMNS)).astype(object)
    rows = rows.assign(cell=cell_text(rows))
    order = spec_rows(spec)
    verdicts = row_verdicts(rows)
    given = table_verdicts(rows)   # one of them (or none): said once, no verdict column
    note_of, notes = row_notes(order)
    lines = header_lines(spec, rows, given, bool(notes))
    reported = reported_protocols(spec)
    for protocol in spec.protocols:
        lines += protocol_lines(spec, protocol, rows, order, reported, note_of, verdicts if len(given) > 1 else None)
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
    """The rows this table leaves out (the authors' released weights, or a BERT folder, not
    configured), and the config keys that would put them in."""
    if not spec.unconfigured:
        return []
    lines = ["Rows left out (their files are not configured for this dataset):"]
    lines += [f"- {r['label']} ({r['needs']}): set {', '.join(r['keys'])}" for r in spec.unconfigured]
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
