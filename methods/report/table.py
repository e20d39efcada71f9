"""Build ``tables/<table>_<dataset>.csv`` (+ ``.md``): per row, protocol and metric the reproduced
value (mean, std over seeds), the reported value, their difference and a verdict.

Verdicts: ``within`` / ``outside`` the configured tolerance; ``not comparable`` when the data
is synthetic or the reported row is an ensemble of another size than the reproduced one (a
single model is never judged against an ensemble number); ``not reported`` when the sources
give no number for the cell.

The columns of a protocol are the metrics it reports that are declared ``in_table``
(``methods.metrics``), in the protocol's order; each metric's declaration names its tolerance.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from methods.cli import run_command
from methods.errors import HarnessError
from methods.io import read_json, write_text
from methods.metrics.protocols import get_protocol
from methods.metrics.registry import METRICS, table_metrics

COLUMNS = ("table", "dataset", "row", "label", "paper", "protocol", "metric", "reproduced", "reproduced_std",
           "n_seeds", "seeds", "ensemble_size", "reported", "reported_std", "reported_ensemble_size", "difference",
           "tolerance",
           "verdict", "reported_source", "run_configs")
KEYS = ["row", "protocol", "metric"]


def tolerance_for(metric: str, tolerance: dict) -> float:
    """The configured tolerance for ``metric``: the entry its declaration names."""
    key = METRICS.get(metric).tolerance
    if key is None:
        raise HarnessError(f"metric '{metric}' is shown in tables but declares no tolerance")
    return tolerance[key]


def verdict(reproduced: float, reported: float | None, synthetic: bool, ens_repro: int, ens_reported: int | None,
            tol: float) -> str:
    if reported is None:
        return "not reported"
    if synthetic:
        return "not comparable (synthetic data)"
    if ens_reported != ens_repro:
        return f"not comparable (ensemble of {ens_reported} vs {ens_repro})"
    return "within" if abs(reproduced - reported) <= tol + 1e-9 else "outside"


def _frame(records, columns: list[str]) -> pd.DataFrame:
    """Records as a frame of Python objects: JSON ints stay ints and floats stay floats (an int
    and a float in one column would otherwise both become floats and print differently)."""
    return pd.DataFrame(list(records), columns=columns, dtype=object)


def _round2(values: pd.Series) -> pd.Series:
    # Python's round is correctly rounded at ...5; numpy's (and pandas') scales by 100 first and
    # rounds some of those halves the other way.
    return values.map(lambda v: round(float(v), 2)).astype(object)


def _blank(values: pd.Series) -> pd.Series:
    """Missing values as empty cells."""
    return values.astype(object).where(values.notna(), "")


def _optional(values: pd.Series) -> list:
    """Missing values as None."""
    return [None if pd.isna(v) else v for v in values]


def cells(spec: dict) -> pd.DataFrame:
    """One line per row, protocol and table metric, in table order."""
    return _frame(((row["id"], protocol, metric) for row in spec["rows"] for protocol in spec["protocols"]
                   for metric in table_metrics(get_protocol(protocol).metrics)), KEYS)


def spec_rows(spec: dict) -> pd.DataFrame:
    """Label, paper and the reason no number is reported (if given) of every row."""
    return _frame(((row["id"], row["label"], row["paper"], row.get("not_reported")) for row in spec["rows"]),
                  ["row", "label", "paper", "not_reported"])


def reported_protocols(spec: dict) -> pd.DataFrame:
    """The reported entry of each row and protocol the sources give: ensemble size and source."""
    return _frame(((row["id"], protocol, True, rep["ensemble_size"], rep["source"])
                   for row in spec["rows"] for protocol, rep in row["reported"].items() if rep),
                  ["row", "protocol", "has_reported_entry", "reported_ensemble_size", "source"])


def reported_values(spec: dict) -> pd.DataFrame:
    """The reported numbers (and their spread where given), one line per row, protocol and metric."""
    return _frame(((row["id"], protocol, metric, value, (rep.get("metrics_std") or {}).get(metric))
                   for row in spec["rows"] for protocol, rep in row["reported"].items() if rep
                   for metric, value in rep["metrics"].items() if value is not None),
                  [*KEYS, "reported", "reported_std"])


def reproduced_values(aggregates: dict[str, dict]) -> pd.DataFrame:
    """Mean and std over seeds of every row, protocol and metric of the row aggregates."""
    return _frame(((row, protocol, metric, stats["mean"], stats["std"])
                   for row, agg in aggregates.items() for protocol, metrics in agg["protocols"].items()
                   for metric, stats in metrics.items()),
                  [*KEYS, "mean", "std"])


def row_runs(aggregates: dict[str, dict]) -> pd.DataFrame:
    """Seeds, ensemble size and run configs of every row aggregate."""
    return _frame(((row, len(agg["seeds"]), " ".join(map(str, agg["seeds"])), agg["ensemble_size"],
                    " ".join(agg["config_hashes"])) for row, agg in aggregates.items()),
                  ["row", "n_seeds", "seeds", "ensemble_size", "run_configs"])


def _source(frame: pd.DataFrame, otherwise: str) -> pd.Series:
    """The reported entry's source; without an entry, the row's reason (if any) or ``otherwise``."""
    reason = frame["not_reported"].where(frame["not_reported"].notna() & (frame["not_reported"] != ""), otherwise)
    return frame["source"].astype(object).where(frame["has_reported_entry"].notna(), reason)


def _check_complete(frame: pd.DataFrame, column: str, what: str) -> None:
    missing = frame.loc[frame[column].isna(), KEYS]
    if len(missing):
        first = missing.iloc[0]
        raise HarnessError(f"{len(missing)} table cell(s) without {what}, e.g. row '{first['row']}', "
                           f"protocol '{first['protocol']}', metric '{first['metric']}'")


def build_rows(spec: dict, aggregates: dict[str, dict]) -> pd.DataFrame:
    """The table, one line per row, protocol and table metric, with ``COLUMNS`` (empty cells are "")."""
    synthetic = spec["dataset_kind"] == "synthetic"
    table = cells(spec)
    tolerances = _frame(((m, tolerance_for(m, spec["tolerance"])) for m in dict.fromkeys(table["metric"])),
                        ["metric", "tolerance"])
    df = (table
          .merge(spec_rows(spec), on="row", how="left", validate="many_to_one")
          .merge(row_runs(aggregates), on="row", how="left", validate="many_to_one")
          .merge(reproduced_values(aggregates), on=KEYS, how="left", validate="one_to_one")
          .merge(reported_protocols(spec), on=["row", "protocol"], how="left", validate="many_to_one")
          .merge(reported_values(spec), on=KEYS, how="left", validate="one_to_one")
          .merge(tolerances, on="metric", how="left", validate="many_to_one"))
    _check_complete(df, "ensemble_size", "a row aggregate")
    _check_complete(df, "mean", "a reproduced value")
    has_reported = df["reported"].notna()
    df["verdict"] = [verdict(value, reported, synthetic, ens, ens_reported, tol)
                     for value, reported, ens, ens_reported, tol
                     in zip(df["mean"], _optional(df["reported"]), df["ensemble_size"],
                            _optional(df["reported_ensemble_size"]), df["tolerance"])]
    df["difference"] = _blank(_round2(pd.to_numeric(df["mean"]) - pd.to_numeric(df["reported"]))
                              .where(has_reported))
    return df.assign(table=spec["table"], dataset=spec["dataset"],
                     reproduced=_round2(df["mean"]),
                     reproduced_std=_round2(df["std"]).where(df["n_seeds"] > 1, ""),
                     reported=_blank(df["reported"]),
                     reported_std=_blank(df["reported_std"]),
                     reported_ensemble_size=_blank(df["reported_ensemble_size"]),
                     reported_source=_source(df, "no reported number in the sources"))[list(COLUMNS)]


def to_csv(rows: pd.DataFrame | list[dict]) -> str:
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype(object).to_csv(index=False, lineterminator="\n")


def _cell_text(rows: pd.DataFrame) -> pd.Series:
    """``reproduced[ ± std][ / reported[ ± spread] — verdict]`` per table cell."""
    has_std, has_reported = rows["reproduced_std"] != "", rows["reported"] != ""
    text = rows["reproduced"].map("{:.1f}".format)
    text = text.where(~has_std, text + " ± " + rows["reproduced_std"].map(lambda v: f"{v:.1f}" if v != "" else ""))
    spread = (" ± " + rows["reported_std"].astype(str)).where(rows["reported_std"] != "", "")
    return text.where(~has_reported, text + " / " + rows["reported"].astype(str) + spread + " — " + rows["verdict"])


def to_markdown(spec: dict, rows: pd.DataFrame | list[dict]) -> str:
    rows = pd.DataFrame(rows, columns=list(COLUMNS)).astype(object)
    rows = rows.assign(cell=_cell_text(rows))
    order = spec_rows(spec)
    lines = [f"# {spec['table']} on {spec['dataset']}", ""]
    lines += [f"- {t}" for t in spec["titles"]]
    lines += ["", "Cells: reproduced (± std over seeds) / reported — verdict. "
              f"Tolerance: R@K ±{spec['tolerance']['recall']}, RSUM ±{spec['tolerance']['rsum']}, "
              f"medr ±{spec['tolerance']['rank']}.", ""]
    reported = reported_protocols(spec)
    for protocol in spec["protocols"]:
        metrics = table_metrics(get_protocol(protocol).metrics)
        of_protocol = rows[rows["protocol"] == protocol]
        grid = (of_protocol.pivot(index="row", columns="metric", values="cell").reindex(columns=metrics)
                .apply(" | ".join, axis=1, result_type="reduce"))
        table = (order[["row", "label"]]
                 .merge(of_protocol.drop_duplicates("row")[["row", "seeds", "ensemble_size"]], on="row", how="left")
                 .merge(grid.rename("cells"), left_on="row", right_index=True, how="left"))
        lines += [f"## Protocol `{protocol}`", "",
                  "| row | seeds | ens. | " + " | ".join(metrics) + " |",
                  "|---|---|---|" + "---|" * len(metrics)]
        lines += ("| " + table["label"] + " | " + table["seeds"].astype(str) + " | "
                  + table["ensemble_size"].astype(str) + " | " + table["cells"] + " |").tolist()
        lines.append("")
        lines.append("Sources of reported numbers:")
        sources = order.merge(reported[reported["protocol"] == protocol], on="row", how="left")
        lines += ("- " + sources["label"] + ": " + _source(sources, "none").astype(str)).tolist()
        lines.append("")
    return "\n".join(lines) + "\n"


def write_table(args) -> None:
    spec = read_json(args.spec)
    aggregates = {Path(p).stem: read_json(p) for p in args.rows}
    rows = build_rows(spec, aggregates)
    write_text(args.out_csv, to_csv(rows))
    write_text(args.out_md, to_markdown(spec, rows))


def _arguments(parser) -> None:
    parser.add_argument("--spec", required=True)
    parser.add_argument("--out-csv", required=True)
    parser.add_argument("--out-md", required=True)
    parser.add_argument("rows", nargs="+", help="row aggregate JSONs, named <row id>.json")


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, write_table, argv, dataset_config=False)


if __name__ == "__main__":
    main()
