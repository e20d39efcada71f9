"""VSE++'s released checkpoints imported onto the project's model (methods.released.vsepp).

The fixtures (tests/data/released/vsepp/) were written by the authors' own code
(github.com/fartashf/vsepp, master, model.py) with a tiny torchvision ResNet of Bottleneck blocks
in place of their ResNet-152 and random weights, saved as their train.py saves a checkpoint (one
as today's torch writes it, one as a 2017 file of the released runs.tar: legacy format, no
BatchNorm step counters), their vocabulary pickled by Python 2.7 as their vocab.py pickles it, with
the scores their code gives on fixed images and captions: tests/data/released/make_vsepp_fixtures.py
says how. The imported model, its CNN running on the images, must give those scores."""
import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from torch import nn
from torchvision.models.resnet import Bottleneck, ResNet

from methods.data.datasets import DatasetPayload
from methods import api
from methods.data.text import Vocabulary
from methods.data.tokenizers import Tokenizer
from methods.errors import HarnessError
from methods.features import architectures
from methods.import_released import import_released
from methods.models.base import BuildContext, build_model
from methods.models.checkpoint import read_model_file
from methods.untrusted.safe_load import load_checkpoint
from methods.released.vsepp import import_checkpoint, read_vocabulary
from methods.scoring import encode_images, encode_texts, score_matrix
from tests.records import READER_LIMITS as LIMITS

FIXTURES = Path(__file__).parent / "data" / "released" / "vsepp"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
IMAGES = np.load(FIXTURES / EXPECTED["images"])
CPU = torch.device("cpu")
RUNS = {"f30k_vse++_resnet_finetune": "flickr", "coco_vse++_resnet_restval": "coco",
        "coco_vse0_resnet_restval_finetune": "coco"}   # VSE0: --no_imgnorm, image embeddings not normalised
TOKENIZER = Tokenizer("nltk_line")
REAL_RESNET152 = torchvision.models.resnet152   # before the autouse fixture below replaces it
TINY_CHANNELS = (16, 32, 64)   # conv3, conv4, conv5 outputs of the tiny ResNet (planes / 32, Bottleneck x4)


class TinyResNet(ResNet):
    """The fixture's CNN (make_vsepp_fixtures.py ``tiny_resnet``): torchvision's ResNet with one
    Bottleneck block per stage, each stage's planes divided by 32."""

    def _make_layer(self, block, planes, blocks, stride=1, dilate=False):
        return super()._make_layer(block, planes // 32, blocks, stride, dilate)


def tiny_resnet(pretrained=False, weights=None, **kwargs) -> ResNet:
    net = TinyResNet(Bottleneck, [1, 1, 1, 1], num_classes=10)
    net.fc = nn.Linear(TINY_CHANNELS[-1], 10)
    return net


@pytest.fixture(autouse=True)
def tiny_resnet152(monkeypatch):
    """'resnet152', as the project's backbone builds it (``getattr(torchvision.models, arch)``)
    and sizes it (``architectures.CHANNELS``), is the fixture's tiny ResNet."""
    monkeypatch.setattr(torchvision.models, "resnet152", tiny_resnet)
    monkeypatch.setitem(architectures.CHANNELS, "resnet152", TINY_CHANNELS)


DATASET = {"features": {"resize": 256, "crop": 224}}   # their data.py's evaluation transform


@pytest.fixture(scope="module")
def base_model():
    return api.experiment_config("vsepp", "flickr")["model"]


def checkpoint(run: str) -> Path:
    return FIXTURES / f"{run}_model_best.pth.tar"


def vocabulary(run: str) -> Path:
    return FIXTURES / f"{run.split('_')[0]}_vocab.pkl"


def image_batches():
    return [torch.from_numpy(image) for image in IMAGES]   # (3, 40, 40) each: what ImageFiles gives


def imported_scores(released, vocab: Vocabulary) -> np.ndarray:
    backbones = {"resnet152": {"arch": "resnet152", "weights": "none"}}
    model = build_model(released.model_config, BuildContext(released.vocab_size, released.image_shape, backbones,
                                                            cnn=True))
    model.load_state_dict(released.state_dict, strict=True)
    model.eval()
    tokens = [vocab.encode(c) for c in EXPECTED["captions"]]
    assert tokens == EXPECTED["token_ids"]   # their vocabulary pickle, read by the project, gives their ids
    img = encode_images(model, len(IMAGES), CPU, 3, images=image_batches())   # the CNN runs; batches of 3
    return score_matrix(model, img, encode_texts(model, tokens, CPU, 3)).numpy()


@pytest.mark.parametrize("run", RUNS)
def test_a_released_checkpoint_scores_as_the_authors_code(base_model, run):
    released = import_checkpoint(checkpoint(run), base_model, DATASET, LIMITS)
    assert released.source_dataset == RUNS[run] and released.runs_cnn and released.provenance["epoch"] == 17
    assert released.image_shape == {"dim": 64} and released.vocab_size == 25
    assert released.model_config["backbone"] == "resnet152" and released.model_config["pre_fc_l2norm"] is True
    assert released.model_config["image_l2norm"] is ("vse0" not in run)
    assert released.model_config["embed_dim"] == 8 and released.model_config["text"]["word_dim"] == 6
    expected = np.array(EXPECTED["scores"][run], dtype=np.float32)
    assert np.abs(expected - expected.mean()).max() > 1e-2   # the scores differ: a swapped tensor would show
    scores = imported_scores(released, read_vocabulary(vocabulary(run), TOKENIZER, LIMITS))
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-5)


def test_vse0s_scores_are_of_unnormalised_image_embeddings(base_model):
    """The VSE0 fixture's scores are not those of normalised image embeddings: imported with the
    image embedding normalised (the project's vsepp before image_l2norm), each image's scores
    shrink by its embedding's norm, which differs between images, far beyond the 1e-5 the
    import is held to: the VSE0 case above checks what --no_imgnorm changes."""
    released = import_checkpoint(checkpoint("coco_vse0_resnet_restval_finetune"), base_model, DATASET, LIMITS)
    vocab = read_vocabulary(vocabulary("coco_vse0_resnet_restval_finetune"), TOKENIZER, LIMITS)
    as_released = imported_scores(released, vocab)
    released.model_config["image_l2norm"] = True
    normalised = imported_scores(released, vocab)
    norms = as_released / normalised   # per image: its embedding's norm, the same for every caption
    np.testing.assert_allclose(norms, norms[:, :1].repeat(norms.shape[1], axis=1), rtol=1e-4)
    assert np.ptp(norms[:, 0]) > 0.05 and np.abs(as_released - normalised).max() > 1e-2


def test_a_file_without_batchnorm_counters_gets_them_at_zero(base_model):
    """The 2017 files (PyTorch < 0.4.1) have no num_batches_tracked; a newer one's are kept."""
    old = import_checkpoint(checkpoint("coco_vse++_resnet_restval"), base_model, DATASET, LIMITS)
    new = import_checkpoint(checkpoint("f30k_vse++_resnet_finetune"), base_model, DATASET, LIMITS)
    counters = [k for k in old.state_dict if k.endswith("num_batches_tracked")]
    assert counters and all(old.state_dict[k].item() == 0 for k in counters)
    assert all(new.state_dict[k].item() == 7 for k in counters)   # the fixture maker's value


def test_a_full_size_resnet152_checkpoint_is_placed_whole(monkeypatch, base_model):
    """The rules place every tensor of a released ResNet-152 run as their EncoderImageFull saves it
    (cnn.module.*, 2048-d fc input, a 2017 file without step counters): shapes only, on the meta
    device (no weights are made)."""
    monkeypatch.setattr(torchvision.models, "resnet152", REAL_RESNET152)
    monkeypatch.setitem(architectures.CHANNELS, "resnet152", (512, 1024, 2048))
    with torch.device("meta"):
        cnn, fc = REAL_RESNET152(weights=None), nn.Linear(2048, 1024)
        embed, rnn = nn.Embedding(10000, 300), nn.GRU(300, 1024, 1, batch_first=True)
    img_enc = {f"cnn.module.{k}": v for k, v in cnn.state_dict().items()
               if not k.startswith("fc.") and not k.endswith("num_batches_tracked")}   # fc: nn.Sequential()
    img_enc.update({f"fc.{k}": v for k, v in fc.state_dict().items()})
    txt_enc = {"embed.weight": embed.weight, **{f"rnn.{k}": v for k, v in rnn.state_dict().items()}}
    opt = load_checkpoint(checkpoint("coco_vse++_resnet_restval"), [argparse.Namespace], LIMITS)["opt"]
    opt.embed_size, opt.word_dim, opt.num_layers, opt.vocab_size = 1024, 300, 1, 10000
    ckpt = {"epoch": 26, "model": [img_enc, txt_enc], "best_rsum": 400.0, "opt": opt, "Eiters": 1}
    monkeypatch.setattr("methods.released.record.load_checkpoint", lambda path, allowed, limits: ckpt)
    released = import_checkpoint("runs/coco_vse++_resnet_restval_finetune/model_best.pth.tar", base_model, DATASET, LIMITS)
    assert released.image_shape == {"dim": 2048} and released.model_config["embed_dim"] == 1024
    assert len({k.split(".")[2] for k in released.state_dict if k.startswith("backbone.layer3.")}) == 36   # blocks
    assert all(released.state_dict[k].item() == 0 for k in released.state_dict if k.endswith("num_batches_tracked"))


def test_their_vocabulary_pickle_reads_as_the_project_vocabulary():
    vocab = read_vocabulary(vocabulary("f30k_vse++_resnet_finetune"), TOKENIZER, LIMITS)
    assert vocab.idx2word[:5] == ["<pad>", "<start>", "<end>", "<unk>", "a"] and vocab.word2idx["café"] == 23
    assert len(vocab) == 25


def resaved(tmp_path: Path, change, run: str = "f30k_vse++_resnet_finetune") -> Path:
    ckpt = load_checkpoint(checkpoint(run), [argparse.Namespace], LIMITS)
    change(ckpt)
    path = tmp_path / "model_best.pth.tar"
    torch.save(ckpt, path)
    return path


@pytest.mark.parametrize("option, value, message", [
    ("use_abs", True, "trained with use_abs=True, which the project's vsepp does not implement"),
    ("measure", "order", "trained with measure='order', which the project's vsepp does not implement"),
    ("cnn_type", "vgg19", "cnn_type 'vgg19' .*the project's vsepp backbone is a ResNet"),
    ("data_name", "f30k_precomp", "data_name 'f30k_precomp', a run on their precomputed 4096-d VGG19 features"),
    ("data_name", "coco_precomp", "data_name 'coco_precomp', a run on their precomputed"),
    ("data_name", "f8k", "data_name 'f8k' is not one of"),
])
def test_an_option_the_project_does_not_implement_is_refused_by_name(tmp_path, base_model, option, value, message):
    path = resaved(tmp_path, lambda c: setattr(c["opt"], option, value))
    with pytest.raises(HarnessError, match=message):
        import_checkpoint(path, base_model, DATASET, LIMITS)


def test_a_checkpoint_of_another_model_is_refused(tmp_path, base_model):
    sgraf = Path(__file__).parent / "data" / "released" / "sgraf" / "f30k_SGR_model_best.pth.tar"
    with pytest.raises(HarnessError, match=r"not a VSE\+\+ checkpoint \(its options have no cnn_type, measure, "
                                           r"use_abs; an SGRAF, SCAN or VSRN checkpoint\?\)"):
        import_checkpoint(sgraf, base_model, DATASET, LIMITS)

    def as_vsrn(ckpt):   # VSRN keeps VSE++'s options and [img_enc, txt_enc]; its image encoder has a GRU, a GCN
        ckpt["model"][0]["img_rnn.weight_ih_l0"] = torch.zeros(3, 2)
    with pytest.raises(HarnessError, match="its image encoder holds 'img_rnn.weight_ih_l0'.*a VSRN checkpoint"):
        import_checkpoint(resaved(tmp_path, as_vsrn), base_model, DATASET, LIMITS)


def test_a_tensor_the_model_has_not_or_a_shape_that_differs_is_named(tmp_path, base_model):
    def wider(ckpt):
        ckpt["model"][0]["fc.weight"] = torch.zeros(9, 64)
    with pytest.raises(HarnessError, match=r"'img_enc.fc.weight' has shape \(9, 64\), but 'fc.weight' of the "
                                           r"project's model is \(8, 64\)"):
        import_checkpoint(resaved(tmp_path, wider), base_model, DATASET, LIMITS)

    def without_layer4(ckpt):
        ckpt["model"][0] = {k: v for k, v in ckpt["model"][0].items() if ".layer4." not in k}
    with pytest.raises(HarnessError, match=r"the checkpoint sets no 'backbone.layer4.0.conv1.weight'"):
        import_checkpoint(resaved(tmp_path, without_layer4), base_model, DATASET, LIMITS)


def payload(name="flickr"):
    """A dataset payload (results/<dataset>/dataset.json) of the fields an import reads."""
    return DatasetPayload.from_json({"name": name, "paths": {}, "dataset": {**DATASET, "tokenizer": "nltk_line"}})


def test_the_import_writes_a_run_folder_that_evaluates_as_the_authors_code(tmp_path, monkeypatch):
    """What ``python -m methods.import_released`` writes: model.pt (marked fine-tuned: evaluation
    runs its CNN on the images) and vocab.json, read back by the evaluation's own loaders."""
    run = "f30k_vse++_resnet_finetune"
    cfg = api.experiment_config("vsepp", "flickr")
    import_released(payload(), cfg, checkpoint(run), vocabulary(run), tmp_path / "run", limits=LIMITS)
    ckpt = read_model_file(tmp_path / "run" / "model.pt")
    assert ckpt["best"]["finetuned"] is True and ckpt["best"]["released"]["code"] == "fartashf/vsepp"
    assert ckpt["image_shape"] == {"dim": 64} and ckpt["config"]["model"]["backbone"] == "resnet152"
    backbones = {"resnet152": {"arch": "resnet152", "weights": None}}   # weights are the run's: never loaded
    model, _ = api.load_model(tmp_path / "run" / "model.pt", CPU, backbones)
    vocab = Vocabulary.load(tmp_path / "run" / "vocab.json")
    img = api.encode_images(model, images=image_batches(), device=CPU)
    txt = api.encode_texts(model, EXPECTED["captions"], vocab, device=CPU)
    np.testing.assert_allclose(api.score(model, img, txt).numpy(), np.array(EXPECTED["scores"][run]),
                               rtol=0, atol=1e-5)


def test_an_import_for_another_dataset_writes_nothing(tmp_path, monkeypatch):
    run = "coco_vse++_resnet_restval"
    with pytest.raises(HarnessError, match="trained on coco, but dataset 'flickr' is flickr"):
        import_released(payload(), api.experiment_config("vsepp", "flickr"), checkpoint(run), vocabulary(run),
                        tmp_path / "run", limits=LIMITS)
    assert not (tmp_path / "run").exists()


def test_a_vocabulary_of_another_size_is_refused(tmp_path, monkeypatch):
    vocab = vocabulary("f30k_vse++_resnet_finetune")

    def wider_embedding(c):
        c["opt"].vocab_size = 26
        c["model"][1]["embed.weight"] = torch.zeros(26, 6)
    ckpt = resaved(tmp_path, wider_embedding)
    with pytest.raises(HarnessError, match="has 25 words, but .* was trained with 26: give the vocabulary released"):
        import_released(payload(), api.experiment_config("vsepp", "flickr"), ckpt, vocab, tmp_path / "run", limits=LIMITS)
    assert not (tmp_path / "run").exists()


def test_a_dataset_whose_images_are_transformed_otherwise_is_refused(base_model):
    other = {"features": {"resize": 256, "crop": 256}}
    with pytest.raises(HarnessError, match="their evaluation resizes images to 256 and crops the centre 224, but "
                                           "datasets.<name>.features has resize 256, crop 256"):
        import_checkpoint(checkpoint("f30k_vse++_resnet_finetune"), base_model, other, LIMITS)
