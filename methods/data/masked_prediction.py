"""Masked prediction targets of training batches, as the public code of the label-wise study
(Yang et al., IJCAI 2021; utils/data_m.py ``make_caption`` / ``mask_image``) draws them:

- words: each word of a text (not ``<start>`` / ``<end>``) is, with probability ``word_prob``,
  replaced by ``<mask>``; its target is the original token id (``IGNORE``, -100, elsewhere);
- regions: each region of an image row is *selected* with probability ``region_prob`` and its
  target is the detector class of that region (``IGNORE`` elsewhere); the region's feature is
  NOT masked, as in the public code.

``<mask>`` is the one token id past the vocabulary, ``len(vocab)``, shared with caption
augmentation (``methods.data.caption_augment.extra_tokens`` counts it once). Words caption
augmentation has already turned into ``<mask>`` are not masked again (no target).

Draws come from the global torch RNG (as caption augmentation's), so the training loop's
checkpointed RNG state and its seeded DataLoader workers make a resumed run draw the same masks.
"""
from __future__ import annotations

import numpy as np
import torch

IGNORE = -100  # the target of an unmasked word / unselected region (torch's cross-entropy ignore_index)


class MaskedPrediction:
    def __init__(self, word_prob: float, region_prob: float, mask_id: int):
        if not (0 <= word_prob <= 1 and 0 <= region_prob <= 1):
            raise ValueError(f"masked prediction needs word_prob and region_prob in [0, 1], got "
                             f"{word_prob}, {region_prob}")
        self.word_prob, self.region_prob, self.mask_id = word_prob, region_prob, mask_id

    @classmethod
    def from_config(cls, training_cfg: dict, vocab_size: int) -> "MaskedPrediction | None":
        """``training.masked_prediction: {word_prob, region_prob}``; None when absent."""
        masked = training_cfg.get("masked_prediction")
        if not masked:
            return None
        return cls(masked["word_prob"], masked["region_prob"], vocab_size)

    def mask_words(self, tokens: list[int], generator: torch.Generator | None = None) -> tuple[list[int], list[int]]:
        """(tokens with masked words, targets): ``tokens`` is ``<start>``, the words, ``<end>``;
        targets has one entry per token, the original id where ``<mask>`` was put, else IGNORE."""
        out, targets = list(tokens), [IGNORE] * len(tokens)
        words = len(tokens) - 2
        if words <= 0:
            return out, targets
        draws = torch.rand(words, generator=generator).tolist()
        for pos, u in enumerate(draws, start=1):
            if u < self.word_prob and tokens[pos] != self.mask_id:
                out[pos], targets[pos] = self.mask_id, tokens[pos]
        return out, targets

    def select_regions(self, classes: np.ndarray, generator: torch.Generator | None = None) -> torch.Tensor:
        """long (U, R): the detector class of each selected region of ``classes`` (U, R), else IGNORE."""
        classes = torch.from_numpy(np.asarray(classes, dtype=np.int64))
        chosen = torch.rand(classes.shape, generator=generator) < self.region_prob
        return torch.where(chosen, classes, torch.full_like(classes, IGNORE))
