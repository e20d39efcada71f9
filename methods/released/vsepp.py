"""VSE++'s released checkpoints (Faghri, Fleet, Kiros, Fidler, "VSE++: Improving Visual-Semantic
Embeddings with Hard Negatives", BMVC 2018; github.com/fartashf/vsepp, whose README links
``runs.tar`` with the trained models and ``vocab.tar`` with their vocabularies) as the project's
``vsepp`` model.

Their train.py saves ``{'epoch', 'model': [img_enc, txt_enc state dicts], 'best_rsum', 'opt':
argparse.Namespace, 'Eiters'}`` (model.py ``VSE.state_dict``). A full-image run (``data_name``
coco or f30k) saves its CNN with the rest: ``EncoderImageFull`` wraps torchvision's ResNet in
``nn.DataParallel`` (``img_enc.cnn.module.*``, its classifier removed), then ``fc``; its forward
is ResNet average pool -> l2 -> fc -> l2 (the project's ``pre_fc_l2norm: true``), the caption a
unidirectional GRU's last state -> l2, scores cosines. The CNN in the file is the one to run, even
for a run without ``--finetune``: their ``train_start`` puts it in train mode, so its BatchNorm
statistics follow the training images (fartashf/vsepp#4); the import therefore says the CNN runs
on the images at evaluation (``runs_cnn``), on a 224-px centre crop of the image resized to 256 as
their data.py evaluates (the datasets' ``features: {resize: 256, crop: 224}``).

VSE0 as their README trains it (``--no_imgnorm``: the image embedding left unnormalised) is
the project's ``image_l2norm: false``. Refused by name, as the project's model does not compute
them: precomputed-feature runs (``*_precomp``: a 4096-d VGG19 vector per image from their
data.tar, while the project's ``vsepp`` model reads its own ResNet backbone's pooled features,
whose width fixes its fc), VGG19 full-image runs (``*_vggfull*``; the project has ResNet
backbones only) and order embeddings (``--measure order --use_abs``). Their vocabulary is a
Python 2 pickle of ``Vocabulary`` (``__main__.Vocabulary`` as vocab.py writes it), read without
running code (``methods.untrusted.safe_load``).
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
from methods.released.mapping import map_tensors, torchvision_resnet_rules
from methods.released.options import FLAG, LAYERS, MARGIN, NAME, VOCABULARY, WIDTH, Option, optional, plain_options
from methods.released.record import Importer, ReleasedModel, read_train_checkpoint
from methods.released.vocabulary import check_eval_transform, read_pickled_vocabulary
from methods.untrusted.safe_load import ReaderLimits

CODE = "fartashf/vsepp"
SOURCE_DATASETS = {"coco": "coco", "f30k": "flickr"}
PRECOMP_DATASETS = {"coco_precomp", "f30k_precomp", "f8k_precomp", "10crop_precomp"}
PARTS = ("img_enc", "txt_enc")
# every version of their train.py has the required ones (vocab_size: set from the vocabulary before
# saving); their types and the ranges the importer accepts (methods.released.options)
OPTIONS = {"data_name": NAME, "cnn_type": NAME, "measure": NAME, "use_abs": FLAG, "embed_size": WIDTH,
           "word_dim": WIDTH, "num_layers": LAYERS, "vocab_size": VOCABULARY, "no_imgnorm": optional(FLAG),
           "finetune": optional(FLAG), "use_restval": optional(FLAG), "max_violation": optional(FLAG),
           "margin": optional(MARGIN), "crop_size": optional(WIDTH), "img_dim": optional(Option(int, 1, 100_000))}
# options of the other released code bases that share VSE++'s layout (SCAN's precomputed-region
# encoders, SGRAF's similarity head): such a checkpoint is not a VSE++ one
FOREIGN_OPTIONS = ("precomp_enc_type", "cross_attn", "raw_feature_norm", "sim_dim", "module_name")
# options the project's model implements only at their default: a checkpoint trained otherwise is refused
DEFAULT_ONLY = {
    "measure": ("cosine", "order embeddings' similarity is not the project's vsepp cosine"),
    "use_abs": (False, "embeddings' absolute values (order embeddings) are not taken by the project's vsepp"),
}
PROVENANCE_OPTIONS = ("data_name", "cnn_type", "finetune", "use_restval", "max_violation", "measure", "use_abs",
                      "no_imgnorm", "embed_size", "word_dim", "num_layers", "vocab_size", "margin", "crop_size")

CNN = r"img_enc\.cnn\.(?:module\.)?"   # DataParallel's 'module.' (every full-image run); without it all the same
RULES = [
    *torchvision_resnet_rules(CNN),
    (r"img_enc\.fc\.(weight|bias)", r"fc.\1"),
    (r"txt_enc\.embed\.weight", "text.embed.weight"),
    (r"txt_enc\.rnn\.(\w+)", r"text.gru.\1"),
]
STEP_COUNTER = "num_batches_tracked"
EVAL_TRANSFORM = (256, 224)   # data.py: transforms.Resize(256), transforms.CenterCrop(224) for val and test


def read_checkpoint(path: str | Path, limits: ReaderLimits) -> dict:
    """Their checkpoint, loaded safely and checked to be VSE++'s (not another code base's)."""
    ckpt = read_train_checkpoint(path, "a VSE++", CODE, len(PARTS), OPTIONS, limits, FOREIGN_OPTIONS,
                                 others="an SGRAF, SCAN or VSRN checkpoint?")
    other = next((k for k in ckpt["model"][0] if not k.startswith(("fc.", "cnn."))), None)
    if other is not None:   # VSRN shares VSE++'s options and layout; its image encoder has more than fc and cnn
        raise HarnessError(f"{path}: not a VSE++ checkpoint (its image encoder holds '{other}'; VSE++'s holds only "
                           f"'cnn.*' and 'fc.*': a VSRN checkpoint?)")
    return ckpt


def check_options(opt: argparse.Namespace, where: str) -> None:
    """What the project's ``vsepp`` model can be: refused by name otherwise."""
    if opt.data_name in PRECOMP_DATASETS:
        dim = getattr(opt, "img_dim", 4096)
        raise HarnessError(f"{where}: data_name {opt.data_name!r}, a run on their precomputed {dim}-d VGG19 "
                           f"features (data.tar): the project's vsepp model reads the pooled features of its own "
                           f"ResNet backbone (the fc's input width), no precomputed vector of another CNN; import "
                           f"a full-image ResNet run (data_name coco or f30k, cnn_type resnet152)")
    if opt.data_name not in SOURCE_DATASETS:
        raise HarnessError(f"{where}: data_name {opt.data_name!r} is not one of {sorted(SOURCE_DATASETS)} "
                           f"(Flickr8K and the 10-crop features are not datasets of the project)")
    if opt.cnn_type not in CHANNELS:
        raise HarnessError(f"{where}: cnn_type {opt.cnn_type!r} (a full-image run of another CNN, e.g. the "
                           f"*_vggfull runs): the project's vsepp backbone is a ResNet ({', '.join(CHANNELS)})")
    for key, (value, why) in DEFAULT_ONLY.items():
        if getattr(opt, key, value) != value:
            raise HarnessError(f"{where}: trained with {key}={getattr(opt, key)!r}, which the project's vsepp does "
                               f"not implement (only {key}={value!r}): {why}")


def model_config(opt: argparse.Namespace, base: dict) -> dict:
    """The project's model block for their options, from the method's own block (``base``). The
    backbone is named by their ``cnn_type`` (config ``backbones`` has a ``resnet152`` of arch
    resnet152; the weights come from the checkpoint)."""
    cfg = copy.deepcopy(base)
    cfg.update(embed_dim=opt.embed_size, backbone=opt.cnn_type, pre_fc_l2norm=True,   # EncoderImageFull: l2 before fc
               image_l2norm=not getattr(opt, "no_imgnorm", False))   # and after it, unless --no_imgnorm (VSE0)
    cfg["text"] = {**cfg["text"], "word_dim": opt.word_dim, "hidden_dim": opt.embed_size,
                   "num_layers": opt.num_layers, "bidirectional": False}   # EncoderText: nn.GRU, one direction
    return cfg


def target_state(cfg: dict, opt: argparse.Namespace, image_shape: dict) -> dict[str, torch.Tensor]:
    """The project model's names, shapes and dtypes, built on the meta device (no ResNet-152 of
    random weights is made: only the checkpoint's tensors are kept)."""
    backbones = {opt.cnn_type: {"arch": opt.cnn_type, "weights": "none"}}
    with torch.device("meta"):
        model = build_model(cfg, BuildContext(opt.vocab_size, image_shape, backbones, cnn=True))
    return model.state_dict()


def import_checkpoint(path: str | Path, base_model_config: dict, dataset_cfg: dict,
                      limits: ReaderLimits, text_encoders: dict | None = None,
                      backbones: dict | None = None) -> ReleasedModel:
    """Their ``model_best.pth.tar`` as the project's model (``base_model_config``: the method's model
    block; ``dataset_cfg``: the dataset's config, whose image transform must be theirs; ``limits``:
    the bounds of reading the file)."""
    where = str(path)
    ckpt = read_checkpoint(path, limits)
    opt = ckpt["opt"]
    check_options(opt, where)
    check_eval_transform(dataset_cfg, EVAL_TRANSFORM, where)
    cfg = model_config(opt, base_model_config)
    image_shape = {"dim": layer_channels(opt.cnn_type, "conv5")}   # as training saves a pooled-input model's
    target = target_state(cfg, opt, image_shape)
    source = {f"{part}.{k}": v for part, state in zip(PARTS, ckpt["model"]) for k, v in state.items()}
    # BatchNorm's step counters: files of PyTorch < 0.4.1 (the released runs.tar, 2017) have none.
    # A counter is read only by a BatchNorm with momentum=None in train mode; the ResNet's have
    # momentum 0.1, and the project keeps the backbone's BatchNorm in eval mode (backbone_bn:
    # frozen), so 0 stands for them. A file that has counters has them mapped like any tensor.
    uncounted = not any(k.endswith(STEP_COUNTER) for k in source)
    counters = [k for k in target if k.endswith(STEP_COUNTER)] if uncounted else []
    state = map_tensors(source, {k: v for k, v in target.items() if k not in counters}, RULES, where)
    state.update({k: torch.zeros((), dtype=target[k].dtype) for k in counters})
    state = {k: state[k] for k in target}   # the model's own order
    provenance = {"code": CODE, "epoch": ckpt.get("epoch"), "best_rsum": ckpt.get("best_rsum"),
                  "options": plain_options(opt, PROVENANCE_OPTIONS, where)}
    return ReleasedModel(cfg, state, image_shape, opt.vocab_size, SOURCE_DATASETS[opt.data_name], provenance,
                         runs_cnn=True)


def read_vocabulary(path: str | Path, tokenizer: Tokenizer, limits: ReaderLimits) -> Vocabulary:
    """Their vocabulary pickle (vocab.tar's ``<data_name>_vocab.pkl``, pickled by Python 2)."""
    return read_pickled_vocabulary(path, tokenizer, CODE, limits)


IMPORTER = Importer(CODE, import_checkpoint, read_vocabulary)
