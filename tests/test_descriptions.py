"""What a run config really runs (the ``ran`` column): each declared model kind describes its own
configs (``describe`` of its ``methods.model_kinds`` declaration), checked here against strings written by
hand for small hand-built configs, its oracle's ``DESCRIPTIONS`` (``tests/oracles/<kind>.py``, found by the
registered name); a model registered without them fails the suite."""
import re

import pytest

from methods.errors import HarnessError
from methods.job_records import RunEvaluation
from methods.metrics.protocols import get_protocol
from methods.model_kinds import MODEL_KINDS, DescribeContext, ModelKind, describe_run
from methods.model_kinds.declared import declared_kind, register_declared_kinds
from methods.model_kinds.description import backbone_text
from methods.plan import Plan
from methods.report import markdown_table, table_rows
from methods.report.aggregate import aggregate
from tests.conftest import config_with_every_table
from tests.oracles import oracle_part
from methods.plugins import PLUGINS_ENV
from methods.registry import Registry
from tests.oracles._descriptions import BACKBONES, REAL, TOY, run, text
from tests.records import run_evaluation, table_spec


@pytest.mark.parametrize("kind", MODEL_KINDS.names())
def test_every_registered_model_has_hand_written_descriptions(kind):
    assert oracle_part(kind, "DESCRIPTIONS")


@pytest.mark.parametrize("kind", MODEL_KINDS.names())
def test_description_of_a_hand_built_config(kind):
    for cfg, dataset, expected in oracle_part(kind, "DESCRIPTIONS"):
        assert describe_run(cfg, DescribeContext(dataset, BACKBONES)) == expected


TOY_BLOCK = {"type": "object", "properties": {"kind": {"const": "toy"}, "embed_dim": {}, "text": {}}}


def test_a_kind_declared_in_its_schema_block_describes_its_configs():
    """``x-model``: the image input and a description whose fields are shared wording or the block's keys."""
    declaration = {"image_input": "regions", "describe": "{regions} averaged, embed {embed_dim}, {text}"}
    kind = declared_kind("toy", {**TOY_BLOCK, "x-model": declaration}, "s.yaml")
    assert kind.image_input == "regions" and kind.set_sizes({}) is None and kind.internals({}) == frozenset()
    cfg = run({"kind": "toy", "embed_dim": 64, "text": text(32, 64, bidirectional=True)}, [(2, False)])
    assert kind.describe(cfg, DescribeContext(REAL, BACKBONES)) == \
        "36×2048 precomputed regions averaged, embed 64, bi-GRU 64, word 32"
    assert kind.describe(cfg, DescribeContext(TOY, BACKBONES)) == \
        "12×256 RoIAlign regions of ResNet-18 (toy pre-trained) conv4 averaged, embed 64, bi-GRU 64, word 32"


@pytest.mark.parametrize("declaration,message", [
    ({"image_input": "pixels", "describe": "{text}"}, r"s\.yaml: \$defs\.toy\.x-model\.image_input: 'pixels' is not"),
    ({"image_input": "regions", "describe": "{regions}, {width}"}, r"x-model\.describe: '\{width\}' is neither"),
    ({"image_input": "regions", "describe": "{regions"}, r"x-model\.describe: .*"),
    ({"image_input": "regions"}, r"x-model: declares two keys"),
])
def test_a_declaration_is_refused_by_its_key(declaration, message):
    with pytest.raises(HarnessError, match=message):
        declared_kind("toy", {**TOY_BLOCK, "x-model": declaration}, "s.yaml")


def test_a_kind_is_declared_once_and_only_by_a_model_block(tmp_path, monkeypatch):
    registry = Registry("model")
    registry.register("vsepp", ModelKind)          # a class of the same name as a declared block
    with pytest.raises(HarnessError, match=r"\$defs\.vsepp\.x-model: model kind 'vsepp' is also a ModelKind class"):
        register_declared_kinds(registry)
    schema = tmp_path / "workflow" / "schemas" / "method.schema.yaml"
    schema.parent.mkdir(parents=True)
    schema.write_text("$defs:\n  thing:\n    x-model: {image_input: regions, describe: x}\n    type: object\n")
    monkeypatch.setenv(PLUGINS_ENV, str(tmp_path))
    with pytest.raises(HarnessError, match=r"method\.schema\.yaml: \$defs\.thing\.x-model: only a model block"):
        register_declared_kinds(Registry("model"))


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
