"""Caption augmentation of training captions, VSE-infinity's (Chen et al., CVPR 2021) as kdwonn/DivE
applies it (data.py ``tokenize``, ``--caption_drop_prob 0.2``): each word of a caption (not
``<start>`` / ``<end>``) is, with probability ``prob``, replaced by a ``<mask>`` token (a share
``mask`` of those), by a random token id (a share ``replace``), or deleted (the rest); DivE's
shares are 0.5, 0.1 and 0.4.

``<mask>`` is not a word of the vocabulary: like DivE, which appends it when it loads the
vocabulary, a model trained with masking gets one more token id, ``len(vocab)``
(``extra_tokens``); random replacements are drawn from every id, ``<mask>`` included, as
``random.randrange(len(vocab))`` does there. Evaluation never augments.
"""
from __future__ import annotations

import torch


def extra_tokens(training_cfg: dict) -> int:
    """Token ids a model needs beyond the vocabulary: 1 (``<mask>``) when its training masks words,
    by caption augmentation or by masked prediction (``methods.data.masked_prediction``; one
    ``<mask>`` id shared by both)."""
    augment = training_cfg.get("caption_augment")
    masked = training_cfg.get("masked_prediction")
    return int((bool(augment) and augment["mask"] > 0) or (bool(masked) and masked["word_prob"] > 0))


class CaptionAugmentation:
    def __init__(self, prob: float, mask: float, replace: float, vocab_size: int):
        if not (0 <= prob <= 1 and mask >= 0 and replace >= 0 and mask + replace <= 1):
            raise ValueError(f"caption augmentation needs prob in [0, 1] and mask + replace <= 1, got "
                             f"prob {prob}, mask {mask}, replace {replace}")
        self.prob, self.mask, self.replace = prob, mask, replace
        self.mask_id = vocab_size                                   # the one id past the vocabulary
        self.n_ids = vocab_size + (1 if mask > 0 else 0)

    @classmethod
    def from_config(cls, training_cfg: dict, vocab_size: int) -> "CaptionAugmentation | None":
        augment = training_cfg.get("caption_augment")
        if not augment:
            return None
        return cls(augment["prob"], augment["mask"], augment["replace"], vocab_size)

    def __call__(self, tokens: list[int], generator: torch.Generator | None = None) -> list[int]:
        """``tokens``: ``<start>``, the words, ``<end>`` (``Vocabulary.encode``)."""
        words = tokens[1:-1]
        if not words:
            return list(tokens)
        draws = torch.rand(len(words), generator=generator).tolist()
        replacements = torch.randint(self.n_ids, (len(words),), generator=generator).tolist()
        out = [tokens[0]]
        for word, u, random_id in zip(words, draws, replacements):
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
