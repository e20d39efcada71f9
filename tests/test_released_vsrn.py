"""VSRN's released checkpoints imported onto the project's model (methods.released.vsrn).

The fixtures (tests/data/released/vsrn/) were written by the authors' own code
(github.com/KunpengLi1994/VSRN, model.py and GCN_lib/Rs_GCN.py) at tiny widths with random
weights, saved as their train.py saves a checkpoint, with a vocabulary pickled as their released
ones (Python 2 protocol 2, ``__main__.Vocabulary``) and the scores their code gives on fixed
inputs: tests/data/released/make_vsrn_fixtures.py says how. One checkpoint per branch of their
image encoder: model_fliker_1 (f30k_precomp: final BatchNorm) and model_coco_1 (coco_precomp: none,
and a 2-layer text GRU). The imported model must give their scores."""
import argparse
import json
import os
import pickle
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
from methods.models.checkpoint import read_model_file
from methods.released import importers, vsrn
from methods.untrusted.safe_load import load_checkpoint
from methods.scoring import encode_images, encode_texts, score_matrix
from tests.records import READER_LIMITS as LIMITS

FIXTURES = Path(__file__).parent / "data" / "released" / "vsrn"
SGRAF_CHECKPOINT = Path(__file__).parent / "data" / "released" / "sgraf" / "f30k_SGR_model_best.pth.tar"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
VOCAB = FIXTURES / "precomp_vocab.pkl"
CPU = torch.device("cpu")
N_REGIONS = len(EXPECTED["images"][0])
REGIONS = {"precomp": {"n_regions": N_REGIONS, "feature_dim": None}}   # the dataset config the importer reads
TOKENIZER = Tokenizer("nltk_line")   # single-sentence captions: as their word_tokenize(caption.lower())
RUNS = {"model_fliker_1": ("flickr", True, 1), "model_coco_1": ("coco", False, 2)}


@pytest.fixture(scope="module")
def base_model():
    return api.experiment_config("vsrn", "flickr")["model"]


def imported_scores(released, state_dict=None) -> np.ndarray:
    model = build_model(released.model_config, BuildContext(released.vocab_size, released.image_shape, {}, cnn=False))
    model.load_state_dict(state_dict or released.state_dict, strict=True)
    model.eval()
    tokens = [vsrn.read_vocabulary(VOCAB, TOKENIZER, LIMITS).encode(c) for c in EXPECTED["captions"]]
    images = CachedImageFeatures(np.array(EXPECTED["images"], dtype=np.float32))
    img = encode_images(model, len(EXPECTED["images"]), CPU, 2, features=images)   # batches of 2: no batch effects
    return score_matrix(model, img, encode_texts(model, tokens, CPU, 3)).numpy()


@pytest.mark.parametrize("run", sorted(RUNS))
def test_a_released_checkpoint_scores_as_the_authors_code(base_model, run):
    dataset, final_bn, text_layers = RUNS[run]
    released = vsrn.import_checkpoint(FIXTURES / f"{run}.pth.tar", base_model, REGIONS, LIMITS)
    assert released.source_dataset == dataset and released.provenance["epoch"] == 17
    cfg = released.model_config
    assert (cfg["final_bn"], cfg["l2norm_after_fc"], cfg["region_l2norm"]) == (final_bn, not final_bn, "region_axis")
    assert cfg["embed_dim"] == 8 and cfg["text"]["num_layers"] == text_layers and cfg["text"]["word_dim"] == 6
    assert released.image_shape == {"dim": 10, "regions": N_REGIONS}
    expected = np.array(EXPECTED["scores"][run], dtype=np.float32)
    assert np.abs(expected - expected.mean()).max() > 1e-3   # the scores differ: a swapped tensor would show
    np.testing.assert_allclose(imported_scores(released), expected, rtol=0, atol=1e-5)


def test_their_vocabulary_pickle_gives_their_token_ids():
    vocab = vsrn.read_vocabulary(VOCAB, TOKENIZER, LIMITS)
    assert len(vocab) == 25 and vocab.idx2word[:4] == ["<pad>", "<start>", "<end>", "<unk>"]
    assert vocab.idx2word[-1] == "café"   # a Python 2 unicode word
    assert [vocab.encode(c) for c in EXPECTED["captions"]] == EXPECTED["token_ids"]


def test_a_vocabulary_json_in_scans_layout_is_read_too(tmp_path):
    """SCAN's (and SGRAF's) f30k_precomp_vocab.json holds the words of VSRN's pickle in its order."""
    words = vsrn.read_vocabulary(VOCAB, TOKENIZER, LIMITS).idx2word
    path = tmp_path / "f30k_precomp_vocab.json"
    path.write_text(json.dumps({"word2idx": {w: i for i, w in enumerate(words)},
                                "idx2word": {str(i): w for i, w in enumerate(words)}, "idx": len(words)}))
    assert [vsrn.read_vocabulary(path, TOKENIZER, LIMITS).encode(c) for c in EXPECTED["captions"]] == EXPECTED["token_ids"]


def resaved(tmp_path: Path, change, run="model_fliker_1") -> Path:
    ckpt = load_checkpoint(FIXTURES / f"{run}.pth.tar", [argparse.Namespace], LIMITS)
    change(ckpt)
    path = tmp_path / "model.pth.tar"
    torch.save(ckpt, path)
    return path


def test_a_checkpoint_without_batchnorm_step_counts_scores_the_same(tmp_path, base_model):
    """torch before 0.4.1 saved no num_batches_tracked; momentum 0.1 never reads it."""
    def old_torch(ckpt):
        for state in ckpt["model"]:
            for key in [k for k in state if k.endswith("num_batches_tracked")]:
                del state[key]
    released = vsrn.import_checkpoint(resaved(tmp_path, old_torch), base_model, REGIONS, LIMITS)
    np.testing.assert_allclose(imported_scores(released), np.array(EXPECTED["scores"]["model_fliker_1"]),
                               rtol=0, atol=1e-5)


@pytest.mark.parametrize("option, value, message", [
    ("no_imgnorm", True, "trained with no_imgnorm=True, which the project's VSRN does not implement"),
    ("use_abs", True, "trained with use_abs=True"),
    ("measure", "order", "trained with measure='order'"),
    ("data_name", "f8k_precomp", "data_name 'f8k_precomp' is not one of"),
    ("data_name", "coco_precomp", "data_name 'coco_precomp' means no final image BatchNorm .* holds img_enc.bn"),
])
def test_an_option_the_project_does_not_implement_is_refused_by_name(tmp_path, base_model, option, value, message):
    path = resaved(tmp_path, lambda c: setattr(c["opt"], option, value))
    with pytest.raises(HarnessError, match=message):
        vsrn.import_checkpoint(path, base_model, REGIONS, LIMITS)


def test_a_checkpoint_of_another_model_is_refused(tmp_path, base_model):
    with pytest.raises(HarnessError, match=r"not a VSRN checkpoint \(its options have no dim_vid, dim_hidden, max_len"):
        vsrn.import_checkpoint(SGRAF_CHECKPOINT, base_model, REGIONS, LIMITS)

    def as_vsepp(ckpt):   # VSE++ saves [img_enc, txt_enc] too, without the caption decoder's options
        for name in ("dim_vid", "dim_hidden", "max_len"):
            delattr(ckpt["opt"], name)
    with pytest.raises(HarnessError, match="not a VSRN checkpoint"):
        vsrn.import_checkpoint(resaved(tmp_path, as_vsepp), base_model, REGIONS, LIMITS)

    def wider_kernel(ckpt):   # a GCN kernel that is not 1x1 is refused by shape, not squeezed
        ckpt["model"][0]["Rs_GCN_2.theta.weight"] = torch.zeros(8, 8, 3)
    with pytest.raises(HarnessError, match=r"'img_enc.Rs_GCN_2.theta.weight' has shape \(8, 8, 3\), but "
                                           r"'gcn.1.theta.weight'"):
        vsrn.import_checkpoint(resaved(tmp_path, wider_kernel), base_model, REGIONS, LIMITS)


def test_a_vocabulary_pickle_that_runs_code_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"

    class Exploit:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)
    path = tmp_path / "f30k_precomp_vocab.pkl"
    path.write_bytes(pickle.dumps(Exploit(), protocol=2))
    with pytest.raises(HarnessError, match=r"refused to load \(refused global posix.system"):
        vsrn.read_vocabulary(path, TOKENIZER, LIMITS)
    assert not marker.exists()


def test_a_vocabulary_without_the_project_specials_first_is_refused(tmp_path):
    data = VOCAB.read_bytes().replace(b"<start>", b"<begin>")   # same length: the pickle stays valid
    path = tmp_path / "vocab.pkl"
    path.write_bytes(data)
    with pytest.raises(HarnessError, match=r"starts with \['<pad>', '<begin>', '<end>', '<unk>'\], not"):
        vsrn.read_vocabulary(path, TOKENIZER, LIMITS)


def payload(name="flickr", feature_dim=10):
    """A dataset payload (results/<dataset>/dataset.json) of the fields an import reads."""
    return DatasetPayload.from_json({"name": name, "paths": {},
            "dataset": {"tokenizer": "nltk_line", "precomp": {"n_regions": N_REGIONS, "feature_dim": feature_dim}}})


def test_the_import_writes_a_run_folder_that_evaluates_as_the_authors_code(tmp_path, monkeypatch):
    """What ``python -m methods.import_released`` writes: model.pt and vocab.json, read back by
    the evaluation's own loaders."""
    import_released(payload("coco"), api.experiment_config("vsrn", "coco"), FIXTURES / "model_coco_1.pth.tar", VOCAB,
                    tmp_path / "run", limits=LIMITS)
    ckpt = read_model_file(tmp_path / "run" / "model.pt")
    assert ckpt["best"]["released"]["code"] == "KunpengLi1994/VSRN" and ckpt["config"]["model"]["final_bn"] is False
    model, _ = api.load_model(tmp_path / "run" / "model.pt", CPU)
    vocab = Vocabulary.load(tmp_path / "run" / "vocab.json")
    img = api.encode_images(model, CachedImageFeatures(np.array(EXPECTED["images"], dtype=np.float32)), device=CPU)
    txt = api.encode_texts(model, EXPECTED["captions"], vocab, device=CPU)
    np.testing.assert_allclose(api.score(model, img, txt).numpy(), np.array(EXPECTED["scores"]["model_coco_1"]),
                               rtol=0, atol=1e-5)
