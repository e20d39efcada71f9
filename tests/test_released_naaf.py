"""NAAF's released checkpoints imported onto the project's model (methods.released.naaf).

The test writes a checkpoint at tiny widths with random weights in the format CrossmodalGroup/NAAF's
train.py saves (``{'epoch', 'model': [img_enc, txt_enc state dicts], 'best_rsum', 'opt', 'Eiters'}``,
the state-dict names of its EncoderImagePrecomp, GloveRNNEncoder and EncoderText, the options
argparse gives with the thresholds model.py writes into them) and the vocabulary JSON of each
text encoder's runs. The imported model must score as the oracle (tests/oracles/naaf.py) does
on those weights, with the source's token ids."""
import argparse
import json
import os
from collections import OrderedDict

import numpy as np
import pytest
import torch

from methods import api
from methods.data.inputs import CachedImageFeatures
from methods.data.tokenizers import Tokenizer
from methods.errors import HarnessError
from methods.models.base import BuildContext, build_model
from methods.released.naaf import import_checkpoint, read_vocabulary
from methods.scoring import encode_images, encode_texts, score_matrix
from tests.oracles.naaf import reference_pair
from tests.records import READER_LIMITS as LIMITS
from tests.test_released_safe_load import Planted
from tests.test_sgraf import l2

CPU = torch.device("cpu")
REGIONS = {"precomp": {"n_regions": 4, "feature_dim": None}}
IMG_DIM, WORD_DIM, EMBED = 10, 6, 8
WORDS = ["a", "dog", "runs", "on", "grass", "cat", "sits", "red", "car"]
CAPTIONS = ["a dog runs on grass", "a cat sits", "a red car", "dog on a zebra", "a cat on grass runs"]
SAFE_THRESHOLD = 0.06


def source_vocabulary(text_type):
    """Their vocabulary files: a GloVe run's (<pad> <unk> <start> <end> first, with char_level and
    max_len) or SCAN's layout (<pad> <start> <end> <unk>)."""
    if text_type == "GloVe":
        words = ["<pad>", "<unk>", "<start>", "<end>", *WORDS]
        return {"word2idx": {w: i for i, w in enumerate(words)}, "char_level": False, "max_len": None}
    words = ["<pad>", "<start>", "<end>", "<unk>", *WORDS]
    return {"idx2word": {str(i): w for i, w in enumerate(words)}, "word2idx": {w: i for i, w in enumerate(words)},
            "idx": len(words)}


def options(text_type, **changes):
    """train.py's argparse options after training: its defaults, the README's arguments, the
    vocabulary size it sets, the thresholds model.py wrote and using_intra_info xattn_score_test set."""
    opt = argparse.Namespace(
        data_path="/home/zhangkun/data/", data_name="f30k_precomp", vocab_path="/home/zhangkun/data/vocab/",
        margin=0.2, num_epochs=20, batch_size=128, word_dim=WORD_DIM, embed_size=EMBED, grad_clip=2.0, num_layers=1,
        learning_rate=0.0005, lr_update=10, workers=10, log_step=200, val_step=10, logger_name="./runs/runX/log",
        logg_path="./runs/runX/logs", model_name="./runs/runX/checkpoint", resume="", precomp_enc_type="basic",
        precomp_enc_text_type=text_type, img_dim=IMG_DIM, no_imgnorm=False, no_txtnorm=False, lambda_softmax=20.0,
        mean_neg=0.21, stnd_neg=0.11, mean_pos=0.52, stnd_pos=0.14, thres=0.37, thres_safe=SAFE_THRESHOLD,
        alpha=2.0, using_intra_info=True, vocab_size=4 + len(WORDS))
    for key, value in changes.items():
        setattr(opt, key, value)
    return opt


def source_state(text_type, seed=0):
    """img_enc and txt_enc state dicts under their module names, random weights."""
    g = torch.Generator().manual_seed(seed)
    gru = torch.nn.GRU(WORD_DIM, EMBED, 1, batch_first=True, bidirectional=True)
    for p in gru.parameters():
        p.data = torch.randn(p.shape, generator=g) * 0.4
    embedding = "embed.glove.weight" if text_type == "GloVe" else "embed.weight"
    img = OrderedDict([("fc.weight", torch.randn(EMBED, IMG_DIM, generator=g) * 0.4),
                       ("fc.bias", torch.randn(EMBED, generator=g) * 0.1)])
    txt = OrderedDict([(embedding, torch.randn(4 + len(WORDS), WORD_DIM, generator=g))])
    txt.update((f"rnn.{k}", v.detach().clone()) for k, v in gru.state_dict().items())
    return [img, txt]


def write_release(tmp_path, text_type, **changes):
    path = tmp_path / f"checkpoint_16_{text_type}.pth.tar"
    torch.save({"epoch": 17, "model": source_state(text_type), "best_rsum": 507.9, "opt": options(text_type, **changes),
                "Eiters": 19277}, path)
    vocab = tmp_path / f"vocab_{text_type}.json"
    vocab.write_text(json.dumps(source_vocabulary(text_type)))
    return path, vocab


def images():
    return np.random.default_rng(0).standard_normal((3, 4, IMG_DIM)).astype(np.float32)


def oracle_scores(text_type):
    """The oracle on the checkpoint's own tensors, the captions read with their vocabulary's ids
    (data.py: <start>, nltk words, <end>)."""
    img, txt = (dict(part) for part in source_state(text_type))
    word2idx = source_vocabulary(text_type)["word2idx"]
    embedding = txt.pop("embed.glove.weight" if text_type == "GloVe" else "embed.weight").double()
    gru = torch.nn.GRU(WORD_DIM, EMBED, 1, batch_first=True, bidirectional=True).double()
    gru.load_state_dict({k.removeprefix("rnn."): v.double() for k, v in txt.items()})
    regions = [l2(torch.from_numpy(x).double() @ img["fc.weight"].double().t() + img["fc.bias"].double())
               for x in images()]
    scores = []
    for caption in CAPTIONS:
        ids = [word2idx["<start>"], *(word2idx.get(w, word2idx["<unk>"]) for w in caption.split()), word2idx["<end>"]]
        out, _ = gru(embedding[ids][None])
        words = l2((out[0, :, :EMBED] + out[0, :, EMBED:]) / 2)
        scores.append([float(reference_pair(r, words, SAFE_THRESHOLD, 20.0, 5.0)) for r in regions])
    return np.array(scores).T


@pytest.fixture(scope="module")
def base_model():
    return api.experiment_config("naaf", "flickr")["model"]


@pytest.mark.parametrize("text_type", ["GloVe", "basic"])
def test_a_released_checkpoint_scores_as_the_oracle_on_its_weights(tmp_path, base_model, text_type):
    path, vocab_path = write_release(tmp_path, text_type)
    released = import_checkpoint(path, base_model, REGIONS, LIMITS)
    assert released.source_dataset == "flickr" and released.provenance["epoch"] == 17
    assert released.model_config["embed_dim"] == EMBED and released.model_config["intra_propagation"] is True
    model = build_model(released.model_config, BuildContext(released.vocab_size, released.image_shape, {}, cnn=False))
    model.load_state_dict(released.state_dict, strict=True)
    model.eval()
    assert (float(model.safe_threshold), float(model.threshold), float(model.matched_std)) == (SAFE_THRESHOLD, 0.37, 0.14)
    vocab = read_vocabulary(vocab_path, Tokenizer("nltk_line"), LIMITS)
    assert len(vocab) == released.vocab_size
    assert [vocab.word2idx[w] for w in ("<pad>", "<start>", "<end>", "<unk>")] == [0, 1, 2, 3]
    tokens = [vocab.encode(c) for c in CAPTIONS]
    img = encode_images(model, 3, CPU, 2, features=CachedImageFeatures(images()))
    got = score_matrix(model, img, encode_texts(model, tokens, CPU, 2)).numpy()
    want = oracle_scores(text_type)
    assert np.abs(want - want.mean()).max() > 1e-3
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_the_glove_vocabulary_must_be_their_layout(tmp_path):
    state = source_vocabulary("GloVe")
    for change, message in [({"char_level": True}, "refused: char_level True"),
                            ({"word2idx": {**state["word2idx"], "<unk>": 2, "<start>": 1}}, "starts with")]:
        path = tmp_path / "v.json"
        path.write_text(json.dumps({**state, **change}))
        with pytest.raises(HarnessError, match=message):
            read_vocabulary(path, Tokenizer("nltk_line"), LIMITS)


@pytest.mark.parametrize("change, message", [
    ({"precomp_enc_type": "weight_norm"}, "trained with precomp_enc_type='weight_norm'"),
    ({"precomp_enc_text_type": "BERT"}, "precomp_enc_text_type 'BERT' is not one of"),
    ({"data_name": "cc152k_precomp"}, "data_name 'cc152k_precomp' is not one of"),
    ({"thres_safe": 3.0}, "option 'thres_safe' is 3.0, outside 0-1"),
])
def test_an_option_the_project_does_not_implement_is_refused_by_name(tmp_path, base_model, change, message):
    path, _ = write_release(tmp_path, "GloVe", **change)
    with pytest.raises(HarnessError, match=message):
        import_checkpoint(path, base_model, REGIONS, LIMITS)


def test_a_checkpoint_of_another_model_is_refused(tmp_path, base_model):
    path = tmp_path / "scan.pth.tar"
    opt = options("basic")
    for name in ("thres", "thres_safe", "alpha", "precomp_enc_text_type"):
        delattr(opt, name)
    torch.save({"epoch": 1, "model": source_state("basic"), "opt": opt}, path)
    with pytest.raises(HarnessError, match=r"not a NAAF checkpoint \(its options have no precomp_enc_text_type"):
        import_checkpoint(path, base_model, REGIONS, LIMITS)


def test_a_hostile_checkpoint_is_refused_and_never_runs(tmp_path, base_model):
    marker = tmp_path / "ran"
    path = tmp_path / "checkpoint_16.pth.tar"
    torch.save({"epoch": 17, "model": source_state("GloVe"), "opt": Planted(marker)}, path)
    with pytest.raises(HarnessError, match="refused to load: it names (posix|nt).system"):
        import_checkpoint(path, base_model, REGIONS, LIMITS)
    assert not marker.exists() and not os.path.exists(marker)
