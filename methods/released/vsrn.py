"""VSRN's released checkpoints (Li, Zhang, Li, Li, Fu, "Visual Semantic Reasoning for Image-Text
Matching", ICCV 2019; github.com/KunpengLi1994/VSRN, whose README links two runs per dataset:
model_coco_{1,2}.pth.tar and model_fliker_{1,2}.pth.tar, its spelling) as the project's ``vsrn`` model.

Their train.py saves ``{'epoch', 'model': [img_enc, txt_enc state dicts], 'best_rsum', 'opt':
argparse.Namespace, 'Eiters'}`` (model.py ``VSRN.state_dict``: the caption decoder, trained beside
them, is not saved, and its options, e.g. ``bidirectional``, say nothing of the retrieval model).
The options say the widths (img_dim, word_dim, embed_size, num_layers) and the dataset, which
switches the image encoder (``EncoderImagePrecompAttn``): on ``f30k_precomp`` a final BatchNorm and
no l2norm after fc, on ``coco_precomp`` the reverse. Fixed in their code, and so in the model config
built here: 4 residual GCN blocks of 1x1 convolutions, their ``l2norm`` over dim 1 (the region axis
of a (B, N, D) tensor, KunpengLi1994/VSRN#7), a unidirectional text GRU, cosine scores of the
l2-normalised embeddings (evaluation.py). Their README's 2-model result averages the two runs'
similarity matrices (evaluation_models.py): the project's ensemble rule; one file is one run.

Their vocabularies are pickles in the repository (vocab/coco_precomp_vocab.pkl, 10,006 words;
vocab/f30k_precomp_vocab.pkl, 8,481), Python 2 protocol 2 of ``__main__.Vocabulary`` (vocab.py run
as a script): ``word2idx``, ``idx2word`` (int keys), ``idx``. They are read without running them.
"""
from __future__ import annotations

import argparse
import copy
import re
from pathlib import Path

import torch

from methods.data.inputs import region_shape
from methods.data.text import Vocabulary
from methods.data.tokenizers import Tokenizer
from methods.errors import HarnessError
from methods.models.base import BuildContext, build_model
from methods.released.mapping import Rules, map_tensors
from methods.released.options import COUNT, FLAG, LAYERS, NAME, VOCABULARY, WIDTH, optional, plain_options
from methods.released.record import Importer, ReleasedModel, read_train_checkpoint
from methods.released.vocabulary import read_pickled_vocabulary, read_vocabulary_json
from methods.untrusted.safe_load import ReaderLimits

SOURCE_DATASETS = {"f30k_precomp": "flickr", "coco_precomp": "coco"}
FINAL_BN_DATA = "f30k_precomp"   # EncoderImagePrecompAttn: `if self.data_name == 'f30k_precomp'`
PARTS = ("img_enc", "txt_enc")
GCN_BLOCKS = 4   # Rs_GCN_1..4, fixed in model.py
# options the project's VSRN implements only at their default: a checkpoint trained otherwise is refused
DEFAULT_ONLY = {"no_imgnorm": False, "use_abs": False, "measure": "cosine"}
ARCHITECTURE_OPTIONS = ("data_name", "img_dim", "word_dim", "embed_size", "num_layers", "vocab_size")
# their types and the ranges the importer accepts (methods.released.options); dim_vid, dim_hidden and
# max_len are the caption decoder's: only VSRN's train.py has them (VSE++, SCAN and SGRAF do not)
OPTIONS = {"data_name": NAME, "img_dim": WIDTH, "word_dim": WIDTH, "embed_size": WIDTH, "num_layers": LAYERS,
           "vocab_size": VOCABULARY, "dim_vid": WIDTH, "dim_hidden": WIDTH, "max_len": COUNT,
           "no_imgnorm": optional(FLAG), "use_abs": optional(FLAG), "measure": optional(NAME)}
CONV_1X1 = re.compile(r"img_enc\.Rs_GCN_\d+\.(g|theta|phi|W\.0)\.weight")


def rules() -> Rules:
    """Their state-dict names (prefixed by the part) -> the project's ``vsrn`` model's."""
    gcn = []
    for block in range(GCN_BLOCKS):   # Rs_GCN_1..4 -> gcn.0..3 (a template cannot count down)
        src, dst = rf"img_enc\.Rs_GCN_{block + 1}", f"gcn.{block}"
        gcn += [(rf"{src}\.(g|theta|phi)\.(weight|bias)", rf"{dst}.\1.\2"),
                (rf"{src}\.W\.0\.(weight|bias)", rf"{dst}.w.\1"),
                (rf"{src}\.W\.1\.(\w+)", rf"{dst}.bn.\1")]
    return [
        (r"img_enc\.fc\.(weight|bias)", r"fc.\1"),
        *gcn,
        (r"img_enc\.img_rnn\.(\w+)", r"gru.\1"),
        (r"img_enc\.bn\.(\w+)", r"bn.\1"),
        (r"txt_enc\.embed\.weight", "text.embed.weight"),
        (r"txt_enc\.rnn\.(\w+)", r"text.gru.\1"),
    ]


def read_checkpoint(path: str | Path, limits: ReaderLimits) -> dict:
    """Their checkpoint, loaded safely and checked to be VSRN's (not another code base's)."""
    return read_train_checkpoint(path, "a VSRN", "KunpengLi1994/VSRN", len(PARTS), OPTIONS, limits,
                                 others="a VSE++, SCAN or SGRAF checkpoint?")


def model_config(opt: argparse.Namespace, base: dict, where: str) -> dict:
    """The project's model block for their options, from the method's own block (``base``)."""
    if opt.data_name not in SOURCE_DATASETS:
        raise HarnessError(f"{where}: data_name {opt.data_name!r} is not one of {sorted(SOURCE_DATASETS)} "
                           f"(the region-feature runs VSRN released)")
    for key, value in DEFAULT_ONLY.items():
        if getattr(opt, key, value) != value:
            raise HarnessError(f"{where}: trained with {key}={getattr(opt, key)!r}, which the project's VSRN does "
                               f"not implement (only {key}={value!r})")
    flickr = opt.data_name == FINAL_BN_DATA
    cfg = copy.deepcopy(base)
    cfg.update(embed_dim=opt.embed_size, gcn_blocks=GCN_BLOCKS, region_l2norm="region_axis",
               l2norm_after_fc=not flickr, final_bn=flickr)
    cfg["text"] = {**cfg["text"], "word_dim": opt.word_dim, "hidden_dim": opt.embed_size,
                   "num_layers": opt.num_layers, "bidirectional": False}
    return cfg


def source_tensors(parts: list[dict]) -> dict[str, torch.Tensor]:
    """Their tensors by part-prefixed name, as the project's layers hold them: a 1x1 Conv1d kernel
    (out, in, 1) is the project's Linear weight (out, in); a kernel of another width is left as it
    is, for ``map_tensors`` to refuse by shape."""
    source = {f"{part}.{k}": v for part, state in zip(PARTS, parts) for k, v in state.items()}
    for key, tensor in source.items():
        if CONV_1X1.fullmatch(key) and torch.is_tensor(tensor) and tensor.dim() == 3 and tensor.shape[-1] == 1:
            source[key] = tensor.squeeze(-1)
    # torch before 0.4.1 saved no BatchNorm step count; only momentum=None reads it, and their
    # BatchNorms use 0.1, so a missing count is zero without changing a score
    for key in [k for k in source if k.endswith(".running_mean")]:
        source.setdefault(key[: -len("running_mean")] + "num_batches_tracked", torch.tensor(0))
    return source


def import_checkpoint(path: str | Path, base_model_config: dict, dataset_cfg: dict,
                      limits: ReaderLimits, text_encoders: dict | None = None,
                      backbones: dict | None = None) -> ReleasedModel:
    """Their ``model_{coco,fliker}_{1,2}.pth.tar`` as the project's model (``base_model_config``: the
    method's model block; ``dataset_cfg``: the dataset's config, whose regions per image the image
    shape records: VSRN's GCN and region GRU take any count; ``limits``: the bounds of reading the
    file)."""
    where = str(path)
    n_regions, _ = region_shape(dataset_cfg)
    ckpt = read_checkpoint(path, limits)
    opt = ckpt["opt"]
    cfg = model_config(opt, base_model_config, where)
    has_bn = any(k.startswith("bn.") for k in ckpt["model"][0])
    if has_bn != cfg["final_bn"]:   # their code builds the BatchNorm from data_name alone
        raise HarnessError(f"{where}: data_name {opt.data_name!r} means {'a' if cfg['final_bn'] else 'no'} final "
                           f"image BatchNorm in KunpengLi1994/VSRN, but the checkpoint holds "
                           f"{'none' if cfg['final_bn'] else 'img_enc.bn tensors'} (another code base's VSRN?)")
    image_shape = {"dim": opt.img_dim, "regions": n_regions}
    with torch.device("meta"):   # names, shapes and dtypes only: no weights allocated for the file's widths
        model = build_model(cfg, BuildContext(opt.vocab_size, image_shape, {}, cnn=False))
    state = map_tensors(source_tensors(ckpt["model"]), model.state_dict(), rules(), where)
    provenance = {"code": "KunpengLi1994/VSRN", "epoch": ckpt.get("epoch"), "best_rsum": ckpt.get("best_rsum"),
                  "options": plain_options(opt, ARCHITECTURE_OPTIONS, where)}
    return ReleasedModel(cfg, state, image_shape, opt.vocab_size, SOURCE_DATASETS[opt.data_name], provenance)


def read_vocabulary(path: str | Path, tokenizer: Tokenizer, limits: ReaderLimits) -> Vocabulary:
    """Their vocabulary pickle (vocab.py: ``Vocabulary`` with word2idx, idx2word, idx), read
    without running it; a vocabulary JSON (SCAN's layout: word2idx, idx2word, idx) is read as such:
    SCAN's f30k_precomp JSON equals VSRN's pickle word for word, its coco_precomp JSON does not
    (11,353 words, refused by the import's size check)."""
    if Path(path).suffix == ".json":
        return read_vocabulary_json(path, tokenizer, "SCAN's vocab.py", limits)
    return read_pickled_vocabulary(path, tokenizer, "KunpengLi1994/VSRN", limits)


IMPORTER = Importer("KunpengLi1994/VSRN", import_checkpoint, read_vocabulary)
