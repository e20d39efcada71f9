"""PCME's released checkpoints imported onto the project's PCME model (methods.released.pcme).

The fixtures (tests/data/released/pcme/) were written by the authors' own code (github.com/naver-
ai/pcme, models/pcme.py ``PCME`` and criterions/probemb.py ``MCSoftContrastiveLoss``) with the tiny
ResNet of the PVSE fixtures in place of ResNet-152 and random weights, saved as their engine's
``save_models`` saves a run (numpy-scalar scores in its metadata); their vocabulary as their
datasets/vocab.py reads it; each item's mean and log standard deviation from their encoders, the
samples they drew, and the match probabilities their evaluation ranks by on those samples:
tests/data/released/make_pcme_fixtures.py says how. The imported model must give the same means
and log standard deviations and, on the same samples, the same scores."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision

from methods import api
from methods.data.tokenizers import Tokenizer
from methods.errors import HarnessError
from methods.features import architectures
from methods.models.base import BuildContext, build_model
from methods.released.pcme import import_checkpoint, read_vocabulary
from methods.scoring import encode_images, encode_texts, score_matrix
from methods.untrusted.safe_load import load_checkpoint
from tests.records import READER_LIMITS as LIMITS
from tests.test_released_pvse import TINY_CHANNELS, tiny_resnet

FIXTURES = Path(__file__).parent / "data" / "released" / "pcme"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
IMAGES = torch.from_numpy(np.load(FIXTURES / EXPECTED["images"]))
CHECKPOINT = FIXTURES / "pcme_coco.pth"
DATASET = {"features": {"resize": 256, "crop": 224}}   # their evaluation transform
TOKENIZER = Tokenizer("nltk_line")
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def tiny_resnet152(monkeypatch):
    monkeypatch.setattr(torchvision.models, "resnet152", tiny_resnet)
    monkeypatch.setitem(architectures.CHANNELS, "resnet152", TINY_CHANNELS)


@pytest.fixture(scope="module")
def base_model():
    return api.experiment_config("pcme", "coco")["model"]


def imported_model(released):
    backbones = {"resnet152": {"arch": "resnet152", "weights": "none"}}
    model = build_model(released.model_config, BuildContext(released.vocab_size, released.image_shape, backbones,
                                                            cnn=True))
    model.load_state_dict(released.state_dict, strict=True)
    return model.eval()


def caption_batch(vocab):
    tokens = [vocab.encode(c) for c in EXPECTED["captions"]]
    assert tokens == EXPECTED["token_ids"]   # their vocabulary, read by the project, gives their ids
    lengths = torch.tensor([len(t) for t in tokens])
    padded = torch.zeros(len(tokens), int(lengths.max()), dtype=torch.long)
    for row, t in enumerate(tokens):
        padded[row, :len(t)] = torch.tensor(t)
    return tokens, padded, lengths


def test_a_released_checkpoint_gives_their_distributions_and_their_match_probabilities(base_model):
    released = import_checkpoint(CHECKPOINT, base_model, DATASET, LIMITS)
    cfg = released.model_config
    assert cfg["kind"] == "pcme" and cfg["n_samples"] == 7 and cfg["eval_method"] == "matching_prob"
    assert cfg["embed_dim"] == 8 and cfg["text"]["hidden_dim"] == 4 and cfg["text"]["word_dim"] == 6
    assert released.runs_cnn and released.source_dataset == "coco" and released.vocab_size == 25
    assert released.image_shape == {"scales": {"conv5": [7, 7, 64]}}
    model = imported_model(released)
    vocab = read_vocabulary(FIXTURES / "coco_vocab.pkl", TOKENIZER, LIMITS)
    tokens, padded, lengths = caption_batch(vocab)
    with torch.no_grad():
        image_mu, image_logsigma = model.image_distributions({"images": IMAGES})
        text_mu, text_logsigma = model.text_distributions(padded, lengths)
        their = {k: torch.tensor(EXPECTED[k]) for k in ("image_samples", "text_samples", "scores")}
        scores = model.score(their["image_samples"], their["text_samples"])
    for name, ours in (("image_mu", image_mu), ("image_logsigma", image_logsigma), ("text_mu", text_mu),
                       ("text_logsigma", text_logsigma)):
        theirs = np.array(EXPECTED[name])
        assert np.abs(theirs).max() > 1e-2, name
        np.testing.assert_allclose(ours.numpy(), theirs, rtol=0, atol=1e-5, err_msg=name)
    assert their["scores"].max() - their["scores"].min() > 1e-2   # scores differ: a swapped a or b would show
    np.testing.assert_allclose(scores.numpy(), their["scores"].numpy(), rtol=0, atol=1e-5)
    # the evaluation path: the CNN on the images, seeded samples, the blocked score matrix
    img = encode_images(model, len(IMAGES), CPU, 3, images=list(IMAGES))
    txt = encode_texts(model, tokens, CPU, 3)
    assert img.shape == (4, 7, 8) and txt.shape == (8, 7, 8)
    with torch.no_grad():
        direct = model.score(img, txt)
    np.testing.assert_allclose(score_matrix(model, img, txt).numpy(), direct.numpy(), rtol=0, atol=1e-6)


def test_the_files_record_and_options_are_its_provenance(base_model):
    released = import_checkpoint(CHECKPOINT, base_model, DATASET, LIMITS)
    assert released.provenance["code"] == "naver-ai/pcme" and released.provenance["cur_epoch"] == 30
    assert released.provenance["options"] == {"cnn_type": "resnet152", "embed_dim": 8, "word_dim": 6,
                                              "wemb_type": "glove", "n_samples_inference": 7, "img_finetune": True,
                                              "txt_finetune": True, "eval_method": "matmul"}


def test_their_vocabulary_dict_pickle_reads_as_the_project_vocabulary():
    vocab = read_vocabulary(FIXTURES / "coco_vocab.pkl", TOKENIZER, LIMITS)
    assert vocab.idx2word[:5] == ["<pad>", "<start>", "<end>", "<unk>", "a"] and vocab.word2idx["café"] == 23


def resaved(tmp_path, change) -> Path:
    ckpt = load_checkpoint(CHECKPOINT, (), LIMITS)
    ckpt = change(ckpt) or ckpt
    path = tmp_path / "resaved.pth"
    torch.save(ckpt, path)
    return path


@pytest.mark.parametrize("option, value, message", [
    ("img_attention", False, "trained with img_attention false: the project's PCME has PIE-Net and the uncertainty"),
    ("txt_probemb", False, "trained with txt_probemb false"),
    ("n_samples_inference", 0, "n_samples_inference 0: a run without samples"),
    ("cnn_type", "vgg19", "cnn_type 'vgg19': the project's grid backbone is a ResNet"),
    ("embed_dim", "8", "option 'embed_dim'"),
])
def test_an_option_the_project_does_not_implement_is_refused_by_name(tmp_path, base_model, option, value, message):
    path = resaved(tmp_path, lambda c: c["config"]["model"].__setitem__(option, value))
    with pytest.raises(HarnessError, match=message):
        import_checkpoint(path, base_model, DATASET, LIMITS)


def test_a_file_without_the_criterion_or_of_another_code_base_is_refused(tmp_path, base_model):
    with pytest.raises(HarnessError, match="no criterion shift and negative_scale"):
        import_checkpoint(resaved(tmp_path, lambda c: c.pop("criterion") and None), base_model, DATASET, LIMITS)
    pvse = FIXTURES.parent / "pvse" / "coco_pvse.pth"
    with pytest.raises(HarnessError, match="not a PCME checkpoint"):
        import_checkpoint(pvse, base_model, DATASET, LIMITS)
    grid = api.experiment_config("set_embeddings_grid", "coco")["model"]
    with pytest.raises(HarnessError, match="PCME's checkpoints fill a pcme model"):
        import_checkpoint(CHECKPOINT, grid, DATASET, LIMITS)
    with pytest.raises(HarnessError, match="their evaluation resizes images to 256"):
        import_checkpoint(CHECKPOINT, base_model, {"features": {"resize": 224, "crop": 224}}, LIMITS)


def test_a_tensor_of_another_shape_is_named(tmp_path, base_model):
    def wider(ckpt):
        ckpt["model"]["img_enc.uncertain_net.fc2.weight"] = torch.zeros(8, 65)
    with pytest.raises(HarnessError, match=r"'img_enc.uncertain_net.fc2.weight' has shape \(8, 65\), but "
                                           r"'image_sigma_pooled.weight' of the project's model is \(8, 64\)"):
        import_checkpoint(resaved(tmp_path, wider), base_model, DATASET, LIMITS)
