"""A released checkpoint's options, checked for type and range before anything is built from them.

A checkpoint's options decide the widths and depth of the model the importer builds: an option of
another type (a tensor, a string where a count belongs) or out of range (``num_layers = 10**6``
makes the build hang) is refused by name first. Types are exact (``type(x) is int``: a bool is not
a count). The bounds are generous around what the public code bases train: widths of 300 (word
vectors), 1,024 (embeddings), 2,048 (ResNet and BUTD features) and 256 (SGRAF's similarity
vectors); one GRU layer; SGRAF's 0-4 reasoning steps; vocabularies of 8,481 to 11,353 words.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Mapping

from methods.errors import HarnessError


@dataclass(frozen=True)
class Option:
    """One option a checkpoint must (``required``) or may hold: its type and the range or values
    it may take."""

    kind: type
    low: float | None = None
    high: float | None = None
    required: bool = True
    nullable: bool = False   # None allowed (an option whose default is None)

    def problem(self, value: Any) -> str | None:
        if value is None and self.nullable:
            return None
        numeric = self.kind is float and type(value) in (int, float)
        if type(value) is not self.kind and not numeric:
            name = self.kind.__name__
            return f"is {_shown(value)}, not {'an' if name[0] in 'aeiou' else 'a'} {name}"
        if self.low is not None and not value >= self.low or self.high is not None and not value <= self.high:
            return f"is {value!r}, outside {self.low:g}-{self.high:g}, the range the code bases train in"
        return None


def optional(option: Option) -> Option:
    return Option(option.kind, option.low, option.high, required=False, nullable=option.nullable)


WIDTH = Option(int, 1, 8192)        # feature, word and embedding widths
LAYERS = Option(int, 1, 4)          # stacked GRU layers
VOCABULARY = Option(int, 4, 1_000_000)
FLAG = Option(bool)
NAME = Option(str)
MARGIN = Option(float, 0, 10)
COUNT = Option(int, 0, 1_000_000_000)   # epochs, steps of training, sizes of batches and crops
# what a checkpoint may say of itself besides its options: checked as the options are
EPOCH = optional(COUNT)
SCORE = Option(float, -1e9, 1e9, required=False)
SCALAR_TYPES = (type(None), bool, int, float, str)
MAX_TEXT = 1000


def _shown(value: Any) -> str:
    if type(value) in SCALAR_TYPES:
        return f"{type(value).__name__} {value!r:.60}"
    return f"a {type(value).__name__}"


def check_options(opt: argparse.Namespace, spec: Mapping[str, Option], where: str) -> None:
    """Every option of ``spec`` the checkpoint holds is of its type and in its range; a required
    one it lacks is named (as the importers' older checks named it)."""
    missing = [k for k, o in spec.items() if o.required and not hasattr(opt, k)]
    if missing:
        raise HarnessError(f"{where}: its options have no {', '.join(missing)}")
    for key, option in spec.items():
        if hasattr(opt, key):
            problem = option.problem(getattr(opt, key))
            if problem:
                raise HarnessError(f"{where}: option '{key}' {problem}")


def plain_options(opt: argparse.Namespace, keys, where: str) -> dict:
    """The options ``keys`` the checkpoint holds, as the run's provenance records them: each a
    plain scalar (None, bool, int, float, or a string of at most ``MAX_TEXT`` characters)."""
    out = {}
    for key in keys:
        if hasattr(opt, key):
            value = getattr(opt, key)
            if type(value) not in SCALAR_TYPES or (type(value) is str and len(value) > MAX_TEXT):
                raise HarnessError(f"{where}: option '{key}' is {_shown(value)}, not a plain value")
            out[key] = value
    return out


def check_record(ckpt: Mapping, where: str) -> None:
    """What the checkpoint says of itself (``epoch``, ``best_rsum``, ``Eiters``), when it says it."""
    for key, option in (("epoch", EPOCH), ("best_rsum", SCORE), ("Eiters", EPOCH), ("best_score", SCORE)):
        if key in ckpt and ckpt[key] is not None:
            problem = option.problem(ckpt[key])
            if problem:
                raise HarnessError(f"{where}: its '{key}' {problem}")
