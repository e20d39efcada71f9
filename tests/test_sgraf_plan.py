"""The SGRAF paper file: each table's rows build the configurations the paper describes, and the
transcribed numbers agree wherever the paper prints the same result twice."""
import pytest

from methods.config import REPO_ROOT, load_harness_config
from methods.plan import Plan
from tests.conftest import config_with_every_table

CONFIG = REPO_ROOT / "config" / "config.yaml"


@pytest.fixture(scope="module")
def plan():
    return Plan(config_with_every_table())


def configs(plan, table, dataset):
    return {r.id: plan.experiment(dataset, r.members[0]).config for r in plan.table(table, dataset).rows}


def schedule(cfg):
    return [(s["epochs"], s["lr"], s["schedule"]["decay_epochs"]) for s in cfg["training"]["stages"]]


@pytest.mark.parametrize("dataset", ["flickr", "coco"])
def test_sgr_saf_and_the_sgraf_ensemble_follow_the_paper(plan, dataset):
    rows = {r.id: r for r in plan.table("sgraf_t1", dataset).rows}
    sgr = plan.experiment(dataset, rows["sgr"].members[0]).config
    saf = plan.experiment(dataset, rows["saf"].members[0]).config
    for cfg in (sgr, saf):
        m = cfg["model"]
        assert (m["embed_dim"], m["sim_dim"], m["attention"], m["similarity"]) == (
            1024, 256, {"direction": "t2i", "smooth": 9.0}, "vector")
        assert m["nodes"] == {"global": True, "local": True}
        assert m["text"]["word_dim"] == 300 and m["text"]["hidden_dim"] == 1024 and m["text"]["bidirectional"]
        assert cfg["loss"] == {"kind": "triplet_hardest", "margin": 0.2, "warmup_sum_epochs": 0}
        t = cfg["training"]
        assert (t["optimizer"], t["grad_clip"], t["batch_size"], t["selection_metric"]) == ("adam", 2.0, 128, "rsum")
    assert sgr["model"]["heads"] == ["sgr"] and sgr["model"]["sgr_steps"] == 3
    assert saf["model"]["heads"] == ["saf"]
    if dataset == "flickr":  # SGR 30 + 10 epochs, SAF 20 + 10
        assert schedule(sgr) == [(40, 2e-4, [30])] and schedule(saf) == [(30, 2e-4, [20])]
    else:                    # MSCOCO: 10 + 10 for both
        assert schedule(sgr) == schedule(saf) == [(20, 2e-4, [10])]
    ens = rows["sgraf"]
    assert ens.ensemble_size == 2 and ens.members == [rows["sgr"].members[0], rows["saf"].members[0]]
    # the ensemble averages exactly the SGR and SAF rows' runs (same seeds), no extra training
    assert set(plan.row_runs(ens, dataset)) == set(plan.row_runs(rows["sgr"], dataset) + plan.row_runs(rows["saf"], dataset))
    for r in ("sgr", "saf", "sgraf"):
        assert plan.row("table1", dataset, f"sgraf_{r}").members == rows[r].members


def test_table3_rows_switch_nodes_and_steps(plan):
    cfgs = configs(plan, "sgraf_t3", "flickr")
    expected = {"t3_1_glo_no_reasoning": (True, False, 0), "t3_2_loc_1step": (False, True, 1),
                "t3_3_loc_3steps": (False, True, 3), "t3_4_glo_loc_1step": (True, True, 1),
                "t3_5_glo_loc_2steps": (True, True, 2), "t3_6_glo_loc_3steps": (True, True, 3),
                "t3_7_glo_loc_4steps": (True, True, 4)}
    got = {k: (c["model"]["nodes"]["global"], c["model"]["nodes"]["local"], c["model"]["sgr_steps"]) for k, c in cfgs.items()}
    assert got == expected
    assert all(c["model"]["heads"] == ["sgr"] for c in cfgs.values())


def test_table4_rows_switch_attention_similarity_and_aggregation(plan):
    cfgs = configs(plan, "sgraf_t4", "flickr")
    got = {k: (c["model"]["attention"]["direction"], c["model"]["similarity"], c["model"]["heads"])
           for k, c in cfgs.items()}
    for i, direction in ((1, "i2t"), (5, "t2i")):
        prefix = f"t4_{i}_{direction}"
        assert got[f"{prefix}_ss_aa"] == (direction, "scalar", ["avg"])
        assert got[f"t4_{i + 1}_{direction}_sv_aa"] == (direction, "vector", ["avg"])
        assert got[f"t4_{i + 2}_{direction}_sv_sgr"] == (direction, "vector", ["sgr"])
        assert got[f"t4_{i + 3}_{direction}_sv_saf"] == (direction, "vector", ["saf"])
    assert all(c["model"]["nodes"] == {"global": False, "local": True} and c["model"]["sgr_steps"] == 3
               for c in cfgs.values())
    # the SAF rows train with SAF's schedule
    assert schedule(cfgs["t4_8_t2i_sv_saf"]) == [(30, 2e-4, [20])]
    # Table 4 #7 is Table 3 #3: one experiment
    t3 = {r.id: r for r in plan.table("sgraf_t3", "flickr").rows}
    t4 = {r.id: r for r in plan.table("sgraf_t4", "flickr").rows}
    assert t4["t4_7_t2i_sv_sgr"].members == t3["t3_3_loc_3steps"].members


@pytest.mark.parametrize("dataset,dims", [("flickr", [128, 256, 384]), ("synthetic", [16, 32, 48])])
def test_table7_sweeps_the_graph_dimension(plan, dataset, dims):
    rows = plan.table("sgraf_t7", dataset).rows
    assert [plan.experiment(dataset, r.members[0]).config["model"]["sim_dim"] for r in rows] == dims
    # the middle row is the SGR model itself
    assert rows[1].members == plan.row("sgraf_t1", dataset, "sgr").members


def test_table5_joint_training_shares_representations_between_both_heads(plan):
    for dataset in ("flickr", "coco"):
        rows = {r.id: r for r in plan.table("sgraf_t5", dataset).rows}
        assert plan.experiment(dataset, rows["t5_joint"].members[0]).config["model"]["heads"] == ["sgr", "saf"]
        assert rows["t5_split"].members == plan.row("sgraf_t1", dataset, "sgraf").members


def reported(plan, table, dataset, row, protocol):
    return plan.row(table, dataset, row).reported[protocol]["metrics"]


def test_numbers_the_paper_prints_twice_agree(plan):
    keys = ("i2t_r1", "i2t_r10", "t2i_r1", "t2i_r10")

    def pick(m):
        return {k: m[k] for k in keys}

    t1_sgr = pick(reported(plan, "sgraf_t1", "flickr", "sgr", "f30k_1k"))
    assert pick(reported(plan, "sgraf_t3", "flickr", "t3_6_glo_loc_3steps", "f30k_1k")) == t1_sgr
    assert reported(plan, "sgraf_t7", "flickr", "t7_graph_dim_256", "f30k_1k") == reported(
        plan, "sgraf_t1", "flickr", "sgr", "f30k_1k")
    assert reported(plan, "sgraf_t4", "flickr", "t4_7_t2i_sv_sgr", "f30k_1k") == reported(
        plan, "sgraf_t3", "flickr", "t3_3_loc_3steps", "f30k_1k")
    for dataset, protocol in (("flickr", "f30k_1k"), ("coco", "coco_1k_5fold")):
        for t5, t1 in (("t5_saf", "saf"), ("t5_sgr", "sgr"), ("t5_split", "sgraf")):
            assert reported(plan, "sgraf_t5", dataset, t5, protocol) == pick(
                reported(plan, "sgraf_t1", dataset, t1, protocol))
            assert reported(plan, "table1", dataset, f"sgraf_{t1}", protocol) == reported(
                plan, "sgraf_t1", dataset, t1, protocol)
    for row in ("saf", "sgr", "sgraf"):
        assert reported(plan, "table1", "coco", f"sgraf_{row}", "coco_5k") == reported(
            plan, "sgraf_t2", "coco", row, "coco_5k")
    assert plan.row("sgraf_t1", "flickr", "sgraf").reported["f30k_1k"]["ensemble_size"] == 2


def test_synthetic_preset_is_small_and_trains_the_papers_loss(plan):
    cfg = plan.experiment("synthetic", plan.row("sgraf_t1", "synthetic", "sgr").members[0]).config
    assert cfg["loss"] == {"kind": "triplet_hardest", "margin": 0.2, "warmup_sum_epochs": 2} and cfg["model"]["sim_dim"] == 32
    assert "figures/sgraf_saf_weights_synthetic.png" in plan.default_targets()
    spec = plan.figure_spec("sgraf_saf_weights", "synthetic").to_json()
    assert spec["row"] == "saf" and spec["split"] == "test" and spec["run"].endswith("/seed0")



@pytest.mark.parametrize("table, row, dataset", [("sgraf_t1", "sgr", "synthetic"), ("sgraf_t4", "t4_4_i2t_sv_saf", "flickr")])
def test_a_saf_weights_figure_of_a_row_without_saf_over_words_is_refused(plan, monkeypatch, table, row, dataset):
    """Fig. 3 draws the SAF head's weights over a caption's words: an SGR-only row has no SAF head, and
    with i2t attention SAF weighs regions, not words."""
    import dataclasses

    from methods.errors import HarnessError

    declared = plan.figures[("sgraf_saf_weights", "synthetic")]
    monkeypatch.setitem(plan.figures, ("other_row", dataset),
                        dataclasses.replace(declared, name="other_row", dataset=dataset, table=table, row=row))
    with pytest.raises(HarnessError, match=f"figure other_row, row '{row}': a saf_weights figure draws a model's "
                                           f"saf weights, which this sgraf model config does not have"):
        plan.figure_spec("other_row", dataset)
