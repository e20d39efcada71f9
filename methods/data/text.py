"""Vocabulary (built from training captions only) and how captions become token ids.

A vocabulary is only meaningful with the tokenizer that built it (``methods.data.tokenizers``), so
the vocabulary file the harness writes records it, beside the dataset's captions tokenised once by
the vocabulary job: the jobs that read the file look captions up instead of importing nltk."""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from methods.data.tokenizers import Tokenizer
from methods.data.wordpiece import KIND as WORDPIECE, WordPieceVocabulary
from methods.errors import HarnessError
from methods.io import read_json, write_json

PAD, START, END, UNK = "<pad>", "<start>", "<end>", "<unk>"
SPECIALS = (PAD, START, END, UNK)
VOCAB_LAYOUT = ('{"word2idx": {word: index}, "idx2word": {"0": word, ...}, "idx": word count} '
                '(SCAN/SGRAF vocabulary JSON, starting with <pad> <start> <end> <unk>)')


class Vocabulary:
    """word <-> index map in the SCAN/SGRAF JSON layout (``word2idx``, ``idx2word``, ``idx``), with
    the tokenizer that reads captions for it and, optionally, captions already tokenised
    (``tokenized``: caption -> its tokens joined by single spaces; nltk's tokens hold no whitespace)."""

    kind = "words"

    def __init__(self, words: Sequence[str], tokenizer: Tokenizer, tokenized: Mapping[str, str] | None = None):
        if list(words[: len(SPECIALS)]) != list(SPECIALS):
            raise HarnessError(f"vocabulary must start with {SPECIALS}, got {list(words[:4])}")
        self.idx2word = list(words)
        self.word2idx = {w: i for i, w in enumerate(self.idx2word)}
        if len(self.word2idx) != len(self.idx2word):
            raise HarnessError("vocabulary has duplicate words")
        self.tokenizer = tokenizer
        self.tokenized = dict(tokenized or {})

    def __len__(self) -> int:
        return len(self.idx2word)

    def tokens(self, caption: str) -> list[str]:
        known = self.tokenized.get(caption)
        return known.split() if known is not None else self.tokenizer(caption)

    @classmethod
    def build(cls, captions: Iterable[str], threshold: int, tokenizer: Tokenizer) -> "Vocabulary":
        captions = list(captions)
        tokenized = {cap: tokenizer(cap) for cap in dict.fromkeys(captions)}
        counts = Counter(tok for cap in captions for tok in tokenized[cap])
        kept = sorted(w for w, c in counts.items() if c >= threshold and w not in SPECIALS)
        return cls(list(SPECIALS) + kept, tokenizer, {cap: " ".join(t) for cap, t in tokenized.items()})

    def with_tokenized(self, captions: Iterable[str]) -> "Vocabulary":
        """This vocabulary holding the tokens of ``captions`` too (the vocabulary job stores every
        split's captions, so that training and evaluation need not tokenise)."""
        new = {cap: " ".join(self.tokenizer(cap)) for cap in dict.fromkeys(captions) if cap not in self.tokenized}
        return Vocabulary(self.idx2word, self.tokenizer, {**self.tokenized, **new})

    def words_only(self) -> "Vocabulary":
        """This vocabulary without its tokenised captions: how a file from elsewhere (a configured
        ``datasets.<name>.vocab``) is used, so that no file decides how captions are read."""
        return Vocabulary(self.idx2word, self.tokenizer)

    def encode(self, caption: str) -> list[int]:
        unk = self.word2idx[UNK]
        ids = [self.word2idx.get(tok, unk) for tok in self.tokens(caption)]
        return [self.word2idx[START], *ids, self.word2idx[END]]

    def save(self, path: str | Path) -> None:
        write_json(path, {
            "word2idx": self.word2idx,
            "idx2word": {str(i): w for i, w in enumerate(self.idx2word)},
            "idx": len(self.idx2word),
            "tokenizer": self.tokenizer.spec(),
            "tokenized_captions": self.tokenized,
        })

    @classmethod
    def load(cls, path: str | Path, tokenizer: Tokenizer | None = None) -> "Vocabulary":
        """A vocabulary JSON. One the harness wrote records its tokenizer; a file from elsewhere
        (SCAN's, a user's) has none and is read with ``tokenizer`` (the dataset's)."""
        path = Path(path)
        if not path.is_file():
            raise HarnessError(f"vocabulary file not found: {path} (expected {VOCAB_LAYOUT})")
        return cls.from_json(read_json(path, VOCAB_LAYOUT), path, tokenizer)

    @classmethod
    def from_json(cls, data, path: Path, tokenizer: Tokenizer | None = None) -> "Vocabulary":
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
        recorded = Tokenizer.from_spec(data["tokenizer"], f"{path}: 'tokenizer'") if "tokenizer" in data else None
        if recorded is not None and tokenizer is not None and recorded != tokenizer:
            raise HarnessError(f"{path}: built with tokenizer {recorded.spec()}, but this dataset tokenises with "
                               f"{tokenizer.spec()}; delete the file to build it again")
        tokenized = data.get("tokenized_captions") or {}
        if not isinstance(tokenized, dict):
            raise HarnessError(f"{path}: 'tokenized_captions' must map captions to their space-joined tokens")
        try:
            vocab = cls([idx2word[str(i)] for i in range(size)], recorded or tokenizer, tokenized)
        except HarnessError as exc:
            raise HarnessError(f"{path}: {exc}") from None
        if data["word2idx"] != vocab.word2idx:
            raise HarnessError(f"{path}: word2idx and idx2word disagree")
        if vocab.tokenizer is None:
            raise HarnessError(f"{path}: records no tokenizer (a vocabulary from elsewhere or from an older "
                               f"harness); delete it to build it again, or configure it as datasets.<name>.vocab")
        return vocab

    def check_built_from(self, train_captions: Iterable[str], other_captions: Iterable[str], where: str) -> None:
        """A supplied vocabulary must fit the training captions, and must not hold words that only
        dev/test captions contain (the leak of the public VSE++ code)."""
        train_captions = list(train_captions)
        self.check_covers(train_captions, where)
        train_words = {tok for cap in train_captions for tok in self.tokens(cap)}
        leaked = sorted({tok for cap in other_captions for tok in self.tokens(cap)
                         if tok in self.word2idx and tok not in train_words})
        if leaked:
            raise HarnessError(
                f"{where}: {len(leaked)} vocabulary words occur only in dev/test captions (e.g. {', '.join(leaked[:5])}); "
                f"it was built with held-out captions. Remove the setting to build one from the training split")

    def check_covers(self, captions: Iterable[str], where: str, max_unk_rate: float = 0.2) -> None:
        """Fail when a vocabulary plainly does not belong to these captions (wrong dataset)."""
        total = unknown = 0
        for cap in captions:
            for tok in self.tokens(cap):
                total += 1
                unknown += tok not in self.word2idx
        if total and unknown / total > max_unk_rate:
            raise HarnessError(
                f"{where}: {unknown}/{total} caption tokens ({100 * unknown / total:.0f}%) are not in the "
                f"vocabulary; it was built for other captions (rebuild it from this dataset's training split)")


def load_vocabulary(path: str | Path, tokenizer: Tokenizer | None = None) -> "Vocabulary | WordPieceVocabulary":
    """The vocabulary file a run reads: the dataset's word vocabulary (``Vocabulary``), or a BERT
    encoder's WordPiece captions (``methods.data.wordpiece``), told apart by the file's ``kind``."""
    path = Path(path)
    if not path.is_file():
        raise HarnessError(f"vocabulary file not found: {path} (expected {VOCAB_LAYOUT})")
    data = read_json(path, VOCAB_LAYOUT)
    if isinstance(data, dict) and data.get("kind") == WORDPIECE:
        return WordPieceVocabulary.from_json(data, path)
    return Vocabulary.from_json(data, path, tokenizer)
