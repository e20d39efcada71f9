"""The MVSA and SCAN paper files: each row builds the configuration its table names, with the
supplement's two-stage schedule, and the transcribed numbers keep the supplement's printed values."""
import pytest
import yaml

from methods.config import REPO_ROOT, load_harness_config
from methods.plan import Plan
from tests.conftest import config_with_every_table

CONFIG = REPO_ROOT / "config" / "config.yaml"
SETTINGS = {"it_lse": ("i2t", "lse", 4.0, 5.0), "it_avg": ("i2t", "avg", 4.0, None),
            "ti_lse": ("t2i", "lse", 9.0, 6.0), "ti_avg": ("t2i", "avg", 9.0, None)}


@pytest.fixture(scope="module")
def plan():
    return Plan(config_with_every_table())


def row_configs(plan, table, dataset):
    return {r.id: plan.experiment(dataset, r.members[0]).config for r in plan.table(table, dataset).rows}


def similarity(cfg):
    sim = cfg["model"]["similarity"]
    return sim["direction"], sim["aggregation"], sim["lambda_softmax"], sim.get("lambda_lse")


def test_table1_rows_switch_scale_and_similarity(plan):
    cfgs = row_configs(plan, "mvsa_t1", "flickr")
    assert len(cfgs) == 8 and len({plan.table("mvsa_t1", "flickr").rows[i].members[0] for i in range(8)}) == 8
    for row, cfg in cfgs.items():
        setting, scale = row.rsplit("_", 1)
        assert similarity(cfg) == SETTINGS[setting]
        assert cfg["model"]["grid_scales"] == {"14": ["conv4"], "7": ["conv5"]}[scale]
        assert cfg["model"]["fusion_pooling"] is None


def test_table2_rows_switch_pooling_and_similarity(plan):
    for row, cfg in row_configs(plan, "mvsa_t2", "flickr").items():
        setting, pooling = row.rsplit("_", 1)
        assert similarity(cfg) == SETTINGS[setting]
        assert cfg["model"]["grid_scales"] == ["conv4", "conv5"] and cfg["model"]["fusion_pooling"] == pooling


@pytest.mark.parametrize("dataset", ["flickr", "coco"])
def test_every_mvsa_row_runs_the_supplements_set_up(plan, dataset):
    tables = ["mvsa_t1", "mvsa_t2", "table1"] if dataset == "flickr" else ["table1"]
    cfgs = [c for t in tables for r, c in row_configs(plan, t, dataset).items() if c["method"] == "mvsa"]
    assert len(cfgs) == (20 if dataset == "flickr" else 4)
    for cfg in cfgs:
        m, t = cfg["model"], cfg["training"]
        assert (m["backbone"], m["candidate_dim"], m["embed_dim"]) == ("resnet152", 2048, 1024)
        assert m["asa"]["batchnorm"] and m["text"] == {"word_dim": 300, "hidden_dim": 1024, "num_layers": 1,
                                                       "bidirectional": True, "word_init": "glove"}
        assert cfg["loss"] == {"kind": "triplet_hardest", "margin": 0.2}
        assert (t["optimizer"], t["batch_size"], t["grad_clip"]) == ("adam", 128, 2.0)
        stages = [(s["name"], s["epochs"], s["lr"], s["finetune_backbone"]) for s in t["stages"]]
        assert stages == [("frozen", 20, 5e-4, False), ("finetune", 15, 2e-5, True)]
        if m["similarity"]["aggregation"] == "lse" and m["similarity"]["direction"] == "i2t":
            assert m["similarity"]["lambda_lse"] == (5.0 if dataset == "flickr" else 20.0)


def test_mvsa_table1_rows_have_no_invented_numbers_and_share_the_fused_runs(plan):
    for row in plan.table("table1", "flickr").rows:
        if row.id.startswith("mvsa_"):
            assert not row.reported and row.not_reported.startswith("NOT FOUND")
            t2 = plan.row("mvsa_t2", "flickr", row.id.removeprefix("mvsa_") + "_max")
            assert row.members == t2.members


def test_transcribed_cells_keep_the_printed_values_and_their_rsum():
    paper = yaml.safe_load((REPO_ROOT / "methods/papers/mvsa.yaml").read_text())
    printed = {("mvsa_t1", "ti_lse_14"): [4.4, 15.4, 24.5, 3.1, 11.8, 19.4],
               ("mvsa_t1", "it_lse_14"): [19.6, 48.1, 62.1, 16, 41.1, 53.6],
               ("mvsa_t2", "ti_avg_avg"): [64, 86.4, 92.6, 46.9, 75.9, 84.2],
               ("mvsa_t2", "it_avg_max"): [61.3, 88.6, 93.8, 46.8, 75.9, 84.3]}
    cells = 0
    for table in ("mvsa_t1", "mvsa_t2"):
        for row in paper["tables"][table]["rows"]:
            metrics = row["reported"]["flickr"]["f30k_1k"]["metrics"]
            recalls = [metrics[k] for k in ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10")]
            cells += len(recalls)
            assert metrics["rsum"] == pytest.approx(sum(recalls), abs=1e-9)
            if (table, row["id"]) in printed:
                assert recalls == printed[table, row["id"]]
    assert cells == 96


def test_scan_ensemble_averages_t2i_avg_and_i2t_lse_with_the_datasets_lambdas(plan):
    for dataset, lse in (("flickr", 5.0), ("coco", 20.0)):
        row = plan.row("table1", dataset, "scan_ensemble")
        members = [plan.experiment(dataset, m).config for m in row.members]
        assert row.ensemble_size == 2
        assert [similarity(c) for c in members] == [("t2i", "avg", 9.0, None), ("i2t", "lse", 4.0, lse)]
        stages = [(s["epochs"], s["lr"], s["schedule"].get("decay_epochs")) for s in members[0]["training"]["stages"]]
        assert stages == ([(30, 2e-4, [15])] if dataset == "flickr" else [(20, 5e-4, [10])])
        assert row.reported[next(iter(row.reported))]["ensemble_size"] == 2
