"""Caption tokenisers by name: what the sources' code runs on a raw caption.

- ``nltk``: ``nltk.tokenize.word_tokenize(caption.lower())``, the call of every caption model's
  public code (kuanghuei/SCAN, fartashf/vsepp, KunpengLi1994/VSRN, Paranioar/SGRAF, yalesong/pvse,
  kdwonn/DivE: data.py and vocab.py). With its default arguments word_tokenize first splits the text
  into sentences with nltk's Punkt model for English, then runs nltk's word tokenizer on each
  sentence. The model (``punkt_tab``, plain-text tables: nothing is unpickled) is read from an
  ``nltk_data`` folder given in config; nothing is downloaded.
- ``nltk_line``: the same word tokenizer on the lowercased caption as one line
  (``word_tokenize(..., preserve_line=True)``); needs no model. It differs from ``nltk`` only on a
  caption holding more than one sentence: the period that ends an inner sentence stays on its word
  ("a dog runs. it jumps ." -> ``runs.``), where Punkt would split it off. The synthetic captions
  are single sentences (the two agree on every one of them; tests/test_tokenizers.py).

The tokens depend on nltk's version (its word tokenizer's rules changed over the years; the
sources did not record theirs): the harness pins one in pyproject.toml.

nltk's import takes 1.5-3 s (it loads scipy.stats and most of nltk), more than a small training
job's epoch: the vocabulary job tokenises every caption of the dataset once and stores the tokens
in the vocabulary file (``methods.data.text``); jobs that read it look captions up there and import
nltk only for a caption it does not hold (``_nltk``).
"""
from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Mapping

from methods.errors import HarnessError

TOKENIZERS = ("nltk", "nltk_line")
# how a source's code may turn captions into tokens (a method file's source.tokenizer): a dataset
# tokenizer's way, or a BERT's WordPiece (methods.data.wordpiece), which runs whatever the dataset's is
SOURCE_TOKENIZERS = (*TOKENIZERS, "wordpiece")
PUNKT_FILES = ("collocations.tab", "sent_starters.txt", "abbrev_types.txt", "ortho_context.tab")
PUNKT_SUBDIR = Path("tokenizers") / "punkt_tab" / "english"
PUNKT_HOWTO = "python -m nltk.downloader -d <folder> punkt_tab"


@cache
def _nltk():
    """nltk's word tokenizer and Punkt module, imported on first use (see the module docstring)."""
    from nltk.tokenize import punkt
    from nltk.tokenize.destructive import NLTKWordTokenizer
    return NLTKWordTokenizer(), punkt


def punkt_dir(nltk_data: str | Path, where: str) -> Path:
    """The English Punkt model folder under an ``nltk_data`` folder, checked file by file."""
    root = Path(nltk_data).expanduser()
    if not root.is_dir():
        raise HarnessError(f"{where}: folder not found: {root} (an nltk_data folder holding "
                           f"{PUNKT_SUBDIR}/; make one with: {PUNKT_HOWTO})")
    model = root / PUNKT_SUBDIR
    missing = [f for f in PUNKT_FILES if not (model / f).is_file()]
    if missing:
        raise HarnessError(f"{where}: {model} lacks {', '.join(missing)} (nltk's punkt_tab model for "
                           f"English; make it with: {PUNKT_HOWTO})")
    return model


class Tokenizer:
    """A named tokeniser (``TOKENIZERS``); ``nltk`` needs the Punkt model folder ``punkt``."""

    def __init__(self, kind: str, punkt: str | Path | None = None):
        if kind not in TOKENIZERS:
            raise HarnessError(f"tokenizer '{kind}' is not one of {', '.join(TOKENIZERS)}")
        if (kind == "nltk") != (punkt is not None):
            raise HarnessError(f"tokenizer '{kind}': " + ("needs the Punkt model folder (nltk_data)" if kind == "nltk"
                                                          else "reads no Punkt model"))
        self.kind = kind
        self.punkt = Path(punkt) if punkt is not None else None
        self._sentences = None

    @classmethod
    def from_dataset(cls, ds: Mapping, nltk_data: str | Path | None, where: str) -> "Tokenizer":
        """A dataset's tokenizer (``datasets.<name>.tokenizer``, Punkt from ``datasets.<name>.nltk_data``)."""
        kind = ds["tokenizer"]
        if kind != "nltk":
            return cls(kind)
        if not nltk_data:
            raise HarnessError(f"{where}.nltk_data: not set; tokenizer 'nltk' (word_tokenize as the sources call "
                               f"it) splits sentences with nltk's Punkt model: give the nltk_data folder "
                               f"holding {PUNKT_SUBDIR}/ ({PUNKT_HOWTO}), or set {where}.tokenizer: nltk_line "
                               f"(one line per caption; listed with every row)")
        return cls(kind, punkt_dir(nltk_data, f"{where}.nltk_data"))

    @classmethod
    def from_spec(cls, spec: Mapping, where: str) -> "Tokenizer":
        if not isinstance(spec, Mapping) or "kind" not in spec:
            raise HarnessError(f"{where}: tokenizer must be an object with 'kind' (one of {', '.join(TOKENIZERS)})")
        return cls(spec["kind"], spec.get("punkt"))

    def spec(self) -> dict:
        return {"kind": self.kind, **({"punkt": str(self.punkt)} if self.punkt is not None else {})}

    def __eq__(self, other) -> bool:
        return isinstance(other, Tokenizer) and self.spec() == other.spec()

    def __repr__(self) -> str:
        return f"Tokenizer({self.kind!r}{f', {str(self.punkt)!r}' if self.punkt else ''})"

    def __call__(self, caption: str) -> list[str]:
        words, punkt = _nltk()
        text = caption.lower()
        if self.kind == "nltk_line":
            return words.tokenize(text)
        if self._sentences is None:  # plain-text tables, read once per process
            self._sentences = punkt.PunktSentenceTokenizer(punkt.load_punkt_params(str(self.punkt)))
        return [tok for sentence in self._sentences.tokenize(text) for tok in words.tokenize(sentence)]
