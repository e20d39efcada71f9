"""Rows judged against a reported number run what the public code behind that number runs, and
every table row carries its deviation ledger.

SOURCE_BEHAVIOUR is written from the public code (files named per entry), not from
config/methods: a method config that drifts from its source fails here even if its own
``source`` block drifts with it.
"""
import pytest
import yaml

from methods.config import REPO_ROOT, load_harness_config
from methods.errors import HarnessError
from methods.fidelity import load_method_file, row_ledger, source_ledger
from methods.plan import Plan, resolve_method_config
from tests.conftest import config_with_every_table

SOURCE_BEHAVIOUR = {
    # fartashf/vsepp (master): train.py defaults and the README's ResNet rows (--cnn_type resnet152,
    # --max_violation), model.py EncoderImageFull (CNN output l2-normalised before the fc),
    # EncoderText (unidirectional GRU), ContrastiveLoss (diagonal positives, margin 0.2); no AMP.
    "vsepp": {"model.backbone": "resnet152", "model.embed_dim": 1024, "model.pre_fc_l2norm": True,
              "model.text.word_dim": 300, "model.text.hidden_dim": 1024, "model.text.bidirectional": False,
              "loss.margin": 0.2, "training.batch_size": 128, "training.batching": "captions",
              "training.batch_positives": "diagonal", "training.amp": False, "training.grad_clip": 2.0,
              "training.optimizer": "adam"},
    # MauritsBleeker/ecir-2022-reproducibility-bleeker VSRN/ (the study's copy of KunpengLi1994/VSRN):
    # l2norm over dim 1 of the regions (VSRN#7), final BatchNorm on both datasets, 4 Rs_GCN blocks,
    # embed 2048, selection on R@1 + R@5, --max_violation, diagonal ContrastiveLoss, fp32.
    "vsrn": {"model.region_l2norm": "region_axis", "model.final_bn": True, "model.gcn_blocks": 4,
             "model.embed_dim": 2048, "model.text.word_dim": 300, "model.text.hidden_dim": 2048,
             "model.text.bidirectional": False, "training.selection_metric": "r1_r5_sum",
             "loss.kind": "triplet_hardest", "loss.margin": 0.2, "training.batch_size": 128,
             "training.batching": "captions", "training.batch_positives": "diagonal", "training.amp": False,
             "training.grad_clip": 2.0},
    # Paranioar/SGRAF (python3.6): opts.py (--max_violation store_false, i.e. on; margin 0.2; embed 1024;
    # word 300; batch 128; grad_clip 2; lr 2e-4), model.py (bi-GRU, dropout 0.4 on words and in
    # VisualSA, SCAN_attention smooth 9.0, diagonal ContrastiveLoss with max_violation from the first
    # step, no warm-up); no AMP. (SGR steps, nodes and
    # graph dimension are the ablation tables' factors, set per row.)
    "sgraf": {"loss.kind": "triplet_hardest", "loss.margin": 0.2, "loss.warmup_sum_epochs": 0, "model.embed_dim": 1024,
              "model.text.word_dim": 300, "model.text.hidden_dim": 1024, "model.text.bidirectional": True,
              "model.text.embed_dropout": 0.4, "model.sa_dropout": 0.4, "model.attention.smooth": 9.0,
              "training.batch_size": 128, "training.batching": "captions",
              "training.batch_positives": "diagonal", "training.amp": False, "training.grad_clip": 2.0,
              "training.optimizer": "adam"},
    # kuanghuei/SCAN: README commands (--max_violation --bi_gru, margin 0.2, embed 1024, word 300,
    # batch 128, grad_clip 2), model.py (ContrastiveLoss on the diagonal), train.py (Adam); no AMP.
    # (Direction, aggregation and lambdas are the four settings, set per row.)
    "scan": {"loss.kind": "triplet_hardest", "loss.margin": 0.2, "model.embed_dim": 1024,
             "model.text.word_dim": 300, "model.text.hidden_dim": 1024, "model.text.bidirectional": True,
             "training.batch_size": 128, "training.batching": "captions", "training.batch_positives": "diagonal",
             "training.amp": False, "training.grad_clip": 2.0, "training.optimizer": "adam",
             "model.evaluation_dtype": "float64"},
    # MVSA: no public code; Zheng, Ben, Yuan, ACML 2019, supplement Section 1: ResNet-152, C = 2048,
    # D = 1024, BatchNorm in ASA, GloVe 300-d words, bi-GRU 1024, margin 0.2, clip 2.0, Adam, batch 128.
    "mvsa": {"model.backbone": "resnet152", "model.candidate_dim": 2048, "model.embed_dim": 1024,
             "model.asa.batchnorm": True, "model.text.word_dim": 300, "model.text.word_init": "glove",
             "model.text.hidden_dim": 1024, "model.text.bidirectional": True, "loss.margin": 0.2,
             "training.grad_clip": 2.0, "training.optimizer": "adam", "training.batch_size": 128},
    # kdwonn/DivE train_eval_coco.sh (embed 1024, word 300, bi-GRU --gpo_rnn, K 4 both sides,
    # --margin 0.2 --max_violation, mean reduction and no --tri_mean_to_max in loss.py/train.py,
    # --mmd_weight 0.01 --unif_weight 0.01, batch 200 images, adamw, weight decay 1e-4, grad_clip 1,
    # --amp, --dropout 0.1, --butd_drop_prob 0.2, --spm_depth 4, padded keys leak in attention.py,
    # eval.py loads the last checkpoint). (Similarity, set module, K, T, alpha are the ablation
    # tables' factors, set per row.)
    "set_embeddings": {"model.embed_dim": 1024, "model.text.word_dim": 300, "model.text.hidden_dim": 1024,
                       "model.text.bidirectional": True, "model.text.word_init": "glove",
                       "loss.terms.0.kind": "triplet_hardest", "loss.terms.0.margin": 0.2,
                       "loss.terms.0.reduction": "mean", "loss.terms.0.warmup_sum_epochs": 0,
                       "loss.terms.1.kind": "mmd", "loss.terms.1.weight": 0.01,
                       "loss.terms.2.kind": "uniformity", "loss.terms.2.weight": 0.01,
                       "training.batch_size": 200, "training.batching": "images", "training.optimizer": "adamw",
                       "training.weight_decay": 1e-4, "training.grad_clip": 1.0, "training.amp": True,
                       "training.selection_metric": "last", "model.dropout": 0.1, "model.region_drop": 0.2,
                       "training.caption_augment": {"prob": 0.2, "mask": 0.5, "replace": 0.1}},
    # The same code's CNN path (model_spm.py EncoderImage without BUTD, ResNet-152 7x7 cells) and
    # the appendix's ResNet-152 + bi-GRU schedule: 120 epochs, the CNN frozen for the first 50
    # (--warm_img), trained in train mode afterwards, random-resized crops and flips.
    "set_embeddings_grid": {"model.backbone": "resnet152", "model.grid_scales": ["conv5"],
                            "model.backbone_bn": "train", "model.embed_dim": 1024, "model.set_size": 4,
                            "model.similarity.kind": "smooth_chamfer", "model.similarity.alpha": 16.0,
                            "model.text.word_dim": 300, "model.text.hidden_dim": 1024,
                            "model.text.word_init": "glove", "loss.terms.0.margin": 0.2,
                            "training.stages.0.epochs": 50, "training.stages.1.epochs": 70,
                            "training.stages.1.finetune_backbone": True,
                            "training.finetune_augment": "random_resized_crop_flip", "training.amp": True,
                            "training.caption_augment": {"prob": 0.2, "mask": 0.5, "replace": 0.1}},
}
# every public code above draws random batches (a shuffled DataLoader; the MVSA paper says nothing else)
for behaviour in SOURCE_BEHAVIOUR.values():
    behaviour["training.length_buckets"] = None
# VSRN model.py skips the first region l2norm on Flickr30K only
PER_DATASET = {("vsrn", "flickr"): {"model.l2norm_after_fc": False}, ("vsrn", "coco"): {"model.l2norm_after_fc": True},
               # appendix A: lr 1e-3 on COCO, 2e-3 on Flickr30K
               ("set_embeddings_grid", "coco"): {"training.stages.0.lr": 1e-3},
               ("set_embeddings_grid", "flickr"): {"training.stages.0.lr": 2e-3}}
# keys a row may set as its own factor (the study's VSRN rows vary the loss; the set-embedding
# Table 4 rows vary K, T and alpha), so not declared switches
ROW_FACTORS = {"vsrn": {"loss.kind"},
               "set_embeddings": {"model.set_size", "model.set_module.iterations", "model.similarity.alpha"}}


def value_at(cfg: dict, dotted: str):
    for part in dotted.split("."):
        cfg = cfg[int(part)] if isinstance(cfg, list) else cfg[part]
    return cfg


@pytest.fixture(scope="module")
def plan():
    return Plan(config_with_every_table())


def judged_rows(plan):
    """(dataset, table, row) of every row with a reported number on a real dataset that the harness runs."""
    return [(d, t, r) for (t, d), tbl in plan.tables.items() if d in ("flickr", "coco")
            for r in tbl.rows if any(r.reported.values()) and r.runs_models]


def test_rows_judged_against_a_reported_number_run_the_source_behaviour(plan):
    rows = judged_rows(plan)
    assert {plan.experiment(d, r.members[0]).method for d, _, r in rows} == set(SOURCE_BEHAVIOUR)
    for dataset, table, row in rows:
        for exp_id in row.members:
            exp = plan.experiment(dataset, exp_id)
            expected = {**SOURCE_BEHAVIOUR[exp.method], **PER_DATASET.get((exp.method, dataset), {})}
            got = {key: value_at(exp.config, key) for key in expected}
            assert got == expected, f"{table}/{dataset} row '{row.id}' ({exp_id})"
        # and the row's own ledger agrees: no declared switch at a non-source value but the row's factors
        factors = ROW_FACTORS.get(plan.experiment(dataset, row.members[0]).method, set())
        assert all(s["key"] in factors for ledger in row.ledger for s in ledger["switches"]), (table, dataset, row.id)


def test_the_ledger_lists_every_switch_a_row_runs_off_source(plan):
    by_id = {r.id: r for r in plan.table("deviations", "coco").rows}
    assert [s["key"] for ledger in by_id["source"].ledger for s in ledger["switches"]] == []
    for row_id, key, runs in [("region_l2norm_feature", "model.region_l2norm", "feature"),
                              ("batch_positives_same_image", "training.batch_positives", "same_image"),
                              ("amp", "training.amp", True)]:
        (ledger,) = by_id[row_id].ledger
        assert [(s["key"], s["runs"]) for s in ledger["switches"]] == [(key, runs)]
        assert by_id[row_id].compare_to == "source" and by_id[row_id].seeds == by_id["source"].seeds
    # the synthetic rows say what they really ran: the small backbone and dimensions
    row = next(r for r in plan.table("metric_learning", "synthetic").rows if r.id == "vsepp_triplet_hardest")
    (ledger,) = row.ledger
    switched = {s["key"]: (s["runs"], s["source"]) for s in ledger["switches"]}
    assert switched["model.backbone"] == ("resnet18_synthetic", "resnet50")
    assert switched["model.embed_dim"] == (256, 1024)
    assert "MauritsBleeker/ecir-2022-reproducibility-bleeker" in ledger["code"]
    assert "cnn_mode_and_crops" in {d["name"] for d in ledger["deviations"]}
    # a table's spec carries the ledger to the table command
    spec = plan.table_spec("deviations", "synthetic").to_json()
    assert all(r["ledger"] and r["ledger"][0]["code"] for r in spec["rows"])


@pytest.mark.parametrize("method", ["sgraf", "set_embeddings", "mvsa"])
def test_length_buckets_are_listed_with_a_row_that_runs_them(method):
    """No source buckets its batches by length: a row that does lists the switch with its value."""
    raw = load_method_file(REPO_ROOT / "config" / "methods" / f"{method}.yaml")
    ledger = source_ledger(raw, [], "coco")
    source = resolve_method_config(REPO_ROOT / "config" / "methods" / f"{method}.yaml", "coco")
    assert source["training"]["length_buckets"] is None
    assert row_ledger(source, ledger, "row x")["switches"] == []
    bucketed = resolve_method_config(REPO_ROOT / "config" / "methods" / f"{method}.yaml", "coco",
                                     {"training.length_buckets": 50})
    (switch,) = row_ledger(bucketed, ledger, "row x")["switches"]
    assert (switch["key"], switch["runs"], switch["source"]) == ("training.length_buckets", 50, None)
    assert "shuffled DataLoader" in switch["behaviour"]


def test_resolved_losses_carry_only_their_own_parameters():
    method = REPO_ROOT / "config" / "methods" / "vsepp.yaml"
    assert resolve_method_config(method, "coco", variants=["nt_xent"])["loss"] == {"kind": "nt_xent", "tau": 0.1}
    assert resolve_method_config(method, "coco", {"loss.kind": "triplet_sum"})["loss"] == \
        {"kind": "triplet_sum", "margin": 0.2}
    with pytest.raises(HarnessError, match="loss"):  # a stray parameter is an error, not dropped
        resolve_method_config(method, "coco", {"loss.kind": "nt_xent", "loss.tau": 0.1, "loss.margin": 0.2})


def _method_file(tmp_path, edit):
    raw = yaml.safe_load((REPO_ROOT / "config" / "methods" / "vsrn.yaml").read_text())
    edit(raw)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_source_blocks_are_validated_and_switch_keys_must_exist(tmp_path):
    path = _method_file(tmp_path, lambda raw: raw["source"].pop("code"))
    with pytest.raises(HarnessError, match=r"m\.yaml: invalid method_file config"):
        load_method_file(path)
    path = _method_file(tmp_path, lambda raw: raw["source"]["switches"].update(
        typo={"key": "model.region_l2nrom", "value": "region_axis", "behaviour": "x"}))
    raw = load_method_file(path)
    cfg = resolve_method_config(path, "coco")
    with pytest.raises(HarnessError, match="model.region_l2nrom"):
        row_ledger(cfg, source_ledger(raw, [], "coco"), "row x")
    path = _method_file(tmp_path, lambda raw: raw["variants"]["nt_xent"].update(
        source={"switches": {"undeclared": {"value": 1}}}))
    with pytest.raises(HarnessError, match="undeclared"):
        source_ledger(load_method_file(path), ["nt_xent"], "coco")


def test_source_values_follow_the_dataset_and_the_variant():
    raw = load_method_file(REPO_ROOT / "config" / "methods" / "vsrn.yaml")
    values = {d: {s.key: s.value for s in source_ledger(raw, [], d).switches} for d in ("flickr", "coco")}
    assert values["flickr"]["model.l2norm_after_fc"] is False and values["coco"]["model.l2norm_after_fc"] is True
    smooth_ap = {s.key: s.value for s in source_ledger(raw, ["smooth_ap"], "coco").switches}
    assert smooth_ap["training.batch_positives"] == "same_image"


def test_a_comparison_needs_another_row_of_the_table_with_the_same_seeds(tmp_path):
    paper = yaml.safe_load((REPO_ROOT / "methods" / "papers" / "deviations.yaml").read_text())
    paper["methods"] = {name: str(REPO_ROOT / file) for name, file in paper["methods"].items()}
    cfg = load_harness_config(REPO_ROOT / "config" / "config.yaml")
    path = tmp_path / "paper.yaml"
    cfg["papers"] = [str(path)]
    rows = paper["tables"]["deviations"]["rows"]
    rows[1]["compare_to"] = "no_such_row"
    path.write_text(yaml.safe_dump(paper))
    with pytest.raises(HarnessError, match="compares to 'no_such_row'"):
        Plan(cfg)
    rows[1]["compare_to"] = "source"
    rows[1]["seeds"] = [0, 1]
    path.write_text(yaml.safe_dump(paper))
    with pytest.raises(HarnessError, match="need the same seeds"):  # on flickr (synthetic's seeds replace the rows')
        Plan(cfg)


@pytest.mark.parametrize("method", sorted(SOURCE_BEHAVIOUR))
def test_the_method_files_declare_the_source_behaviour_as_switches(method):
    raw = load_method_file(REPO_ROOT / "config" / "methods" / f"{method}.yaml")
    for dataset in ("flickr", "coco"):
        declared = {s.key: s.value for s in source_ledger(raw, [], dataset).switches}
        expected = {**SOURCE_BEHAVIOUR[method], **PER_DATASET.get((method, dataset), {})}
        for key in ROW_FACTORS.get(method, set()):
            expected.pop(key, None)
        assert {k: declared.get(k, "undeclared") for k in expected} == expected


def test_deviations_apply_to_their_datasets_and_stand_in_data_is_named(plan):
    def names(dataset):
        row = next(r for r in plan.table("metric_learning", dataset).rows if r.id == "vsrn_triplet_hardest")
        return {d["name"] for ledger in row.ledger for d in ledger["deviations"]}
    assert "coco_validation_set" in names("coco") and "coco_validation_set" not in names("flickr")
    assert "stand_in_data" in names("synthetic") and "stand_in_data" not in names("coco")
    row = next(r for r in plan.table("metric_learning", "synthetic").rows if r.id == "vsrn_triplet_hardest")
    (stand_in,) = [d for d in row.ledger[0]["deviations"] if d["name"] == "stand_in_data"]
    assert "12 RoIAlign regions per image from the conv4 map of resnet18_synthetic" in stand_in["ours"]  # config.yaml


def test_a_variant_value_replaces_the_per_dataset_values():
    raw = load_method_file(REPO_ROOT / "config" / "methods" / "vsrn.yaml")
    raw["variants"]["nt_xent"]["source"] = {"switches": {"l2norm_after_fc": {"value": False}}}
    values = {s.key: s.value for s in source_ledger(raw, ["nt_xent"], "coco").switches}
    assert values["model.l2norm_after_fc"] is False


def test_a_loss_of_another_family_inherits_no_parameter():
    method = REPO_ROOT / "config" / "methods" / "vsrn.yaml"
    with pytest.raises(HarnessError, match="tau"):  # SmoothAP does not take NT-Xent's tau as its own
        resolve_method_config(method, "coco", {"loss.kind": "smooth_ap", "training.batching": "images",
                                               "training.batch_positives": "same_image"}, ["nt_xent"])


def test_the_sgr_warm_up_runs_on_synthetic_rows_only_and_is_listed(plan):
    """The synthetic SGRAF preset's two sum-of-hinges warm-up epochs are an off-source switch every
    synthetic SGRAF row lists; no Flickr30K or COCO SGRAF row runs it."""
    for dataset, listed in (("synthetic", True), ("flickr", False), ("coco", False)):
        rows = [r for (t, d), tbl in plan.tables.items() if d == dataset for r in tbl.rows
                if r.runs_models and plan.experiment(dataset, r.members[0]).method == "sgraf"]
        assert rows, dataset
        for row in rows:
            for exp_id in row.members:
                assert plan.experiment(dataset, exp_id).config["loss"]["warmup_sum_epochs"] == (2 if listed else 0)
            switched = [(s["key"], s["runs"], s["source"]) for ledger in row.ledger for s in ledger["switches"]]
            assert (("loss.warmup_sum_epochs", 2, 0) in switched) == listed, (dataset, row.id, switched)


def test_the_ledger_says_how_a_rows_captions_were_tokenised(plan):
    """Flickr30K and COCO tokenise as the sources (no entry); the synthetic captions one line each
    (an entry naming the key); tag datasets have no caption tokenizer to compare; the Python 2
    sources' ASCII-only lowercasing is declared where it applies, not for Bleeker's Python 3 copy."""
    def deviations(table, dataset, row_id):
        row = next(r for r in plan.table(table, dataset).rows if r.id == row_id)
        return {d["name"]: d for ledger in row.ledger for d in ledger["deviations"]}

    for table, dataset, row_id in [("table1", "flickr", "vsepp_resnet152_ft"), ("sgraf_t1", "coco", "sgr")]:
        assert "tokenizer" not in deviations(table, dataset, row_id)
    synthetic = deviations("sgraf_t1", "synthetic", "sgr")
    assert synthetic["tokenizer"]["ours"].startswith("datasets.synthetic.tokenizer: nltk_line")
    assert "word_tokenize" in synthetic["tokenizer"]["source"] and "ascii_lowercase" in synthetic
    assert "tokenizer" not in deviations("label_wise_t1", "synthtags", "ours")
    assert "ascii_lowercase" not in deviations("metric_learning", "coco", "vsepp_triplet_hardest")
