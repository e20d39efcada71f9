"""The pickled vocabularies of VSE++, VSRN and PVSE (each code base's vocab.py: a ``Vocabulary``
with ``word2idx``, ``idx2word`` {index: word} and ``idx``, pickled as ``__main__.Vocabulary`` when
vocab.py runs as a script, ``vocab.Vocabulary`` when imported), read without running them, and
the evaluation transform their images must get."""
from __future__ import annotations

from pathlib import Path

from methods.data.text import SPECIALS, Vocabulary
from methods.data.tokenizers import Tokenizer
from methods.errors import HarnessError
from methods.released.safe_load import PickledObject, load_pickle

VOCABULARY_CLASSES = frozenset({"__main__.Vocabulary", "vocab.Vocabulary"})


def read_pickled_vocabulary(path: str | Path, tokenizer: Tokenizer, code: str) -> Vocabulary:
    """``code``'s vocabulary pickle as the project's ``Vocabulary``, words in their id order; the
    special tokens must be at the ids where the project's captions put them."""
    where = str(path)
    loaded = load_pickle(path, VOCABULARY_CLASSES)
    state = loaded.state if isinstance(loaded, PickledObject) else None
    if not isinstance(state, dict) or not all(k in state for k in ("word2idx", "idx2word", "idx")):
        raise HarnessError(f"{where}: not a {code} vocabulary (expected a pickled Vocabulary with word2idx, "
                           f"idx2word and idx, as {code}'s vocab.py writes it)")
    size, idx2word, word2idx = state["idx"], state["idx2word"], state["word2idx"]
    if isinstance(size, bool) or not isinstance(size, int) or not isinstance(idx2word, dict) \
            or not isinstance(word2idx, dict):
        raise HarnessError(f"{where}: 'idx' must be the word count, 'idx2word' and 'word2idx' dicts")
    gap = next((i for i in range(size) if not isinstance(idx2word.get(i), str)), None)
    if gap is not None or len(idx2word) != size:
        raise HarnessError(f"{where}: idx2word has {len(idx2word)} words for idx {size}"
                           + (f" and no word for index {gap}" if gap is not None else ""))
    words = [idx2word[i] for i in range(size)]
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


def check_eval_transform(dataset_cfg: dict, transform: tuple[int, int], where: str) -> None:
    """The dataset's image transform (``features: resize, crop``) is the one their evaluation runs."""
    features = dataset_cfg["features"]
    if (features["resize"], features["crop"]) != transform:
        raise HarnessError(f"{where}: their evaluation resizes images to {transform[0]} and crops the centre "
                           f"{transform[1]}, but datasets.<name>.features has resize {features['resize']}, "
                           f"crop {features['crop']}: set those to evaluate their model as their code does")
