"""Every results file is named in one module (methods.paths): the layout it documents, patterns
with wildcards, and no other module or rule writing those names by hand."""
import re
from pathlib import Path

import pytest

from methods.config import load_harness_config
from methods.errors import HarnessError
from methods.paths import ResultsLayout, eval_file, eval_name, model_file, sims_file, sims_name, train_log

REPO = Path(__file__).resolve().parents[1]


def test_the_layout_the_module_documents():
    layout = ResultsLayout("results")
    run = layout.run_dir("coco", "sgraf-0123456789", 2)
    assert run == "results/coco/runs/sgraf-0123456789/seed2"
    assert (model_file(run), train_log(run)) == (f"{run}/model.pt", f"{run}/train_log.json")
    assert (eval_file(run, "testall"), sims_file(run, "testall")) == (f"{run}/eval_testall.json", f"{run}/sims_testall.npy")
    assert eval_name("test", "img0_txt1") == "eval_test@img0_txt1.json" and sims_name("test", "v") == "sims_test@v.npy"
    assert layout.ensemble_dir("flickr", "ens-0123456789", 0) == "results/flickr/ensembles/ens-0123456789/seed0"
    assert layout.row_aggregate("flickr", "table1", "vsepp") == "results/flickr/rows/table1/vsepp.json"
    assert layout.spec("flickr", "claims", "sgraf") == "results/flickr/claims/sgraf.spec.json"
    assert layout.experiment_config("flickr", "x-0123456789") == "results/flickr/runs/x-0123456789/config.json"
    assert layout.backbone_weights("synthetic", "resnet18_synthetic") == "results/synthetic/backbones/resnet18_synthetic.pt"


def test_wildcards_give_the_rules_patterns():
    layout = ResultsLayout("out")
    assert eval_file(layout.run_dir("{dataset}", "{exp}", "{seed}"), "{split}", "v") == \
        "out/{dataset}/runs/{exp}/seed{seed}/eval_{split}@v.json"


def test_no_rule_or_module_builds_a_results_path_by_hand():
    """No other module or rule joins a root and a name that methods/paths.py owns (an f-string
    ``{...}/model.pt``, ``{...}/runs/``, a ``Path / "model.pt"``); messages and help texts that
    show the layout are not paths. Logs and benchmarks are the rules' own."""
    built = re.compile(r"""\}/(runs|ensembles|rows|tables|figures|claims|reports|data|precomp|source|features|backbones)\b"""
                       r"""|\}/(model\.pt|train_log\.json|vocab\.json|dataset\.json|summary\.spec|runtime\.spec|eval_|sims_)"""
                       r"""|/ f?"(model\.pt|train_log\.json|eval_|sims_)""")
    files = [*REPO.glob("methods/**/*.py"), *REPO.glob("workflow/rules/*.smk"), REPO / "Snakefile"]
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
             for path in files if path.name != "paths.py"
             for number, line in enumerate(path.read_text().splitlines(), 1) if built.search(line)]
    assert not found, "\n".join(found)


def test_a_backbone_the_dag_pretrains_has_its_weights_where_the_results_are():
    """Its weights are a DAG output: the config need not name them, and one that moves
    results_dir moves them; a path elsewhere is refused naming the key and the path."""
    config = REPO / "config" / "config.yaml"
    moved = load_harness_config(config, {"results_dir": "/lab/itr"})
    assert moved["backbones"]["resnet18_synthetic"]["weights"] == "/lab/itr/synthetic/backbones/resnet18_synthetic.pt"
    assert load_harness_config(config)["backbones"]["resnet18_synthetic"]["weights"] == \
        "results/synthetic/backbones/resnet18_synthetic.pt"
    with pytest.raises(HarnessError, match=r"backbones\.resnet18_synthetic: pre-trained by the DAG, which writes it "
                                           r"to 'results/synthetic/backbones/resnet18_synthetic\.pt'.*leave 'weights' out"):
        load_harness_config(config, {"backbones": {"resnet18_synthetic": {"weights": "/elsewhere/r18.pt"}}})
    # a text encoder the DAG pre-trains likewise
    assert load_harness_config(config)["text_encoders"]["bert_synthetic"]["path"] == \
        "results/synthetic/text_encoders/bert_synthetic"
    with pytest.raises(HarnessError, match=r"text_encoders\.bert_synthetic: pre-trained by the DAG, .*leave 'path' out"):
        load_harness_config(config, {"text_encoders": {"bert_synthetic": {"path": "/elsewhere/bert"}}})
    with pytest.raises(HarnessError, match=r"backbones\.r50: 'weights' is a required property"):   # any other backbone
        load_harness_config(config, {"backbones": {"r50": {"arch": "resnet50"}}})
