"""VSE-infinity's released checkpoints (Chen, Deng, Wang, Hong, CVPR 2021; github.com/woodfrog/vse_infty,
whose README links its models per dataset, image input and text encoder on huggingface.co/cccjc/vse-infty)
as the project's ``vse_infinity`` model: the BUTD-region runs with a bi-GRU (branch bigru:
coco_butd_region_bigru, f30k_butd_region_bigru).

Their train.py saves ``{'epoch', 'model': [img_enc, txt_enc state dicts], 'best_rsum', 'opt':
argparse.Namespace, 'Eiters'}`` (lib/vse.py ``VSEModel.state_dict``). The options say the widths
(img_dim, word_dim, embed_size, num_layers), the image input (precomp_enc_type: ``basic`` for
region features) and the vocabulary size, which train.py sets after adding ``<mask>`` to the
vocabulary (one id past its words, as the project's caption augmentation adds it). Fixed in their
code, and so in the model config built here: GPO(32, 32) on both sides, a bi-GRU text encoder, the
fc + two-layer MLP residual on the regions, l2-normalised embeddings scored by their dot product.
Their vocabulary is SCAN's JSON (word2idx, idx2word, idx: vocab.py ``serialize_vocab``), read as
words and ids only (``methods.released.vocabulary``).
"""
from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch

from methods.data.inputs import region_shape
from methods.data.text import Vocabulary
from methods.data.tokenizers import Tokenizer
from methods.errors import HarnessError
from methods.models.base import BuildContext, build_model
from methods.released.mapping import Rules, map_tensors
from methods.released.options import FLAG, LAYERS, NAME, VOCABULARY, WIDTH, Option, optional, plain_options
from methods.released.record import Importer, ReleasedModel, read_train_checkpoint
from methods.released.vocabulary import read_vocabulary_json
from methods.untrusted.safe_load import ReaderLimits

CODE = "woodfrog/vse_infty"
SOURCE_DATASETS = {"f30k_precomp": "flickr", "coco_precomp": "coco", "f30k": "flickr", "coco": "coco"}
PARTS = ("img_enc", "txt_enc")
# options the project's VSE-infinity implements only at their default: a checkpoint trained otherwise is refused
DEFAULT_ONLY = {"no_imgnorm": False, "no_txtnorm": False, "precomp_enc_type": "basic"}
ARCHITECTURE_OPTIONS = ("data_name", "img_dim", "word_dim", "embed_size", "num_layers", "vocab_size",
                        "precomp_enc_type", "vse_mean_warmup_epochs")
# their types and the ranges the importer accepts (methods.released.options); precomp_enc_type and
# vse_mean_warmup_epochs are VSE-infinity's own (VSE++, VSRN, SCAN and SGRAF have neither)
OPTIONS = {"data_name": NAME, "img_dim": WIDTH, "word_dim": WIDTH, "embed_size": WIDTH, "num_layers": LAYERS,
           "vocab_size": VOCABULARY, "precomp_enc_type": NAME, "vse_mean_warmup_epochs": Option(int, 0, 1000),
           "no_imgnorm": optional(FLAG), "no_txtnorm": optional(FLAG)}
MASK_TOKENS = 1   # train.py: vocab.add_word('<mask>') after loading the vocabulary, before vocab_size = len(vocab)
GPO_TENSORS = r"(gru\.\w+|linear\.weight)"
RULES: Rules = [
    (r"img_enc\.fc\.(weight|bias)", r"region.fc.\1"),
    (r"img_enc\.mlp\.layers\.0\.(weight|bias)", r"region.mlp_in.\1"),
    (r"img_enc\.mlp\.bns\.0\.(\w+)", r"region.bn.\1"),
    (r"img_enc\.mlp\.layers\.1\.(weight|bias)", r"region.mlp_out.\1"),
    (rf"img_enc\.gpool\.{GPO_TENSORS}", r"image_pool.\1"),
    (r"txt_enc\.embed\.weight", "text.embed.weight"),
    (r"txt_enc\.rnn\.(\w+)", r"text.gru.\1"),
    (rf"txt_enc\.gpool\.{GPO_TENSORS}", r"text_pool.\1"),
]
# lib/modules/mlp.py MLP builds a BatchNorm per layer and applies all but the last (forward: bn only
# for i < num_layers - 1), so no score depends on the last one
IGNORED = [(r"img_enc\.mlp\.bns\.1\.\w+", "the MLP's last BatchNorm, built and never applied")]


def read_checkpoint(path: str | Path, limits: ReaderLimits) -> dict:
    """Their checkpoint, loaded safely and checked to be VSE-infinity's (not another code base's)."""
    return read_train_checkpoint(path, "a VSE-infinity", CODE, len(PARTS), OPTIONS, limits,
                                 others="a VSE++, VSRN, SCAN or SGRAF checkpoint?")


def model_config(opt: argparse.Namespace, text_state: dict, base: dict, where: str) -> dict:
    """The project's model block for their options, from the method's own block (``base``)."""
    if opt.data_name not in SOURCE_DATASETS:
        raise HarnessError(f"{where}: data_name {opt.data_name!r} is not one of {sorted(SOURCE_DATASETS)} "
                           f"(the datasets VSE-infinity released)")
    if any(key.startswith("bert.") for key in text_state):
        raise HarnessError(f"{where}: a BERT text encoder ({CODE} branch master); the project's VSE-infinity "
                           f"imports the bi-GRU runs (branch bigru)")
    for key, value in DEFAULT_ONLY.items():
        if getattr(opt, key, value) != value:
            raise HarnessError(f"{where}: trained with {key}={getattr(opt, key)!r}, which the project's "
                               f"VSE-infinity does not import (only {key}={value!r})")
    cfg = copy.deepcopy(base)
    cfg.update(embed_dim=opt.embed_size, pooling="gpo")
    cfg["text"] = {**cfg["text"], "word_dim": opt.word_dim, "hidden_dim": opt.embed_size,
                   "num_layers": opt.num_layers, "bidirectional": True}
    return cfg


def import_checkpoint(path: str | Path, base_model_config: dict, dataset_cfg: dict,
                      limits: ReaderLimits) -> ReleasedModel:
    """Their ``model_best.pth`` as the project's model (``base_model_config``: the method's model
    block; ``dataset_cfg``: the dataset's config, whose regions per image the image shape records:
    GPO pools any count; ``limits``: the bounds of reading the file)."""
    where = str(path)
    n_regions, _ = region_shape(dataset_cfg)
    ckpt = read_checkpoint(path, limits)
    opt = ckpt["opt"]
    cfg = model_config(opt, ckpt["model"][1], base_model_config, where)
    image_shape = {"dim": opt.img_dim, "regions": n_regions}
    with torch.device("meta"):   # names, shapes and dtypes only: no weights allocated for the file's widths
        model = build_model(cfg, BuildContext(opt.vocab_size, image_shape, {}, cnn=False))
    source = {f"{part}.{k}": v for part, state in zip(PARTS, ckpt["model"]) for k, v in state.items()}
    state = map_tensors(source, model.state_dict(), RULES, where, IGNORED)
    provenance = {"code": CODE, "epoch": ckpt.get("epoch"), "best_rsum": ckpt.get("best_rsum"),
                  "options": plain_options(opt, ARCHITECTURE_OPTIONS, where)}
    return ReleasedModel(cfg, state, image_shape, opt.vocab_size, SOURCE_DATASETS[opt.data_name], provenance,
                         extra_tokens=MASK_TOKENS)


def read_vocabulary(path: str | Path, tokenizer: Tokenizer, limits: ReaderLimits) -> Vocabulary:
    """Their vocabulary JSON (SCAN's layout: word2idx, idx2word, idx), read as words and ids only."""
    return read_vocabulary_json(path, tokenizer, "SCAN's vocab.py (woodfrog/vse_infty lib/vocab.py)", limits)


IMPORTER = Importer(CODE, import_checkpoint, read_vocabulary)
