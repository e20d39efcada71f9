"""What a run config really runs, in a few words: the ``ran`` column of the tables and the notes
of the figures, beside the paper setting a row stands for.

Each model kind describes its own configs: ``describe`` (a method of its declaration in
``methods.model_kinds.MODEL_KINDS``) names the backbone or image input it reads and the
dimensions it runs with. ``methods.model_kinds.describe_run`` adds what every run has (the schedule and the batch);
the helpers below spell out the parts several models share (a backbone, region features, the
text GRU), so that a model's description reads like the others'.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from methods.data.inputs import region_shape
from methods.data.word_vectors import WORD_INITS
from methods.features.architectures import layer_channels


@dataclass(frozen=True)
class DescribeContext:
    """What a description needs beyond the run config: the harness config block of the run's
    dataset (``datasets.<name>``: where its image input comes from) and ``backbones``."""

    dataset: dict
    backbones: dict


def arch_text(arch: str) -> str:
    """``resnet152`` -> ``ResNet-152``, ``resnext101_32x8d`` -> ``ResNeXt-101 32x8d``; others as named."""
    match = re.fullmatch(r"resnet(\d+)", arch)
    if match:
        return f"ResNet-{match.group(1)}"
    match = re.fullmatch(r"resnext(\d+)_(\w+)", arch)
    return f"ResNeXt-{match.group(1)} {match.group(2)}" if match else arch


def backbone_text(name: str, ctx: DescribeContext) -> str:
    """A configured backbone and its weights: ``ResNet-18 (synthetic pre-trained)``,
    ``ResNet-152 (weights resnet152-394f9c45.pth)``, ``ResNet-50 (random init)``."""
    bb = ctx.backbones[name]
    if "pretrain" in bb:
        weights = f"{bb['pretrain']['dataset']} pre-trained"
    elif bb["weights"] is None:
        weights = "weights not configured"
    elif bb["weights"] == "none":
        weights = "random init"
    else:
        weights = f"weights {Path(bb['weights']).name}"
    return f"{arch_text(bb['arch'])} ({weights})"


def pooled_dim(name: str, ctx: DescribeContext) -> int:
    """Channels of a backbone's pooled (conv5) feature."""
    return layer_channels(ctx.backbones[name]["arch"], "conv5")


def regions_text(ctx: DescribeContext) -> str:
    """The dataset's region features: ``36×2048 precomputed regions``, or for the synthetic
    RoIAlign regions ``36×256 RoIAlign regions of ResNet-18 (synthetic pre-trained) conv4``."""
    if "precomp" not in ctx.dataset and "region" not in ctx.dataset["features"]:
        return "precomputed regions"  # a dataset that declares no region shape
    n_regions, dim = region_shape(ctx.dataset)
    if dim is not None:
        return f"{n_regions}×{dim} precomputed regions"
    region = ctx.dataset["features"]["region"]
    dim = layer_channels(ctx.backbones[region["backbone"]]["arch"], region["layer"])
    return f"{n_regions}×{dim} RoIAlign regions of {backbone_text(region['backbone'], ctx)} {region['layer']}"


def gru_text(text_cfg: dict) -> str:
    """A ``text`` block: ``GRU 1024, word 300``, ``bi-GRU 64, word 32 (GloVe)``, ``2-layer GRU ...``,
    ``bi-GRU 512, word 300 (GloVe, fixed)`` when the word embeddings do not train."""
    layers = f"{text_cfg['num_layers']}-layer " if text_cfg["num_layers"] > 1 else ""
    kind = "bi-GRU" if text_cfg["bidirectional"] else "GRU"
    label = WORD_INITS.get(text_cfg["word_init"]).label
    notes = [label] if label else []
    if not text_cfg.get("train_words", True):
        notes.append("fixed")
    vectors = f" ({', '.join(notes)})" if notes else ""
    return f"{layers}{kind} {text_cfg['hidden_dim']}, word {text_cfg['word_dim']}{vectors}"


def text_encoder_text(text_cfg: dict) -> str:
    """A ``text`` block of either kind: the GRU's (``gru_text``) or ``BERT bert_base_uncased -> 1024 (lr x0.1)``."""
    if text_cfg.get("kind") == "bert":
        return f"BERT {text_cfg['encoder']} -> {text_cfg['out_dim']} (lr x{text_cfg['lr_factor']:g})"
    return gru_text(text_cfg)


def finetunes(cfg: dict) -> bool:
    """Whether some training stage of a run config trains the CNN."""
    return any(s["finetune_backbone"] for s in cfg["training"]["stages"])


def reads_cached_features(cfg: dict) -> bool:
    """Whether some training stage of a run config reads the cached image input (its CNN frozen, or
    none at all): a run whose every stage trains the CNN sees images only."""
    return not all(s["finetune_backbone"] for s in cfg["training"]["stages"])


def schedule_text(cfg: dict) -> str:
    """Epochs per stage and the batch: ``12+1 epochs, batch 64`` (``batch 32 images`` for image batches)."""
    training = cfg["training"]
    epochs = "+".join(str(s["epochs"]) for s in training["stages"])
    unit = " images" if training["batching"] == "images" else ""
    return f"{epochs} epochs, batch {training['batch_size']}{unit}"
