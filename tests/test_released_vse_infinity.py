"""VSE-infinity's released checkpoints imported onto the project's model (methods.released.vse_infinity).

The fixtures (tests/data/released/vse_infinity/) were written by the authors' own code
(github.com/woodfrog/vse_infty, branch bigru: lib/encoders.py, lib/modules/aggr/gpo.py,
lib/modules/mlp.py) at tiny widths with random weights, saved as their train.py saves a checkpoint,
with a vocabulary in their JSON layout and the scores their code gives on fixed inputs:
tests/data/released/make_vse_infinity_fixtures.py says how. One checkpoint per dataset name
their scripts use (f30k, coco). The imported model must give their scores."""
import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from methods import api
from methods.data.datasets import DatasetPayload
from methods.data.inputs import CachedImageFeatures
from methods.data.text import Vocabulary
from methods.data.tokenizers import Tokenizer
from methods.errors import HarnessError
from methods.import_released import import_released
from methods.models.base import BuildContext, build_model
from methods.models.checkpoint import read_model_file
from methods.released import importers, vse_infinity
from methods.scoring import encode_images, encode_texts, score_matrix
from methods.untrusted.safe_load import load_checkpoint
from tests.records import READER_LIMITS as LIMITS

FIXTURES = Path(__file__).parent / "data" / "released" / "vse_infinity"
VSRN_CHECKPOINT = Path(__file__).parent / "data" / "released" / "vsrn" / "model_fliker_1.pth.tar"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
VOCAB = FIXTURES / "precomp_vocab.json"
CPU = torch.device("cpu")
N_REGIONS = len(EXPECTED["images"][0])
REGIONS = {"precomp": {"n_regions": N_REGIONS, "feature_dim": None}}   # the dataset config the importer reads
TOKENIZER = Tokenizer("nltk_line")   # single-sentence captions: as their word_tokenize(caption.lower())
RUNS = {"f30k_butd_region_bigru": "flickr", "coco_butd_region_bigru": "coco"}


@pytest.fixture(scope="module")
def base_model():
    return api.experiment_config("vse_infinity", "flickr")["model"]


def imported_scores(released) -> np.ndarray:
    model = build_model(released.model_config, BuildContext(released.vocab_size, released.image_shape, {}, cnn=False))
    model.load_state_dict(released.state_dict, strict=True)
    model.eval()
    tokens = [vse_infinity.read_vocabulary(VOCAB, TOKENIZER, LIMITS).encode(c) for c in EXPECTED["captions"]]
    images = CachedImageFeatures(np.array(EXPECTED["images"], dtype=np.float32))
    img = encode_images(model, len(EXPECTED["images"]), CPU, 2, features=images)   # batches of 2: no batch effects
    return score_matrix(model, img, encode_texts(model, tokens, CPU, 3)).numpy()


def test_vse_infinity_has_an_importer():
    assert importers.released_code("vse_infinity", "x") == "woodfrog/vse_infty"
    assert importers.get_importer("vse_infinity", "x") is vse_infinity.IMPORTER


@pytest.mark.parametrize("run", sorted(RUNS))
def test_a_released_checkpoint_scores_as_the_authors_code(base_model, run):
    released = vse_infinity.import_checkpoint(FIXTURES / f"{run}.pth", base_model, REGIONS, LIMITS)
    assert released.source_dataset == RUNS[run] and released.provenance["epoch"] == 21
    cfg = released.model_config
    assert cfg["embed_dim"] == 8 and cfg["pooling"] == "gpo" and cfg["text"]["word_dim"] == 6
    assert cfg["text"]["hidden_dim"] == 8 and cfg["text"]["bidirectional"] is True
    assert released.image_shape == {"dim": 10, "regions": N_REGIONS}
    assert released.vocab_size == len(json.loads(VOCAB.read_text())["word2idx"]) + 1 == released.extra_tokens + 24
    expected = np.array(EXPECTED["scores"][run], dtype=np.float32)
    assert np.abs(expected - expected.mean()).max() > 1e-3   # the scores differ: a swapped tensor would show
    np.testing.assert_allclose(imported_scores(released), expected, rtol=0, atol=1e-5)


def test_their_vocabulary_gives_their_token_ids():
    vocab = vse_infinity.read_vocabulary(VOCAB, TOKENIZER, LIMITS)
    assert len(vocab) == 24 and vocab.idx2word[:4] == ["<pad>", "<start>", "<end>", "<unk>"]
    assert [vocab.encode(c) for c in EXPECTED["captions"]] == EXPECTED["token_ids"]


def resaved(tmp_path: Path, change, run="f30k_butd_region_bigru") -> Path:
    ckpt = load_checkpoint(FIXTURES / f"{run}.pth", [argparse.Namespace], LIMITS)
    change(ckpt)
    path = tmp_path / "model.pth"
    torch.save(ckpt, path)
    return path


@pytest.mark.parametrize("option, value, message", [
    ("no_imgnorm", True, "trained with no_imgnorm=True, which the project's VSE-infinity does not import"),
    ("precomp_enc_type", "backbone", "trained with precomp_enc_type='backbone'"),
    ("data_name", "f8k", "data_name 'f8k' is not one of"),
])
def test_an_option_the_project_does_not_implement_is_refused_by_name(tmp_path, base_model, option, value, message):
    path = resaved(tmp_path, lambda c: setattr(c["opt"], option, value))
    with pytest.raises(HarnessError, match=message):
        vse_infinity.import_checkpoint(path, base_model, REGIONS, LIMITS)


def test_a_checkpoint_of_another_model_or_text_encoder_is_refused(tmp_path, base_model):
    with pytest.raises(HarnessError, match=r"not a VSE-infinity checkpoint \(its options have no precomp_enc_type, "
                                           r"vse_mean_warmup_epochs"):
        vse_infinity.import_checkpoint(VSRN_CHECKPOINT, base_model, REGIONS, LIMITS)

    def as_bert(ckpt):   # branch master's text encoder: a BERT model and a linear layer
        ckpt["model"][1] = {"bert.embeddings.word_embeddings.weight": torch.zeros(25, 8), "linear.weight": torch.zeros(8, 8)}
    with pytest.raises(HarnessError, match=r"its text encoder is BERT \(branch master\), but the method's text "
                                           r"block is a bi-GRU: import it into a method of its text encoder"):
        vse_infinity.import_checkpoint(resaved(tmp_path, as_bert), base_model, REGIONS, LIMITS)

    def without_text_pool(ckpt):
        ckpt["model"][1] = {k: v for k, v in ckpt["model"][1].items() if not k.startswith("gpool.")}
    with pytest.raises(HarnessError, match=r"sets no 'text_pool\.gru\.weight_ih_l0' of the project's model"):
        vse_infinity.import_checkpoint(resaved(tmp_path, without_text_pool), base_model, REGIONS, LIMITS)


def payload(name="flickr", feature_dim=10):
    """A dataset payload (results/<dataset>/dataset.json) of the fields an import reads."""
    return DatasetPayload.from_json({"name": name, "paths": {},
            "dataset": {"tokenizer": "nltk_line", "precomp": {"n_regions": N_REGIONS, "feature_dim": feature_dim}}})


def test_the_import_writes_a_run_folder_that_evaluates_as_the_authors_code(tmp_path):
    """What ``python -m methods.import_released`` writes: model.pt and vocab.json, read back by
    the evaluation's own loaders; the vocabulary has the words, the model one more id (<mask>)."""
    import_released(payload("coco"), api.experiment_config("vse_infinity", "coco"),
                    FIXTURES / "coco_butd_region_bigru.pth", VOCAB, tmp_path / "run", limits=LIMITS)
    ckpt = read_model_file(tmp_path / "run" / "model.pt")
    assert ckpt["best"]["released"]["code"] == "woodfrog/vse_infty"
    model, _ = api.load_model(tmp_path / "run" / "model.pt", CPU)
    vocab = Vocabulary.load(tmp_path / "run" / "vocab.json")
    assert len(vocab) == 24 and model.text.embed.num_embeddings == 25
    img = api.encode_images(model, CachedImageFeatures(np.array(EXPECTED["images"], dtype=np.float32)), device=CPU)
    txt = api.encode_texts(model, EXPECTED["captions"], vocab, device=CPU)
    np.testing.assert_allclose(api.score(model, img, txt).numpy(),
                               np.array(EXPECTED["scores"]["coco_butd_region_bigru"]), rtol=0, atol=1e-5)


def test_a_vocabulary_of_other_words_is_refused_naming_the_ids(tmp_path):
    words = json.loads(VOCAB.read_text())
    words["word2idx"]["zebra"] = 24
    words["idx2word"]["24"] = "zebra"
    words["idx"] = 25
    path = tmp_path / "vocab.json"
    path.write_text(json.dumps(words))
    with pytest.raises(HarnessError, match=r"has 25 words, but .* was trained with 25 \(1 of its ids past the words\)"):
        import_released(payload("coco"), api.experiment_config("vse_infinity", "coco"),
                        FIXTURES / "coco_butd_region_bigru.pth", path, tmp_path / "run", limits=LIMITS)
