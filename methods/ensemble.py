"""Ensemble = average of the members' similarity matrices (how VSRN, SCAN t-i+i-t and SGRAF
report their ensemble rows), evaluated under the dataset's protocols like a single model (with the
training check of the averaged matrix); each member's entry carries its own evaluation's training
checks per protocol (None: an evaluation written before the check), so that an ensemble of a member
that did not train is flagged too."""
from __future__ import annotations

import time
from pathlib import Path

from methods.cli import run_command
from methods.data.datasets import load_dataset_payload
from methods.job_records import EnsembleEvaluation, RunEvaluation
from methods.metrics.evaluation import evaluate_split, split_relevances
from methods.paths import eval_file, sims_file
from methods.scoring import average_similarities


def _ensemble(args) -> None:
    t0 = time.time()
    payload = load_dataset_payload(args.dataset_config)
    relevances = split_relevances(payload, args.split)
    runs = [Path(m) for m in args.members]
    sims = average_similarities([Path(sims_file(r, args.split)) for r in runs])
    members = [RunEvaluation.read(eval_file(r, args.split)) for r in runs]
    # an ensemble has a score matrix and no label predictions: evaluate_split leaves label-prediction
    # protocols to its members
    results = evaluate_split(sims, payload.dataset["protocols"], args.split, relevances, payload.dataset)
    EnsembleEvaluation(
        kind="ensemble", ensemble_size=len(runs), dataset=payload.name, split=args.split,
        members=[{"run_dir": str(r), "config_hash": m.config_hash, "seed": m.seed,
                  "training_checks": {res["protocol"]: res.get("training_check") for res in m.results},
                  "provenance": m.provenance}
                 for r, m in zip(runs, members)],
        seed=members[0].seed, results=results, provenance=members[0].provenance,
        wall_seconds={"total": time.time() - t0}).write(args.out)


def _arguments(parser) -> None:
    parser.add_argument("--split", required=True)
    parser.add_argument("--members", nargs="+", required=True, help="member run dirs (sims_<split>.npy, eval_<split>.json)")
    parser.add_argument("--out", required=True)


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, _ensemble, argv)


if __name__ == "__main__":
    main()
