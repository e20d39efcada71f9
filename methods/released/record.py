"""What an importer of one code base's released files gives the project: the checkpoint as the
project's model (``ReleasedModel``) and the vocabulary released with it, read with the dataset's
tokenizer; ``Importer`` names both readers and the code base they read."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from methods.data.text import Vocabulary
from methods.data.tokenizers import Tokenizer


@dataclass(frozen=True)
class ReleasedModel:
    """A released checkpoint as the project's model: its model config block, the state dict that
    fills it, the image input's shape and vocabulary size it was built for, the dataset it was
    trained on (the harness's name: flickr, coco), whether its CNN runs on the images at
    evaluation (a checkpoint holding the CNN's weights) and what the file said of itself (epoch,
    selection score, options)."""

    model_config: dict
    state_dict: dict
    image_shape: dict
    vocab_size: int
    source_dataset: str
    provenance: dict
    runs_cnn: bool = False


@dataclass(frozen=True)
class Importer:
    """One code base's released files. ``import_checkpoint(path, base_model_config, dataset_cfg)``:
    the checkpoint onto the method's model block (``dataset_cfg``: the dataset's config, e.g. its
    precomputed regions' shape); ``read_vocabulary(path, tokenizer)``: the vocabulary file as the
    project's ``Vocabulary``, words in the authors' id order."""

    code: str   # the public repository, e.g. Paranioar/SGRAF
    import_checkpoint: Callable[[Path, dict, dict], ReleasedModel]
    read_vocabulary: Callable[[Path, Tokenizer], Vocabulary]
