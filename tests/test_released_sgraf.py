"""SGRAF's released checkpoints imported onto the project's model (methods.released.sgraf).

The fixtures (tests/data/released/sgraf/) were written by the authors' own code
(github.com/Paranioar/SGRAF, branch python3.6, model.py) at tiny widths with random weights,
saved as their train.py saves a checkpoint, with the scores their code gives on fixed inputs:
tests/data/released/make_sgraf_fixtures.py says how. The imported model must give those scores."""
import argparse
import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from methods.data.datasets import DatasetPayload
from methods import api
from methods.data.inputs import CachedImageFeatures
from methods.data.text import Vocabulary
from methods.data.tokenizers import Tokenizer
from methods.errors import HarnessError
from methods.import_released import import_released
from methods.models.base import BuildContext, build_model
from methods.released.mapping import map_tensors
from methods.untrusted.safe_load import load_checkpoint
from methods.released.sgraf import import_checkpoint
from methods.scoring import encode_images, encode_texts, score_matrix
from tests.records import READER_LIMITS as LIMITS

FIXTURES = Path(__file__).parent / "data" / "released" / "sgraf"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
CPU = torch.device("cpu")
REGIONS = {"precomp": {"n_regions": 36, "feature_dim": None}}   # the dataset config the importer reads


@pytest.fixture(scope="module")
def base_model():
    return api.experiment_config("sgraf", "flickr")["model"]


def imported_scores(released) -> np.ndarray:
    model = build_model(released.model_config, BuildContext(released.vocab_size, released.image_shape, {}, cnn=False))
    model.load_state_dict(released.state_dict, strict=True)
    model.eval()
    vocab = Vocabulary.load(FIXTURES / "f30k_precomp_vocab.json", Tokenizer("nltk_line"))
    tokens = [vocab.encode(c) for c in EXPECTED["captions"]]
    assert tokens == EXPECTED["token_ids"]   # their vocabulary, read by the project, gives their ids
    images = CachedImageFeatures(np.array(EXPECTED["images"], dtype=np.float32))
    img = encode_images(model, len(EXPECTED["images"]), CPU, 2, features=images)   # batches of 2: no batch effects
    return score_matrix(model, img, encode_texts(model, tokens, CPU, 3)).numpy()


@pytest.mark.parametrize("head", ["SGR", "SAF"])
def test_a_released_checkpoint_scores_as_the_authors_code(base_model, head):
    released = import_checkpoint(FIXTURES / f"f30k_{head}_model_best.pth.tar", base_model, REGIONS, LIMITS)
    assert released.source_dataset == "flickr" and released.provenance["epoch"] == 12
    assert released.model_config["heads"] == [head.lower()] and released.model_config["embed_dim"] == 8
    expected = np.array(EXPECTED["scores"][head], dtype=np.float32)
    assert np.abs(expected - expected.mean()).max() > 1e-3   # the scores differ: a swapped tensor would show
    np.testing.assert_allclose(imported_scores(released), expected, rtol=0, atol=1e-5)


def resaved(tmp_path: Path, change) -> Path:
    ckpt = load_checkpoint(FIXTURES / "f30k_SGR_model_best.pth.tar", [argparse.Namespace], LIMITS)
    change(ckpt)
    path = tmp_path / "model_best.pth.tar"
    torch.save(ckpt, path)
    return path


@pytest.mark.parametrize("option, value, message", [
    ("no_imgnorm", True, "trained with no_imgnorm=True, which the project's SGRAF does not implement"),
    ("no_txtnorm", True, "trained with no_txtnorm=True"),
    ("module_name", "AVE", "module_name 'AVE' is not one of SGRAF's"),
    ("data_name", "cc152k_precomp", "data_name 'cc152k_precomp' is not one of"),
])
def test_an_option_the_project_does_not_implement_is_refused_by_name(tmp_path, base_model, option, value, message):
    path = resaved(tmp_path, lambda c: setattr(c["opt"], option, value))
    with pytest.raises(HarnessError, match=message):
        import_checkpoint(path, base_model, REGIONS, LIMITS)


def test_a_checkpoint_of_another_model_is_refused(tmp_path, base_model):
    def as_vsepp(ckpt):   # VSE++ saves [img_enc, txt_enc] and has no SGRAF options
        ckpt["model"] = ckpt["model"][:2]
        for name in ("sim_dim", "module_name", "sgr_step"):
            delattr(ckpt["opt"], name)
    with pytest.raises(HarnessError, match=r"not an SGRAF checkpoint \(its options have no sim_dim, module_name, sgr_step"):
        import_checkpoint(resaved(tmp_path, as_vsepp), base_model, REGIONS, LIMITS)


def test_a_tensor_the_model_has_not_or_a_shape_that_differs_is_named(tmp_path, base_model):
    def extra(ckpt):
        ckpt["model"][2]["extra_head.weight"] = torch.zeros(1)
    with pytest.raises(HarnessError, match="1 tensors have no place in the project's model \\(e.g. 'sim_enc.extra_head.weight'"):
        import_checkpoint(resaved(tmp_path, extra), base_model, REGIONS, LIMITS)

    def wider(ckpt):
        ckpt["model"][0]["fc.weight"] = torch.zeros(9, 12)
    with pytest.raises(HarnessError, match=r"'img_enc.fc.weight' has shape \(9, 12\), but 'fc.weight' of the project's "
                                           r"model is \(8, 12\)"):
        import_checkpoint(resaved(tmp_path, wider), base_model, REGIONS, LIMITS)


def test_every_project_tensor_is_set_exactly_once():
    target = {"a.weight": torch.zeros(2), "b.weight": torch.zeros(2)}
    with pytest.raises(HarnessError, match="the checkpoint sets no 'b.weight'"):
        map_tensors({"x.weight": torch.ones(2)}, target, [(r"x\.(\w+)", r"a.\1")], "f")
    with pytest.raises(HarnessError, match="tensors 'x.weight' and 'y.weight' both map to 'a.weight'"):
        map_tensors({"x.weight": torch.ones(2), "y.weight": torch.ones(2)}, target, [(r"[xy]\.(\w+)", r"a.\1")], "f")
    state = map_tensors({"x.weight": torch.ones(2), "y.weight": torch.full((2,), 2.0), "y.count": torch.ones(())},
                        target, [(r"x\.(\w+)", r"a.\1"), (r"y\.(\w+)", r"b.\1")], "f", ignored=[(r"y\.count", "why")])
    assert torch.equal(state["b.weight"], torch.full((2,), 2.0)) and set(state) == set(target)


def payload(name="flickr", feature_dim=12):
    """A dataset payload (results/<dataset>/dataset.json) of the fields an import reads."""
    return DatasetPayload.from_json({"name": name, "paths": {},
            "dataset": {"tokenizer": "nltk_line", "precomp": {"n_regions": 36, "feature_dim": feature_dim}}})


def test_the_import_writes_a_run_folder_that_evaluates_as_the_authors_code(tmp_path):
    """What ``python -m methods.import_released`` writes: model.pt and vocab.json, read back by
    the evaluation's own loaders."""
    cfg = api.experiment_config("sgraf", "flickr")
    import_released(payload(), cfg, FIXTURES / "f30k_SAF_model_best.pth.tar", FIXTURES / "f30k_precomp_vocab.json",
                    tmp_path / "run", limits=LIMITS)
    model, ckpt = api.load_model(tmp_path / "run" / "model.pt", CPU)
    assert ckpt["best"]["released"]["code"] == "Paranioar/SGRAF" and ckpt["config"]["model"]["heads"] == ["saf"]
    vocab = Vocabulary.load(tmp_path / "run" / "vocab.json")
    img = api.encode_images(model, CachedImageFeatures(np.array(EXPECTED["images"], dtype=np.float32)), device=CPU)
    txt = api.encode_texts(model, EXPECTED["captions"], vocab, device=CPU)
    np.testing.assert_allclose(api.score(model, img, txt).numpy(), np.array(EXPECTED["scores"]["SAF"]), rtol=0, atol=1e-5)


@pytest.mark.parametrize("dataset, feature_dim, vocab_words, message", [
    ("coco", 12, None, "trained on flickr, but dataset 'coco' is coco"),
    ("flickr", 2048, None, "trained on 12-d region features, but datasets.flickr.precomp.feature_dim is 2048"),
    ("flickr", 12, 23, "has 23 words, but .* was trained with 24: give the vocabulary released with it"),
])
def test_an_import_that_does_not_fit_the_dataset_writes_nothing(tmp_path, dataset, feature_dim, vocab_words, message):
    vocab = FIXTURES / "f30k_precomp_vocab.json"
    if vocab_words:
        words = json.loads(vocab.read_text())["idx2word"]
        kept = [words[str(i)] for i in range(vocab_words)]
        vocab = tmp_path / "vocab.json"
        vocab.write_text(json.dumps({"word2idx": {w: i for i, w in enumerate(kept)},
                                     "idx2word": dict(enumerate(kept)), "idx": len(kept)}))
    with pytest.raises(HarnessError, match=message):
        import_released(payload(dataset, feature_dim), api.experiment_config("sgraf", "flickr"),
                        FIXTURES / "f30k_SGR_model_best.pth.tar", vocab, tmp_path / "run", limits=LIMITS)
    assert not (tmp_path / "run").exists()


def test_a_model_kind_without_released_weights_has_no_importer(tmp_path):
    with pytest.raises(HarnessError, match="no importer of released checkpoints for model kind 'scan'"):
        import_released(payload(), api.experiment_config("scan", "flickr"), FIXTURES / "f30k_SGR_model_best.pth.tar",
                        FIXTURES / "f30k_precomp_vocab.json", tmp_path / "run", limits=LIMITS)


def test_an_import_refuses_a_run_folder_that_holds_files_and_a_failed_one_leaves_none(tmp_path, monkeypatch):
    """A run folder of its own: an old evaluation must not stay beside a new model, and a failure
    half-way (here: saving the model) leaves no vocabulary without a model."""
    cfg = api.experiment_config("sgraf", "flickr")
    ckpt, vocab = FIXTURES / "f30k_SAF_model_best.pth.tar", FIXTURES / "f30k_precomp_vocab.json"
    run = tmp_path / "run"
    run.mkdir()
    (run / "eval_test.json").write_text("{}")
    with pytest.raises(HarnessError, match="run: not an empty folder"):
        import_released(payload(), cfg, ckpt, vocab, run, limits=LIMITS)
    (run / "eval_test.json").unlink()

    def disk_full(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr("methods.import_released.save_trained_model", disk_full)
    with pytest.raises(OSError):
        import_released(payload(), cfg, ckpt, vocab, run, limits=LIMITS)
    assert list(run.iterdir()) == [] and [p.name for p in tmp_path.iterdir()] == ["run"]   # no staging folder left


def test_every_listed_importer_reads_the_code_base_the_dag_names():
    """The DAG build names each importer's code base without importing it (no torch there)."""
    import importlib

    from methods.released.importers import RELEASED
    for kind, (code, module) in RELEASED.items():
        assert importlib.import_module(f"methods.released.{module}").IMPORTER.code == code


def test_an_experiment_planned_for_other_numerics_is_refused(tmp_path):
    from methods.model_kinds.method_schema import read_experiment
    cfg = api.experiment_config("sgraf", "flickr")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "numerics": "portable"}))
    with pytest.raises(HarnessError, match="was planned for portable numerics but dataset 'flickr' runs native"):
        read_experiment(path, payload())
    path.write_text(json.dumps({**cfg, "numerics": "native", "model": {**cfg["model"], "no_such_key": 1}}))
    with pytest.raises(HarnessError, match="no_such_key"):
        read_experiment(path, payload())


def test_a_checkpoint_of_another_run_than_the_row_expects_is_refused(tmp_path):
    """A config key pointing at the SGR file for the SAF row fails instead of showing SGR's numbers."""
    with pytest.raises(HarnessError, match=r"trained with module_name='SGR', but the row expects module_name='SAF'"):
        import_released(payload(), api.experiment_config("sgraf", "flickr"), FIXTURES / "f30k_SGR_model_best.pth.tar",
                        FIXTURES / "f30k_precomp_vocab.json", tmp_path / "run", {"module_name": "SAF"}, limits=LIMITS)
    with pytest.raises(HarnessError, match=r"the row expects finetune=True, but the importer reads no option"):
        import_released(payload(), api.experiment_config("sgraf", "flickr"), FIXTURES / "f30k_SGR_model_best.pth.tar",
                        FIXTURES / "f30k_precomp_vocab.json", tmp_path / "run", {"finetune": True}, limits=LIMITS)
    assert not (tmp_path / "run").exists()


def test_an_imported_run_folder_is_readable_as_the_umask_allows(tmp_path):
    import os
    import stat
    old = os.umask(0o022)
    try:
        import_released(payload(), api.experiment_config("sgraf", "flickr"), FIXTURES / "f30k_SAF_model_best.pth.tar",
                        FIXTURES / "f30k_precomp_vocab.json", tmp_path / "run", limits=LIMITS)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "run").stat().st_mode) == 0o755
