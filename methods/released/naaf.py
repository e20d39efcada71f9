"""NAAF's released checkpoints (Zhang et al., CVPR 2022; github.com/CrossmodalGroup/NAAF, whose
README links two Flickr30K models on Google Drive: one with GloVe words, one without) as the
project's ``naaf`` model.

Their train.py saves ``{'epoch', 'model': [img_enc, txt_enc state dicts], 'best_rsum', 'opt':
argparse.Namespace, 'Eiters'}`` (model.py ``NAAF.state_dict``). The options give the widths
(img_dim, word_dim, embed_size, num_layers), the text encoder (precomp_enc_text_type: ``GloVe``,
``GloveRNNEncoder`` with ``embed.glove.weight``; ``basic``, ``EncoderText`` with ``embed.weight``;
both a bi-GRU ``rnn``) and, since model.py writes the mined thresholds into them during training,
the thresholds: evaluation.py scores with the saved ``opt.thres_safe``. They become the model's
threshold buffers. Fixed in their code, and so here: the bidirectional GRU, the intra-modal
relation at evaluation (5), no weight-normalised image fc.

Vocabularies: a ``basic`` run reads SCAN's JSON (``*_precomp_vocab.json``: word2idx, idx2word,
idx); a GloVe run ``vocab/{f30k,coco}_precomp.json`` (word2idx, char_level, max_len), whose
specials are <pad> <unk> <start> <end>. The project's vocabulary puts <unk> after <end>, so that
file's words are reordered and a GloVe checkpoint's embedding rows with them.
"""
from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch

from methods.data.inputs import region_shape
from methods.data.text import SPECIALS, Vocabulary
from methods.data.tokenizers import Tokenizer
from methods.errors import HarnessError
from methods.models.base import BuildContext, build_model
from methods.models.naaf import STATE
from methods.released.mapping import map_tensors
from methods.released.options import FLAG, LAYERS, NAME, VOCABULARY, WIDTH, Option, optional, plain_options
from methods.released.record import Importer, ReleasedModel, read_train_checkpoint
from methods.released.vocabulary import vocabulary_from_maps
from methods.untrusted.safe_load import ReaderLimits, load_json

CODE = "CrossmodalGroup/NAAF"
SOURCE_DATASETS = {"f30k_precomp": "flickr", "coco_precomp": "coco"}
TEXT_TYPES = ("GloVe", "basic")
PARTS = ("img_enc", "txt_enc")
THRESHOLD = Option(float, 0, 1)          # model.py keeps both thresholds in [0, 1]
STATISTIC = Option(float, -10, 10)       # means and stds of cosines
# the options model.py writes its threshold state into -> the model's buffers
STATE_OPTIONS = dict(zip(("thres", "thres_safe", "mean_pos", "stnd_pos", "mean_neg", "stnd_neg"), STATE))
OPTIONS = {"img_dim": WIDTH, "word_dim": WIDTH, "embed_size": WIDTH, "num_layers": LAYERS, "vocab_size": VOCABULARY,
           "data_name": NAME, "precomp_enc_text_type": NAME, "precomp_enc_type": NAME,
           "lambda_softmax": Option(float, 1e-3, 1e3), "alpha": Option(float, 1e-3, 1e3),
           "thres": THRESHOLD, "thres_safe": THRESHOLD, "mean_pos": STATISTIC, "stnd_pos": STATISTIC,
           "mean_neg": STATISTIC, "stnd_neg": STATISTIC,
           "no_imgnorm": optional(FLAG), "no_txtnorm": optional(FLAG)}
ARCHITECTURE_OPTIONS = ("img_dim", "word_dim", "embed_size", "num_layers", "vocab_size", "data_name",
                        "precomp_enc_text_type", "lambda_softmax", "alpha", *STATE_OPTIONS)
DEFAULT_ONLY = {"no_imgnorm": False, "no_txtnorm": False, "precomp_enc_type": "basic"}
# the GloVe vocabulary's first four words, and the source row of each of the project's first four ids
GLOVE_SPECIALS = ("<pad>", "<unk>", "<start>", "<end>")
GLOVE_ROWS = [GLOVE_SPECIALS.index(word) for word in SPECIALS]


def rules(text_type: str) -> list[tuple[str, str]]:
    """Their state-dict names (prefixed by the part) -> the project's ``naaf`` model's."""
    embedding = r"txt_enc\.embed\.glove\.weight" if text_type == "GloVe" else r"txt_enc\.embed\.weight"
    return [(r"img_enc\.fc\.(weight|bias)", r"fc.\1"),
            (embedding, "text.embed.weight"),
            (r"txt_enc\.rnn\.(\w+)", r"text.gru.\1")]


def read_checkpoint(path: str | Path, limits: ReaderLimits) -> dict:
    """Their checkpoint, loaded safely and checked to be NAAF's (not another code base's)."""
    return read_train_checkpoint(path, "a NAAF", CODE, len(PARTS), OPTIONS, limits,
                                 others="a SCAN, BFAN or SGRAF checkpoint?")


def model_config(opt: argparse.Namespace, base: dict, where: str) -> dict:
    """The project's model block for their options, from the method's own block (``base``)."""
    if opt.precomp_enc_text_type not in TEXT_TYPES:
        raise HarnessError(f"{where}: precomp_enc_text_type {opt.precomp_enc_text_type!r} is not one of {list(TEXT_TYPES)}")
    for key, value in DEFAULT_ONLY.items():
        if getattr(opt, key, value) != value:
            raise HarnessError(f"{where}: trained with {key}={getattr(opt, key)!r}, which the project's NAAF does "
                               f"not implement (only {key}={value!r})")
    cfg = copy.deepcopy(base)
    cfg.update(embed_dim=opt.embed_size, lambda_softmax=float(opt.lambda_softmax), alpha=float(opt.alpha),
               intra_propagation=True, intra_lambda=5.0)
    cfg["text"] = {**cfg["text"], "word_dim": opt.word_dim, "hidden_dim": opt.embed_size,
                   "num_layers": opt.num_layers, "bidirectional": True}
    return cfg


def import_checkpoint(path: str | Path, base_model_config: dict, dataset_cfg: dict,
                      limits: ReaderLimits, text_encoders: dict | None = None,
                      backbones: dict | None = None) -> ReleasedModel:
    """Their checkpoint as the project's model (``base_model_config``: the method's model block;
    ``dataset_cfg``: the dataset's config, whose precomputed regions per image, 36 in their
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
    weights = {k: v for k, v in model.state_dict().items() if k not in STATE}
    source = {f"{part}.{k}": v for part, state in zip(PARTS, ckpt["model"]) for k, v in state.items()}
    state = map_tensors(source, weights, rules(opt.precomp_enc_text_type), where)
    if opt.precomp_enc_text_type == "GloVe":   # their <unk> row after <end>, as the project's ids
        rows = torch.arange(opt.vocab_size)
        rows[:len(GLOVE_ROWS)] = torch.tensor(GLOVE_ROWS)
        state["text.embed.weight"] = state["text.embed.weight"][rows]
    for option, buffer in STATE_OPTIONS.items():
        state[buffer] = torch.tensor(float(getattr(opt, option)), dtype=torch.float64)
    provenance = {"code": CODE, "epoch": ckpt.get("epoch"), "best_rsum": ckpt.get("best_rsum"),
                  "options": plain_options(opt, ARCHITECTURE_OPTIONS, where)}
    return ReleasedModel(cfg, state, image_shape, opt.vocab_size, SOURCE_DATASETS[opt.data_name], provenance)


def read_glove_vocabulary(state, tokenizer: Tokenizer, where: str) -> Vocabulary:
    """A GloVe run's ``{word2idx, char_level: false, max_len: null}`` as the project's ``Vocabulary``,
    its words in their id order but <unk> moved after <end>."""
    word2idx = state["word2idx"]
    if state.get("char_level") is not False or state.get("max_len") is not None:
        raise HarnessError(f"{where}: refused: char_level {state.get('char_level')!r} and max_len "
                           f"{state.get('max_len')!r}; their data.py reads words, so the file says false and null")
    if not isinstance(word2idx, dict) or not all(type(k) is str and type(v) is int for k, v in word2idx.items()):
        raise HarnessError(f"{where}: 'word2idx' must map words to ids")
    size = len(word2idx)
    words = sorted(word2idx, key=word2idx.get)
    if sorted(word2idx.values()) != list(range(size)):
        raise HarnessError(f"{where}: word2idx's ids are not 0-{size - 1}, each once")
    if tuple(words[:len(GLOVE_SPECIALS)]) != GLOVE_SPECIALS:
        raise HarnessError(f"{where}: the vocabulary starts with {words[:len(GLOVE_SPECIALS)]}, not "
                           f"{list(GLOVE_SPECIALS)}, as their GloVe runs' vocabularies do")
    ordered = [words[i] for i in GLOVE_ROWS] + words[len(GLOVE_SPECIALS):]
    maps = {"word2idx": {w: i for i, w in enumerate(ordered)}, "idx2word": {str(i): w for i, w in enumerate(ordered)},
            "idx": size}
    return vocabulary_from_maps(maps, tokenizer, CODE, where, str)


def read_vocabulary(path: str | Path, tokenizer: Tokenizer, limits: ReaderLimits) -> Vocabulary:
    """Their vocabulary JSON: SCAN's layout (a ``basic`` run) or the GloVe runs' (``read_glove_vocabulary``)."""
    state = load_json(path, limits)
    if isinstance(state, dict) and set(state) == {"word2idx", "char_level", "max_len"}:
        return read_glove_vocabulary(state, tokenizer, str(path))
    return vocabulary_from_maps(state, tokenizer, CODE, str(path), str)


IMPORTER = Importer(CODE, import_checkpoint, read_vocabulary)
