"""SGRAF's released checkpoints (Diao, Zhang, Ma, Lu, AAAI 2021; github.com/Paranioar/SGRAF, whose
README links SGR and SAF models for Flickr30K and MS-COCO) as the project's ``sgraf`` model.

Their train.py saves ``{'epoch', 'model': [img_enc, txt_enc, sim_enc state dicts], 'best_rsum',
'opt': argparse.Namespace, 'Eiters'}`` (model.py ``SGRAF.state_dict``); the options say the
widths (img_dim, word_dim, embed_size, sim_dim, num_layers, bi_gru), the head (module_name SGR
or SAF) and SGR's steps. Fixed in their code, and so in the model config built here: the
similarity smooth 9 (``SCAN_attention(..., smooth=9.0)``), both node kinds, text-to-visual
attention, vector similarities, dropout 0.4. Their vocabulary is a JSON of word2idx, idx2word and
idx (vocab.py ``serialize_vocab``), read as words and ids only (``methods.released.vocabulary``).
"""
from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch

from methods.errors import HarnessError
from methods.models.base import BuildContext, build_model
from methods.data.inputs import region_shape
from methods.data.text import Vocabulary
from methods.data.tokenizers import Tokenizer
from methods.released.mapping import Rules, map_tensors
from methods.released.options import FLAG, LAYERS, NAME, VOCABULARY, WIDTH, Option, optional, plain_options
from methods.released.record import Importer, ReleasedModel, read_train_checkpoint
from methods.released.vocabulary import read_vocabulary_json
from methods.untrusted.safe_load import ReaderLimits

SOURCE_DATASETS = {"f30k_precomp": "flickr", "coco_precomp": "coco"}
HEADS = {"SGR": "sgr", "SAF": "saf"}
PARTS = ("img_enc", "txt_enc", "sim_enc")
# options the project's SGRAF implements only at their default: a checkpoint trained otherwise is refused
DEFAULT_ONLY = {"no_imgnorm": False, "no_txtnorm": False}
ARCHITECTURE_OPTIONS = ("img_dim", "word_dim", "embed_size", "sim_dim", "num_layers", "bi_gru", "module_name",
                        "sgr_step", "vocab_size", "data_name")
# their types and the ranges the importer accepts (methods.released.options); SGR's 0-4 steps in the paper
OPTIONS = {"img_dim": WIDTH, "word_dim": WIDTH, "embed_size": WIDTH, "sim_dim": WIDTH, "num_layers": LAYERS,
           "bi_gru": FLAG, "module_name": NAME, "sgr_step": Option(int, 0, 16), "vocab_size": VOCABULARY,
           "data_name": NAME, "no_imgnorm": optional(FLAG), "no_txtnorm": optional(FLAG)}


def rules(head: str) -> Rules:
    """Their state-dict names (prefixed by the part) -> the project's ``sgraf`` model's."""
    sa = [(rf"sim_enc\.{src}_global_w\.embedding_local\.(\d)\.(\w+)", rf"{dst}_sa.local.\1.\2")
          for src, dst in (("v", "visual"), ("t", "text"))]
    sa += [(rf"sim_enc\.{src}_global_w\.embedding_global\.(\d)\.(\w+)", rf"{dst}_sa.mean.\1.\2")
           for src, dst in (("v", "visual"), ("t", "text"))]
    sa += [(rf"sim_enc\.{src}_global_w\.embedding_common\.0\.(\w+)", rf"{dst}_sa.weight.\1")
           for src, dst in (("v", "visual"), ("t", "text"))]
    return [
        (r"img_enc\.fc\.(weight|bias)", r"fc.\1"),
        (r"txt_enc\.embed\.weight", "text.embed.weight"),
        (r"txt_enc\.cap_rnn\.(\w+)", r"text.gru.\1"),
        *sa,
        (r"sim_enc\.sim_tranloc_w\.(weight|bias)", r"local_sim.proj.\1"),
        (r"sim_enc\.sim_tranglo_w\.(weight|bias)", r"global_sim.proj.\1"),
        (r"sim_enc\.sim_eval_w\.(weight|bias)", rf"heads.{head}.score.\1"),
        (r"sim_enc\.SGR_module\.(\d+)\.graph_query_w\.(weight|bias)", r"heads.sgr.steps.\1.query.\2"),
        (r"sim_enc\.SGR_module\.(\d+)\.graph_key_w\.(weight|bias)", r"heads.sgr.steps.\1.key.\2"),
        (r"sim_enc\.SGR_module\.(\d+)\.sim_graph_w\.(weight|bias)", r"heads.sgr.steps.\1.update.\2"),
        (r"sim_enc\.SAF_module\.attn_sim_w\.(weight|bias)", r"heads.saf.attention.\1"),
        (r"sim_enc\.SAF_module\.bn\.(\w+)", r"heads.saf.bn.\1"),
    ]


# SAF's BatchNorm1d(1) counts its steps; the project's (a masked BatchNorm) does not: the count is
# read only with momentum=None, and SAF's momentum is 0.1, so no score depends on it
IGNORED = [(r"sim_enc\.SAF_module\.bn\.num_batches_tracked", "a step count that momentum 0.1 never reads")]


def read_checkpoint(path: str | Path, limits: ReaderLimits) -> dict:
    """Their checkpoint, loaded safely and checked to be SGRAF's (not another code base's)."""
    return read_train_checkpoint(path, "an SGRAF", "Paranioar/SGRAF", len(PARTS), OPTIONS, limits,
                                 others="a VSE++, VSRN or SCAN checkpoint?")


def model_config(opt: argparse.Namespace, base: dict, where: str) -> dict:
    """The project's model block for their options, from the method's own block (``base``)."""
    if opt.module_name not in HEADS:
        raise HarnessError(f"{where}: module_name {opt.module_name!r} is not one of SGRAF's {sorted(HEADS)}")
    for key, value in DEFAULT_ONLY.items():
        if getattr(opt, key, value) != value:
            raise HarnessError(f"{where}: trained with {key}={getattr(opt, key)!r}, which the project's SGRAF does "
                               f"not implement (only {key}={value!r})")
    cfg = copy.deepcopy(base)
    cfg.update(embed_dim=opt.embed_size, sim_dim=opt.sim_dim, heads=[HEADS[opt.module_name]],
               nodes={"global": True, "local": True}, attention={"direction": "t2i", "smooth": 9.0},
               similarity="vector", sa_dropout=0.4)
    if opt.module_name == "SGR":
        cfg["sgr_steps"] = opt.sgr_step
    cfg["text"] = {**cfg["text"], "word_dim": opt.word_dim, "hidden_dim": opt.embed_size,
                   "num_layers": opt.num_layers, "bidirectional": bool(opt.bi_gru), "embed_dropout": 0.4}
    return cfg


def import_checkpoint(path: str | Path, base_model_config: dict, dataset_cfg: dict,
                      limits: ReaderLimits, text_encoders: dict | None = None,
                      backbones: dict | None = None) -> ReleasedModel:
    """Their ``model_best.pth.tar`` as the project's model (``base_model_config``: the method's model
    block; ``dataset_cfg``: the dataset's config, whose precomputed regions per image, 36 in their
    features, the model is built for; ``limits``: the bounds of reading the file)."""
    where = str(path)
    n_regions, _ = region_shape(dataset_cfg)
    ckpt = read_checkpoint(path, limits)
    opt = ckpt["opt"]
    if opt.data_name not in SOURCE_DATASETS:
        raise HarnessError(f"{where}: data_name {opt.data_name!r} is not one of {sorted(SOURCE_DATASETS)}")
    cfg = model_config(opt, base_model_config, where)
    image_shape = {"dim": opt.img_dim, "regions": n_regions}
    with torch.device("meta"):   # names, shapes and dtypes only: no weights allocated for the file's widths
        model = build_model(cfg, BuildContext(opt.vocab_size, image_shape, {}, cnn=False))
    source = {f"{part}.{k}": v for part, state in zip(PARTS, ckpt["model"]) for k, v in state.items()}
    state = map_tensors(source, model.state_dict(), rules(HEADS[opt.module_name]), where, IGNORED)
    provenance = {"code": "Paranioar/SGRAF", "epoch": ckpt.get("epoch"), "best_rsum": ckpt.get("best_rsum"),
                  "options": plain_options(opt, ARCHITECTURE_OPTIONS, where)}
    return ReleasedModel(cfg, state, image_shape, opt.vocab_size, SOURCE_DATASETS[opt.data_name], provenance)


def read_vocabulary(path: str | Path, tokenizer: Tokenizer, limits: ReaderLimits) -> Vocabulary:
    """Their vocabulary JSON (vocab.py ``serialize_vocab``: word2idx, idx2word, idx, nothing else)."""
    return read_vocabulary_json(path, tokenizer, "Paranioar/SGRAF", limits)


IMPORTER = Importer("Paranioar/SGRAF", import_checkpoint, read_vocabulary)
