"""Rows of the authors' released weights in the plan (paper-file rows with ``released``): their
files come from ``datasets.<name>.released``; a row whose files are not configured is left out of
its table, which says so; they plan an import and evaluation, never a training run."""
import re

import pytest
import yaml

from methods.config import load_harness_config
from methods.errors import HarnessError
from methods.estimate import table_work
from methods.plan import Plan
from tests.conftest import REPO

CONFIG = REPO / "config" / "config.yaml"
SPLIT_IMAGES = {"train": 29000, "dev": 1014, "test": 1000}


def released_files(tmp_path, keys=("sgraf_sgr", "sgraf_saf", "sgraf_vocab")) -> dict:
    out = {}
    for key in keys:
        (tmp_path / key).write_text("their file")
        out[key] = str(tmp_path / key)
    return out


def test_without_configured_files_a_table_leaves_its_released_rows_out_and_says_which_keys():
    plan = Plan(load_harness_config(CONFIG))
    flickr = plan.table("sgraf_t1", "flickr")
    assert not any(r.released for r in flickr.rows)
    left_out = {r["id"]: r["keys"] for r in plan.table_spec("sgraf_t1", "flickr").unconfigured}
    assert left_out["released_sgraf"] == ["datasets.flickr.released.sgraf_sgr", "datasets.flickr.released.sgraf_saf",
                                          "datasets.flickr.released.sgraf_vocab"]
    # the built-in data have no released weights: nothing to leave out, nothing to say
    assert not plan.table_spec("sgraf_t1", "synthetic").unconfigured


def test_configured_released_rows_evaluate_imported_runs_and_train_nothing(tmp_path):
    files = released_files(tmp_path, ("sgraf_sgr", "sgraf_saf", "sgraf_vocab", "vsrn_1", "vsrn_2", "vsrn_vocab"))
    cfg = load_harness_config(CONFIG, {"datasets": {"flickr": {"released": files}}})
    plan = Plan(cfg)
    rows = {r.id: r for r in plan.table("sgraf_t1", "flickr").rows}
    sgraf, saf = rows["released_sgraf"], rows["released_saf"]
    assert not plan.table_spec("sgraf_t1", "flickr").unconfigured
    assert sgraf.members == [] and sgraf.seeds == [0] and sgraf.ensemble_size == 2 and sgraf.ensemble_id
    exp = sgraf.released[0].exp
    assert sgraf.run_dirs(plan.layout, "flickr") == [f"results/flickr/released/{exp}/sgraf_sgr",
                                                      f"results/flickr/released/{exp}/sgraf_saf"]
    assert saf.ensemble_id is None and saf.run_dirs(plan.layout, "flickr") == [f"results/flickr/released/{exp}/sgraf_saf"]
    assert plan.score_files(sgraf, "flickr", "test") == [[f"results/flickr/released/{exp}/sgraf_sgr/sims_test.npy",
                                                          f"results/flickr/released/{exp}/sgraf_saf/sims_test.npy"]]
    assert saf.ledger[0]["switches"] == [] and "Paranioar/SGRAF" in saf.ran
    # the table's training work is that of its trained rows only: SGR, SAF, SCAN's two models, BFAN's
    # two, PFAN, IMRAM and VSRN (3 seeds each), and the second members of the VSRN ensemble (3 more seeds)
    work = table_work(plan, "sgraf_t1", "flickr", SPLIT_IMAGES)
    assert sorted((w.method, w.seed) for w in work) == sorted(
        [(m, s) for m in ("sgraf", "sgraf", "scan", "scan", "bfan", "bfan", "pfan", "imram", "vsrn_captioning")
         for s in (0, 1, 2)]
        + [("vsrn_captioning", s) for s in (1000, 1001, 1002)])
    assert not any(w.exp == exp and w.seed == 0 and w.method != "sgraf" for w in work)
    vsrn = rows["released_vsrn"].released[0].exp
    assert set(plan.released_members("flickr")) == {(exp, "sgraf_sgr"), (exp, "sgraf_saf"), (vsrn, "vsrn_1"),
                                                    (vsrn, "vsrn_2")}
    # the ensemble of two released models differs from the trained SGRAF row's
    assert sgraf.ensemble_id != rows["sgraf"].ensemble_id


def test_a_configured_file_that_is_missing_fails_the_plan_naming_its_key(tmp_path):
    files = {**released_files(tmp_path), "sgraf_saf": str(tmp_path / "not_downloaded.pth.tar")}
    with pytest.raises(HarnessError, match=r"datasets.coco.released.sgraf_saf: file not found: .*not_downloaded"):
        Plan(load_harness_config(CONFIG, {"datasets": {"coco": {"released": files}}}))


def paper(tmp_path, row: str, method: str = "sgraf", figures: str = "") -> str:
    path = tmp_path / "p.yaml"
    path.write_text(f"paper: t\nkey: t\nmethods: {{{method}: config/methods/{method}.yaml}}\n{figures}"
                    "tables:\n  t:\n    title: t\n    datasets: [flickr]\n"
                    f"    rows:\n      - {{id: r, label: r, method: {method}, seeds: [0]}}\n      - {row}\n")
    return str(path)


@pytest.mark.parametrize("row, message", [
    ("{id: x, label: x, method: sgraf, seeds: [0], released: {checkpoint: sgraf_sgr, vocab: sgraf_vocab}}",
     "rows.1: fits none of its forms: .*`method` and `released`"),
    ("{id: x, label: x, method: sgraf, released: {checkpoint: [sgraf_sgr], vocab: sgraf_vocab}}",
     "is not valid under any of the given schemas|should be non-empty|too short"),
])
def test_a_released_row_has_no_seeds_and_an_ensemble_of_one_is_not_one(tmp_path, row, message):
    cfg = load_harness_config(CONFIG, {"papers": [paper(tmp_path, row)],
                                       "datasets": {"flickr": {"released": released_files(tmp_path)}}})
    with pytest.raises(HarnessError, match=message):
        Plan(cfg)


def test_a_model_kind_without_an_importer_and_a_figure_of_a_released_row_are_refused(tmp_path):
    row = "{id: x, label: x, method: scan, released: {checkpoint: sgraf_sgr, vocab: sgraf_vocab}}"
    cfg = load_harness_config(CONFIG, {"papers": [paper(tmp_path, row, "scan")],
                                       "datasets": {"flickr": {"released": released_files(tmp_path)}}})
    with pytest.raises(HarnessError, match="row 'x': no importer of released checkpoints for model kind 'scan'"):
        Plan(cfg)
    row = "{id: x, label: x, method: sgraf, released: {checkpoint: sgraf_saf, vocab: sgraf_vocab}}"
    figure = "figures:\n  f: {kind: saf_weights, table: t, row: x, title: t}\n"
    cfg = load_harness_config(CONFIG, {"papers": [paper(tmp_path, row, figures=figure)],
                                       "datasets": {"flickr": {"released": released_files(tmp_path)}}})
    with pytest.raises(HarnessError, match="figure 'f' names row 'x', which is the authors' weights"):
        Plan(cfg)


def test_rows_that_import_one_checkpoint_must_agree_on_its_vocabulary_and_expectations(tmp_path):
    rows = ("{id: a, label: a, method: sgraf, released: {checkpoint: sgraf_saf, vocab: sgraf_vocab}}\n"
            "      - {id: b, label: b, method: sgraf, released: {checkpoint: sgraf_saf, vocab: sgraf_sgr}}")
    cfg = load_harness_config(CONFIG, {"papers": [paper(tmp_path, rows)],
                                       "datasets": {"flickr": {"released": released_files(tmp_path)}}})
    with pytest.raises(HarnessError, match="checkpoint 'sgraf_saf' is imported with vocabulary 'sgraf_sgr' .* one "
                                           "import serves both rows"):
        Plan(cfg)
    row = "{id: x, label: x, method: sgraf, released: {checkpoint: sgraf_saf, vocab: sgraf_vocab, expect: {saf: {a: 1}}}}"
    cfg = load_harness_config(CONFIG, {"papers": [paper(tmp_path, row)]})
    with pytest.raises(HarnessError, match="released.expect names saf, which is not one of its checkpoints"):
        Plan(cfg)   # checked where no file is configured too


def test_a_released_row_naming_an_unknown_method_fails_on_every_dataset(tmp_path):
    row = "{id: x, label: x, method: sgrf, released: {checkpoint: sgraf_saf, vocab: sgraf_vocab}}"
    path = tmp_path / "p.yaml"
    path.write_text("paper: t\nkey: t\nmethods: {sgraf: config/methods/sgraf.yaml}\ntables:\n  t:\n    title: t\n"
                    f"    datasets: [synthetic]\n    rows:\n      - {row}\n")
    with pytest.raises(HarnessError, match="row 'x' names unknown method 'sgrf'"):
        Plan(load_harness_config(CONFIG, {"papers": [str(path)]}))


def test_the_docs_flickr_keys_plan_every_released_row_of_the_flickr30k_tables(tmp_path):
    """docs/released-weights.md's example block of released files: set as it is written (with files
    at those names), every Flickr30K table has all its released rows, VSE0's among them."""
    page = (REPO / "docs" / "released-weights.md").read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", page, re.S) if "released:" in b]
    keys = yaml.safe_load(block)["datasets"]["flickr"]["released"]
    files = released_files(tmp_path, tuple(keys))
    plan = Plan(load_harness_config(CONFIG, {"datasets": {"flickr": {"released": files}}}))
    tables = [t for (t, d) in plan.tables if d == "flickr"]
    assert not [r["id"] for t in tables for r in plan.table_spec(t, "flickr").unconfigured or []
                if r["needs"] == "the authors' released weights"]
    released = {r.id for t in tables for r in plan.table(t, "flickr").rows if r.released}
    assert {"released_sgraf", "released_vsrn", "released_vsepp_resnet152_ft", "released_vse0_resnet152_ft"} <= released
    (vse0,) = [r for r in plan.table("table1", "flickr").rows if r.id == "released_vse0_resnet152_ft"]
    assert [m.checkpoint for m in vse0.released] == ["vse0_resnet_finetune"] and vse0.members == []


BERT_FOLDER = REPO / "tests" / "data" / "released" / "vse_infinity_bert" / "bert"   # config.json, vocab.txt: no weights


def test_a_released_bert_row_is_left_out_until_its_checkpoint_and_bert_folder_are_set_then_reads_both(tmp_path):
    """VSE-infinity's released WSL grid + BERT runs: the authors release no vocabulary with a BERT
    run, so the row needs its checkpoint and the BERT folder (whose vocab.txt the DAG tokenises the
    captions with, whose config.json gives the architecture; the weights are the checkpoint's)."""
    from methods.plan.dag_checks import InputChecks
    from methods.plan.rule_inputs import RuleInputs

    for dataset in ("coco", "flickr"):
        left = {r["id"]: r for r in Plan(load_harness_config(CONFIG)).table_spec(
            {"coco": "set_embeddings_t1", "flickr": "set_embeddings_t2"}[dataset], dataset).unconfigured}
        assert left["released_vse_infinity_resnext_bert"]["keys"] == [
            f"datasets.{dataset}.released.vse_infinity_wsl_grid_bert", "text_encoders.bert_base_uncased.path"]
        assert left["released_vse_infinity_resnext_bert"]["needs"] == "the authors' released weights and a BERT folder"
    files = released_files(tmp_path, ("vse_infinity_wsl_grid_bert",))
    only_weights = Plan(load_harness_config(CONFIG, {"datasets": {"coco": {"released": files}}}))
    (row,) = [r for r in only_weights.table_spec("set_embeddings_t1", "coco").unconfigured
              if r["id"] == "released_vse_infinity_resnext_bert"]
    assert row["keys"] == ["text_encoders.bert_base_uncased.path"] and row["needs"] == "a BERT folder"

    plan = Plan(load_harness_config(CONFIG, {"datasets": {"coco": {"released": files}},
                                             "text_encoders": {"bert_base_uncased": {"path": str(BERT_FOLDER)}}}))
    (row,) = [r for r in plan.table("set_embeddings_t1", "coco").rows if r.id == "released_vse_infinity_resnext_bert"]
    (member,) = row.released
    assert member.vocab is None and member.vocab_path == plan.layout.wordpiece_captions("coco", "bert_base_uncased")
    assert "BERT folder text_encoders.bert_base_uncased" in row.ran and "coco_wsl_grid_bert" in row.label

    class NoDatasetCheck(InputChecks):
        def dataset(self, name):   # the fake COCO's files are not there; the BERT folder's check runs
            pass

    got = RuleInputs(plan, NoDatasetCheck(plan.cfg)).released("coco", member.exp, member.checkpoint)
    assert got["vocab"] == member.vocab_path and got["checkpoint"] == files["vse_infinity_wsl_grid_bert"]
    assert got["text_encoder"] == [f"{BERT_FOLDER}/vocab.txt", f"{BERT_FOLDER}/config.json"]   # no weights file
    assert got["features"] == []   # the CNN runs on the images: no cached maps


@pytest.mark.parametrize("method, row, message", [
    ("vse_infinity_grid_bert", "{id: x, label: X, method: vse_infinity_grid_bert, released: {checkpoint: a, vocab: b}}",
     r"released.vocab is set, but method 'vse_infinity_grid_bert' reads BERT's WordPiece pieces"),
    ("sgraf", "{id: x, label: X, method: sgraf, released: {checkpoint: a}}",
     r"released.vocab is not set: method 'sgraf' reads words, from the vocabulary released with the weights"),
])
def test_a_released_rows_vocabulary_key_follows_its_text_encoder(tmp_path, method, row, message):
    with pytest.raises(HarnessError, match=message):
        Plan(load_harness_config(CONFIG, {"papers": [paper(tmp_path, row, method)]}))
