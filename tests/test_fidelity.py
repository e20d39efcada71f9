"""Rows judged against a reported number run what the public code behind that number runs, and
every table row carries its deviation ledger.

SOURCE_BEHAVIOUR is written from the public code (files named per entry), not from
config/methods: a method config that drifts from its source fails here even if its own
``source`` block drifts with it. Each model's oracle (``tests/oracles/<kind>.py``) gives it for the
method files of that model.
"""
import inspect

import pytest
import yaml

from methods.config import REPO_ROOT, load_harness_config
from methods.errors import HarnessError
from methods.fidelity import load_method_file, row_ledger, source_ledger
from methods.models.base import model_class
from methods.plan import Plan, resolve_method_config
from tests.conftest import config_with_every_table
from tests.oracles import merged_oracle_parts

SOURCE_BEHAVIOUR = merged_oracle_parts("SOURCE_BEHAVIOUR")
# every public code draws random batches (a shuffled DataLoader; the MVSA paper says nothing else)
for behaviour in SOURCE_BEHAVIOUR.values():
    behaviour["training.length_buckets"] = None
PER_DATASET = merged_oracle_parts("PER_DATASET")   # (method, dataset) -> keys that differ per dataset
ROW_FACTORS = merged_oracle_parts("ROW_FACTORS")   # method -> keys a row may set as its own factor


def value_at(cfg: dict, dotted: str):
    for part in dotted.split("."):
        cfg = cfg[int(part)] if isinstance(cfg, list) else cfg[part]
    return cfg


# the optional inputs set (paths only: a plan reads no file), so that their rows are judged too
OPTIONAL_INPUTS = {"text_encoders": {"bert_base_uncased": {"kind": "bert", "path": "/data/bert-base-uncased"}},
                   "backbones": {"resnext101_wsl": {"arch": "resnext101_32x8d", "optional": True,
                                                    "weights": "/data/ig_resnext101_32x8-c38310e5.pth"}}}


@pytest.fixture(scope="module")
def plan():
    return Plan(config_with_every_table(OPTIONAL_INPUTS))


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


def test_vse0_runs_its_sources_unnormalised_image_embedding_and_a_row_off_it_lists_the_switch(plan):
    """fartashf/vsepp's README trains VSE0 with --no_imgnorm: the vse0 variant runs it as its source
    value; VSE++ configs, which leave the optional key out, run the normalised embedding of theirs."""
    path = REPO_ROOT / "config" / "methods" / "vsepp.yaml"
    raw = load_method_file(path)
    vsepp, vse0 = source_ledger(raw, [], "coco"), source_ledger(raw, ["vse0"], "coco")

    def switched(cfg, ledger):
        return [(s["key"], s["runs"], s["source"]) for s in row_ledger(cfg, ledger, "row x")["switches"]]
    plain = resolve_method_config(path, "coco")
    assert "image_l2norm" not in plain["model"] and switched(plain, vsepp) == []
    assert switched(resolve_method_config(path, "coco", {"model.image_l2norm": False}), vsepp) == \
        [("model.image_l2norm", False, True)]
    vse0_cfg = resolve_method_config(path, "coco", variants=["vse0"])
    assert vse0_cfg["model"]["image_l2norm"] is False and vse0_cfg["loss"]["kind"] == "triplet_sum"
    assert switched(vse0_cfg, vse0) == []
    assert switched(resolve_method_config(path, "coco", {"model.image_l2norm": True}, ["vse0"]), vse0) == \
        [("model.image_l2norm", True, False)]
    (row,) = [r for r in plan.table("table1", "coco").rows if r.id == "vse0_resnet152_ft"]
    assert plan.experiment("coco", row.members[0]).config["model"]["image_l2norm"] is False


def test_a_switchs_value_when_absent_is_the_models_default():
    """``absent`` (a switch of an optional model key) says what the model's constructor does
    without the key; checked against that constructor's default for a top-level key, and for a key
    of a block (the set module's) by building the method's model on the built-in data without the
    key and with it at that value: the same parameters and the same encodings, for every method file."""
    checked = 0
    for path in sorted((REPO_ROOT / "config" / "methods").glob("*.yaml")):
        raw = load_method_file(path)
        blocks = [raw["source"]] + [v["source"] for v in (raw.get("variants") or {}).values() if v.get("source")]
        for block in blocks:
            for name, switch in (block.get("switches") or {}).items():
                if switch and "absent" in switch:
                    key = (switch.get("key") or raw["source"]["switches"][name]["key"]).split(".")
                    assert key[0] == "model", (path, name)
                    if len(key) == 2:
                        default = inspect.signature(model_class(raw["base"]["model"]["kind"])).parameters[key[1]].default
                        assert switch["absent"] == default, (path, name)
                    else:
                        assert same_model_without_the_key(raw["method"], ".".join(key), switch["absent"]), (path, name)
                    checked += 1
    assert checked >= 4


def same_model_without_the_key(method: str, key: str, value) -> bool:
    """The method's synthetic model built without ``key`` and with it set to ``value``, from one seed:
    the same parameters, and the same image sets of one random batch (evaluation mode)."""
    import torch

    from methods import api
    base = api.experiment_config(method, "synthetic")
    assert key.split(".")[-1] not in value_at(base, key.rsplit(".", 1)[0]), key   # absent from the base
    models = []
    for overrides in ({}, {key: value}):
        torch.manual_seed(0)
        models.append(api.build_model(api.experiment_config(method, "synthetic", overrides=overrides), 20,
                                      {"dim": 6, "regions": 3}).eval())
    without, with_value = (m.state_dict() for m in models)
    if without.keys() != with_value.keys() or not all(torch.equal(without[k], with_value[k]) for k in without):
        return False
    batch = {"features": torch.randn(2, 3, 6, generator=torch.Generator().manual_seed(1)), "lengths": torch.tensor([3, 2])}
    with torch.no_grad():
        return torch.equal(models[0].encode_images(batch), models[1].encode_images(batch))
