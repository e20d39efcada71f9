"""VSE-infinity's released checkpoints (Chen, Deng, Wang, Hong, CVPR 2021; github.com/woodfrog/vse_infty,
whose README links its models per dataset, image input and text encoder on huggingface.co/cccjc/vse-infty)
as the project's ``vse_infinity`` model: the BUTD-region runs with a bi-GRU (branch bigru:
coco_butd_region_bigru, f30k_butd_region_bigru) and with BERT (branch master:
coco_butd_region_bert, f30k_butd_region_bert). Its grid runs are ``methods.released.vse_infinity_grid``.

Their train.py saves ``{'epoch', 'model': [img_enc, txt_enc state dicts], 'best_rsum', 'opt':
argparse.Namespace, 'Eiters'}`` (lib/vse.py ``VSEModel.state_dict``). The options say the widths
(img_dim, word_dim, embed_size, num_layers), the image input (precomp_enc_type: ``basic`` for
region features) and the vocabulary size, which train.py sets after adding ``<mask>`` to the
vocabulary (one id past its words, as the project's caption augmentation adds it); on master,
the size of bert-base-uncased's vocabulary (train.py: ``len(tokenizer.vocab)``). Fixed in their
code, and so in the model config built here: GPO(32, 32) on both sides, the fc + two-layer MLP
residual on the regions, l2-normalised embeddings scored by their dot product; on bigru a bi-GRU
text encoder, on master ``BertModel`` + ``nn.Linear(768, embed_size)`` (``lib/encoders.py``
``EncoderText``), whose weights the checkpoint holds whole (BERT fine-tuned): the method's BERT
folder (``text_encoders.<name>.path``) gives only its architecture (``config.json``) and the
WordPiece vocabulary the captions are tokenised with. The bi-GRU runs' vocabulary is SCAN's JSON
(word2idx, idx2word, idx: vocab.py ``serialize_vocab``), read as words and ids only
(``methods.released.vocabulary``); a BERT run reads the captions the DAG tokenised with that folder.
"""
from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch

from methods.data.inputs import region_shape
from methods.data.text import Vocabulary
from methods.data.wordpiece import check_bert_folder
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
# vse_mean_warmup_epochs are VSE-infinity's own (VSE++, VSRN, SCAN and SGRAF have neither); master's
# arguments.py has no num_layers (its text encoder is BERT): required of a bi-GRU run only
OPTIONS = {"data_name": NAME, "img_dim": WIDTH, "word_dim": WIDTH, "embed_size": WIDTH, "num_layers": optional(LAYERS),
           "vocab_size": VOCABULARY, "precomp_enc_type": NAME, "vse_mean_warmup_epochs": Option(int, 0, 1000),
           "no_imgnorm": optional(FLAG), "no_txtnorm": optional(FLAG)}
MASK_TOKENS = 1   # train.py: vocab.add_word('<mask>') after loading the vocabulary, before vocab_size = len(vocab)
GPO_TENSORS = r"(gru\.\w+|linear\.weight)"
IMAGE_RULES: Rules = [
    (r"img_enc\.fc\.(weight|bias)", r"region.fc.\1"),
    (r"img_enc\.mlp\.layers\.0\.(weight|bias)", r"region.mlp_in.\1"),
    (r"img_enc\.mlp\.bns\.0\.(\w+)", r"region.bn.\1"),
    (r"img_enc\.mlp\.layers\.1\.(weight|bias)", r"region.mlp_out.\1"),
    (rf"img_enc\.gpool\.{GPO_TENSORS}", r"image_pool.\1"),
]
GRU_TEXT_RULES: Rules = [
    (r"txt_enc\.embed\.weight", "text.embed.weight"),
    (r"txt_enc\.rnn\.(\w+)", r"text.gru.\1"),
    (rf"txt_enc\.gpool\.{GPO_TENSORS}", r"text_pool.\1"),
]
BERT_TEXT_RULES: Rules = [
    (r"txt_enc\.bert\.(.+)", r"text.bert.\1"),
    (r"txt_enc\.linear\.(weight|bias)", r"text.linear.\1"),
    (rf"txt_enc\.gpool\.{GPO_TENSORS}", r"text_pool.\1"),
]
# lib/modules/mlp.py MLP builds a BatchNorm per layer and applies all but the last (forward: bn only
# for i < num_layers - 1), so no score depends on the last one
IMAGE_IGNORED = [(r"img_enc\.mlp\.bns\.1\.\w+", "the MLP's last BatchNorm, built and never applied")]
BERT_IGNORED = [(r"txt_enc\.bert\.embeddings\.position_ids",
                 "BertEmbeddings' buffer of the positions 0 .. max_position_embeddings - 1, which transformers rebuilds")]


def read_checkpoint(path: str | Path, limits: ReaderLimits, options: dict = OPTIONS) -> dict:
    """Their checkpoint, loaded safely and checked to be VSE-infinity's (not another code base's)."""
    return read_train_checkpoint(path, "a VSE-infinity", CODE, len(PARTS), options, limits,
                                 others="a VSE++, VSRN, SCAN or SGRAF checkpoint?")


def is_bert_run(text_state: dict) -> bool:
    """Whether their text encoder is BERT (branch master) rather than the bi-GRU (branch bigru)."""
    return any(key.startswith("bert.") for key in text_state)


def check_dataset(opt: argparse.Namespace, where: str) -> None:
    if opt.data_name not in SOURCE_DATASETS:
        raise HarnessError(f"{where}: data_name {opt.data_name!r} is not one of {sorted(SOURCE_DATASETS)} "
                           f"(the datasets VSE-infinity released)")


def check_default_only(opt: argparse.Namespace, default_only: dict, where: str) -> None:
    for key, value in default_only.items():
        if getattr(opt, key, value) != value:
            raise HarnessError(f"{where}: trained with {key}={getattr(opt, key)!r}, which the project's "
                               f"VSE-infinity does not import (only {key}={value!r})")


def text_config(opt: argparse.Namespace, text_state: dict, base_text: dict, text_encoders: dict,
                where: str) -> dict:
    """The model's ``text`` block for their text encoder, from the method's (``base_text``): a
    bi-GRU run into a GRU block, a BERT run into a BERT block whose folder
    (``text_encoders.<encoder>``) has their vocabulary's size."""
    bert = is_bert_run(text_state)
    if bert != (base_text.get("kind") == "bert"):
        theirs, ours = ("BERT (branch master)", "a bi-GRU") if bert else ("a bi-GRU (branch bigru)", "BERT")
        raise HarnessError(f"{where}: its text encoder is {theirs}, but the method's text block is {ours}: "
                           f"import it into a method of its text encoder")
    if not bert:
        if not hasattr(opt, "num_layers"):
            raise HarnessError(f"{where}: its options have no num_layers (a bi-GRU run of branch bigru has it)")
        return {**base_text, "word_dim": opt.word_dim, "hidden_dim": opt.embed_size,
                "num_layers": opt.num_layers, "bidirectional": True}
    name = base_text["encoder"]
    folder = (text_encoders.get(name) or {}).get("path")
    if not folder:
        raise HarnessError(f"text_encoders.{name}.path: not set (the BERT folder whose config.json and vocab.txt "
                           f"{where} was trained with: bert-base-uncased)")
    config = check_bert_folder(folder, f"text_encoders.{name}.path", weights=False)
    if config["vocab_size"] != opt.vocab_size:
        raise HarnessError(f"{where}: trained with a BERT vocabulary of {opt.vocab_size} pieces, but "
                           f"text_encoders.{name}.path ({folder}) has {config['vocab_size']}: point it at "
                           f"bert-base-uncased")
    return {**base_text, "out_dim": opt.embed_size}


def text_rules(text_state: dict) -> tuple[Rules, list]:
    """The rules (and ignored tensors) of their text encoder's tensors."""
    return (BERT_TEXT_RULES, BERT_IGNORED) if is_bert_run(text_state) else (GRU_TEXT_RULES, [])


def model_config(opt: argparse.Namespace, text_state: dict, base: dict, text_encoders: dict, where: str) -> dict:
    """The project's model block for their options, from the method's own block (``base``)."""
    check_dataset(opt, where)
    check_default_only(opt, DEFAULT_ONLY, where)
    cfg = copy.deepcopy(base)
    cfg.update(embed_dim=opt.embed_size, pooling="gpo")
    cfg["text"] = text_config(opt, text_state, cfg["text"], text_encoders, where)
    return cfg


def meta_model(cfg: dict, vocab_size: int, image_shape: dict, text_encoders: dict, backbones: dict | None = None):
    """The project's model for the file's widths, on the meta device: names, shapes and dtypes
    only, no weights allocated (a BERT's folder read for its architecture, never its weights;
    ``backbones``: config ``backbones`` of a model that runs its CNN, built without weights)."""
    text_encoders = {k: {**v, "weights": "none"} for k, v in text_encoders.items()}
    cnn = {k: {**v, "weights": "none"} for k, v in (backbones or {}).items()}
    with torch.device("meta"):
        return build_model(cfg, BuildContext(vocab_size, image_shape, cnn, text_encoders=text_encoders,
                                             cnn=backbones is not None))


def import_checkpoint(path: str | Path, base_model_config: dict, dataset_cfg: dict, limits: ReaderLimits,
                      text_encoders: dict | None = None, backbones: dict | None = None) -> ReleasedModel:
    """Their ``model_best.pth`` as the project's model (``base_model_config``: the method's model
    block; ``dataset_cfg``: the dataset's config, whose regions per image the image shape records:
    GPO pools any count; ``limits``: the bounds of reading the file; ``text_encoders``: config
    ``text_encoders``, the BERT folder of a BERT run; no CNN runs: ``backbones`` unread)."""
    where, text_encoders = str(path), text_encoders or {}
    n_regions, _ = region_shape(dataset_cfg)
    ckpt = read_checkpoint(path, limits)
    opt, text_state = ckpt["opt"], ckpt["model"][1]
    cfg = model_config(opt, text_state, base_model_config, text_encoders, where)
    image_shape = {"dim": opt.img_dim, "regions": n_regions}
    model = meta_model(cfg, opt.vocab_size, image_shape, text_encoders)
    source = {f"{part}.{k}": v for part, state in zip(PARTS, ckpt["model"]) for k, v in state.items()}
    rules, ignored = text_rules(text_state)
    state = map_tensors(source, model.state_dict(), [*IMAGE_RULES, *rules], where, [*IMAGE_IGNORED, *ignored])
    provenance = {"code": CODE, "epoch": ckpt.get("epoch"), "best_rsum": ckpt.get("best_rsum"),
                  "options": plain_options(opt, ARCHITECTURE_OPTIONS, where)}
    bert = is_bert_run(text_state)   # BERT's [MASK] is one of its pieces: no id past them
    return ReleasedModel(cfg, state, image_shape, opt.vocab_size, SOURCE_DATASETS[opt.data_name], provenance,
                         extra_tokens=0 if bert else MASK_TOKENS)


def read_vocabulary(path: str | Path, tokenizer: Tokenizer, limits: ReaderLimits) -> Vocabulary:
    """Their vocabulary JSON (SCAN's layout: word2idx, idx2word, idx), read as words and ids only."""
    return read_vocabulary_json(path, tokenizer, "SCAN's vocab.py (woodfrog/vse_infty lib/vocab.py)", limits)


IMPORTER = Importer(CODE, import_checkpoint, read_vocabulary)
