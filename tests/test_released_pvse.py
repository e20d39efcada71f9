"""PVSE's released checkpoints imported onto the project's grid set-embedding model
(methods.released.pvse).

The fixtures (tests/data/released/pvse/) were written by the authors' own code
(github.com/yalesong/pvse, master, model.py ``PVSE``) with a tiny torchvision ResNet of Bottleneck
blocks in place of their ResNet-152 and random weights: two files as released and as their eval.py
loads them (the state dict alone, legacy torch.save format; K = 2 and K = 1, evaluated with their
README's ``--legacy``) and one as their train.py saves a run without ``--legacy``; their vocabulary
pickled as their vocab.py pickles it; the scores their evaluation gives on fixed images and
captions: tests/data/released/make_pvse_fixtures.py says how. The imported model, its CNN running
on the images, must give those scores."""
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
from methods.released import pvse
from methods.released.pvse import import_checkpoint, read_vocabulary
from methods.untrusted.safe_load import load_checkpoint
from methods.scoring import encode_images, encode_texts, score_matrix
from tests.records import READER_LIMITS as LIMITS

FIXTURES = Path(__file__).parent / "data" / "released" / "pvse"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
IMAGES = np.load(FIXTURES / EXPECTED["images"])
CPU = torch.device("cpu")
# file -> (K, text_global, layout)
RUNS = {"coco_pvse.pth": (2, "concatenate_last_outputs", "state dict (as eval.py loads it)"),
        "coco_pvse_k1.pth": (1, "concatenate_last_outputs", "state dict (as eval.py loads it)"),
        "coco_pvse_train_model_best.pth.tar": (2, "concatenate_final", "train.py checkpoint")}
TRAIN_RUN = "coco_pvse_train_model_best.pth.tar"
TOKENIZER = Tokenizer("nltk_line")
REAL_RESNET152 = torchvision.models.resnet152   # before the autouse fixture below replaces it
TINY_CHANNELS = (16, 32, 64)   # conv3, conv4, conv5 outputs of the tiny ResNet (planes / 32, Bottleneck x4)


class TinyResNet(ResNet):
    """The fixture's CNN (make_pvse_fixtures.py ``tiny_resnet``): torchvision's ResNet with one
    Bottleneck block per stage, each stage's planes divided by 32, strides 2-4 dilated (7x7 at 28 px)."""

    def _make_layer(self, block, planes, blocks, stride=1, dilate=False):
        return super()._make_layer(block, planes // 32, blocks, stride, dilate)


DATASET = {"features": {"resize": 256, "crop": 224}}   # their data.py's evaluation transform


def tiny_resnet(pretrained=False, weights=None, **kwargs) -> ResNet:
    net = TinyResNet(Bottleneck, [1, 1, 1, 1], num_classes=10, replace_stride_with_dilation=[True, True, True])
    net.fc = nn.Linear(TINY_CHANNELS[-1], 10)
    return net


@pytest.fixture(autouse=True)
def tiny_resnet152(monkeypatch):
    """'resnet152', as the project's backbone builds it and sizes it, is the fixture's tiny ResNet."""
    monkeypatch.setattr(torchvision.models, "resnet152", tiny_resnet)
    monkeypatch.setitem(architectures.CHANNELS, "resnet152", TINY_CHANNELS)


@pytest.fixture(scope="module")
def base_model():
    return api.experiment_config("set_embeddings_grid", "coco")["model"]


def image_batches():
    return [torch.from_numpy(image) for image in IMAGES]   # (3, 28, 28) each: what ImageFiles gives


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
    k, text_global, layout = RUNS[run]
    released = import_checkpoint(FIXTURES / run, base_model, DATASET, LIMITS)
    cfg = released.model_config
    assert released.source_dataset == "coco" and released.runs_cnn and released.provenance["layout"] == layout
    assert released.image_shape == {"scales": {"conv5": [7, 7, 64]}} and released.vocab_size == 25
    assert cfg["kind"] == "set_embedding_grid" and cfg["set_size"] == k and cfg["text_global"] == text_global
    assert cfg["set_module"] == {"kind": "pie", "image_input": "raw"} and cfg["similarity"] == {"kind": "mil"}
    assert cfg["image_projection"]["mlp"] is False and cfg["image_projection"]["global_pool"] == "mean"
    assert cfg["embed_dim"] == 8 and cfg["text"]["hidden_dim"] == 4 and cfg["text"]["word_dim"] == 6
    expected = np.array(EXPECTED["scores"][run], dtype=np.float32)
    assert np.abs(expected - expected.mean()).max() > 1e-2   # the scores differ: a swapped tensor would show
    scores = imported_scores(released, read_vocabulary(FIXTURES / "coco_vocab.pkl", TOKENIZER, LIMITS))
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-5)


def test_the_text_switch_matters_the_legacy_and_final_features_differ(base_model):
    """Evaluating a --legacy run as today's code (final states) would change its scores."""
    released = import_checkpoint(FIXTURES / "coco_pvse.pth", base_model, DATASET, LIMITS)
    other = type(released)({**released.model_config, "text_global": "concatenate_final"}, released.state_dict,
                           released.image_shape, released.vocab_size, released.source_dataset, released.provenance,
                           runs_cnn=True)
    vocab = read_vocabulary(FIXTURES / "coco_vocab.pkl", TOKENIZER, LIMITS)
    assert np.abs(imported_scores(other, vocab) - np.array(EXPECTED["scores"]["coco_pvse.pth"])).max() > 1e-3


def test_a_train_py_checkpoint_keeps_its_options_as_provenance(base_model):
    released = import_checkpoint(FIXTURES / TRAIN_RUN, base_model, DATASET, LIMITS)
    options = released.provenance["options"]
    assert released.provenance["epoch"] == 17 and released.provenance["best_score"] == 412.25
    assert options["legacy"] is False and options["wemb_type"] == "glove" and options["div_weight"] == 0.1


def test_their_vocabulary_pickle_reads_as_the_project_vocabulary():
    vocab = read_vocabulary(FIXTURES / "coco_vocab.pkl", TOKENIZER, LIMITS)
    assert vocab.idx2word[:5] == ["<pad>", "<start>", "<end>", "<unk>", "a"] and vocab.word2idx["café"] == 23
    assert len(vocab) == 25


def resaved(tmp_path: Path, change, run: str = TRAIN_RUN) -> Path:
    ckpt = load_checkpoint(FIXTURES / run, [argparse.Namespace], LIMITS)
    ckpt = change(ckpt) or ckpt
    path = tmp_path / "resaved.pth.tar"
    torch.save(ckpt, path)
    return path


@pytest.mark.parametrize("option, value, message", [
    ("order", True, "trained with --order .*order embeddings"),
    ("img_attention", False, "trained without --img_attention: the project's set model has PIE-Net on both"),
    ("txt_attention", False, "trained without --txt_attention"),
    ("max_video_length", 4, "max_video_length 4: a video model .*no video datasets"),
    ("data_name", "mrw", "data_name 'mrw', .*a video model"),
    ("cnn_type", "vgg19", "cnn_type 'vgg19': the project's grid backbone is a ResNet"),
    ("img_num_embeds", 4, "its options have img_num_embeds: a kdwonn/DivE checkpoint"),
])
def test_an_option_the_project_does_not_implement_is_refused_by_name(tmp_path, base_model, option, value, message):
    path = resaved(tmp_path, lambda c: setattr(c["args"], option, value))
    with pytest.raises(HarnessError, match=message):
        import_checkpoint(path, base_model, DATASET, LIMITS)


def test_a_released_video_model_is_refused(tmp_path, base_model):
    def video(state):   # EncoderVideo: a GRU over the frames' CNN features
        state["img_enc.rnn.weight_ih_l0"] = torch.zeros(12, 64)
    with pytest.raises(HarnessError, match=r"a video model \(EncoderVideo.*the MRW and TGIF runs"):
        import_checkpoint(resaved(tmp_path, video, "coco_pvse.pth"), base_model, DATASET, LIMITS)


def test_dataparallel_names_and_the_old_two_encoder_layout_import_alike(tmp_path, base_model):
    """A state dict saved inside nn.DataParallel ('module.'), and eval.py convert_old_state_dict's
    layout ([img_enc, txt_enc] state dicts, PIE-Net named 'our_model'), give the same model."""
    plain = import_checkpoint(FIXTURES / "coco_pvse.pth", base_model, DATASET, LIMITS)
    parallel = import_checkpoint(resaved(tmp_path, lambda s: {f"module.{k}": v for k, v in s.items()},
                                         "coco_pvse.pth"), base_model, DATASET, LIMITS)

    def old(state):
        return [{k.split(".", 1)[1].replace("pie_net", "our_model"): v for k, v in state.items() if k.startswith(p)}
                for p in ("img_enc.", "txt_enc.")]
    older = import_checkpoint(resaved(tmp_path, old, "coco_pvse.pth"), base_model, DATASET, LIMITS)
    for other in (parallel, older):
        assert other.model_config == plain.model_config and list(other.state_dict) == list(plain.state_dict)
        assert all(torch.equal(other.state_dict[k], v) for k, v in plain.state_dict.items())


def test_a_checkpoint_of_another_code_base_or_a_model_kind_that_does_not_fit_is_refused(tmp_path, base_model):
    vsepp = FIXTURES.parent / "vsepp" / "f30k_vse++_resnet_finetune_model_best.pth.tar"
    with pytest.raises(HarnessError, match=r"not a PVSE checkpoint \(an opt entry .*a VSE\+\+, VSRN, SCAN or SGRAF"):
        import_checkpoint(vsepp, base_model, DATASET, LIMITS)
    sgraf = FIXTURES.parent / "sgraf" / "f30k_SGR_model_best.pth.tar"
    with pytest.raises(HarnessError, match=r"not a PVSE checkpoint"):
        import_checkpoint(sgraf, base_model, DATASET, LIMITS)
    butd = api.experiment_config("set_embeddings", "coco", variants=["pvse"])["model"]   # PIE-Net on BUTD regions
    with pytest.raises(HarnessError, match=r"PVSE's checkpoints fill a set_embedding_grid model .*not 'set_embedding'"):
        import_checkpoint(FIXTURES / "coco_pvse.pth", butd, DATASET, LIMITS)


def test_a_tensor_of_another_shape_is_named(tmp_path, base_model):
    def wider(ckpt):
        ckpt["model"]["img_enc.pie_net.fc.weight"] = torch.zeros(8, 65)
    with pytest.raises(HarnessError, match=r"'img_enc.pie_net.fc.weight' has shape \(8, 65\), but "
                                           r"'image_set.fc.weight' of the project's model is \(8, 64\)"):
        import_checkpoint(resaved(tmp_path, wider), base_model, DATASET, LIMITS)


def test_a_full_size_released_checkpoint_is_placed_whole(monkeypatch, base_model):
    """The rules place every tensor of a released COCO PVSE (ResNet-152, D 1024, word_dim 300, K 2)
    as eval.py loads it: shapes only, on the meta device."""
    monkeypatch.setattr(torchvision.models, "resnet152", REAL_RESNET152)
    monkeypatch.setitem(architectures.CHANNELS, "resnet152", (512, 1024, 2048))
    with torch.device("meta"):
        cnn = REAL_RESNET152(weights=None)
        parts = {"img_enc.fc": nn.Linear(2048, 1024), "txt_enc.embed": nn.Embedding(11355, 300),
                 "txt_enc.rnn": nn.GRU(300, 512, bidirectional=True, batch_first=True),
                 "img_enc.pie_net.attention.w_1": nn.Linear(2048, 1024, bias=False),
                 "img_enc.pie_net.attention.w_2": nn.Linear(1024, 2, bias=False),
                 "img_enc.pie_net.fc": nn.Linear(2048, 1024), "img_enc.pie_net.layer_norm": nn.LayerNorm(1024),
                 "txt_enc.pie_net.attention.w_1": nn.Linear(300, 150, bias=False),
                 "txt_enc.pie_net.attention.w_2": nn.Linear(150, 2, bias=False),
                 "txt_enc.pie_net.fc": nn.Linear(300, 1024), "txt_enc.pie_net.layer_norm": nn.LayerNorm(1024)}
    state = {f"img_enc.cnn.{k}": v for k, v in cnn.state_dict().items() if not k.startswith("fc.")}
    state.update({f"{name}.{k}": v for name, module in parts.items() for k, v in module.state_dict().items()})
    monkeypatch.setattr(pvse, "load_checkpoint", lambda path, allowed, limits: state)
    released = import_checkpoint("ckpt/coco_pvse.pth", base_model, DATASET, LIMITS)
    assert released.image_shape == {"scales": {"conv5": [7, 7, 2048]}} and released.vocab_size == 11355
    cfg = released.model_config
    assert (cfg["embed_dim"], cfg["set_size"], cfg["text"]["hidden_dim"], cfg["text"]["word_dim"]) == (1024, 2, 512, 300)
    assert len({k.split(".")[2] for k in released.state_dict if k.startswith("backbone.layer3.")}) == 36   # blocks


def payload(name="coco"):
    """A dataset payload (results/<dataset>/dataset.json) of the fields an import reads."""
    return DatasetPayload.from_json({"name": name, "paths": {}, "dataset": {**DATASET, "tokenizer": "nltk_line"}})


def released_row_config(dataset: str) -> dict:
    """The method's config as a released row's job reads it: with the caption augmentation of its
    training, whose <mask> id (methods.data.caption_augment.extra_tokens) the import drops."""
    cfg = api.experiment_config("set_embeddings_grid", dataset)
    assert cfg["training"]["caption_augment"]
    return cfg


def test_the_import_writes_a_run_folder_that_evaluates_as_the_authors_code(tmp_path):
    """What ``python -m methods.import_released`` writes: model.pt (marked fine-tuned: evaluation
    runs its CNN on the images) and vocab.json, read back by the evaluation's own loaders."""
    run = "coco_pvse.pth"
    cfg = released_row_config("coco")
    import_released(payload(), cfg, FIXTURES / run, FIXTURES / "coco_vocab.pkl", tmp_path / "run", limits=LIMITS)
    ckpt = read_model_file(tmp_path / "run" / "model.pt")
    assert ckpt["best"]["finetuned"] is True and ckpt["best"]["released"]["code"] == "yalesong/pvse"
    assert ckpt["config"]["model"]["text_global"] == "concatenate_last_outputs"
    backbones = {"resnet152": {"arch": "resnet152", "weights": None}}   # weights are the run's: never loaded
    model, _ = api.load_model(tmp_path / "run" / "model.pt", CPU, backbones)
    vocab = Vocabulary.load(tmp_path / "run" / "vocab.json")
    img = api.encode_images(model, images=image_batches(), device=CPU)
    txt = api.encode_texts(model, EXPECTED["captions"], vocab, device=CPU)
    np.testing.assert_allclose(api.score(model, img, txt).numpy(), np.array(EXPECTED["scores"][run]),
                               rtol=0, atol=1e-5)


def test_an_import_for_another_dataset_writes_nothing(tmp_path):
    with pytest.raises(HarnessError, match="trained on coco, but dataset 'flickr' is flickr"):
        import_released(payload("flickr"), released_row_config("flickr"),
                        FIXTURES / "coco_pvse.pth", FIXTURES / "coco_vocab.pkl", tmp_path / "run", limits=LIMITS)
    assert not (tmp_path / "run").exists()
