"""The rows of ``tables/<table>_<dataset>.csv``: one line per row, protocol and table metric with
``COLUMNS`` (empty cells are ""), from the table spec and the row aggregates: what each row ran,
its seeds and runs, whether it trained, the reproduced and reported values, their difference and
verdict (``methods.report.verdicts``), the paired difference from the row it compares to
(``methods.report.paired``) and its deviation ledger."""
from __future__ import annotations

import pandas as pd

from methods.errors import HarnessError
from methods.job_records import RowAggregate, TableRowSpec, TableSpec
from methods.metrics.declarations import METRICS, table_metrics, value_from
from methods.metrics.protocols import CHECKED_PROTOCOLS, STATISTICS_PROTOCOL, get_protocol
from methods.metrics.training_check import NOT_TRAINED, TrainingThresholds, row_training
from methods.report.environment import row_environment_text
from methods.report.paired import paired_statistics, seed_pairs
from methods.report.verdicts import TRAINED_CELLS, tolerance_for, verdict
from methods.report.wording import INCOMPARABLE_DATA

COLUMNS = ("table", "dataset", "row", "label", "ran", "paper", "protocol", "metric", "reproduced", "reproduced_std",
           "n_seeds", "seeds", "ensemble_size", "reported", "reported_std", "reported_computed",
           "reported_ensemble_size", "difference", "tolerance",
           "verdict", "trained", "training_check", "reported_source", "run_configs", "compared_to", "paired_difference",
           "paired_difference_std", "paired_p", "non_source_switches", "source_deviations", "environment")
KEYS = ["row", "protocol", "metric"]


def _frame(records, columns: list[str]) -> pd.DataFrame:
    """Records as a frame of Python objects: JSON ints stay ints and floats stay floats (an int
    and a float in one column would otherwise both become floats and print differently)."""
    return pd.DataFrame(list(records), columns=columns, dtype=object)


# digits kept in the CSV and shown in the markdown, by the metric's scale (micro-F1 is a 0-1
# fraction printed to three decimals in the label-wise paper; percentages to one or two)
CSV_DIGITS, SHOWN_DIGITS = {"unit": 4}, {"unit": 3}


def digits_of(metrics: pd.Series, table: dict[str, int], default: int) -> pd.Series:
    """Per metric, the digits ``table`` gives its scale (``default`` for the other scales)."""
    return metrics.map(lambda m: table.get(METRICS.get(m).scale, default))


def _rounded(values: pd.Series, metrics: pd.Series) -> pd.Series:
    # Python's round is correctly rounded at ...5; numpy's (and pandas') scales by 100 first and
    # rounds some of those halves the other way.
    return pd.Series([v if pd.isna(v) else round(float(v), d) for v, d in zip(values, digits_of(metrics, CSV_DIGITS, 2))],
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
                a, b = seed_pairs(row.id, row.compare_to, cell, base.protocols[protocol][metric])
                records.append((row.id, protocol, metric, row.compare_to, *paired_statistics(a, b)))
    return _frame(records, [*KEYS, "compared_to", "paired_difference", "paired_difference_std", "paired_p"])


def reported_sources(frame: pd.DataFrame, otherwise: str) -> pd.Series:
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
                     reported_source=reported_sources(df, "no reported number in the sources"),
                     compared_to=_blank(df["compared_to"]),
                     paired_difference=_blank(_rounded(df["paired_difference"], df["metric"]).where(df["compared_to"].notna())),
                     paired_difference_std=_blank(_rounded(df["paired_difference_std"], df["metric"])
                                                  .where(df["compared_to"].notna() & (df["n_seeds"] > 1))),
                     paired_p=_blank(df["paired_p"].map(lambda v: None if v is None or pd.isna(v) else float(f"{v:.3g}"))),
                     )[list(COLUMNS)]


def to_csv(rows: pd.DataFrame | list[dict]) -> str:
    """The table's rows as CSV text, in ``COLUMNS`` order."""
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype(object).to_csv(index=False, lineterminator="\n")
