"""Captions as a BERT model reads them: WordPiece ids, tokenised once per dataset and text encoder.

The sources' BERT caption path (woodfrog/vse_infty master, ``lib/datasets/image_caption.py``;
kdwonn/DivE ``data.py``) runs ``BertTokenizer``'s basic tokenizer on the raw caption (lower case
for an uncased model, accents stripped, punctuation split off), then its WordPiece tokenizer on each
word, and wraps the ids in ``[CLS]`` ... ``[SEP]``. Its caption augmentation works word by word:
a chosen word's pieces are all masked, all replaced, or all deleted. So the cache keeps each
caption's words as groups of piece ids.

The tokenisation job (``python -m methods.data.wordpiece_captions``) reads the encoder folder's
``vocab.txt`` and ``tokenizer_config.json`` with ``transformers``' ``BertTokenizer`` (plain text and
JSON: nothing is executed) and writes ``<results>/<dataset>/text/<encoder>.json``; training and
evaluation read that file (``WordPieceVocabulary``) and never import ``transformers``' tokenizer.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from methods.errors import HarnessError
from methods.io import read_json, write_json

KIND = "wordpiece"
PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIALS = (PAD, UNK, CLS, SEP, MASK)
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")   # the first found is read (safetensors first)
LAYOUT = ('a BERT folder as transformers saves one: config.json (model_type "bert"), vocab.txt (one piece per '
          'line, [PAD] first) and model.safetensors or pytorch_model.bin')


def _vocab_lines(path: Path) -> list[str]:
    """The pieces of a vocab.txt as BertTokenizer's load_vocab reads them: one per line."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f.readlines()]


def check_bert_folder(folder: str | Path, where: str, weights: bool = True) -> dict:
    """A configured BERT folder, checked before any job reads it: its ``config.json`` (a BERT's),
    its ``vocab.txt`` (as many pieces as the model's embedding rows, ``[PAD]`` at id 0, as the
    sources' attention mask ``ids != 0`` assumes) and a weights file (unless ``weights`` is False:
    a model whose weights come from elsewhere). Returns the parsed config."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise HarnessError(f"{where}: folder not found: {root} ({LAYOUT})")
    config_path = root / "config.json"
    if not config_path.is_file():
        raise HarnessError(f"{where}: {root} has no config.json ({LAYOUT})")
    config = read_json(config_path, "a transformers model config (JSON object)")
    if not isinstance(config, dict) or config.get("model_type") != "bert":
        found = config.get("model_type") if isinstance(config, dict) else type(config).__name__
        raise HarnessError(f"{where}: {config_path} is not a BERT's config (model_type {found!r}, expected 'bert')")
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "max_position_embeddings"):
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise HarnessError(f"{where}: {config_path}: '{key}' must be a positive integer, got {value!r}")
    vocab_path = root / "vocab.txt"
    if not vocab_path.is_file():
        raise HarnessError(f"{where}: {root} has no vocab.txt ({LAYOUT})")
    pieces = _vocab_lines(vocab_path)
    if len(pieces) != config["vocab_size"]:
        raise HarnessError(f"{where}: {vocab_path} holds {len(pieces)} pieces but {config_path} says vocab_size "
                           f"{config['vocab_size']}: the vocabulary is not this model's")
    missing = [s for s in SPECIALS if s not in pieces]
    if missing:
        raise HarnessError(f"{where}: {vocab_path} lacks {', '.join(missing)} (a BERT WordPiece vocabulary has them)")
    if pieces[0] != PAD:
        raise HarnessError(f"{where}: {vocab_path}: id 0 is {pieces[0]!r}, not {PAD} (the sources mask ids equal to 0)")
    if weights and not any((root / name).is_file() for name in WEIGHT_FILES):
        raise HarnessError(f"{where}: {root} has no weights file ({' or '.join(WEIGHT_FILES)})")
    return config


def weights_file(folder: str | Path) -> Path:
    root = Path(folder).expanduser()
    for name in WEIGHT_FILES:
        if (root / name).is_file():
            return root / name
    raise HarnessError(f"{root}: no weights file ({' or '.join(WEIGHT_FILES)})")


class WordPieceVocabulary:
    """A BERT's WordPiece vocabulary with captions tokenised by its tokenizer: ``encode`` gives
    ``[CLS]`` + the pieces + ``[SEP]``, ``encode_words`` the pieces grouped per word (what caption
    augmentation works on). Its ``[MASK]`` is one of its pieces: a model reading it needs no id
    past the vocabulary (``extra_tokens`` 0)."""

    kind = KIND

    def __init__(self, pieces: Sequence[str], encoder: str, captions: Mapping[str, Sequence[Sequence[int]]]):
        self.idx2word = list(pieces)
        self.word2idx = {w: i for i, w in enumerate(self.idx2word)}
        missing = [s for s in SPECIALS if s not in self.word2idx]
        if missing or self.word2idx.get(PAD) != 0:
            raise HarnessError(f"WordPiece vocabulary of {encoder}: needs {', '.join(SPECIALS)} with {PAD} at id 0")
        self.encoder = encoder
        self.captions = {cap: [list(word) for word in words] for cap, words in captions.items()}
        self.cls_id, self.sep_id, self.mask_id = self.word2idx[CLS], self.word2idx[SEP], self.word2idx[MASK]
        self.unk_id = self.word2idx[UNK]

    def __len__(self) -> int:
        return len(self.idx2word)

    def encode_words(self, caption: str) -> list[list[int]]:
        words = self.captions.get(caption)
        if words is None:
            raise HarnessError(f"caption not tokenised for {self.encoder} (the tokenisation job writes every "
                               f"split's captions): {caption[:80]!r}")
        return [list(w) for w in words]

    def encode(self, caption: str) -> list[int]:
        return [self.cls_id, *(i for word in self.encode_words(caption) for i in word), self.sep_id]

    def tokens(self, caption: str) -> list[str]:
        return [self.idx2word[i] for word in self.encode_words(caption) for i in word]

    def check_covers(self, captions: Iterable[str], where: str, max_unk_rate: float = 0.2) -> None:
        total = unknown = 0
        for cap in captions:
            for word in self.encode_words(cap):
                total += len(word)
                unknown += sum(i == self.unk_id for i in word)
        if total and unknown / total > max_unk_rate:
            raise HarnessError(f"{where}: {unknown}/{total} caption pieces ({100 * unknown / total:.0f}%) are "
                               f"{UNK}: the encoder's vocabulary does not fit these captions")

    def save(self, path: str | Path) -> None:
        write_json(path, {"kind": KIND, "encoder": self.encoder, "idx2word": self.idx2word,
                          "tokenized_captions": self.captions})

    @classmethod
    def from_json(cls, data: dict, path: Path) -> "WordPieceVocabulary":
        if not isinstance(data.get("idx2word"), list) or not isinstance(data.get("tokenized_captions"), dict) \
                or not isinstance(data.get("encoder"), str):
            raise HarnessError(f"{path}: not a WordPiece caption file (kind, encoder, idx2word, tokenized_captions)")
        try:
            return cls(data["idx2word"], data["encoder"], data["tokenized_captions"])
        except HarnessError as exc:
            raise HarnessError(f"{path}: {exc}") from None


def tokenize_captions(folder: str | Path, captions: Iterable[str]) -> tuple[list[str], dict[str, list[list[int]]]]:
    """(the folder's pieces, caption -> its words' piece ids), as the sources' ``process_caption``
    computes them before augmentation: ``basic_tokenizer.tokenize`` then
    ``wordpiece_tokenizer.tokenize`` per word."""
    from transformers import BertTokenizer   # the tokenisation job only (module docstring)

    root = Path(folder).expanduser()
    tokenizer = BertTokenizer.from_pretrained(str(root), local_files_only=True)
    pieces = [tokenizer.convert_ids_to_tokens(i) for i in range(len(tokenizer.vocab))]
    out = {}
    for caption in dict.fromkeys(captions):
        words = tokenizer.basic_tokenizer.tokenize(caption)
        out[caption] = [tokenizer.convert_tokens_to_ids(tokenizer.wordpiece_tokenizer.tokenize(w)) for w in words]
    return pieces, out
