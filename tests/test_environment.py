"""Where a number came from (methods.report.environment): each model's training environment as
one line, written by hand here from provenance records as the jobs write them, collected per
row over its seeds and ensemble members, and shown by the tables and the reproduction reports."""
import json

from methods.job_records import EnsembleEvaluation, RowAggregate, RunEvaluation
from methods.metrics.protocols import get_protocol
from methods.report import aggregate, markdown_table, table_rows
from methods.report.environment import environment_text, row_environment_text
from tests.records import ensemble_evaluation, run_evaluation, table_spec

CPU_TRAINING = {"git_commit": "2a846afcd505c9d2d1e89477e3eff24c1fd4b357", "torch": "2.14.1+cu130", "cuda": "13.0",
                "cudnn": None, "device": "cpu (x86_64)", "threads": 1, "precision": "fp32",
                "numerics": {"mode": "portable", "threads": 1}}
GPU_TRAINING = {"git_commit": "46e74de0000000000000000000000000000000-dirty", "torch": "2.11.0+cu130", "cuda": "13.0",
                "cudnn": 91200, "device": "NVIDIA H200", "threads": 16, "precision": "fp16 autocast",
                "numerics": {"mode": "native"}}


def test_an_environment_is_one_line_written_by_hand():
    assert environment_text({"device": "other", "training": CPU_TRAINING}) == (
        "trained with harness 2a846af, torch 2.14.1+cu130, cpu (x86_64), fp32, 1 thread, numerics portable")
    assert environment_text({"training": GPU_TRAINING}) == (
        "trained with harness 46e74de-dirty, torch 2.11.0+cu130, CUDA 13.0, cuDNN 91200, NVIDIA H200, "
        "fp16 autocast, 16 threads, numerics native")
    # the authors' weights: no training of ours, so the evaluation's environment, said as such
    evaluation = {k: v for k, v in GPU_TRAINING.items() if k != "precision"}
    assert environment_text({**evaluation, "training": None}) == (
        "authors' weights (trained elsewhere), evaluated with harness 46e74de-dirty, torch 2.11.0+cu130, CUDA 13.0, "
        "cuDNN 91200, NVIDIA H200, 16 threads, numerics native")
    # an evaluation of an older version: written at the end of its training job, so that job's
    assert environment_text(evaluation).startswith("trained with harness 46e74de-dirty, torch 2.11.0+cu130,")


def _eval(seed, training):
    metrics = {m: 10.0 for m in get_protocol("f30k_1k").metrics}
    return run_evaluation(seed, [{"protocol": "f30k_1k", "metrics": metrics}], provenance={"training": training})


def test_a_rows_environments_are_collected_with_their_seeds_and_shown_under_its_table():
    evals = [RunEvaluation.from_json(_eval(s, t), "e") for s, t in ((0, CPU_TRAINING), (1, GPU_TRAINING),
                                                                     (2, CPU_TRAINING))]
    agg = aggregate.aggregate(evals)
    cpu, gpu = environment_text({"training": CPU_TRAINING}), environment_text({"training": GPU_TRAINING})
    assert agg.environments == [{"environment": cpu, "seeds": [0, 2]}, {"environment": gpu, "seeds": [1]}]
    one = aggregate.aggregate(evals[:1])
    spec = table_spec([{"id": "mixed", "label": "MIXED"}, {"id": "one", "label": "ONE"}],
                      protocols=["f30k_1k"], tolerance={"recall": 2.0, "rsum": 6.0, "rank": 1.0},
                      training_check={"min_gain_share": 0.05, "min_score_spread": 1e-4, "saturated_share": 0.99})
    rows = table_rows.build_rows(spec, {"mixed": agg, "one": one})
    assert set(rows.loc[rows["row"] == "one", "environment"]) == {cpu}
    assert set(rows.loc[rows["row"] == "mixed", "environment"]) == {f"{cpu} (seeds 0 2); {gpu} (seeds 1)"}
    md = markdown_table.to_markdown(spec, rows)
    section = md.split("## Environment\n\n")[1].split("\n\n")[0].splitlines()
    assert section == [f"- {cpu} (seeds 0 2): MIXED", f"- {gpu} (seeds 1): MIXED", f"- {cpu}: ONE"]


def test_an_ensembles_environments_are_its_members():
    metrics = {m: 10.0 for m in get_protocol("f30k_1k").metrics}
    members = [{"run_dir": f"r{i}", "config_hash": f"c{i}", "seed": 0, "training_checks": {},
                "provenance": {"training": t}} for i, t in enumerate((CPU_TRAINING, GPU_TRAINING))]
    ev = EnsembleEvaluation.from_json(ensemble_evaluation(0, [{"protocol": "f30k_1k", "metrics": metrics}], members), "e")
    assert [e["environment"] for e in aggregate.aggregate([ev]).environments] == [
        environment_text({"training": CPU_TRAINING}), environment_text({"training": GPU_TRAINING})]


def test_an_aggregate_written_before_environments_reads_and_shows_none(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"seeds": [0], "ensemble_size": 1, "config_hashes": ["c"], "protocols": {},
                                "training_checks": None}))
    assert RowAggregate.read(path).environments is None and row_environment_text(RowAggregate.read(path).environments) == ""
