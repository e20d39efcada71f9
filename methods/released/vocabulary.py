"""The released vocabularies: the pickles of VSE++, VSRN and PVSE (each code base's vocab.py: a
``Vocabulary`` with ``word2idx``, ``idx2word`` {index: word} and ``idx``, pickled as
``__main__.Vocabulary`` when vocab.py runs as a script, ``vocab.Vocabulary`` when imported) and the
JSON of SCAN and SGRAF (vocab.py ``serialize_vocab``: the same three keys, ``idx2word`` keyed by
the index as a string), each read in a bounded child without running it; and the evaluation
transform their images must get.

A released vocabulary gives words and their ids, nothing else: a key beyond the three (a
``tokenized_captions`` that would decide how the evaluation captions are tokenised, a
``tokenizer``) is refused by name, and the run's vocabulary is built from the checked words alone,
read with the dataset's tokenizer.
"""
from __future__ import annotations

from pathlib import Path

from methods.data.text import SPECIALS, Vocabulary
from methods.data.tokenizers import Tokenizer
from methods.errors import HarnessError
from methods.untrusted.safe_load import PickledObject, ReaderLimits, load_json, load_pickle

VOCABULARY_CLASSES = frozenset({"__main__.Vocabulary", "vocab.Vocabulary"})
KEYS = ("word2idx", "idx2word", "idx")


def vocabulary_from_maps(state, tokenizer: Tokenizer, code: str, where: str, index_keys: type) -> Vocabulary:
    """The project's ``Vocabulary`` of a released one's ``{'word2idx', 'idx2word', 'idx'}``
    (``index_keys``: the type of idx2word's keys, int in a pickle, str in a JSON), words in their
    id order; the special tokens must be at the ids where the project's captions put them."""
    if not isinstance(state, dict) or not all(k in state for k in KEYS):
        raise HarnessError(f"{where}: not a {code} vocabulary (expected word2idx, idx2word and idx, as {code} "
                           f"writes them)")
    extra = sorted(str(k) for k in state if k not in KEYS)
    if extra:
        raise HarnessError(f"{where}: refused: it holds {', '.join(map(repr, extra[:3]))} beside word2idx, idx2word "
                           f"and idx; a released vocabulary gives words and ids only, and the harness decides how "
                           f"captions are read")
    size, idx2word, word2idx = state["idx"], state["idx2word"], state["word2idx"]
    if type(size) is not int or not isinstance(idx2word, dict) or not isinstance(word2idx, dict):
        raise HarnessError(f"{where}: 'idx' must be the word count, 'idx2word' and 'word2idx' dicts")
    key = str if index_keys is str else (lambda i: i)
    gap = next((i for i in range(size) if not isinstance(idx2word.get(key(i)), str)), None)
    if gap is not None or len(idx2word) != size:
        raise HarnessError(f"{where}: idx2word has {len(idx2word)} words for idx {size}"
                           + (f" and no word for index {gap}" if gap is not None else ""))
    words = [idx2word[key(i)] for i in range(size)]
    if words[:len(SPECIALS)] != list(SPECIALS):   # their data.py looks the specials up by name; the project by id
        raise HarnessError(f"{where}: the vocabulary starts with {words[:len(SPECIALS)]}, not {list(SPECIALS)} "
                           f"at ids 0-{len(SPECIALS) - 1}, where the project's captions put them")
    try:
        vocab = Vocabulary(words, tokenizer)
    except HarnessError as exc:   # duplicate words
        raise HarnessError(f"{where}: {exc}") from None
    if word2idx != vocab.word2idx:   # their encoders read word2idx: it must say what idx2word says
        raise HarnessError(f"{where}: word2idx and idx2word disagree")
    return vocab


def read_pickled_vocabulary(path: str | Path, tokenizer: Tokenizer, code: str, limits: ReaderLimits) -> Vocabulary:
    """``code``'s vocabulary pickle as the project's ``Vocabulary``."""
    loaded = load_pickle(path, VOCABULARY_CLASSES, limits)
    state = loaded.state if isinstance(loaded, PickledObject) else None
    return vocabulary_from_maps(state, tokenizer, code, str(path), int)


def read_vocabulary_json(path: str | Path, tokenizer: Tokenizer, code: str, limits: ReaderLimits) -> Vocabulary:
    """A vocabulary JSON of SCAN's layout (``code``'s) as the project's ``Vocabulary``."""
    return vocabulary_from_maps(load_json(path, limits), tokenizer, code, str(path), str)


def check_eval_transform(dataset_cfg: dict, transform: tuple[int, int], where: str) -> None:
    """The dataset's image transform (``features: resize, crop``) is the one their evaluation runs."""
    features = dataset_cfg["features"]
    if (features["resize"], features["crop"]) != transform:
        raise HarnessError(f"{where}: their evaluation resizes images to {transform[0]} and crops the centre "
                           f"{transform[1]}, but datasets.<name>.features has resize {features['resize']}, "
                           f"crop {features['crop']}: set those to evaluate their model as their code does")
