"""Tokenisation and vocabulary (built from training captions only)."""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

import torch

from methods.errors import HarnessError
from methods.io import read_json, write_json

PAD, START, END, UNK = "<pad>", "<start>", "<end>", "<unk>"
SPECIALS = (PAD, START, END, UNK)
VOCAB_LAYOUT = ('{"word2idx": {word: index}, "idx2word": {"0": word, ...}, "idx": word count} '
                '(SCAN/SGRAF vocabulary JSON, starting with <pad> <start> <end> <unk>)')

# Words (with inner apostrophes/hyphens kept) or single punctuation marks; close to
# nltk.word_tokenize on captions but needs no downloaded tokenizer models.
_TOKEN_RE = re.compile(r"[a-z0-9]+(?:['\-][a-z0-9]+)*|[^\sa-z0-9]")


def tokenize(caption: str) -> list[str]:
    return _TOKEN_RE.findall(caption.lower())


class Vocabulary:
    """word <-> index map in the SCAN/SGRAF JSON layout (``word2idx``, ``idx2word``, ``idx``)."""

    def __init__(self, words: Sequence[str]):
        if list(words[: len(SPECIALS)]) != list(SPECIALS):
            raise HarnessError(f"vocabulary must start with {SPECIALS}, got {list(words[:4])}")
        self.idx2word = list(words)
        self.word2idx = {w: i for i, w in enumerate(self.idx2word)}
        if len(self.word2idx) != len(self.idx2word):
            raise HarnessError("vocabulary has duplicate words")

    def __len__(self) -> int:
        return len(self.idx2word)

    @classmethod
    def build(cls, captions: Iterable[str], threshold: int) -> "Vocabulary":
        counts = Counter(tok for cap in captions for tok in tokenize(cap))
        kept = sorted(w for w, c in counts.items() if c >= threshold and w not in SPECIALS)
        return cls(list(SPECIALS) + kept)

    def encode(self, caption: str) -> list[int]:
        unk = self.word2idx[UNK]
        ids = [self.word2idx.get(tok, unk) for tok in tokenize(caption)]
        return [self.word2idx[START], *ids, self.word2idx[END]]

    def save(self, path: str | Path) -> None:
        write_json(path, {
            "word2idx": self.word2idx,
            "idx2word": {str(i): w for i, w in enumerate(self.idx2word)},
            "idx": len(self.idx2word),
        })

    @classmethod
    def load(cls, path: str | Path) -> "Vocabulary":
        path = Path(path)
        if not path.is_file():
            raise HarnessError(f"vocabulary file not found: {path} (expected {VOCAB_LAYOUT})")
        data = read_json(path, VOCAB_LAYOUT)
        missing = [k for k in ("word2idx", "idx2word", "idx") if not isinstance(data, dict) or k not in data]
        if missing:
            raise HarnessError(f"{path}: not a vocabulary JSON: no {', '.join(map(repr, missing))}; "
                               f"expected {VOCAB_LAYOUT}")
        size, idx2word = data["idx"], data["idx2word"]
        if isinstance(size, bool) or not isinstance(size, int) or not isinstance(idx2word, dict):
            raise HarnessError(f"{path}: 'idx' must be the word count and 'idx2word' an object; "
                               f"expected {VOCAB_LAYOUT}")
        gap = next((i for i in range(size) if not isinstance(idx2word.get(str(i)), str)), None)
        if gap is not None:
            raise HarnessError(f"{path}: idx2word has no word for index {gap} ('idx' is {size}); "
                               f"expected {VOCAB_LAYOUT}")
        try:
            vocab = cls([idx2word[str(i)] for i in range(size)])
        except HarnessError as exc:
            raise HarnessError(f"{path}: {exc}") from None
        if data["word2idx"] != vocab.word2idx:
            raise HarnessError(f"{path}: word2idx and idx2word disagree")
        return vocab

    def check_built_from(self, train_captions: Iterable[str], other_captions: Iterable[str], where: str) -> None:
        """A supplied vocabulary must fit the training captions, and must not hold words that only
        dev/test captions contain (the leak of the public VSE++ code)."""
        train_captions = list(train_captions)
        self.check_covers(train_captions, where)
        train_words = {tok for cap in train_captions for tok in tokenize(cap)}
        leaked = sorted({tok for cap in other_captions for tok in tokenize(cap)
                         if tok in self.word2idx and tok not in train_words})
        if leaked:
            raise HarnessError(
                f"{where}: {len(leaked)} vocabulary words occur only in dev/test captions (e.g. {', '.join(leaked[:5])}); "
                f"it was built with held-out captions. Remove the setting to build one from the training split")

    def check_covers(self, captions: Iterable[str], where: str, max_unk_rate: float = 0.2) -> None:
        """Fail when a vocabulary plainly does not belong to these captions (wrong dataset)."""
        total = unknown = 0
        for cap in captions:
            for tok in tokenize(cap):
                total += 1
                unknown += tok not in self.word2idx
        if total and unknown / total > max_unk_rate:
            raise HarnessError(
                f"{where}: {unknown}/{total} caption tokens ({100 * unknown / total:.0f}%) are not in the "
                f"vocabulary; it was built for other captions (rebuild it from this dataset's training split)")


def pad_tokens(token_lists: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, longest) token ids padded with 0 (``<pad>``), and the (B,) lengths."""
    lengths = torch.tensor([len(t) for t in token_lists], dtype=torch.long)
    tokens = torch.zeros(len(token_lists), int(lengths.max()), dtype=torch.long)
    for row, t in enumerate(token_lists):
        tokens[row, : len(t)] = torch.tensor(t, dtype=torch.long)
    return tokens, lengths
