"""Job records (``methods.job_records``): what a job writes, its reader reads back whole; a file of
another version (a key missing or unknown) is refused in one line naming the file and the key."""
import json

import pytest

from methods.config import REPO_ROOT, load_harness_config
from methods.errors import HarnessError
from methods.job_records import (ClaimsSpec, EnsembleEvaluation, FigureSpec, ReportSpec, RowAggregate, RunEvaluation,
                                 RuntimeJobSpec, RuntimeSpec, SummarySpec, TableSpec, read_evaluation)
from methods.plan import Plan
from tests.records import ensemble_evaluation, run_evaluation


@pytest.fixture(scope="module")
def plan():
    return Plan(load_harness_config(REPO_ROOT / "config" / "config.yaml"))


def test_every_spec_the_plan_writes_reads_back_equal(plan, tmp_path):
    """Each spec as the rules write it (``json.dumps`` of ``to_json``), read by its job's reader."""
    specs = [(TableSpec, plan.table_spec(t, d)) for t, d in sorted(plan.tables)]
    specs += [(FigureSpec, plan.figure_spec(f, d)) for f, d in sorted(plan.figures)]
    specs += [(SummarySpec, plan.summary_spec(d)) for d in plan.cfg["default_datasets"]]
    for paper in plan.papers:
        for dataset in plan.paper_datasets(paper):
            specs.append((ReportSpec, plan.report_spec(paper, dataset)))
            if (paper, dataset) in plan.claims:
                specs.append((ClaimsSpec, plan.claims_spec(paper, dataset)))
    assert {cls for cls, _ in specs} == {TableSpec, FigureSpec, SummarySpec, ReportSpec, ClaimsSpec}
    for i, (cls, spec) in enumerate(specs):
        path = tmp_path / f"{i}.json"
        path.write_text(json.dumps(spec.to_json()))
        assert cls.read(path) == spec


def test_a_record_with_a_missing_or_unknown_key_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "t.spec.json"
    spec = {"table": "t", "dataset": "d", "dataset_kind": "real", "titles": [], "tolerance": {}, "training_check": {},
            "protocols": [], "rows": []}
    path.write_text(json.dumps({k: v for k, v in spec.items() if k != "protocols"}))
    with pytest.raises(HarnessError, match=r"t\.spec\.json: not a table spec of this harness version \(missing keys "
                                           r"\['protocols'\]\): re-run the job that writes it"):
        TableSpec.read(path)
    path.write_text(json.dumps({**spec, "rows": [{"id": "a", "colour": "red"}]}))
    with pytest.raises(HarnessError, match=r"t\.spec\.json: rows\[0\]: not a table row of this harness version "
                                           r"\(unknown keys \['colour'\]; missing keys \['label', "):
        TableSpec.read(path)


def test_a_figure_rows_kind_details_are_written_beside_its_own_keys():
    """The settings a figure's kind adds to a row stay where the drawing reads them, and read back."""
    row = {"id": "k_2", "label": "K = 2", "model": "set_embedding", "method": "m", "loss": "l", "seeds": [0],
           "ensemble_size": 1, "runs": ["r"], "ran": "x", "overrides": ["model.set_size"], "setting": {"model.set_size": 2}}
    spec = FigureSpec.from_json({"figure": "f", "kind": "rsum_by_setting", "title": "t", "dataset": "d", "table": "t",
                                 "dataset_kind": "synthetic", "protocols": [], "rows": [row]}, "test")
    assert spec.rows[0].details == {"overrides": ["model.set_size"], "setting": {"model.set_size": 2}}
    assert spec.to_json()["rows"] == [row] and "split" not in spec.to_json()


def test_an_aggregate_written_before_the_training_check_reads_as_none(tmp_path):
    path = tmp_path / "row.json"
    path.write_text(json.dumps({"seeds": [0], "ensemble_size": 1, "config_hashes": ["c"], "protocols": {}}))
    assert RowAggregate.read(path).training_checks is None
    assert "training_checks" not in RowAggregate.read(path).to_json()


def test_an_evaluation_is_read_by_its_kind(tmp_path):
    single, ensemble = tmp_path / "single.json", tmp_path / "ensemble.json"
    single.write_text(json.dumps(run_evaluation(3, [], config_hash="h")))
    members = [{"run_dir": "runs/a/seed0", "config_hash": "a", "seed": 0, "training_checks": {}},
               {"run_dir": "runs/b/seed0", "config_hash": "b", "seed": 0, "training_checks": {}}]
    ensemble.write_text(json.dumps(ensemble_evaluation(0, [], members)))
    run, ens = read_evaluation(single), read_evaluation(ensemble)
    assert isinstance(run, RunEvaluation) and run.seed == 3 and run.config_hashes == ["h"]
    assert isinstance(ens, EnsembleEvaluation) and ens.config_hashes == ["a", "b"]
    assert ens.member_checks("p") == [{"run_dir": "runs/a/seed0", "seed": 0, "check": None},
                                      {"run_dir": "runs/b/seed0", "seed": 0, "check": None}]
    single.write_text(json.dumps({**run_evaluation(3, []), "kind": "bagged"}))
    with pytest.raises(HarnessError, match=r"single\.json: not an evaluation of this harness version \(kind 'bagged'"):
        read_evaluation(single)


def test_the_runtime_spec_reads_back_its_jobs_and_refuses_an_unknown_key(tmp_path):
    written = {"dataset": "toy", "rules": ["train", "table"], "papers": [["pb", "Paper B"], ["pa", "Paper A"]],
               "jobs": [{"rule": "train", "file": "b/train.tsv", "papers": ["pa"]},
                        {"rule": "table", "file": "b/table.tsv", "papers": []}]}
    path = tmp_path / "runtime.spec.json"
    path.write_text(json.dumps(written))
    spec = RuntimeSpec.read(path)
    assert spec.jobs[0] == RuntimeJobSpec(rule="train", file="b/train.tsv", papers=["pa"])
    assert json.dumps(spec.to_json()) == json.dumps(written)   # the same keys in the same order
    path.write_text(json.dumps({**written, "jobs": [{"rule": "train", "file": "f", "papers": [], "host": "x"}]}))
    with pytest.raises(HarnessError, match=r"runtime\.spec\.json: jobs\[0\]: not a job of the runtime table .*"
                                           r"unknown keys \['host'\]"):
        RuntimeSpec.read(path)
