"""Build ``tables/<table>_<dataset>.csv`` (+ ``.md``): per row, protocol and metric the reproduced
value (mean, std over seeds), the reported value, their difference and a verdict.

Verdicts: ``within`` / ``outside`` the configured tolerance; ``not comparable`` when the data
is synthetic or the reported row is an ensemble of another size than the reproduced one (a
single model is never judged against an ensemble number); ``not reported`` when the sources
give no number for the cell.
"""
from __future__ import annotations

import argparse
import csv
import io
from pathlib import Path

from methods.cli import run_cli
from methods.io import read_json, write_text

TABLE_METRICS = ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum", "i2t_medr", "t2i_medr")
COLUMNS = ("table", "dataset", "row", "label", "paper", "protocol", "metric", "reproduced", "reproduced_std",
           "n_seeds", "seeds", "ensemble_size", "reported", "reported_std", "reported_ensemble_size", "difference",
           "tolerance",
           "verdict", "reported_source", "run_configs")


def tolerance_for(metric: str, tolerance: dict) -> float:
    if metric == "rsum":
        return tolerance["rsum"]
    return tolerance["rank"] if metric.endswith("medr") else tolerance["recall"]


def verdict(reproduced: float, reported: float | None, synthetic: bool, ens_repro: int, ens_reported: int | None,
            tol: float) -> str:
    if reported is None:
        return "not reported"
    if synthetic:
        return "not comparable (synthetic data)"
    if ens_reported != ens_repro:
        return f"not comparable (ensemble of {ens_reported} vs {ens_repro})"
    return "within" if abs(reproduced - reported) <= tol + 1e-9 else "outside"


def build_rows(spec: dict, aggregates: dict[str, dict]) -> list[dict]:
    synthetic = spec["dataset_kind"] == "synthetic"
    out = []
    for row in spec["rows"]:
        agg = aggregates[row["id"]]
        for protocol in spec["protocols"]:
            rep = row["reported"].get(protocol)
            stats = agg["protocols"][protocol]
            for metric in TABLE_METRICS:
                value, std = stats[metric]["mean"], stats[metric]["std"]
                reported = rep["metrics"].get(metric) if rep else None
                reported_std = (rep.get("metrics_std") or {}).get(metric) if reported is not None else None
                tol = tolerance_for(metric, spec["tolerance"])
                out.append({
                    "table": spec["table"], "dataset": spec["dataset"], "row": row["id"], "label": row["label"],
                    "paper": row["paper"], "protocol": protocol, "metric": metric,
                    "reproduced": round(value, 2), "reproduced_std": round(std, 2) if len(agg["seeds"]) > 1 else "",
                    "n_seeds": len(agg["seeds"]), "seeds": " ".join(map(str, agg["seeds"])),
                    "ensemble_size": agg["ensemble_size"], "reported": "" if reported is None else reported,
                    "reported_std": "" if reported_std is None else reported_std,
                    "reported_ensemble_size": rep["ensemble_size"] if rep else "",
                    "difference": "" if reported is None else round(value - reported, 2), "tolerance": tol,
                    "verdict": verdict(value, reported, synthetic, agg["ensemble_size"],
                                       rep["ensemble_size"] if rep else None, tol),
                    "reported_source": rep["source"] if rep else (row.get("not_reported") or "no reported number in the sources"),
                    "run_configs": " ".join(agg["config_hashes"]),
                })
    return out


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def to_markdown(spec: dict, rows: list[dict]) -> str:
    lines = [f"# {spec['table']} on {spec['dataset']}", ""]
    lines += [f"- {t}" for t in spec["titles"]]
    lines += ["", "Cells: reproduced (± std over seeds) / reported — verdict. "
              f"Tolerance: R@K ±{spec['tolerance']['recall']}, RSUM ±{spec['tolerance']['rsum']}, "
              f"medr ±{spec['tolerance']['rank']}.", ""]
    for protocol in spec["protocols"]:
        lines += [f"## Protocol `{protocol}`", "",
                  "| row | seeds | ens. | " + " | ".join(TABLE_METRICS) + " |",
                  "|---|---|---|" + "---|" * len(TABLE_METRICS)]
        for row in spec["rows"]:
            cells = {r["metric"]: r for r in rows if r["row"] == row["id"] and r["protocol"] == protocol}
            first = next(iter(cells.values()))

            def fmt(r: dict) -> str:
                s = f"{r['reproduced']:.1f}" + (f" ± {r['reproduced_std']:.1f}" if r["reproduced_std"] != "" else "")
                if r["reported"] != "":
                    spread = f" ± {r['reported_std']}" if r["reported_std"] != "" else ""
                    s += f" / {r['reported']}{spread} — {r['verdict']}"
                return s

            lines.append(f"| {row['label']} | {first['seeds']} | {first['ensemble_size']} | "
                         + " | ".join(fmt(cells[m]) for m in TABLE_METRICS) + " |")
        lines.append("")
        lines.append("Sources of reported numbers:")
        for row in spec["rows"]:
            rep = row["reported"].get(protocol)
            lines.append(f"- {row['label']}: {rep['source'] if rep else (row.get('not_reported') or 'none')}")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True)
    parser.add_argument("--out-csv", required=True)
    parser.add_argument("--out-md", required=True)
    parser.add_argument("rows", nargs="+", help="row aggregate JSONs, named <row id>.json")
    args = parser.parse_args(argv)

    def _run() -> None:
        spec = read_json(args.spec)
        aggregates = {Path(p).stem: read_json(p) for p in args.rows}
        rows = build_rows(spec, aggregates)
        write_text(args.out_csv, to_csv(rows))
        write_text(args.out_md, to_markdown(spec, rows))

    run_cli(_run)


if __name__ == "__main__":
    main()
