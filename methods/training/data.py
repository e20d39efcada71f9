"""Batches for training and validation.

Two batchings, chosen by ``training.batching``:
- ``captions``: each item is one caption and its image (VSE++/VSRN/SCAN style; an image may
  appear with several of its captions, or once);
- ``images``: each item is one image with all its texts_per_image captions (the ranking batches
  the metric-learning study uses for SmoothAP: B images x 5B captions).
The collate function builds the image rows of the batch and the (image rows x captions)
positive mask the losses take, as ``training.batch_positives`` says:
- ``diagonal``: one image row per caption, even when two captions of a batch share an image,
  and only the diagonal is positive (the public VSE++, VSRN, SCAN and SGRAF code: the second
  caption of an image and the repeated image row are negatives);
- ``same_image``: each image once, positive with every caption of it in the batch (the only
  meaning image batches can have).

The collate function also adds the split's labels (``image_labels`` of the image rows,
``text_labels`` of the captions) when it has them, and the masked-prediction targets
(``token_targets``, ``region_class_targets``; ``methods.data.masked_prediction``) when the method
config sets ``training.masked_prediction``.

Random draws (an image's crop and flip, a caption's augmentation and masked words, a batch's masked
regions) come from a seed of their own per item and epoch (``sample_seed``; ``for_epoch``), not
from a loader worker's random stream: a run's numbers are the same whatever the number of loader
workers, so that number can follow the job's cores.
"""
from __future__ import annotations

import contextlib
import hashlib
from typing import Iterator

import numpy as np
import torch
from torch.utils.data import Dataset

from methods.data.caption_augment import CaptionAugmentation, CaptionUnkDrop
from methods.data.inputs import CachedGridFeatures, CachedImageFeatures, SplitData
from methods.data.masked_prediction import IGNORE, MaskedPrediction
from methods.data.batches import feature_tensors, pad_tokens
from methods.data.text import UNK, Vocabulary
from methods.data.wordpiece import KIND as WORDPIECE
from methods.errors import HarnessError
from methods.features.images import ImageFiles


def sample_seed(epoch_seed: int, index: int) -> int:
    """The seed of item ``index``'s random draws in the epoch of ``epoch_seed``."""
    return int.from_bytes(hashlib.blake2b(f"{epoch_seed}:{index}".encode(), digest_size=8).digest(), "little") >> 1


@contextlib.contextmanager
def drawing_from(seed: int | None) -> Iterator[None]:
    """torch's CPU random draws in the block come from ``seed`` (None: the process's own stream),
    and the process's stream is left where it was (the model's dropout draws from it)."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)   # the CPU generator only: torch.manual_seed would reseed
        yield                                         # the GPU's too, which fork_rng(devices=[]) does not restore


def augment_caption(augment: CaptionAugmentation | CaptionUnkDrop, tokens: list[int],
                    generator: torch.Generator | None = None, words: list[list[int]] | None = None) -> list[int]:
    """``tokens`` (the specials around the pieces of ``words``; None: one id per word) augmented
    with draws from torch's stream (``generator``, else the process's): a uniform per word, then a
    replacement id per piece (``CaptionAugmentation``) or a uniform per deletion (``CaptionUnkDrop``)."""
    if isinstance(augment, CaptionUnkDrop):
        n_words = len(tokens) - 2
        draws = torch.rand(n_words, generator=generator).tolist()
        return augment.apply(tokens, draws, torch.rand(augment.deletions(n_words), generator=generator).tolist())
    words = [[t] for t in tokens[1:-1]] if words is None else words
    if not words:
        return list(tokens)
    draws = torch.rand(len(words), generator=generator).tolist()
    replacements = torch.randint(augment.n_ids, (sum(len(w) for w in words),), generator=generator).tolist()
    return [tokens[0], *augment.apply_words(words, draws, replacements), tokens[-1]]


class CaptionPairs(Dataset):
    """Item k = (image index k // texts_per_image, token ids of caption k, transformed image or None,
    masked-prediction targets of the tokens or None, the seed of its random draws or None)."""

    def __init__(self, captions: list[str], vocab: Vocabulary, texts_per_image: int, images: ImageFiles | None = None,
                 max_images: int | None = None, augment: CaptionAugmentation | None = None,
                 masked: MaskedPrediction | None = None):
        n_img = len(captions) // texts_per_image
        n_img = n_img if max_images is None else min(max_images, n_img)
        self.texts_per_image = texts_per_image
        self.tokens = [vocab.encode(c) for c in captions[: n_img * texts_per_image]]
        # the pieces of each word, where a word may be several (a BERT's WordPiece captions)
        self.words = ([vocab.encode_words(c) for c in captions[: n_img * texts_per_image]]
                      if augment is not None and vocab.kind == WORDPIECE else None)
        self.images = images
        self.n_images = n_img
        self.augment = augment   # drawn anew each time a caption is read (training only)
        self.masked = masked     # likewise, after the augmentation
        self.epoch_seed: int | None = None   # None: draws from the process's stream (no draws in validation)

    def for_epoch(self, epoch_seed: int) -> "CaptionPairs":
        """Items read from now on draw from seeds of ``epoch_seed`` (set before the epoch's loader
        starts its workers: each gets a copy of the dataset)."""
        self.epoch_seed = epoch_seed
        return self

    def item_seed(self, index: int) -> int | None:
        return None if self.epoch_seed is None else sample_seed(self.epoch_seed, index)

    def item_lengths(self) -> list[int]:
        """Each item's caption length in tokens, before augmentation (what length buckets sort by)."""
        return [len(t) for t in self.tokens]

    def caption(self, k: int) -> tuple[list[int], list[int] | None]:
        """(token ids, masked-prediction targets or None) of caption k, augmented and masked anew."""
        tokens = self.tokens[k] if self.augment is None else augment_caption(
            self.augment, self.tokens[k], words=None if self.words is None else self.words[k])
        return (tokens, None) if self.masked is None else self.masked.mask_words(tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, k: int):
        image_index, seed = k // self.texts_per_image, self.item_seed(k)
        with drawing_from(seed):
            image = self.images[image_index] if self.images is not None else None
            tokens, targets = self.caption(k)
        return image_index, tokens, image, targets, seed


class ImagesWithCaptions(CaptionPairs):
    """Item i = image i with each of its texts_per_image captions (the image itself is loaded once)."""

    def __len__(self) -> int:
        return self.n_images

    def item_lengths(self) -> list[int]:
        """Each image's longest caption (what its captions are padded to)."""
        per = self.texts_per_image
        return [max(len(t) for t in self.tokens[i * per:(i + 1) * per]) for i in range(self.n_images)]

    def __getitem__(self, i: int):
        seed, items = self.item_seed(i), []
        with drawing_from(seed):
            image = self.images[i] if self.images is not None else None
            for j in range(self.texts_per_image):
                tokens, targets = self.caption(i * self.texts_per_image + j)
                items.append((i, tokens, image if j == 0 else None, targets, seed))
        return items


def make_train_dataset(batching: str, captions: list[str], vocab: Vocabulary, texts_per_image: int,
                       images: ImageFiles | None, augment: CaptionAugmentation | None = None,
                       masked: MaskedPrediction | None = None):
    if batching == "images":
        return ImagesWithCaptions(captions, vocab, texts_per_image, images, augment=augment, masked=masked)
    return CaptionPairs(captions, vocab, texts_per_image, images, augment=augment, masked=masked)


def training_batches(training_cfg: dict, split: SplitData, vocab: Vocabulary,
                     images: ImageFiles | None) -> tuple[Dataset, "PairCollator"]:
    """The training dataset and collate function of ``split`` as the method config's ``training``
    block says (batching, positives, caption augmentation, masked prediction); ``images``: the
    image files when the CNN is fine-tuned, else None (cached features)."""
    if vocab.kind == WORDPIECE and training_cfg.get("masked_prediction"):
        raise HarnessError("training.masked_prediction predicts words of a word vocabulary; a BERT text encoder's "
                           "WordPiece captions have none")
    masked = MaskedPrediction.from_config(training_cfg, len(vocab))
    mask_token = vocab.mask_id if vocab.kind == WORDPIECE else None
    if vocab.kind == WORDPIECE and training_cfg.get("caption_drop"):
        raise HarnessError("training.caption_drop replaces words by <unk> of a word vocabulary; a BERT text "
                           "encoder's WordPiece captions have none")
    augment = (CaptionAugmentation.from_config(training_cfg, len(vocab), mask_token)
               or CaptionUnkDrop.from_config(training_cfg, vocab.word2idx[UNK]))
    dataset = make_train_dataset(training_cfg["batching"], split.captions, vocab, split.texts_per_image, images,
                                 augment, masked)
    collate = PairCollator(None if images is not None else split.features, training_cfg["batch_positives"],
                           split.labels, split.region_classes, masked)
    return dataset, collate


BATCH_POSITIVES = ("diagonal", "same_image")


def batch_seed(items: list) -> int | None:
    """The seed of a batch's own draws, from its items' seeds (None when they have none)."""
    seeds = [it[4] if len(it) > 4 else None for it in items]
    if None in seeds:
        return None
    digest = hashlib.blake2b(np.asarray(seeds, dtype=np.int64).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


class PairCollator:
    """Batch dict: ``image_index`` (U,), ``features`` (U, ...) or ``images``, ``tokens``, ``lengths``,
    ``positives`` (U, B): U = B image rows (``diagonal``) or the batch's distinct images; with
    ``labels`` (N, C): ``image_labels`` float (U, C) and ``text_labels`` float (B, C); with
    ``masked``: ``token_targets`` long (B, L) (padded with IGNORE like the tokens) and
    ``region_class_targets`` long (U, R) from ``region_classes`` (N, R)."""

    def __init__(self, features: CachedImageFeatures | CachedGridFeatures | None, positives: str,
                 labels: np.ndarray | None = None, region_classes: np.ndarray | None = None,
                 masked: MaskedPrediction | None = None):
        if positives not in BATCH_POSITIVES:
            raise ValueError(f"batch positives '{positives}': expected one of {', '.join(BATCH_POSITIVES)}")
        if masked is not None and masked.region_prob > 0 and region_classes is None:
            raise HarnessError("training.masked_prediction needs the detector class of each training region: "
                               "a regions model with model.region_classes: true")
        self.features = features  # cached features, or None when images are loaded
        self.positives = positives
        self.labels, self.region_classes, self.masked = labels, region_classes, masked

    def __call__(self, items):
        if isinstance(items[0], list):  # image batching: flatten each image's captions
            if self.positives != "same_image":
                raise ValueError("image batches (training.batching: images) need batch_positives: same_image")
            items = [pair for group in items for pair in group]
        image_index = torch.tensor([it[0] for it in items], dtype=torch.long)
        tokens, lengths = pad_tokens([it[1] for it in items])
        if self.positives == "diagonal":
            rows, positives = image_index, torch.eye(len(items), dtype=torch.bool)
            first = torch.arange(len(items))
        else:
            rows, inverse = torch.unique(image_index, return_inverse=True)
            first = torch.full((len(rows),), len(items), dtype=torch.long).scatter_reduce(
                0, inverse, torch.arange(len(items)), reduce="amin")
            positives = inverse[None, :] == torch.arange(len(rows))[:, None]
        batch = {"image_index": rows, "tokens": tokens, "lengths": lengths, "positives": positives}
        if items[0][2] is not None:
            # diagonal: each caption's own image item (augmented independently, as in the public code)
            batch["images"] = torch.stack([items[int(i)][2] for i in first])
        else:
            batch["features"] = feature_tensors(self.features.take(rows.numpy()))
        if self.labels is not None:
            batch["image_labels"] = torch.from_numpy(self.labels[rows.numpy()].astype(np.float32))
            batch["text_labels"] = torch.from_numpy(self.labels[image_index.numpy()].astype(np.float32))
        if self.masked is not None:
            targets = torch.full(tokens.shape, IGNORE, dtype=torch.long)
            for row, it in enumerate(items):
                targets[row, :len(it[3])] = torch.tensor(it[3], dtype=torch.long)
            batch["token_targets"] = targets
            if self.masked.region_prob > 0:   # words only otherwise (no region classes needed)
                with drawing_from(batch_seed(items)):
                    batch["region_class_targets"] = self.masked.select_regions(self.region_classes[rows.numpy()])
        return batch
