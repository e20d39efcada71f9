"""PVSE's released checkpoints (Song and Soleymani, "Polysemous Visual-Semantic Embedding for
Cross-Modal Retrieval", CVPR 2019; github.com/yalesong/pvse, whose README links
``coco_pvse_k1.pth`` and ``coco_pvse.pth`` with the COCO vocabulary ``coco_vocab.pkl`` of its
data/prepare_coco_dataset.sh) as the project's ``set_embedding_grid`` model.

Their model.py ``PVSE``: ``EncoderImage`` runs torchvision's ResNet (avgpool and fc removed) to its
7x7 x 2048 cells; the global feature is avgpool -> fc (2048 -> D) -> dropout, and PIE-Net attends
over the *raw* cells (``PIENet(K, 2048, D, 1024)``): LayerNorm(global + sigmoid(fc(attention-pooled
cells))), l2. ``EncoderText``: word embeddings -> a bidirectional GRU of D/2 units whose two
directions are concatenated, PIE-Net over the word embeddings (d_h = word_dim/2, padded words
masked), l2. Scores: the max cosine over the K x K element pairs (eval.py i2t / t2i,
``np.tensordot(...).max``; a cosine for K = 1). The project's model takes them through four
switches of its model block (``methods.models.set_embedding``): ``image_projection: {mlp: false,
global_pool: mean}``, ``set_module: {kind: pie, image_input: raw}`` and ``text_global``.

``text_global``: their README evaluates every released model with ``--legacy`` ("to reproduce
results in [the] paper"): the text feature is the GRU's padded output at the last word, i.e. the
forward final state and the backward direction after the last word alone
(``concatenate_last_outputs``); without it, the two final states (``concatenate_final``, the code
since bf52321, 2020-04, which the README's training command runs). A train.py checkpoint says
which by its ``args.legacy``; one saved before that option existed (e58b9ef, 2020-04-23) is taken as
legacy, the code it was trained with (bar bf52321's three weeks).

Files: train.py saves ``{'args': Namespace, 'epoch', 'best_score', 'model': PVSE.state_dict()}``;
eval.py loads a released file with ``model.load_state_dict(torch.load(ckpt))``, so a released
``.pth`` is the state dict itself, with no options: it is read as the README's COCO command builds
the model (option.py defaults, ``--data_name coco --img_attention --txt_attention --legacy``; K from
the PIE-Net's heads, widths from the tensors, the CNN ``resnet152``, option.py's default, which the
commands do not change). Accepted as well: the names of a model saved inside ``nn.DataParallel``
(``module.``) and eval.py ``convert_old_state_dict``'s older layout (a list of the two encoders'
state dicts, PIE-Net named ``our_model``).

Refused by name: video models (``EncoderVideo``, ``--max_video_length`` > 1, the MRW and TGIF
runs; not datasets of the project), runs without PIE-Net on both sides (``--img_attention`` /
``--txt_attention`` off), order embeddings (``--order``), CNNs other than the project's ResNets,
and DivE's checkpoints (kdwonn/DivE saves the same layout; its options have ``img_num_embeds``).
Their vocabulary is a pickle of vocab.py's ``Vocabulary`` (``__main__.Vocabulary``, pickled by
Python 3 with ``pickle.HIGHEST_PROTOCOL`` as the README's ``python3`` runs it), read without running
code (``methods.untrusted.safe_load``).
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
from methods.released.options import (COUNT, FLAG, MARGIN, NAME, VOCABULARY, WIDTH, Option, check_options as
                                      check_option_types, check_record, optional, plain_options)
from methods.released.record import Importer, ReleasedModel, is_state_dict
from methods.released.vocabulary import check_eval_transform, read_pickled_vocabulary
from methods.untrusted.safe_load import ReaderLimits, load_checkpoint

CODE = "yalesong/pvse"
EVAL_TRANSFORM = (256, 224)   # data.py: Resize(256), CenterCrop(crop_size), crop_size 224 (option.py)
KIND = "set_embedding_grid"
CHECKPOINT_GLOBALS = ("argparse.Namespace",)   # train.py's args; nothing else but tensors and plain data
SOURCE_DATASETS = {"coco": "coco"}
VIDEO_DATASETS = ("mrw", "tgif")
# option.py's defaults where a released state dict says nothing, with the README's COCO command
README_COCO_OPTIONS = dict(data_name="coco", cnn_type="resnet152", max_video_length=1, img_attention=True,
                           txt_attention=True, legacy=True, order=False, dropout=0.0, img_finetune=False,
                           txt_finetune=False, wemb_type=None, margin=0.1, max_violation=False)
# the options of DivE's train.py (the same checkpoint layout as PVSE's): such a file is not PVSE's
DIVE_OPTIONS = ("img_num_embeds", "txt_num_embeds", "arch", "spm_depth")
PROVENANCE_OPTIONS = ("data_name", "cnn_type", "num_embeds", "embed_size", "word_dim", "img_attention",
                      "txt_attention", "legacy", "img_finetune", "txt_finetune", "wemb_type", "margin",
                      "max_violation", "mmd_weight", "div_weight", "dropout", "crop_size", "batch_size", "lr")
PARTS = ("img_enc", "txt_enc")
# the options the importer reads, their types and the ranges it accepts (methods.released.options):
# from train.py's args, or README_COCO_OPTIONS with the widths of a released state dict's tensors
OPTIONS = {"data_name": NAME, "cnn_type": NAME, "max_video_length": Option(int, 1, 10_000), "img_attention": FLAG,
           "txt_attention": FLAG, "legacy": FLAG, "order": FLAG, "dropout": Option(float, 0, 1),
           "num_embeds": Option(int, 1, 64), "embed_size": WIDTH, "word_dim": WIDTH, "vocab_size": VOCABULARY,
           "img_finetune": optional(FLAG), "txt_finetune": optional(FLAG), "margin": optional(MARGIN),
           "max_violation": optional(FLAG), "wemb_type": Option(str, required=False, nullable=True),
           "crop_size": optional(WIDTH), "batch_size": optional(COUNT)}

CNN = r"img_enc\.cnn\."
RULES = [
    *torchvision_resnet_rules(CNN),
    (r"img_enc\.fc\.(weight|bias)", r"region.fc.\1"),
    *pie_net_rules(r"img_enc\.pie_net\.", "image_set"),
    (r"txt_enc\.embed\.weight", "text.embed.weight"),
    (r"txt_enc\.rnn\.(\w+)", r"text.gru.\1"),
    *pie_net_rules(r"txt_enc\.pie_net\.", "text_set"),
]
HEADS = "img_enc.pie_net.attention.w_2.weight"   # (K, 1024): PIE-Net's K attention heads


def _is_state(value) -> bool:
    return bool(value) and is_state_dict(value)


def read_checkpoint(path: str | Path, limits: ReaderLimits) -> tuple[dict, argparse.Namespace | None, dict]:
    """(PVSE's state dict under their model's names, train.py's args or None, what the file was)."""
    where = str(path)
    ckpt = load_checkpoint(path, CHECKPOINT_GLOBALS, limits)
    if isinstance(ckpt, dict) and "model" in ckpt and ("args" in ckpt or "opt" in ckpt):
        args = ckpt.get("args")
        if not isinstance(args, argparse.Namespace) or not _is_state(ckpt["model"]):
            raise HarnessError(f"{where}: not a PVSE checkpoint ({'an opt entry' if 'opt' in ckpt else 'args'} "
                               f"and a 'model' of {type(ckpt['model']).__name__}; {CODE}'s train.py saves 'args' "
                               f"and the model's state dict: a VSE++, VSRN, SCAN or SGRAF checkpoint?)")
        dive = [k for k in DIVE_OPTIONS if hasattr(args, k)]
        if dive or not hasattr(args, "num_embeds"):
            what = f"its options have {', '.join(dive)}" if dive else "its options have no num_embeds"
            raise HarnessError(f"{where}: not a PVSE checkpoint ({what}: a kdwonn/DivE checkpoint? DivE saves "
                               f"PVSE's layout; the project imports no DivE files)")
        check_record(ckpt, where)
        state, layout = ckpt["model"], "train.py checkpoint"
        meta = {"epoch": ckpt.get("epoch"), "best_score": ckpt.get("best_score")}
    elif _is_state(ckpt):
        args, state, layout, meta = None, ckpt, "state dict (as eval.py loads it)", {}
    elif isinstance(ckpt, (list, tuple)) and len(ckpt) == len(PARTS) and all(_is_state(p) for p in ckpt):
        # eval.py convert_old_state_dict: 'module.' dropped, 'our_model' is the PIE-Net
        args, layout, meta = None, "two encoder state dicts (eval.py convert_old_state_dict)", {}
        state = {f"{part}.{k.replace('module.', '').replace('our_model', 'pie_net')}": v
                 for part, sd in zip(PARTS, ckpt) for k, v in sd.items()}
    else:
        raise HarnessError(f"{where}: not a PVSE checkpoint (expected {CODE}'s model state dict, as eval.py "
                           f"loads a released .pth, or train.py's {{'args', 'epoch', 'best_score', 'model'}})")
    state = {k[len("module."):] if k.startswith("module.") else k: v for k, v in state.items()}   # DataParallel
    other = next((k for k in state if not k.startswith(tuple(f"{p}." for p in PARTS))), None)
    if other is not None:
        raise HarnessError(f"{where}: not a PVSE checkpoint (it holds '{other}'; PVSE's tensors are "
                           f"'img_enc.*' and 'txt_enc.*')")
    return state, args, {"layout": layout, **meta}


def options(state: dict, args: argparse.Namespace | None, where: str) -> argparse.Namespace:
    """Their options: train.py's args, or, for a released state dict, the README's COCO command
    with the widths its tensors have."""
    if any(k.startswith("img_enc.rnn.") for k in state):
        raise HarnessError(f"{where}: a video model (EncoderVideo: a GRU over frames, --max_video_length > 1; "
                           f"the MRW and TGIF runs): the project has no video datasets; import a COCO run")
    opt = argparse.Namespace(**README_COCO_OPTIONS)
    if args is not None:
        vars(opt).update(vars(args))
        opt.legacy = getattr(args, "legacy", True)   # the option exists since e58b9ef; older runs: legacy (module doc)
    else:
        img_attention = HEADS in state
        txt_attention = "txt_enc.pie_net.attention.w_2.weight" in state
        opt.img_attention, opt.txt_attention = img_attention, txt_attention
        opt.num_embeds = state[HEADS].shape[0] if img_attention else 1
    for key, tensor in (("embed_size", "img_enc.fc.weight"), ("word_dim", "txt_enc.embed.weight")):
        if tensor not in state:
            raise HarnessError(f"{where}: the checkpoint has no '{tensor}' (a PVSE model always has it)")
    embedding, fc = state["txt_enc.embed.weight"], state["img_enc.fc.weight"]
    if embedding.dim() != 2 or fc.dim() != 2:
        raise HarnessError(f"{where}: 'txt_enc.embed.weight' and 'img_enc.fc.weight' must be matrices, not of "
                           f"shapes {tuple(embedding.shape)} and {tuple(fc.shape)}")
    opt.vocab_size, word_dim = embedding.shape
    if args is None:
        opt.embed_size, opt.word_dim = fc.shape[0], word_dim
    check_option_types(opt, OPTIONS, where)
    return opt


def check_options(opt: argparse.Namespace, where: str) -> None:
    """What the project's set model can be: refused by name otherwise."""
    if opt.data_name in VIDEO_DATASETS or getattr(opt, "max_video_length", 1) > 1:
        raise HarnessError(f"{where}: data_name {opt.data_name!r}, max_video_length {opt.max_video_length}: a video "
                           f"model (EncoderVideo); the project has no video datasets (import a COCO run)")
    if opt.data_name not in SOURCE_DATASETS:
        raise HarnessError(f"{where}: data_name {opt.data_name!r} is not one of {sorted(SOURCE_DATASETS)}")
    if opt.cnn_type not in CHANNELS:
        raise HarnessError(f"{where}: cnn_type {opt.cnn_type!r}: the project's grid backbone is a ResNet "
                           f"({', '.join(CHANNELS)})")
    for key in ("img_attention", "txt_attention"):
        if not getattr(opt, key):
            raise HarnessError(f"{where}: trained without --{key}: the project's set model has PIE-Net on both "
                               f"sides (PVSE's --num_embeds K needs both; a run without is VSE++ with "
                               f"mean-pooled cells, not built here)")
    if getattr(opt, "order", False):
        raise HarnessError(f"{where}: trained with --order (order embeddings: absolute embeddings and the order "
                           f"violation score), which the project's set model does not implement")
    if opt.embed_size % 2:
        raise HarnessError(f"{where}: embed_size {opt.embed_size} is odd; PVSE's text GRU has embed_size // 2 "
                           f"units a direction")


def model_config(opt: argparse.Namespace, base: dict) -> dict:
    """The project's ``set_embedding_grid`` block for their options, from the method's own block
    (``base``); its training-only keys (learning-rate scales) are not PVSE's and are dropped."""
    cfg = {k: copy.deepcopy(v) for k, v in base.items() if k != "lr_scale"}
    cfg.update(kind=KIND, backbone=opt.cnn_type, grid_scales=["conv5"], embed_dim=opt.embed_size,
               set_size=opt.num_embeds, dropout=opt.dropout,
               set_module={"kind": "pie", "image_input": "raw"},       # PIENet(K, cnn_dim, D, cnn_dim // 2)
               similarity={"kind": "mil"},                             # eval.py: max over the K x K cosines
               image_projection={"init": "pytorch", "global_pass": "shared", "mlp": False, "global_pool": "mean"},
               text_global="concatenate_last_outputs" if opt.legacy else "concatenate_final")
    cfg["text"] = {**cfg["text"], "word_dim": opt.word_dim, "hidden_dim": opt.embed_size // 2, "num_layers": 1,
                   "bidirectional": True, "embed_dropout": opt.dropout}
    return cfg


def target_state(cfg: dict, opt: argparse.Namespace, image_shape: dict) -> dict[str, torch.Tensor]:
    """The project model's names, shapes and dtypes, built on the meta device."""
    backbones = {opt.cnn_type: {"arch": opt.cnn_type, "weights": "none"}}
    with torch.device("meta"):
        model = build_model(cfg, BuildContext(opt.vocab_size, image_shape, backbones, cnn=True))
    return model.state_dict()


def import_checkpoint(path: str | Path, base_model_config: dict, dataset_cfg: dict,
                      limits: ReaderLimits, text_encoders: dict | None = None,
                      backbones: dict | None = None) -> ReleasedModel:
    """Their checkpoint (a released ``coco_pvse*.pth`` or train.py's ``model_best.pth.tar``) as the
    project's model; ``base_model_config``: the method's ``set_embedding_grid`` block (another kind,
    e.g. the BUTD ``set_embedding``, is refused); ``dataset_cfg``: the dataset's config, whose image
    transform must be theirs; ``limits``: the bounds of reading the file."""
    where = str(path)
    check_eval_transform(dataset_cfg, EVAL_TRANSFORM, where)
    if base_model_config.get("kind") != KIND:
        raise HarnessError(f"{where}: PVSE's checkpoints fill a {KIND} model (ResNet cells), not "
                           f"{base_model_config.get('kind')!r}: use a method of kind {KIND}")
    state, args, meta = read_checkpoint(path, limits)
    opt = options(state, args, where)
    check_options(opt, where)
    cfg = model_config(opt, base_model_config)
    image_shape = {"scales": {"conv5": [7, 7, layer_channels(opt.cnn_type, "conv5")]}}   # 224 px: EncoderImage's 7x7
    target = target_state(cfg, opt, image_shape)
    mapped = map_tensors(state, target, RULES, where)
    mapped = {k: mapped[k] for k in target}   # the model's own order
    provenance = {"code": CODE, **meta,
                  "options": plain_options(opt, PROVENANCE_OPTIONS, where)}
    return ReleasedModel(cfg, mapped, image_shape, opt.vocab_size, SOURCE_DATASETS[opt.data_name], provenance,
                         runs_cnn=True)


def read_vocabulary(path: str | Path, tokenizer: Tokenizer, limits: ReaderLimits) -> Vocabulary:
    """Their vocabulary pickle (``coco_vocab.pkl`` of data/prepare_coco_dataset.sh)."""
    return read_pickled_vocabulary(path, tokenizer, CODE, limits)


IMPORTER = Importer(CODE, import_checkpoint, read_vocabulary)
