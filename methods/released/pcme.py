"""PCME's released checkpoints (Chun et al., "Probabilistic Embeddings for Cross-Modal Retrieval",
CVPR 2021; github.com/naver-ai/pcme, whose README links ``pcme_coco.pth`` and the CutMix-pretrained
``pcme_cutmix_coco.pth``, evaluated with the COCO vocabulary ``datasets/vocabs/coco_vocab.pkl``) as
the project's ``pcme`` model.

Files: engine/base.py ``save_models`` writes ``{'model': PCME.state_dict(), 'criterion':
MCSoftContrastiveLoss.state_dict() (shift, negative_scale), 'optimizer', 'lr_scheduler', 'config'
(the run's YAML as a plain dict), 'word2idx', 'metadata'}``; evaluate_recall_coco.py loads
``model`` and ``criterion`` from it and builds the model from the config file given on its command
line (the README's ``config/coco/pcme_coco.yaml``), which the saved ``config`` is. The metadata's
scores are numpy scalars (read as numbers, ``methods.untrusted.numpy_scalars``); the optimizer's
and scheduler's states are read and not used.

Their model (models/pcme.py ``PCME``): ``EncoderImage`` on torchvision's ResNet (avgpool and fc
emptied: its 7x7 x C cells), the mean of the cells -> fc -> PIE-Net with one head over the raw
cells, l2, and ``UncertaintyModuleImage``; ``EncoderText``: word embeddings -> a bi-GRU of D/2
units read at the last word, PIE-Net over the word embeddings, l2, and ``UncertaintyModuleText``
(its own bi-GRU). Their evaluation (evaluate_recall_coco.py) ranks by the match probability of
``n_samples_inference`` samples with the criterion's scale and shift (``eval_method:
matching_prob``), which the imported row does too; the samples are the project's (seeded) draws.

Refused by name: a run without PIE-Net or without the uncertainty heads on either side
(``img_attention``, ``txt_attention``, ``img_probemb``, ``txt_probemb``: the project's PCME has
all four), without inference samples (``n_samples_inference`` 0: a deterministic run, which the
project's PCME, always sampling, cannot be), a CNN other than the project's ResNets, and a file
without the criterion's scale and shift. A CUB run (train_cub.py) saves the same file and its
config names no dataset, so it cannot be told from a COCO run; its rows would name CUB's
vocabulary. Their vocabulary pickle is a plain dict ``{'idx', 'word2idx', 'idx2word'}`` (datasets/
vocab.py ``load_from_pickle``), read without running code.
"""
from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch

from methods.data.text import Vocabulary
from methods.data.tokenizers import Tokenizer
from methods.errors import HarnessError
from methods.features.architectures import CHANNELS, layer_channels
from methods.models.base import BuildContext, build_model
from methods.released.mapping import map_tensors, pie_net_rules, torchvision_resnet_rules
from methods.released.options import (EPOCH, FLAG, NAME, SCORE, VOCABULARY, WIDTH, Option,
                                      check_options as check_option_types, plain_options)
from methods.released.record import Importer, ReleasedModel, is_state_dict
from methods.released.vocabulary import check_eval_transform, vocabulary_from_maps
from methods.untrusted.safe_load import ReaderLimits, load_checkpoint, load_pickle

CODE = "naver-ai/pcme"
KIND = "pcme"
EVAL_TRANSFORM = (256, 224)   # datasets/_transforms.py imagenet_transform: Resize(256), CenterCrop(224)
SOURCE_DATASETS = {"coco": "coco"}
CRITERION = ("shift", "negative_scale")
PROVENANCE_OPTIONS = ("cnn_type", "embed_dim", "word_dim", "wemb_type", "n_samples_inference", "img_finetune",
                      "txt_finetune", "eval_method")
# config['model'] keys the importer reads, their types and the ranges it accepts (methods.released.options)
OPTIONS = {"cnn_type": NAME, "embed_dim": WIDTH, "word_dim": WIDTH, "img_attention": FLAG, "txt_attention": FLAG,
           "img_probemb": FLAG, "txt_probemb": FLAG, "n_samples_inference": Option(int, 0, 1024),
           "vocab_size": VOCABULARY}

CNN = r"img_enc\.cnn\."
RULES = [
    *torchvision_resnet_rules(CNN),
    (r"img_enc\.fc\.(weight|bias)", r"image_fc.\1"),
    *pie_net_rules(r"img_enc\.pie_net\.", "image_pie"),
    (r"img_enc\.uncertain_net\.attention\.w_([12])\.weight", r"image_sigma_attention.w\1.weight"),
    (r"img_enc\.uncertain_net\.fc\.(weight|bias)", r"image_sigma_fc.\1"),
    (r"img_enc\.uncertain_net\.fc2\.(weight|bias)", r"image_sigma_pooled.\1"),
    (r"txt_enc\.embed\.weight", "text.embed.weight"),
    (r"txt_enc\.rnn\.(\w+)", r"text.gru.\1"),
    *pie_net_rules(r"txt_enc\.pie_net\.", "text_pie"),
    (r"txt_enc\.uncertain_net\.attention\.w_([12])\.weight", r"text_sigma_attention.w\1.weight"),
    (r"txt_enc\.uncertain_net\.fc\.(weight|bias)", r"text_sigma_fc.\1"),
    (r"txt_enc\.uncertain_net\.rnn\.(\w+)", r"text_sigma_gru.\1"),
    (r"criterion\.(shift|negative_scale)", r"\1"),
]


def read_checkpoint(path: str | Path, limits: ReaderLimits) -> tuple[dict, dict, dict]:
    """(their model's and criterion's tensors under their names, the run's model options, what the
    file said of itself)."""
    where = str(path)
    ckpt = load_checkpoint(path, (), limits)
    if not isinstance(ckpt, dict) or not is_state_dict(ckpt.get("model")) or not isinstance(ckpt.get("config"), dict):
        raise HarnessError(f"{where}: not a PCME checkpoint (expected {CODE}'s engine save_models file: 'model', "
                           f"'criterion', 'config', 'word2idx', ...)")
    criterion = ckpt.get("criterion")
    if not is_state_dict(criterion) or any(k not in criterion for k in CRITERION):
        raise HarnessError(f"{where}: the checkpoint has no criterion shift and negative_scale, which PCME's "
                           f"match probability needs (evaluate_recall_coco.py loads 'model' and 'criterion')")
    config = ckpt["config"]
    model_options = config.get("model")
    if not isinstance(model_options, dict):
        raise HarnessError(f"{where}: its config has no 'model' block (PCME's YAML config)")
    if model_options.get("name", "pcme") != "pcme":
        raise HarnessError(f"{where}: config model.name {model_options.get('name')!r}: not PCME")
    state = dict(ckpt["model"])
    other = next((k for k in state if not k.startswith(("img_enc.", "txt_enc."))), None)
    if other is not None:
        raise HarnessError(f"{where}: not a PCME checkpoint (it holds '{other}'; PCME's tensors are 'img_enc.*' "
                           f"and 'txt_enc.*')")
    state.update({f"criterion.{k}": criterion[k] for k in CRITERION})
    metadata = ckpt.get("metadata") if isinstance(ckpt.get("metadata"), dict) else {}
    meta = {}
    for key, option in (("cur_epoch", EPOCH), ("best_epoch", EPOCH), ("best_score", SCORE)):
        if metadata.get(key) is not None:
            problem = option.problem(metadata[key])
            if problem:
                raise HarnessError(f"{where}: its metadata '{key}' {problem}")
            meta[key] = metadata[key]
    return state, dict(model_options), meta


def options(state: dict, model_options: dict, where: str) -> argparse.Namespace:
    """Their model options with the vocabulary size their embedding has, checked."""
    embedding = state.get("txt_enc.embed.weight")
    if embedding is None or embedding.dim() != 2:
        raise HarnessError(f"{where}: the checkpoint has no word embedding matrix 'txt_enc.embed.weight'")
    known = {k: model_options[k] for k in (*OPTIONS, *PROVENANCE_OPTIONS) if k in model_options and k != "vocab_size"}
    namespace = argparse.Namespace(**known, vocab_size=int(embedding.shape[0]))
    check_option_types(namespace, OPTIONS, where)
    opt = vars(namespace)
    for key in ("img_attention", "txt_attention", "img_probemb", "txt_probemb"):
        if not opt[key]:
            raise HarnessError(f"{where}: trained with {key} false: the project's PCME has PIE-Net and the "
                               f"uncertainty heads on both sides (a deterministic PVSE-style run is not PCME)")
    if opt["n_samples_inference"] < 1:
        raise HarnessError(f"{where}: n_samples_inference {opt['n_samples_inference']}: a run without samples, "
                           f"scored by the dot product of its means; the project's PCME ranks samples")
    if opt["cnn_type"] not in CHANNELS:
        raise HarnessError(f"{where}: cnn_type {opt['cnn_type']!r}: the project's grid backbone is a ResNet "
                           f"({', '.join(CHANNELS)})")
    if opt["embed_dim"] % 2:
        raise HarnessError(f"{where}: embed_dim {opt['embed_dim']} is odd; PCME's caption GRU has embed_dim // 2 "
                           f"units a direction")
    if opt["word_dim"] != embedding.shape[1]:
        raise HarnessError(f"{where}: config model.word_dim {opt['word_dim']}, but the word embedding has "
                           f"{embedding.shape[1]} columns")
    return namespace


def model_config(opt: dict, base: dict) -> dict:
    """The project's ``pcme`` block for their options, from the method's own block (``base``,
    whose sample seed and BatchNorm handling it keeps); evaluation by match probability, as their
    evaluate_recall_coco.py."""
    cfg = {k: copy.deepcopy(v) for k, v in base.items() if k != "lr_scale"}
    cfg.update(kind=KIND, backbone=opt["cnn_type"], grid_scales=["conv5"], embed_dim=opt["embed_dim"],
               n_samples=opt["n_samples_inference"], eval_method="matching_prob")
    cfg["text"] = {**cfg["text"], "word_dim": opt["word_dim"], "hidden_dim": opt["embed_dim"] // 2,
                   "num_layers": 1, "bidirectional": True}
    return cfg


def import_checkpoint(path: str | Path, base_model_config: dict, dataset_cfg: dict, limits: ReaderLimits,
                      text_encoders: dict | None = None, backbones: dict | None = None) -> ReleasedModel:
    """Their checkpoint (a released ``pcme_coco.pth`` or train_coco.py's ``model_last.pth``) as the
    project's model; ``base_model_config``: the method's ``pcme`` block; ``dataset_cfg``: the
    dataset's config, whose image transform must be theirs; ``limits``: the bounds of reading it."""
    where = str(path)
    check_eval_transform(dataset_cfg, EVAL_TRANSFORM, where)
    if base_model_config.get("kind") != KIND:
        raise HarnessError(f"{where}: PCME's checkpoints fill a {KIND} model, not {base_model_config.get('kind')!r}: "
                           f"use a method of kind {KIND}")
    state, model_options, meta = read_checkpoint(path, limits)
    namespace = options(state, model_options, where)
    opt = vars(namespace)
    cfg = model_config(opt, base_model_config)
    image_shape = {"scales": {"conv5": [7, 7, layer_channels(opt["cnn_type"], "conv5")]}}   # 224 px: 7x7 cells
    arch = {opt["cnn_type"]: {"arch": opt["cnn_type"], "weights": "none"}}
    with torch.device("meta"):
        target = build_model(cfg, BuildContext(opt["vocab_size"], image_shape, arch, cnn=True)).state_dict()
    mapped = map_tensors(state, target, RULES, where)
    mapped = {k: mapped[k] for k in target}   # the model's own order
    provenance = {"code": CODE, **meta, "options": plain_options(namespace, PROVENANCE_OPTIONS, where)}
    return ReleasedModel(cfg, mapped, image_shape, opt["vocab_size"], SOURCE_DATASETS["coco"], provenance,
                         runs_cnn=True)


def read_vocabulary(path: str | Path, tokenizer: Tokenizer, limits: ReaderLimits) -> Vocabulary:
    """Their vocabulary pickle (``coco_vocab.pkl``: a plain dict of idx, word2idx, idx2word)."""
    return vocabulary_from_maps(load_pickle(path, (), limits), tokenizer, CODE, str(path), int)


IMPORTER = Importer(CODE, import_checkpoint, read_vocabulary)
