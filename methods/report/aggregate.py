"""Aggregate one table row over seeds: mean and (population, ddof=0) std per protocol and metric."""
from __future__ import annotations

import argparse

import numpy as np

from methods.cli import run_cli
from methods.errors import HarnessError
from methods.io import read_json, write_json
from methods.metrics.retrieval import METRIC_NAMES


def aggregate(evals: list[dict]) -> dict:
    by_protocol: dict[str, list[dict]] = {}
    for ev in evals:
        for res in ev["results"]:
            by_protocol.setdefault(res["protocol"], []).append(res["metrics"])
    sizes = {ev["ensemble_size"] for ev in evals}
    if len(sizes) != 1:
        raise HarnessError(f"runs of one row mix ensemble sizes {sorted(sizes)}")
    out = {"seeds": sorted(ev["seed"] for ev in evals), "ensemble_size": sizes.pop(),
           "config_hashes": sorted({ev.get("config_hash") or m["config_hash"] for ev in evals
                                    for m in ev.get("members", [{"config_hash": ev.get("config_hash")}])}),
           "protocols": {}}
    for protocol, runs in by_protocol.items():
        out["protocols"][protocol] = {
            m: {"mean": float(np.mean([r[m] for r in runs])), "std": float(np.std([r[m] for r in runs])),
                "values": [r[m] for r in runs]} for m in METRIC_NAMES}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("evals", nargs="+", help="eval_<split>.json files of every seed (and split)")
    args = parser.parse_args(argv)
    run_cli(lambda: write_json(args.out, aggregate([read_json(p) for p in args.evals])))


if __name__ == "__main__":
    main()
