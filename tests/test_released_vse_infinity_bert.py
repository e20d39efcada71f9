"""VSE-infinity's released BERT checkpoints (github.com/woodfrog/vse_infty, branch master) imported
onto the project's models: the BUTD-region runs (``methods.released.vse_infinity``) and the grid
runs (``methods.released.vse_infinity_grid``).

The region fixtures (tests/data/released/vse_infinity_bert/) were written by the authors' own code
at tiny widths with random weights (tests/data/released/make_vse_infinity_bert_fixtures.py says
how), with a tiny BERT folder (config.json, vocab.txt) in the layout a user configures, and the
scores and caption embeddings their code gives. The grid checkpoint (a CNN too large for a fixture
at the WSL ResNeXt's widths) is written here in their state-dict layout: ``ResnetFeatureExtractor``
registers one torchvision CNN as ``resnet`` and again as ``base`` + ``top``; its image side is
checked against a reference written from their ``forward``, its text side against their code's
caption embeddings."""
import argparse
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from methods import api
from methods.data.datasets import DatasetPayload
from methods.data.inputs import CachedImageFeatures
from methods.data.text import load_vocabulary
from methods.data.wordpiece import WordPieceVocabulary, tokenize_captions
from methods.errors import HarnessError
from methods.features.backbone import ResNetBackbone
from methods.import_released import import_released
from methods.models.base import BuildContext, build_model
from methods.models.checkpoint import read_model_file
from methods.released import importers, vse_infinity, vse_infinity_grid
from methods.scoring import encode_images, encode_texts, score_matrix
from methods.untrusted.safe_load import load_checkpoint
from tests.oracles.vse_infinity import gpo, scan_l2
from tests.records import READER_LIMITS as LIMITS

FIXTURES = Path(__file__).parent / "data" / "released" / "vse_infinity_bert"
BIGRU = Path(__file__).parent / "data" / "released" / "vse_infinity" / "f30k_butd_region_bigru.pth"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
BERT_FOLDER = FIXTURES / "bert"
ENCODERS = {"bert_base_uncased": {"kind": "bert", "path": str(BERT_FOLDER)}}
CPU = torch.device("cpu")
N_REGIONS = len(EXPECTED["images"][0])
REGIONS = {"precomp": {"n_regions": N_REGIONS, "feature_dim": None}}
RUNS = {"f30k_butd_region_bert": "flickr", "coco_butd_region_bert": "coco"}


@pytest.fixture(scope="module")
def base_model():
    return api.experiment_config("vse_infinity_bert", "flickr")["model"]


def wordpieces() -> WordPieceVocabulary:
    """The captions as the DAG's tokenisation job writes them for the BERT folder."""
    pieces, captions = tokenize_captions(BERT_FOLDER, EXPECTED["captions"])
    return WordPieceVocabulary(pieces, "bert_base_uncased", captions)


def built(released, backbones=None):
    encoders = {k: {**v, "weights": "none"} for k, v in ENCODERS.items()}
    cnn = {k: {**v, "weights": "none"} for k, v in (backbones or {}).items()}   # the checkpoint's weights fill it
    model = build_model(released.model_config, BuildContext(released.vocab_size, released.image_shape,
                                                            cnn, text_encoders=encoders,
                                                            cnn=backbones is not None))
    model.load_state_dict(released.state_dict, strict=True)
    return model.eval()


def test_the_tokenisation_job_gives_their_token_ids():
    vocab = wordpieces()
    assert [vocab.encode(c) for c in EXPECTED["captions"]] == EXPECTED["token_ids"]


def test_the_grid_runs_have_an_importer():
    assert importers.released_code("vse_infinity_grid", "x") == "woodfrog/vse_infty"
    assert importers.get_importer("vse_infinity_grid", "x") is vse_infinity_grid.IMPORTER


@pytest.mark.parametrize("run", sorted(RUNS))
def test_a_released_bert_checkpoint_scores_as_the_authors_code(base_model, run):
    released = vse_infinity.import_checkpoint(FIXTURES / f"{run}.pth", base_model, REGIONS, LIMITS, ENCODERS)
    assert released.source_dataset == RUNS[run] and released.provenance["epoch"] == 19
    cfg = released.model_config
    assert cfg["text"] == {**base_model["text"], "out_dim": 8} and cfg["embed_dim"] == 8
    assert released.vocab_size == len((BERT_FOLDER / "vocab.txt").read_text().split()) and released.extra_tokens == 0
    model = built(released)
    tokens = [wordpieces().encode(c) for c in EXPECTED["captions"]]
    img = encode_images(model, len(EXPECTED["images"]), CPU, 2,
                        features=CachedImageFeatures(np.array(EXPECTED["images"], dtype=np.float32)))
    scores = score_matrix(model, img, encode_texts(model, tokens, CPU, 3)).numpy()
    expected = np.array(EXPECTED["scores"][run], dtype=np.float32)
    assert np.abs(expected - expected.mean()).max() > 1e-3   # the scores differ: a swapped tensor would show
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-5)


def payload(name="coco", feature_dim=10, **extra):
    return DatasetPayload.from_json({"name": name, "paths": {}, "text_encoders": ENCODERS,
            "dataset": {"tokenizer": "nltk_line", "precomp": {"n_regions": N_REGIONS, "feature_dim": feature_dim}},
            **extra})


def test_the_import_writes_a_run_folder_that_evaluates_as_the_authors_code(tmp_path):
    """What ``python -m methods.import_released`` writes for a BERT run: model.pt and, as its
    vocabulary, the captions the DAG tokenised for the BERT folder; the evaluation's loaders
    read them back (the BERT's weights from model.pt, its architecture from the folder)."""
    captions = tmp_path / "bert_base_uncased.json"
    wordpieces().save(captions)
    import_released(payload(), api.experiment_config("vse_infinity_bert", "coco"),
                    FIXTURES / "coco_butd_region_bert.pth", captions, tmp_path / "run", limits=LIMITS)
    ckpt = read_model_file(tmp_path / "run" / "model.pt")
    assert ckpt["best"]["released"]["code"] == "woodfrog/vse_infty" and "caption_augment" not in ckpt["config"]["training"]
    model, _ = api.load_model(tmp_path / "run" / "model.pt", CPU, {}, ENCODERS)
    vocab = load_vocabulary(tmp_path / "run" / "vocab.json")
    img = api.encode_images(model, CachedImageFeatures(np.array(EXPECTED["images"], dtype=np.float32)), device=CPU)
    txt = api.encode_texts(model, EXPECTED["captions"], vocab, device=CPU)
    np.testing.assert_allclose(api.score(model, img, txt).numpy(),
                               np.array(EXPECTED["scores"]["coco_butd_region_bert"]), rtol=0, atol=1e-5)
    other = tmp_path / "bert_synthetic.json"   # the captions tokenised for another configured BERT
    pieces, tokenised = tokenize_captions(BERT_FOLDER, EXPECTED["captions"])
    WordPieceVocabulary(pieces, "bert_synthetic", tokenised).save(other)
    with pytest.raises(HarnessError, match=r"not the captions tokenised for text encoder 'bert_base_uncased' "
                                           r"\(bert_synthetic\)"):
        import_released(payload(), api.experiment_config("vse_infinity_bert", "coco"),
                        FIXTURES / "coco_butd_region_bert.pth", other, tmp_path / "run2", limits=LIMITS)
    assert not (tmp_path / "run2").exists()


def resaved(tmp_path: Path, change, source=FIXTURES / "coco_butd_region_bert.pth") -> Path:
    ckpt = load_checkpoint(source, [argparse.Namespace], LIMITS)
    change(ckpt)
    path = tmp_path / f"model{len(list(tmp_path.iterdir()))}.pth"
    torch.save(ckpt, path)
    return path


def test_a_checkpoint_of_the_other_text_encoder_or_another_bert_is_refused(tmp_path, base_model):
    gru_method = api.experiment_config("vse_infinity", "flickr")["model"]
    with pytest.raises(HarnessError, match=r"its text encoder is BERT \(branch master\), but the method's text "
                                           r"block is a bi-GRU"):
        vse_infinity.import_checkpoint(FIXTURES / "coco_butd_region_bert.pth", gru_method, REGIONS, LIMITS, ENCODERS)
    with pytest.raises(HarnessError, match=r"its text encoder is a bi-GRU \(branch bigru\), but the method's text "
                                           r"block is BERT"):
        vse_infinity.import_checkpoint(BIGRU, base_model, REGIONS, LIMITS, ENCODERS)
    with pytest.raises(HarnessError, match=r"text_encoders\.bert_base_uncased\.path: not set"):
        vse_infinity.import_checkpoint(FIXTURES / "coco_butd_region_bert.pth", base_model, REGIONS, LIMITS,
                                       {"bert_base_uncased": {"kind": "bert", "path": None}})
    bigger = resaved(tmp_path, lambda c: setattr(c["opt"], "vocab_size", 30522))
    with pytest.raises(HarnessError, match=r"trained with a BERT vocabulary of 30522 pieces, but "
                                           r"text_encoders\.bert_base_uncased\.path .* has 28"):
        vse_infinity.import_checkpoint(bigger, base_model, REGIONS, LIMITS, ENCODERS)
    deeper = tmp_path / "deeper"   # a BERT folder of another depth than the file's
    deeper.mkdir()
    (deeper / "vocab.txt").write_text((BERT_FOLDER / "vocab.txt").read_text())
    (deeper / "config.json").write_text(json.dumps({**json.loads((BERT_FOLDER / "config.json").read_text()),
                                                    "num_hidden_layers": 3}))
    with pytest.raises(HarnessError, match=r"sets no 'text\.bert\.encoder\.layer\.2\."):
        vse_infinity.import_checkpoint(FIXTURES / "coco_butd_region_bert.pth", base_model, REGIONS, LIMITS,
                                       {"bert_base_uncased": {"kind": "bert", "path": str(deeper)}})


def test_the_position_ids_buffer_older_transformers_saved_is_read_and_not_kept(tmp_path, base_model):
    def with_position_ids(ckpt):   # transformers 3 - 4.30 saved BertEmbeddings.position_ids in the state dict
        ckpt["model"][1]["bert.embeddings.position_ids"] = torch.arange(32)[None]
    released = vse_infinity.import_checkpoint(resaved(tmp_path, with_position_ids), base_model, REGIONS, LIMITS,
                                              ENCODERS)
    assert not any("position_ids" in k for k in released.state_dict)


# -- the grid runs ---------------------------------------------------------------------------------
class TheirFeatureExtractor(nn.Module):
    """lib/modules/resnet.py ``ResnetFeatureExtractor``'s registration of its CNN: the torchvision
    net as ``resnet``, its modules again as ``base`` (conv1, bn1, relu, maxpool, layer1..3) and
    ``top`` (layer4); ``forward`` as theirs: top(base(x)), cells row-major."""

    def __init__(self, resnet):
        super().__init__()
        self.resnet = resnet
        self.base = nn.Sequential(resnet.conv1, resnet.bn1, resnet.relu, resnet.maxpool, resnet.layer1,
                                  resnet.layer2, resnet.layer3)
        self.top = nn.Sequential(resnet.layer4)

    def forward(self, x):
        top = self.top(self.base(x))
        return top.view(x.shape[0], top.shape[1], -1).permute(0, 2, 1)


def randomised(resnet, gen, conv_scale):
    """``resnet`` with random weights and BatchNorm statistics (positive variances), in place."""
    with torch.no_grad():
        for name, tensor in resnet.state_dict().items():
            if name.endswith("running_var"):
                tensor.copy_(torch.rand(tensor.shape, generator=gen) + 0.5)
            elif tensor.is_floating_point():
                tensor.copy_(torch.randn(tensor.shape, generator=gen) * (conv_scale if "conv" in name else 0.5))
    return resnet


@pytest.fixture(scope="module")
def grid_run():
    """Their grid checkpoint at ResNet-18 width (the WSL ResNeXt-101's layout: torchvision's module
    names), its CNN random with random BatchNorm statistics, BERT and the text pooling from the
    region fixture their code wrote, fc and the image GPO random."""
    import torchvision

    gen = torch.Generator().manual_seed(5)
    resnet = randomised(torchvision.models.resnet18(weights=None), gen, conv_scale=0.05)
    extractor = TheirFeatureExtractor(resnet)
    region = load_checkpoint(FIXTURES / "coco_butd_region_bert.pth", [argparse.Namespace], LIMITS)
    fc = {"image_encoder.fc.weight": torch.randn(8, 512, generator=gen) * 0.1,
          "image_encoder.fc.bias": torch.randn(8, generator=gen) * 0.1}
    image_pool = {f"image_encoder.{k}": v.clone() + 0.1 * torch.randn(v.shape, generator=gen)
                  for k, v in region["model"][0].items() if k.startswith("gpool.")}
    image_state = {**{f"backbone.{k}": v for k, v in extractor.state_dict().items()}, **fc, **image_pool}
    opt = argparse.Namespace(**{**vars(region["opt"]), "precomp_enc_type": "backbone", "backbone_source": "wsl",
                                "input_scale_factor": 2.0, "img_dim": 512})
    ckpt = {"epoch": 23, "model": [image_state, region["model"][1]], "best_rsum": 540.0, "opt": opt, "Eiters": 9}
    return SimpleNamespace(ckpt=ckpt, extractor=extractor.eval(), image_state=image_state)


@pytest.fixture
def resnet18_as_wsl(monkeypatch):
    """The importer's table of their --backbone_source values, pointed at ResNet-18 for the test."""
    monkeypatch.setitem(vse_infinity_grid.SOURCE_ARCHITECTURES, "wsl", "resnet18")
    return {"resnext101_wsl": {"arch": "resnet18", "weights": None}}


def grid_base():
    return api.experiment_config("vse_infinity_grid_bert", "coco")["model"]


def saved(tmp_path, ckpt, name="grid.pth"):
    torch.save(ckpt, tmp_path / name)
    return tmp_path / name


def reference_image_embeddings(grid_run, images, cells=None, state=None):
    """EncoderImageFull.forward at evaluation, from their code: every cell, fc, GPO, l2norm
    (``cells``: the CNN's cells, (B, HW, C), where not the run's extractor's)."""
    state = state if state is not None else grid_run.image_state
    pool = SimpleNamespace(gru=nn.GRU(32, 32, batch_first=True, bidirectional=True).double(),
                           linear=SimpleNamespace(weight=state["image_encoder.gpool.linear.weight"].double()), d_pe=32)
    pool.gru.load_state_dict({k.removeprefix("image_encoder.gpool.gru."): v.double() for k, v in state.items()
                              if k.startswith("image_encoder.gpool.gru.")})
    with torch.no_grad():
        cells = (grid_run.extractor(images) if cells is None else cells).double()
        projected = cells @ state["image_encoder.fc.weight"].double().T + state["image_encoder.fc.bias"].double()
        return torch.stack([scan_l2(gpo(pool, p)) for p in projected])


def test_a_released_grid_checkpoint_scores_as_their_code(tmp_path, grid_run, resnet18_as_wsl):
    dataset = {"features": {"crop": 64}}
    released = vse_infinity_grid.import_checkpoint(saved(tmp_path, grid_run.ckpt), grid_base(), dataset, LIMITS,
                                                   ENCODERS, resnet18_as_wsl)
    assert released.runs_cnn and released.images == {"kind": "squash", "size": 512, "pixels": "imagenet"}
    assert released.provenance["options"]["backbone_source"] == "wsl" and released.source_dataset == "coco"
    model = built(released, resnet18_as_wsl)
    images = torch.randn(3, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        img = model.encode_images({"images": images})
    tokens = [wordpieces().encode(c) for c in EXPECTED["captions"]]
    txt = encode_texts(model, tokens, CPU, 3)
    scores = score_matrix(model, img, txt).numpy()
    their_captions = torch.tensor(EXPECTED["caption_embeddings"]["coco_butd_region_bert"], dtype=torch.float64)
    expected = (reference_image_embeddings(grid_run, images) @ their_captions.T).numpy()
    assert np.abs(expected - expected.mean()).max() > 1e-3
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-5)


def test_a_grid_checkpoint_whose_two_cnn_listings_differ_or_of_another_source_is_refused(tmp_path, grid_run,
                                                                                         resnet18_as_wsl):
    dataset = {"features": {"crop": 64}}
    image_state = dict(grid_run.image_state)
    image_state["backbone.resnet.layer2.0.conv1.weight"] = image_state["backbone.resnet.layer2.0.conv1.weight"] + 1
    path = saved(tmp_path, {**grid_run.ckpt, "model": [image_state, grid_run.ckpt["model"][1]]})
    with pytest.raises(HarnessError, match=r"img_enc\.backbone\.resnet\.layer2\.0\.conv1\.weight and "
                                           r"img_enc\.backbone\.base\.5\.0\.conv1\.weight differ"):
        vse_infinity_grid.import_checkpoint(path, grid_base(), dataset, LIMITS, ENCODERS, resnet18_as_wsl)
    other = argparse.Namespace(**{**vars(grid_run.ckpt["opt"]), "backbone_source": "imagenet_res50"})
    path = saved(tmp_path, {**grid_run.ckpt, "opt": other}, "other.pth")
    with pytest.raises(HarnessError, match=r"trained with backbone_source 'imagenet_res50'; the project imports "
                                           r"detector, wsl"):
        vse_infinity_grid.import_checkpoint(path, grid_base(), dataset, LIMITS, ENCODERS, resnet18_as_wsl)
    detector = argparse.Namespace(**{**vars(grid_run.ckpt["opt"]), "backbone_source": "detector"})
    path = saved(tmp_path, {**grid_run.ckpt, "opt": detector}, "detector.pth")
    with pytest.raises(HarnessError, match=r"backbones\.resnext101_wsl\.arch: 'resnet18', but .* was trained on "
                                           r"backbone_source 'detector' \(resnet101_caffe\)"):
        vse_infinity_grid.import_checkpoint(path, grid_base(), dataset, LIMITS, ENCODERS, resnet18_as_wsl)
    with pytest.raises(HarnessError, match=r"backbones\.resnext101_wsl\.arch: 'resnet50', but .* was trained on "
                                           r"backbone_source 'wsl' \(resnet18\)"):
        vse_infinity_grid.import_checkpoint(saved(tmp_path, grid_run.ckpt), grid_base(), dataset, LIMITS, ENCODERS,
                                            {"resnext101_wsl": {"arch": "resnet50"}})
    with pytest.raises(HarnessError, match=r"trained with precomp_enc_type='basic'"):
        vse_infinity_grid.import_checkpoint(FIXTURES / "coco_butd_region_bert.pth", grid_base(), dataset, LIMITS,
                                            ENCODERS, resnet18_as_wsl)


def test_a_released_detector_grid_checkpoint_runs_the_bottom_up_resnet_on_caffe_pixels(tmp_path, grid_run):
    """``--backbone_source detector`` (their ``*_butd_grid_bert`` runs): their resnet.py
    ``resnet101()``, the BUTD detector's Caffe-style ResNet-101, saved in the same triple listing
    (its own classifier too), imported into a method whose backbone is ``resnet101_caffe``; its
    cells against the source's equations (tests.test_caffe_resnet.reference_maps), then fc and GPO."""
    import torchvision

    from tests.test_caffe_resnet import reference_maps

    gen = torch.Generator().manual_seed(7)
    # their ResNet's names and shapes (the state dict does not hold the strides)
    resnet = randomised(torchvision.models.resnet101(weights=None), gen, conv_scale=0.02)
    extractor = TheirFeatureExtractor(resnet)
    fc = {"image_encoder.fc.weight": torch.randn(8, 2048, generator=gen) * 0.05,
          "image_encoder.fc.bias": torch.randn(8, generator=gen) * 0.1}
    pool = {k: v for k, v in grid_run.image_state.items() if k.startswith("image_encoder.gpool.")}
    image_state = {**{f"backbone.{k}": v for k, v in extractor.state_dict().items()}, **fc, **pool}
    opt = argparse.Namespace(**{**vars(grid_run.ckpt["opt"]), "backbone_source": "detector", "img_dim": 2048})
    path = saved(tmp_path, {**grid_run.ckpt, "opt": opt, "model": [image_state, grid_run.ckpt["model"][1]]})
    backbones = {"butd_resnet101": {"arch": "resnet101_caffe", "weights": None}}
    base = {**grid_base(), "backbone": "butd_resnet101"}
    released = vse_infinity_grid.import_checkpoint(path, base, {"features": {"crop": 64}}, LIMITS, ENCODERS, backbones)
    assert released.images == {"kind": "squash", "size": 512, "pixels": "caffe_bgr"}
    model = built(released, backbones)
    images = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        img = model.encode_images({"images": images})
        conv5 = reference_maps(resnet.state_dict(), images)["conv5"]
    cells = conv5.flatten(2).transpose(1, 2)   # row-major, as their forward's view
    expected = reference_image_embeddings(grid_run, images, cells=cells, state=image_state)
    torch.testing.assert_close(img.double(), expected, rtol=0, atol=1e-5)
