"""How a text encoder's word embeddings start (``model.text.word_init``), by registered name:
``random`` (the encoder's own initialisation) or pre-trained vectors read from a file the dataset
config names (``glove``: ``datasets.<name>.glove``, read by ``methods.data.glove``). The DAG build
checks the file (``check_word_vectors``); the training job reads the vectors of its vocabulary
(``initial_word_vectors``). Torch-free: the vectors are a numpy array.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from methods.data.datasets import dataset_paths
from methods.data.glove import check_glove_head, load_word_vectors
from methods.data.text import Vocabulary
from methods.errors import HarnessError
from methods.registry import Registry


@dataclass(frozen=True)
class WordInit:
    name: str
    label: str | None = None                # how a run description names the vectors ("GloVe")
    dataset_key: str | None = None          # the ``datasets.<name>`` key of the vectors file; None: no file
    wanted: str = ""                        # the file to ask for, with {dim} (the model's word_dim)
    check: Callable[[Path, int], object] | None = None                    # the file's head, of word_dim
    load: Callable[[Path, Vocabulary, int], np.ndarray] | None = None     # (len(vocab), word_dim) float32

    @property
    def pretrained(self) -> bool:
        return self.dataset_key is not None


WORD_INITS: Registry[WordInit] = Registry("word initialisation")
WORD_INITS.register("random", WordInit("random"))
WORD_INITS.register("glove", WordInit("glove", "GloVe", "glove", "a GloVe text file of {dim}-d vectors (e.g. "
                                      "glove.840B.300d.txt)", check_glove_head, load_word_vectors))


def word_init(model_cfg: dict) -> WordInit | None:
    """The word initialisation of a ``model`` config block's text encoder (None: it has none)."""
    text = model_cfg.get("text") or {}
    return WORD_INITS.get(text["word_init"]) if "word_init" in text else None


def check_word_vectors(cfg: dict, dataset: str, model_cfg: dict, experiment: str) -> None:
    """An experiment whose text encoder starts from pre-trained vectors has their file configured
    for its dataset, of the encoder's word_dim (that the file exists and parses is
    ``methods.data.checks.check_dataset_inputs``'s, run first)."""
    init = word_init(model_cfg)
    if init is None or not init.pretrained:
        return
    dim = model_cfg["text"]["word_dim"]
    path = dataset_paths(cfg, dataset)[init.dataset_key]
    if path is None:
        raise HarnessError(f"experiment {experiment} sets model.text.word_init: {init.name}, but "
                           f"datasets.{dataset}.{init.dataset_key} is not set: give {init.wanted.format(dim=dim)}, "
                           f"or use word_init: random")
    init.check(path, dim)


def initial_word_vectors(model_cfg: dict, paths: dict, vocab: Vocabulary) -> np.ndarray | None:
    """(len(vocab), word_dim) pre-trained vectors of the vocabulary's words (zero rows for words
    the file lacks), or None when the encoder starts from its own initialisation. ``paths``: the
    dataset's (``dataset.json``)."""
    init = word_init(model_cfg)
    if init is None or not init.pretrained:
        return None
    if not paths[init.dataset_key]:
        raise HarnessError(f"word_init: {init.name} needs datasets.<name>.{init.dataset_key} "
                           f"({init.wanted.format(dim=model_cfg['text']['word_dim'])}) in config")
    return init.load(paths[init.dataset_key], vocab, model_cfg["text"]["word_dim"])
