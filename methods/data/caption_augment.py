"""Caption augmentation of training captions, VSE-infinity's (Chen et al., CVPR 2021) as kdwonn/DivE
applies it (data.py ``tokenize``, ``--caption_drop_prob 0.2``): each word of a caption (not
``<start>`` / ``<end>``) is, with probability ``prob``, replaced by a ``<mask>`` token (a share
``mask`` of those), by a random token id (a share ``replace``), or deleted (the rest); DivE's
shares are 0.5, 0.1 and 0.4.

``<mask>`` is not a word of the vocabulary: like DivE, which appends it when it loads the
vocabulary, a model trained with masking gets one more token id, ``len(vocab)``
(``extra_tokens``); random replacements are drawn from every id, ``<mask>`` included, as
``random.randrange(len(vocab))`` does there. Evaluation never augments.

A BERT's WordPiece captions (``methods.data.wordpiece``) are augmented the same way, word by word
over each word's pieces (woodfrog/vse_infty master, ``process_caption``), with the vocabulary's own
``[MASK]`` and no id past it.

The random draws are torch's (``methods.training.data.augment_caption``: the training loader's
seeded stream); this module holds the rule and its parameters, which the DAG build checks.
"""
from __future__ import annotations

from dataclasses import dataclass


def extra_tokens(training_cfg: dict, text_cfg: dict | None = None) -> int:
    """Token ids a model needs beyond the vocabulary: 1 (``<mask>``) when its training masks words,
    by caption augmentation or by masked prediction (``methods.data.masked_prediction``; one
    ``<mask>`` id shared by both); none for a BERT text encoder (``text_cfg`` of kind bert), whose
    vocabulary holds its ``[MASK]``."""
    if text_cfg is not None and text_cfg.get("kind") == "bert":
        return 0
    augment = training_cfg.get("caption_augment")
    masked = training_cfg.get("masked_prediction")
    return int((bool(augment) and augment["mask"] > 0) or (bool(masked) and masked["word_prob"] > 0))


@dataclass(frozen=True)
class CaptionAugmentation:
    prob: float
    mask: float
    replace: float
    vocab_size: int
    # a vocabulary that holds a mask token (BERT's [MASK]) gives its id; None: ``<mask>`` is the id
    # past the vocabulary (the word vocabularies)
    mask_token: int | None = None

    def __post_init__(self) -> None:
        if not (0 <= self.prob <= 1 and self.mask >= 0 and self.replace >= 0 and self.mask + self.replace <= 1):
            raise ValueError(f"caption augmentation needs prob in [0, 1] and mask + replace <= 1, got "
                             f"prob {self.prob}, mask {self.mask}, replace {self.replace}")

    @property
    def mask_id(self) -> int:
        return self.vocab_size if self.mask_token is None else self.mask_token

    @property
    def n_ids(self) -> int:
        """The ids a replacement is drawn from: the vocabulary's, and ``<mask>`` when words are masked
        with an id past it (``random.choice(list(tokenizer.vocab.keys()))`` for a BERT: its pieces)."""
        return self.vocab_size + (1 if self.mask > 0 and self.mask_token is None else 0)

    @classmethod
    def from_config(cls, training_cfg: dict, vocab_size: int, mask_token: int | None = None) -> "CaptionAugmentation | None":
        augment = training_cfg.get("caption_augment")
        if not augment:
            return None
        return cls(augment["prob"], augment["mask"], augment["replace"], vocab_size, mask_token)

    def apply_words(self, words: list[list[int]], draws: list[float], replacements: list[int]) -> list[int]:
        """The pieces of ``words`` (each word a group of piece ids; one id each for a word
        vocabulary) augmented word by word: ``draws`` holds one uniform [0, 1) per word,
        ``replacements`` one id below ``n_ids`` per piece. A chosen word has all its pieces masked,
        all replaced (each by its own draw) or all deleted, as the sources' ``process_caption``."""
        if sum(len(w) for w in words) != len(replacements) or len(words) != len(draws):
            raise ValueError(f"{len(words)} words of {sum(len(w) for w in words)} pieces, but {len(draws)} draws "
                             f"and {len(replacements)} replacement ids")
        out, piece = [], 0
        for word, u in zip(words, draws):
            ids, piece = replacements[piece:piece + len(word)], piece + len(word)
            if u >= self.prob:
                out.extend(word)
                continue
            share = u / self.prob                                  # uniform on [0, 1) given an augmented word
            if share < self.mask:
                out.extend([self.mask_id] * len(word))
            elif share < self.mask + self.replace:
                out.extend(ids)
            # else: deleted
        return out

    def apply(self, tokens: list[int], draws: list[float], replacements: list[int]) -> list[int]:
        """``tokens`` (``<start>``, the words, ``<end>``: ``Vocabulary.encode``) augmented word by
        word (``apply_words``, one id per word); the specials stay."""
        if len(tokens) <= 2:
            return list(tokens)
        return [tokens[0], *self.apply_words([[t] for t in tokens[1:-1]], draws, replacements), tokens[-1]]


@dataclass(frozen=True)
class CaptionUnkDrop:
    """PCME's caption drop (naver-ai/pcme datasets/_transforms.py ``tokenize``, ``caption_drop_prob``
    0.1; ``training.caption_drop``): each word of a training caption becomes ``<unk>`` with
    probability ``prob`` (kept when a uniform draw exceeds it), then int(words x prob) words are
    deleted one after another at uniformly drawn positions (``random.randrange`` of the words
    left); ``<start>`` and ``<end>`` stay. Evaluation never drops."""

    prob: float
    unk_id: int

    def __post_init__(self) -> None:
        if not 0 <= self.prob <= 1:
            raise ValueError(f"caption drop needs prob in [0, 1], got {self.prob}")

    @classmethod
    def from_config(cls, training_cfg: dict, unk_id: int) -> "CaptionUnkDrop | None":
        drop = training_cfg.get("caption_drop")
        return cls(drop["prob"], unk_id) if drop else None

    def deletions(self, n_words: int) -> int:
        return int(n_words * self.prob)

    def apply(self, tokens: list[int], draws: list[float], positions: list[float]) -> list[int]:
        """``tokens`` (``<start>``, the words, ``<end>``) with one uniform [0, 1) per word in ``draws``
        and one per deletion in ``positions`` (deletion i removes word int(u (n - i)) of the n - i left)."""
        words = tokens[1:-1]
        if len(draws) != len(words) or len(positions) != self.deletions(len(words)):
            raise ValueError(f"{len(words)} words take {len(words)} draws and {self.deletions(len(words))} "
                             f"positions, not {len(draws)} and {len(positions)}")
        words = [w if u > self.prob else self.unk_id for w, u in zip(words, draws)]
        for u in positions:
            words.pop(int(u * len(words)))
        return [tokens[0], *words, tokens[-1]]
