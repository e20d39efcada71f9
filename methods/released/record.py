"""What an importer of one code base's released files gives the project: the checkpoint as the
project's model (``ReleasedModel``) and the vocabulary released with it, read with the dataset's
tokenizer; ``Importer`` names both readers and the code base they read."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import torch

from methods.data.text import Vocabulary
from methods.data.tokenizers import Tokenizer
from methods.errors import HarnessError
from methods.released.options import Option, check_options, check_record
from methods.untrusted.safe_load import ReaderLimits, load_checkpoint

CHECKPOINT_GLOBALS = ("argparse.Namespace",)   # the options train.py saves; nothing else but tensors and plain data


@dataclass(frozen=True)
class ReleasedModel:
    """A released checkpoint as the project's model: its model config block, the state dict that
    fills it, the image input's shape and vocabulary size it was built for, the dataset it was
    trained on (the harness's name: flickr, coco), whether its CNN runs on the images at
    evaluation (a checkpoint holding the CNN's weights), what the file said of itself (epoch,
    selection score, options), the token ids its embedding has past the released vocabulary's
    words (VSE-infinity's ``<mask>``, which its train.py adds when it loads the vocabulary) and,
    for a model that runs its CNN on the images, the image transform it was trained for (the
    run's ``training.images``; None: the method's own)."""

    model_config: dict
    state_dict: dict
    image_shape: dict
    vocab_size: int
    source_dataset: str
    provenance: dict
    runs_cnn: bool = False
    extra_tokens: int = 0
    images: dict | None = None


@dataclass(frozen=True)
class Importer:
    """One code base's released files. ``import_checkpoint(path, base_model_config, dataset_cfg,
    limits, text_encoders, backbones)``: the checkpoint onto the method's model block
    (``dataset_cfg``: the dataset's config, e.g. its precomputed regions' shape; ``limits``: the
    bounds of reading the file; ``text_encoders`` and ``backbones``: the config's, whose BERT
    folder and CNN architecture a run with either is built for; an importer reads what its code
    base has);
    ``read_vocabulary(path, tokenizer, limits)``: the vocabulary file as the project's
    ``Vocabulary``, words in the authors' id order."""

    code: str   # the public repository, e.g. Paranioar/SGRAF
    import_checkpoint: Callable[[Path, dict, dict, ReaderLimits, dict, dict], ReleasedModel]
    read_vocabulary: Callable[[Path, Tokenizer, ReaderLimits], Vocabulary]


def read_train_checkpoint(path: str | Path, name: str, code: str, n_parts: int, options: Mapping[str, Option],
                          limits: ReaderLimits, foreign: Sequence[str] = (),
                          others: str = "another code base's checkpoint?") -> dict:
    """What the train.py of VSE++ and of the code bases grown from it (VSRN, SCAN, SGRAF) saves,
    ``{'epoch', 'model': [state dicts], 'best_rsum', 'opt': argparse.Namespace, 'Eiters'}``, loaded
    safely and checked to be ``name``'s (``code``): its ``options`` present (the required ones),
    of their types and in their ranges, no ``foreign`` one, ``n_parts`` state dicts of named
    tensors; otherwise one line saying what differs (``others``: which checkpoints it may be
    instead)."""
    ckpt = load_checkpoint(path, CHECKPOINT_GLOBALS, limits)
    opt = ckpt.get("opt") if isinstance(ckpt, dict) else None
    parts = ckpt.get("model") if isinstance(ckpt, dict) else None
    if not isinstance(opt, argparse.Namespace) or not isinstance(parts, (list, tuple)):
        raise HarnessError(f"{path}: not {name} checkpoint (expected 'opt' options and 'model' as a list of "
                           f"state dicts, as {code}'s train.py saves them)")
    missing = [k for k, o in options.items() if o.required and not hasattr(opt, k)]
    found = [k for k in foreign if hasattr(opt, k)]
    what = (f"its options have no {', '.join(missing)}" if missing else
            f"its options have {', '.join(found)}" if found else
            f"it holds {len(parts)} state dicts, not {n_parts}" if len(parts) != n_parts else
            "'model' holds something other than state dicts of named tensors"
            if not all(is_state_dict(p) for p in parts) else None)
    if what is not None:
        raise HarnessError(f"{path}: not {name} checkpoint ({what}; {others})")
    check_options(opt, options, str(path))
    check_record(ckpt, str(path))
    return ckpt


def is_state_dict(value) -> bool:
    """A dict of tensors by string names."""
    return isinstance(value, dict) and all(type(k) is str and torch.is_tensor(v) for k, v in value.items())
