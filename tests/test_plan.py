"""The plan of the metric-learning study: 2 models x 4 losses x 5 seeds with the study's schedules."""
import copy
import dataclasses

import pytest

from methods.config import REPO_ROOT, load_harness_config, load_yaml
from methods.errors import HarnessError
from methods.plan import Plan, resolve_method_config
from tests.conftest import config_with_every_table

CONFIG = REPO_ROOT / "config" / "config.yaml"


@pytest.fixture(scope="module")
def plan():
    return Plan(config_with_every_table())


def stage_schedule(cfg):
    return [(s["epochs"], s["schedule"].get("decay_epochs"), s["finetune_backbone"]) for s in cfg["training"]["stages"]]


@pytest.mark.parametrize("dataset", ["flickr", "coco"])
def test_study_rows_have_the_papers_settings(plan, dataset):
    table = plan.table("metric_learning", dataset)
    assert len(table.rows) == 8 and all(r.seeds == [0, 1, 2, 3, 4] and r.ensemble_size == 1 for r in table.rows)
    configs = {r.id: plan.experiment(dataset, r.members[0]).config for r in table.rows}
    assert len({plan.experiment(dataset, r.members[0]).id for r in table.rows}) == 8
    vsrn_decay = 10 if dataset == "flickr" else 15
    vsrn_ap_decay = 50 if dataset == "flickr" else 75
    for row_id, cfg in configs.items():
        model, loss = row_id.split("_", 1)
        assert cfg["model"]["kind"] == model and cfg["loss"]["kind"] == loss
        # the resolved loss carries its own parameters only (no margin left over from the base)
        if loss == "triplet_hardest":
            assert cfg["loss"] == {"kind": loss, "margin": 0.2, **({"warmup_sum_epochs": 0} if model == "vsepp" else {})}
        elif loss == "triplet_sum":
            assert cfg["loss"] == {"kind": loss, "margin": 0.2}
        else:
            assert cfg["loss"] == {"kind": loss, "tau": {"nt_xent": 0.1, "smooth_ap": 0.01}[loss]}
        assert cfg["training"]["batching"] == ("images" if loss == "smooth_ap" else "captions")
        assert cfg["training"]["batch_positives"] == ("same_image" if loss == "smooth_ap" else "diagonal")
        assert cfg["training"]["amp"] is False
        assert cfg["training"]["batch_size"] == 128 and cfg["training"]["stages"][0]["lr"] == 2e-4
        if model == "vsepp":  # ResNet-50, frozen for the whole run, no fine-tune stage
            assert cfg["model"]["backbone"] == "resnet50"
            assert stage_schedule(cfg) == ([(150, [75], False)] if loss == "smooth_ap" else [(30, [15], False)])
        else:
            assert cfg["model"]["region_l2norm"] == "region_axis" and cfg["model"]["final_bn"] is True
            assert cfg["model"]["gcn_blocks"] == 4 and cfg["model"]["embed_dim"] == 2048
            assert cfg["training"]["selection_metric"] == "r1_r5_sum"
            assert stage_schedule(cfg) == ([(150, [vsrn_ap_decay], False)] if loss == "smooth_ap"
                                           else [(30, [vsrn_decay], False)])


def test_only_the_found_cell_group_is_reported(plan):
    rows = {r.id: r for r in plan.table("metric_learning", "coco").rows}
    assert [rid for rid, r in rows.items() if r.reported] == ["vsrn_triplet_hardest"]
    cell = rows["vsrn_triplet_hardest"].reported["coco_5k"]
    assert cell["metrics"]["rsum"] == 399.0 and cell["metrics_std"]["rsum"] == 2.32
    assert "coco_1k_5fold" not in rows["vsrn_triplet_hardest"].reported
    assert not any(r.reported for r in plan.table("metric_learning", "flickr").rows)


def test_unknown_variant_is_a_clear_error(tmp_path):
    paper = tmp_path / "p.yaml"
    paper.write_text(
        "paper: t\nkey: t\nmethods: {vsrn: config/methods/vsrn.yaml}\n"
        "tables:\n  t:\n    title: t\n    datasets: [synthetic]\n"
        "    rows: [{id: r, label: r, method: vsrn, variants: [smoothap], seeds: [0]}]\n")
    cfg = load_harness_config(CONFIG, {"papers": [str(paper)]})
    with pytest.raises(HarnessError, match="unknown variant 'smoothap'.*declared: nt_xent, smooth_ap"):
        Plan(cfg)


@pytest.mark.parametrize("method, refused", [("vsrn", True), ("scan", True), ("vsepp", False)])
def test_a_model_of_precomputed_regions_cannot_fine_tune_a_cnn(method, refused):
    """Region features come from a detector run elsewhere: a stage that would fine-tune the CNN is
    refused when the config is resolved; VSE++ computes its pooled features with its own CNN."""
    raw = load_yaml(REPO_ROOT / "config" / "methods" / f"{method}.yaml")
    preset = raw["presets"]["synthetic"].setdefault("training", {})
    stage = (preset.get("stages") or raw["base"]["training"]["stages"])[0]
    preset["stages"] = [{**stage, "finetune_backbone": True}]
    resolve = lambda: resolve_method_config(f"{method}.yaml", "synthetic", raw=raw)   # noqa: E731
    if refused:
        with pytest.raises(HarnessError, match=f"finetune_backbone is true, but a {method} model reads precomputed "
                                               f"regions: it has no CNN to fine-tune"):
            resolve()
    else:
        assert resolve()["training"]["stages"][0]["finetune_backbone"] is True


def test_figures_are_default_targets_of_the_synthetic_dataset(plan):
    targets = plan.default_targets()
    assert "figures/metric_learning_synthetic.png" in targets
    assert "figures/metric_learning_gradients_synthetic.png" in targets
    spec = plan.figure_spec("metric_learning_gradients", "synthetic").to_json()
    assert {(r["model"], r["loss"]) for r in spec["rows"]} == {
        (m, lo) for m in ("vsepp", "vsrn") for lo in ("triplet_sum", "triplet_hardest", "nt_xent", "smooth_ap")}


def test_a_finetuned_run_whose_best_epoch_may_be_frozen_waits_for_cached_test_features(plan):
    """VSE++ fine-tuned = a frozen stage then a fine-tune stage: if the best validation epoch is
    in the frozen stage, evaluation reads cached features, so the DAG must have built them."""
    rows = {r.id: r for r in plan.table("table1", "synthetic").rows}
    ft = plan.experiment("synthetic", rows["vsepp_resnet152_ft"].members[0])
    assert [s["finetune_backbone"] for s in ft.config["training"]["stages"]] == [False, True]
    assert ft.finetunes and ft.may_evaluate_on_cached_features
    only_finetune = copy.deepcopy(ft.config)
    only_finetune["training"]["stages"] = only_finetune["training"]["stages"][1:]
    assert not dataclasses.replace(ft, config=only_finetune).may_evaluate_on_cached_features


def test_table_seeds_replace_the_seeds_of_the_named_tables_only(plan):
    # config.yaml: synthetic seeds [0, 1]; the tables named in table_seeds one seed; real datasets the paper's rows
    assert {tuple(r.seeds) for r in plan.table("sgraf_t3", "synthetic").rows} == {(0,)}
    assert {tuple(r.seeds) for r in plan.table("sgraf_t1", "synthetic").rows if r.runs_models} == {(0,)}
    # the compared systems the harness does not run have no seeds
    assert all(r.seeds == [] for r in plan.table("sgraf_t1", "synthetic").rows if r.reported_only)
    assert {tuple(r.seeds) for r in plan.table("metric_learning", "synthetic").rows} == {(0, 1)}
    assert {tuple(r.seeds) for r in plan.table("sgraf_t3", "flickr").rows} == {(0, 1, 2)}
    # the SGR run of seed 0 serves Table 1 and Table 3 (#6 is the same model): one run directory
    t1 = {r.id: r for r in plan.table("sgraf_t1", "synthetic").rows}
    t3 = {r.id: r for r in plan.table("sgraf_t3", "synthetic").rows}
    assert plan.row_runs(t3["t3_6_glo_loc_3steps"], "synthetic") == plan.row_runs(t1["sgr"], "synthetic")[:1]


def test_the_default_job_skips_the_listed_tables_with_their_figures_and_claims():
    """config.yaml's synthetic datasets skip some tables (the default job's 20 minutes): they, their
    figures and their claims are not built, a paper left without a table there has no report,
    every other declared table is built, and config/synthetic_all_tables.yaml builds them all."""
    default, every = Plan(load_harness_config(CONFIG)), Plan(config_with_every_table())
    skipped = {d: set(cfg.get("skip_tables", [])) for d, cfg in default.cfg["datasets"].items()}
    assert skipped["synthetic"] and skipped["synthtags"] and not skipped["flickr"] and not skipped["coco"]
    assert set(default.tables) == {(t, d) for t, d in every.tables if t not in skipped[d]}
    assert all(t in skipped[d] for t, d in set(every.tables) - set(default.tables))
    targets = set(default.default_targets())
    for t, d in every.tables:
        if d in default.cfg["default_datasets"]:
            assert (f"tables/{t}_{d}.csv" in targets) == (t not in skipped[d])
    assert set(default.figures) == {(f, d) for (f, d), fig in every.figures.items() if fig.table not in skipped[d]}
    for (paper, d), claims in every.claims.items():
        kept = [c.id for c in claims if c.table not in skipped[d]]
        assert [c.id for c in default.claims.get((paper, d), [])] == kept
    for paper in ("metric_learning", "deviations"):   # every synthetic table of theirs is skipped
        assert "synthetic" not in default.paper_datasets(paper) and "synthetic" in every.paper_datasets(paper)
        assert f"reports/{paper}_synthetic.md" not in targets
    with pytest.raises(HarnessError, match=r"table 'sgraf_t3' is declared for dataset 'synthetic', but "
                                           r"datasets\.synthetic\.skip_tables leaves it out; build every table with "
                                           r"--configfile config/synthetic_all_tables\.yaml"):
        default.table("sgraf_t3", "synthetic")


def test_skip_tables_naming_an_undeclared_table_is_a_clear_error():
    cfg = load_harness_config(CONFIG, {"datasets": {"synthetic": {"skip_tables": ["table1", "sgraf_t9"]}}})
    with pytest.raises(HarnessError, match=r"datasets\.synthetic\.skip_tables\.1: no table 'sgraf_t9'"):
        Plan(cfg)


def test_table_seeds_naming_an_undeclared_table_is_a_clear_error():
    cfg = load_harness_config(CONFIG, {"datasets": {"synthetic": {"table_seeds": {"sgraf_t9": [0]}}}})
    with pytest.raises(HarnessError, match=r"datasets\.synthetic\.table_seeds\.sgraf_t9: no table 'sgraf_t9'"):
        Plan(cfg)
