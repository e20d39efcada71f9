"""GloVe text vectors (``word v1 ... vD`` per line) -> an embedding matrix for a vocabulary (numpy:
the DAG build checks these files, and it does not import torch)."""
from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np

from methods.data.text import Vocabulary
from methods.errors import HarnessError

# The DAG-build-time check reads this many lines: glove.840B.300d.txt is ~5 GB, and a file of the
# wrong dimension or of another format shows on its first lines; a bad line further down is still
# named (file:line) by the training job that reads the whole file.
HEAD_LINES = 1000


def _values(tokens: list[str], dim: int) -> list[float] | None:
    """The last ``dim`` tokens as finite floats, or None if they are not. (A few GloVe 840B words
    contain spaces, so a line may have more than dim + 1 tokens: the word is all but the last dim.)"""
    if len(tokens) < dim + 1:
        return None
    try:
        values = [float(v) for v in tokens[-dim:]]
    except ValueError:
        return None
    return values if all(math.isfinite(v) for v in values) else None


def check_glove_head(path: str | Path, dim: int | None = None) -> int:
    """The vector dimension of a GloVe text file (its first line's value count), after checking that
    its first HEAD_LINES lines are ``word v1 ... vD`` with D finite numbers and, when ``dim`` is
    given (the model's word_dim), that D == dim."""
    path = Path(path)
    stat = path.stat()
    found = _head_dimension(str(path), stat.st_size, stat.st_mtime_ns)
    if dim is not None and found != dim:
        raise HarnessError(f"{path}: {found}-dimensional word vectors (line 1 has {found} values after the word), "
                           f"but the model's word_dim (model.text.word_dim) is {dim}; expected a GloVe file of {dim}-d vectors")
    return found


@functools.lru_cache(maxsize=None)
def _head_dimension(path: str, size: int, mtime_ns: int) -> int:
    """(size and mtime key the cache: one read per file version per process; every training run of
    a DAG asks.)"""
    dim = None
    with open(path, encoding="utf8", errors="replace") as f:
        for line_no, line in enumerate(f, 1):
            if line_no > HEAD_LINES:
                break
            tokens = line.rstrip("\n").rstrip(" ").split(" ")
            if dim is None:
                dim = len(tokens) - 1
                if dim < 1:
                    raise HarnessError(f"{path}:1: no numbers after the word; expected a GloVe text file, "
                                       f"one 'word v1 ... vD' per line")
            if _values(tokens, dim) is None:
                raise HarnessError(f"{path}:{line_no}: malformed line (starts '{line[:40].strip()}'): expected "
                                   f"a word then {dim} finite numbers, as on line 1")
    if dim is None:
        raise HarnessError(f"{path}: empty file; expected a GloVe text file, one 'word v1 ... vD' per line")
    return dim


def load_word_vectors(path: str | Path, vocab: Vocabulary, dim: int) -> np.ndarray:
    """(len(vocab), dim) float32; rows of words absent from the file stay zero (the encoder keeps its init)."""
    path = Path(path)
    if not path.is_file():
        raise HarnessError(f"GloVe file not found: {path} (expected a text file, one 'word v1 ... v{dim}' per line)")
    out = np.zeros((len(vocab), dim), dtype=np.float32)
    found = 0
    with open(path, encoding="utf8", errors="replace") as f:
        for line_no, line in enumerate(f, 1):
            tokens = line.rstrip("\n").rstrip(" ").split(" ")
            word = " ".join(tokens[:-dim]) if len(tokens) > dim + 1 else tokens[0]  # see _values
            idx = vocab.word2idx.get(word)
            if idx is None:
                continue
            values = _values(tokens, dim)
            if values is None:
                raise HarnessError(f"{path}:{line_no}: malformed vector for '{word}': expected {dim} finite numbers")
            out[idx] = values   # each value rounded to float32 once, as torch.tensor(values)
            found += 1
    if found == 0:
        raise HarnessError(f"{path}: no vocabulary word found; is it a GloVe text file?")
    return out
