"""Caption augmentation of training captions, VSE-infinity's (Chen et al., CVPR 2021) as kdwonn/DivE
applies it (data.py ``tokenize``, ``--caption_drop_prob 0.2``): each word of a caption (not
``<start>`` / ``<end>``) is, with probability ``prob``, replaced by a ``<mask>`` token (a share
``mask`` of those), by a random token id (a share ``replace``), or deleted (the rest); DivE's
shares are 0.5, 0.1 and 0.4.

``<mask>`` is not a word of the vocabulary: like DivE, which appends it when it loads the
vocabulary, a model trained with masking gets one more token id, ``len(vocab)``
(``extra_tokens``); random replacements are drawn from every id, ``<mask>`` included, as
``random.randrange(len(vocab))`` does there. Evaluation never augments.

The random draws are torch's (``methods.training.data.augment_caption``: the training loader's
seeded stream); this module holds the rule and its parameters, which the DAG build checks.
"""
from __future__ import annotations

from dataclasses import dataclass


def extra_tokens(training_cfg: dict) -> int:
    """Token ids a model needs beyond the vocabulary: 1 (``<mask>``) when its training masks words,
    by caption augmentation or by masked prediction (``methods.data.masked_prediction``; one
    ``<mask>`` id shared by both)."""
    augment = training_cfg.get("caption_augment")
    masked = training_cfg.get("masked_prediction")
    return int((bool(augment) and augment["mask"] > 0) or (bool(masked) and masked["word_prob"] > 0))


@dataclass(frozen=True)
class CaptionAugmentation:
    prob: float
    mask: float
    replace: float
    vocab_size: int

    def __post_init__(self) -> None:
        if not (0 <= self.prob <= 1 and self.mask >= 0 and self.replace >= 0 and self.mask + self.replace <= 1):
            raise ValueError(f"caption augmentation needs prob in [0, 1] and mask + replace <= 1, got "
                             f"prob {self.prob}, mask {self.mask}, replace {self.replace}")

    @property
    def mask_id(self) -> int:
        return self.vocab_size   # the one id past the vocabulary

    @property
    def n_ids(self) -> int:
        """The ids a replacement is drawn from: the vocabulary's, and ``<mask>`` when words are masked."""
        return self.vocab_size + (1 if self.mask > 0 else 0)

    @classmethod
    def from_config(cls, training_cfg: dict, vocab_size: int) -> "CaptionAugmentation | None":
        augment = training_cfg.get("caption_augment")
        if not augment:
            return None
        return cls(augment["prob"], augment["mask"], augment["replace"], vocab_size)

    def apply(self, tokens: list[int], draws: list[float], replacements: list[int]) -> list[int]:
        """``tokens`` (``<start>``, the words, ``<end>``: ``Vocabulary.encode``) augmented word by
        word: ``draws`` holds one uniform [0, 1) per word, ``replacements`` one id below ``n_ids``."""
        words = tokens[1:-1]
        if not words:
            return list(tokens)
        out = [tokens[0]]
        for word, u, random_id in zip(words, draws, replacements, strict=True):
            if u >= self.prob:
                out.append(word)
                continue
            share = u / self.prob                                  # uniform on [0, 1) given an augmented word
            if share < self.mask:
                out.append(self.mask_id)
            elif share < self.mask + self.replace:
                out.append(random_id)
            # else: deleted
        out.append(tokens[-1])
        return out
