"""VSE-infinity's released grid checkpoints (Chen, Deng, Wang, Hong, CVPR 2021; github.com/woodfrog/vse_infty
branch master, whose README links coco_wsl_grid_bert and f30k_wsl_grid_bert on huggingface.co/cccjc/vse-infty)
as the project's ``vse_infinity_grid`` model: the CNN, fine-tuned, with BERT.

Their train.py saves what the region runs save (``methods.released.vse_infinity``), with
``precomp_enc_type backbone``: ``img_enc`` is ``EncoderImageFull``, whose ``backbone``
(``lib/modules/resnet.py`` ``ResnetFeatureExtractor``) holds the CNN twice in its state dict, once
as ``resnet`` (the whole torchvision net, its unused classifier too) and once as ``base``
(conv1, bn1, relu, maxpool, layer1..3) and ``top`` (layer4): the same modules, so the same
tensors, read here from ``base`` and ``top`` after checking the two copies are equal. Then
``image_encoder`` (``EncoderImageAggr`` without the MLP, which it builds for regions alone): fc
and GPO. The CNN is the one ``--backbone_source`` names: ``wsl`` is torch.hub's
facebookresearch/WSL-Images ``resnext101_32x8d_wsl``, torchvision's ResNeXt-101 32x8d;
``detector`` (the ``*_butd_grid_bert`` runs) their ``resnet101()``, the BUTD detector's Caffe-style
ResNet-101 (``resnet101_caffe``, ``methods.features.architectures``), whose own classifier is in the
``resnet`` listing too. The images are what ``RawImageDataset`` gives at evaluation: squashed to
``256 x input_scale_factor`` pixels a side, normalised with ImageNet's mean and deviation, or for
``detector`` flipped to BGR minus the Caffe pixel means on the 0-255 scale.
"""
from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch

from methods.errors import HarnessError
from methods.features.architectures import cached_shape
from methods.features.backbone import detector_name
from methods.released.mapping import Rules, map_tensors
from methods.released.options import NAME, Option, plain_options
from methods.released.record import Importer, ReleasedModel
from methods.released.vse_infinity import (ARCHITECTURE_OPTIONS, CODE, DEFAULT_ONLY, GPO_TENSORS, OPTIONS, PARTS,
                                           SOURCE_DATASETS, check_dataset, check_default_only, is_bert_run, meta_model,
                                           read_checkpoint, read_vocabulary, text_config, text_rules)
from methods.untrusted.safe_load import ReaderLimits

GRID_DEFAULT_ONLY = {**DEFAULT_ONLY, "precomp_enc_type": "backbone"}
GRID_OPTIONS = {**OPTIONS, "backbone_source": NAME, "input_scale_factor": Option(float, 0.25, 8)}
GRID_ARCHITECTURE_OPTIONS = (*ARCHITECTURE_OPTIONS, "backbone_source", "input_scale_factor")
BASE_TARGET_SIZE = 256   # image_caption.py RawImageDataset.base_target_size, times input_scale_factor
# --backbone_source -> the torchvision architecture its CNN is (resnet.py ResnetFeatureExtractor)
SOURCE_ARCHITECTURES = {"wsl": "resnext101_32x8d", "detector": "resnet101_caffe"}
PIXELS = {"wsl": "imagenet", "detector": "caffe_bgr"}   # RawImageDataset: _imagenet_norm, or _detector_norm of BGR
CNN_RULES: Rules = [
    (r"img_enc\.backbone\.base\.([014])\.(.+)", r"backbone.stem.\1.\2"),   # the project's stem: conv1 .. layer1
    (r"img_enc\.backbone\.base\.5\.(.+)", r"backbone.layer2.\1"),
    (r"img_enc\.backbone\.base\.6\.(.+)", r"backbone.layer3.\1"),
    (r"img_enc\.backbone\.top\.0\.(.+)", r"backbone.layer4.\1"),
]
IMAGE_RULES: Rules = [
    *CNN_RULES,
    (r"img_enc\.image_encoder\.fc\.(weight|bias)", r"fc.\1"),
    (rf"img_enc\.image_encoder\.gpool\.{GPO_TENSORS}", r"image_pool.\1"),
]
IMAGE_IGNORED = [(r"img_enc\.backbone\.resnet\..+",
                  "the CNN's second listing in the state dict (the modules of base and top, checked equal), "
                  "and its ImageNet classifier (fc), which no feature passes through")]


def source_cnn_name(key: str) -> str | None:
    """The ``base``/``top`` name of a tensor of the CNN's ``resnet`` listing (ResnetFeatureExtractor:
    ``methods.features.backbone.DETECTOR_LAYOUT``), None for its classifier."""
    name = detector_name(key)
    return None if name == key else name


def check_cnn_copies(image_state: dict, where: str) -> None:
    """The CNN's two listings hold the same tensors (one set of modules saved under two names):
    a file whose copies differ was not saved by their code, and which one ran is unknown."""
    prefix = "backbone.resnet."
    for key, tensor in image_state.items():
        if not key.startswith(prefix):
            continue
        twin = source_cnn_name(key[len(prefix):])
        if twin is None:
            continue
        other = image_state.get(f"backbone.{twin}")
        if other is None or tuple(other.shape) != tuple(tensor.shape) or not torch.equal(other, tensor):
            raise HarnessError(f"{where}: img_enc.{key} and img_enc.backbone.{twin} differ (their code saves one "
                               f"module under both names): not a checkpoint of its train.py")


def grid_images(opt: argparse.Namespace, source: str, where: str) -> dict:
    size = BASE_TARGET_SIZE * opt.input_scale_factor
    if size != int(size):
        raise HarnessError(f"{where}: input_scale_factor {opt.input_scale_factor} gives images of {size} pixels, "
                           f"not a whole number")
    return {"kind": "squash", "size": int(size), "pixels": PIXELS[source]}


def model_config(opt: argparse.Namespace, text_state: dict, base: dict, backbones: dict, text_encoders: dict,
                 where: str) -> dict:
    """The project's model block for their options, from the method's own block (``base``, whose
    backbone must be the architecture of their ``backbone_source``)."""
    check_dataset(opt, where)
    check_default_only(opt, GRID_DEFAULT_ONLY, where)
    source = opt.backbone_source
    if source not in SOURCE_ARCHITECTURES:
        raise HarnessError(f"{where}: trained with backbone_source {source!r}; the project imports "
                           f"{', '.join(sorted(SOURCE_ARCHITECTURES))}")
    name, arch = base["backbone"], SOURCE_ARCHITECTURES[source]
    configured = (backbones.get(name) or {}).get("arch")
    if configured != arch:
        raise HarnessError(f"backbones.{name}.arch: {configured!r}, but {where} was trained on backbone_source "
                           f"{source!r} ({arch}): import it into a method whose backbone is {arch}")
    if opt.img_dim != (width := cached_shape("pooled", arch, base, 0)["dim"]):
        raise HarnessError(f"{where}: img_dim {opt.img_dim}, but {arch}'s last map has {width} channels")
    cfg = copy.deepcopy(base)
    cfg.update(embed_dim=opt.embed_size, pooling="gpo", grid_scales=["conv5"])
    cfg["text"] = text_config(opt, text_state, cfg["text"], text_encoders, where)
    return cfg


def import_checkpoint(path: str | Path, base_model_config: dict, dataset_cfg: dict, limits: ReaderLimits,
                      text_encoders: dict | None = None, backbones: dict | None = None) -> ReleasedModel:
    """Their grid ``model_best.pth`` as the project's model (``base_model_config``: the method's
    ``vse_infinity_grid`` block; ``dataset_cfg``: the dataset's config, whose feature crop the image
    shape records as a trained run's does: GPO pools any count of cells; ``limits``: the bounds of
    reading the file; ``text_encoders``, ``backbones``: the config's, the BERT folder and the
    CNN's architecture)."""
    where = str(path)
    text_encoders, backbones = text_encoders or {}, backbones or {}
    ckpt = read_checkpoint(path, limits, GRID_OPTIONS)
    opt, (image_state, text_state) = ckpt["opt"], ckpt["model"]
    if not is_bert_run(text_state):
        raise HarnessError(f"{where}: a bi-GRU grid run; the project's grid VSE-infinity imports branch master's "
                           f"(BERT)")
    cfg = model_config(opt, text_state, base_model_config, backbones, text_encoders, where)
    check_cnn_copies(image_state, where)
    arch = backbones[cfg["backbone"]]["arch"]
    image_shape = cached_shape("grid", arch, cfg, dataset_cfg["features"]["crop"])
    model = meta_model(cfg, opt.vocab_size, image_shape, text_encoders, {cfg["backbone"]: backbones[cfg["backbone"]]})
    source = {f"{part}.{k}": v for part, state in zip(PARTS, ckpt["model"]) for k, v in state.items()}
    rules, ignored = text_rules(text_state)
    state = map_tensors(source, model.state_dict(), [*IMAGE_RULES, *rules], where, [*IMAGE_IGNORED, *ignored])
    provenance = {"code": CODE, "epoch": ckpt.get("epoch"), "best_rsum": ckpt.get("best_rsum"),
                  "options": plain_options(opt, GRID_ARCHITECTURE_OPTIONS, where)}
    return ReleasedModel(cfg, state, image_shape, opt.vocab_size, SOURCE_DATASETS[opt.data_name], provenance,
                         runs_cnn=True, images=grid_images(opt, opt.backbone_source, where))


IMPORTER = Importer(CODE, import_checkpoint, read_vocabulary)
