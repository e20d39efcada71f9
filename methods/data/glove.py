"""GloVe text vectors (``word v1 ... vD`` per line) -> an embedding matrix for a vocabulary."""
from __future__ import annotations

from pathlib import Path

import torch

from methods.data.text import Vocabulary
from methods.errors import HarnessError


def load_word_vectors(path: str | Path, vocab: Vocabulary, dim: int) -> torch.Tensor:
    """(len(vocab), dim); rows of words absent from the file stay zero (the encoder keeps its init)."""
    path = Path(path)
    if not path.is_file():
        raise HarnessError(f"GloVe file not found: {path} (expected a text file, one 'word v1 ... v{dim}' per line)")
    out = torch.zeros(len(vocab), dim)
    found = 0
    with open(path, encoding="utf8", errors="replace") as f:
        for line_no, line in enumerate(f, 1):
            word, _, rest = line.rstrip("\n").partition(" ")
            idx = vocab.word2idx.get(word)
            if idx is None:
                continue
            values = rest.split(" ")
            if len(values) != dim:
                raise HarnessError(f"{path}:{line_no}: {len(values)} values for '{word}', expected {dim}")
            out[idx] = torch.tensor([float(v) for v in values])
            found += 1
    if found == 0:
        raise HarnessError(f"{path}: no vocabulary word found; is it a GloVe text file?")
    return out
