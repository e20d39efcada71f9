"""Aggregate one table row over seeds: mean and (population, ddof=0) std per protocol and metric,
and every run's training check (``methods.metrics.training_check``), carried as the evaluations
wrote them for the tables and claims to judge with the configured thresholds."""
from __future__ import annotations

import numpy as np
import pandas as pd

from methods.cli import run_command
from methods.errors import HarnessError
from methods.job_records import Evaluation, RowAggregate, read_evaluation
from methods.report.environment import evaluation_environments


def _mean(values: pd.Series) -> float:
    # numpy's reductions over the values as given, not pandas' groupby kernels: those sum with
    # compensation (mean) and Welford's update (std), which differ from these in the last digit.
    return float(np.mean(values.tolist()))


def _std(values: pd.Series) -> float:
    return float(np.std(values.tolist()))


def seed_values(evals: list[Evaluation]) -> pd.DataFrame:
    """One line per run, protocol and metric its evaluation reports (the protocol's metrics, as the
    evaluation wrote them): ``protocol, metric, seed, value``, in the order of ``evals`` (values
    keep their JSON type). Every run must report the same metrics under the same protocols."""
    reported = {}
    for ev in evals:
        got = {res["protocol"]: tuple(res["metrics"]) for res in ev.results}
        first = reported.setdefault("runs", got)
        if got != first:
            raise HarnessError(f"the runs of one row report different protocols or metrics ({first} vs {got}, "
                               f"seed {ev.seed}): evaluations of different harness versions? re-run them")
    records = [(res["protocol"], metric, ev.seed, value)
               for ev in evals for res in ev.results for metric, value in res["metrics"].items()]
    return pd.DataFrame(records, columns=["protocol", "metric", "seed", "value"], dtype=object)


def training_checks(evals: list[Evaluation]) -> list[dict]:
    """One entry per run and protocol: ``seed``, ``split``, ``protocol`` and ``check`` (the result's
    ``training_check``; None where the evaluation has none: a protocol without a main metric, or an
    evaluation written before the check); an ensemble's entry adds ``members``, each member's
    ``run_dir``, ``seed`` and ``check`` of that protocol (None: written before the check)."""
    out = []
    for ev in evals:
        for res in ev.results:
            entry = {"seed": ev.seed, "split": ev.split, "protocol": res["protocol"],
                     "check": res.get("training_check")}
            members = ev.member_checks(res["protocol"])
            if members is not None:
                entry["members"] = members
            out.append(entry)
    return out


def aggregate(evals: list[Evaluation]) -> RowAggregate:
    sizes = {ev.ensemble_size for ev in evals}
    if len(sizes) != 1:
        raise HarnessError(f"runs of one row mix ensemble sizes {sorted(sizes)}")
    values = seed_values(evals)
    stats = values.groupby(["protocol", "metric"], sort=False)["value"].agg(mean=_mean, std=_std, values=list)
    seeds = values.groupby(["protocol", "metric"], sort=False)["seed"].agg(list)
    protocols: dict[str, dict] = {}
    for (protocol, metric), cell in stats.to_dict(orient="index").items():
        cell["seeds"] = seeds[(protocol, metric)]  # the seed of each value, for paired comparisons
        protocols.setdefault(protocol, {})[metric] = cell
    return RowAggregate(seeds=sorted(ev.seed for ev in evals), ensemble_size=sizes.pop(),
                        config_hashes=sorted({h for ev in evals for h in ev.config_hashes}),
                        protocols=protocols, training_checks=training_checks(evals),
                        environments=environments(evals))


def environments(evals: list[Evaluation]) -> list[dict]:
    """Each distinct environment of the row's models (``methods.report.environment``), with the
    seeds of the runs from it, in the order first met."""
    seen: dict[str, list[int]] = {}
    for ev in evals:
        for text in evaluation_environments(ev):
            if ev.seed not in seen.setdefault(text, []):
                seen[text].append(ev.seed)
    return [{"environment": text, "seeds": sorted(seeds)} for text, seeds in seen.items()]


def _arguments(parser) -> None:
    parser.add_argument("--out", required=True)
    parser.add_argument("evals", nargs="+", help="eval_<split>.json files of every seed (and split)")


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, lambda args: aggregate([read_evaluation(p) for p in args.evals]).write(args.out),
                argv, dataset_config=False)


if __name__ == "__main__":
    main()
