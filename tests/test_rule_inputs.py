"""What the rules read and say, as pure functions of the plan, called here without Snakemake: the
dry run's notes (methods/dry_run.py), a rule's resources (methods/plan/resources.py) and the
inputs of a rule's jobs (methods/plan/rule_inputs.py), against the plan's own records."""
import pytest

from methods.estimate import estimate, table_work
from methods.plan import Plan
from methods.plan.dag_checks import InputChecks
from methods.dry_run import dry_run_lines
from methods.plan.resources import dataset_gpus, dataset_resource, job_resources
from methods.plan.rule_inputs import RuleInputs
from tests.conftest import config_with_every_table

COCO_IMAGES = {"train": 113_287, "dev": 5_000, "testall": 5_000}


@pytest.fixture(scope="module")
def plan():
    return Plan(config_with_every_table())


def test_a_dry_run_prices_each_real_table_once_and_no_synthetic_one(plan):
    asked = []

    def split_images(dataset):
        asked.append(dataset)
        return COCO_IMAGES

    lines = dry_run_lines(plan, [("table1", "coco"), ("table1", "coco"), ("table1", "synthetic")], [],
                          split_images, lambda: [])
    expected = estimate(table_work(plan, "table1", "coco", COCO_IMAGES), []).lines(
        "tables/table1_coco.csv",
        "python -m methods.benchmarks.run_cost --dataset coco --tables table1 --device cuda "
        "--write config/measured_costs.yaml")
    unconfigured = [f"tables/table1_coco.csv: row '{r['id']}' (the authors' released weights) is left out: set "
                    f"{', '.join(r['keys'])}" for r in plan.table("table1", "coco").unconfigured]
    # the claims the default config cannot test on COCO: their ResNeXt-101 + BERT rows need two keys
    untested = [f"claims of set_embeddings on coco: '{claim}' is not tested (a row it compares is left out): set "
                "backbones.resnext101_wsl.weights, text_encoders.bert_base_uncased.path"
                for claim in ("beats_vse_infinity_resnext_bert_coco", "ensemble_beats_the_best_record_coco")]
    assert lines == unconfigured + expected + untested and asked == ["coco"]


def test_a_dry_run_reads_the_measured_costs_once_for_all_its_tables(plan):
    reads = []
    dry_run_lines(plan, [("table1", "coco"), ("sgraf_t1", "coco"), ("sgraf_t1", "flickr")], [],
                  lambda d: COCO_IMAGES if d == "coco" else {"train": 29_000, "dev": 1_014, "test": 1_000},
                  lambda: reads.append(1) or [])
    assert reads == [1]


def test_a_dry_run_of_released_rows_names_those_left_out_without_an_estimate(plan):
    """The released rows' table (target released_<dataset>) trains nothing: no estimate, the rows it
    leaves out named once, as for the paper table itself."""
    left_out = plan.table("sgraf_t1", "flickr").unconfigured
    lines = dry_run_lines(plan, [], [("sgraf_t1", "flickr"), ("sgraf_t1", "flickr")],
                          lambda d: pytest.fail("no estimate"), lambda: pytest.fail("no costs"))
    assert left_out and lines == [f"tables/sgraf_t1_flickr.csv: row '{r['id']}' (the authors' released weights) is "
                                  f"left out: set {', '.join(r['keys'])}" for r in left_out]


def test_resources_take_a_datasets_override_and_portable_numerics_ask_for_no_gpu(plan):
    cfg = {**plan.cfg, "datasets": {**plan.cfg["datasets"]}}
    cfg["datasets"]["coco"] = {**cfg["datasets"]["coco"], "numerics": "native",
                               "resources": {"train": {"mem_mb": 12345}}}
    assert dataset_resource(cfg, "coco", "train", "mem_mb") == 12345
    assert dataset_resource(cfg, "coco", "train", "runtime") == cfg["resources"]["train"]["runtime"]
    assert job_resources(cfg, "coco", "train") == {"mem_mb": 12345, "runtime": cfg["resources"]["train"]["runtime"],
                                                   "gpu": cfg["resources"]["train"]["gpus"]}
    assert plan.cfg["datasets"]["synthetic"]["numerics"] == "portable" and dataset_gpus(cfg, "synthetic", "train") == 0


class NoChecks(InputChecks):
    """The checks of configured files, recorded instead of run (the synthetic data is not on disk)."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.asked = []

    def dataset(self, name):
        self.asked.append(("dataset", name))
        return {}

    def backbone(self, name):
        self.asked.append(("backbone", name))


def test_a_training_job_reads_its_experiments_files_after_their_checks(plan):
    checks = NoChecks(plan.cfg)
    inputs = RuleInputs(plan, checks)
    row = plan.row("table1", "synthetic", "vsepp_resnet152_ft")
    exp_id = row.members[0]
    exp = plan.experiment("synthetic", exp_id)
    got = inputs.train("synthetic", exp_id)
    layout = plan.layout
    assert got["exp"] == layout.experiment_config("synthetic", exp_id) and got["vocab"] == layout.vocab("synthetic")
    assert got["weights"] == plan.weights_input(exp.backbone)
    assert set(got["features"]) >= set(plan.image_feature_files("synthetic", exp_id, "train"))
    assert checks.asked == [("backbone", exp.backbone), ("dataset", "synthetic")]


def test_a_runtime_table_waits_for_its_datasets_targets_and_regions(plan):
    inputs = RuleInputs(plan, NoChecks(plan.cfg))
    got = inputs.runtime("synthetic")
    regions = [f for f in got if f.endswith("_ims.npy")]
    assert got[:len(got) - len(regions)] == plan.dataset_targets("synthetic")
    assert regions == [f"{plan.layout.precomp_dir('synthetic')}/{s}_ims.npy"
                       for s in plan.cfg["datasets"]["synthetic"]["splits"]]
    assert not [f for f in inputs.runtime("synthtags") if f.endswith("_ims.npy")]
