"""What a run config really runs (the ``ran`` column): each declared model kind describes its own
configs (``describe`` of its ``methods.model_kinds`` declaration), checked here against strings written by
hand for small hand-built configs, its oracle's ``DESCRIPTIONS`` (``tests/oracles/<kind>.py``, found by the
registered name); a model registered without them fails the suite."""
import re

import pytest

from methods.job_records import RunEvaluation
from methods.metrics.protocols import get_protocol
from methods.model_kinds import MODEL_KINDS, DescribeContext, describe_run
from methods.model_kinds.description import backbone_text
from methods.plan import Plan
from methods.report import markdown_table, table_rows
from methods.report.aggregate import aggregate
from tests.conftest import config_with_every_table
from tests.oracles import oracle_part
from tests.oracles._descriptions import BACKBONES, REAL
from tests.records import run_evaluation, table_spec


@pytest.mark.parametrize("kind", MODEL_KINDS.names())
def test_every_registered_model_has_hand_written_descriptions(kind):
    assert oracle_part(kind, "DESCRIPTIONS")


@pytest.mark.parametrize("kind", MODEL_KINDS.names())
def test_description_of_a_hand_built_config(kind):
    for cfg, dataset, expected in oracle_part(kind, "DESCRIPTIONS"):
        assert describe_run(cfg, DescribeContext(dataset, BACKBONES)) == expected


def test_backbone_weights_are_named():
    ctx = DescribeContext(REAL, BACKBONES)
    assert backbone_text("r50_random", ctx) == "ResNet-50 (random init)"
    assert backbone_text("r152", ctx) == "ResNet-152 (weights resnet152-394f9c45.pth)"


def test_plan_rows_carry_the_description_of_their_runs():
    plan = Plan(config_with_every_table())
    ctx = DescribeContext(plan.cfg["datasets"]["synthetic"], plan.cfg["backbones"])
    spec = plan.table_spec("table1", "synthetic").to_json()
    for row in spec["rows"]:
        described = [describe_run(plan.experiment("synthetic", e).config, ctx) for e in row["members"]]
        assert row["ran"] == " + ".join(dict.fromkeys(described))
    ft = next(r for r in spec["rows"] if r["id"] == "vsepp_resnet152_ft")
    assert "ResNet-152" in ft["label"] and ft["ran"].startswith("ResNet-18 (synthetic pre-trained), CNN fine-tuned")
    sgraf = next(r for r in spec["rows"] if r["id"] == "sgraf_sgraf")   # SGR + SAF: one description when alike
    assert " + " not in sgraf["ran"] and re.match(r"\d+×\d+ RoIAlign regions of ResNet-18", sgraf["ran"])
    figure = plan.figure_spec("metric_learning", "synthetic").to_json()
    assert all(r["ran"] for r in figure["rows"])


def test_table_shows_what_ran_beside_the_label():
    metrics = {m: 10.0 for m in get_protocol("f30k_1k").metrics}
    evals = [RunEvaluation.from_json(run_evaluation(seed, [{"protocol": "f30k_1k", "metrics": metrics}]), "test")
             for seed in (0, 1)]
    spec = {"table": "t", "dataset": "toy", "dataset_kind": "synthetic", "titles": ["a paper"],
            "protocols": ["f30k_1k"], "tolerance": {"recall": 2.0, "rsum": 6.0, "rank": 1.0},
            "training_check": {"min_gain_share": 0.05, "min_score_spread": 1e-4, "saturated_share": 0.99},
            "rows": [{"id": "a", "label": "A (ResNet-152)", "ran": "ResNet-18 (toy pre-trained), CNN frozen",
                      "paper": "p", "not_reported": None, "ensemble_size": 1, "reported": {}, "compare_to": None,
                      "ledger": [{"code": "org/repo", "switches": [], "deviations": []}]}]}
    spec = table_spec(spec.pop("rows"), **spec)
    rows = table_rows.build_rows(spec, {"a": aggregate(evals)})
    assert list(rows.columns[:5]) == ["table", "dataset", "row", "label", "ran"]
    assert set(rows["ran"]) == {"ResNet-18 (toy pre-trained), CNN frozen"}
    md = markdown_table.to_markdown(spec, rows)
    assert "| A (ResNet-152) [1] | 0 1 | 1 |" in md and "- [1] ran: ResNet-18 (toy pre-trained), CNN frozen" in md
