"""Named evaluation protocols; the name is written into every result row."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from methods.data.karpathy import CAPTIONS_PER_IMAGE
from methods.errors import HarnessError
from methods.metrics.retrieval import METRIC_NAMES, retrieval_metrics


@dataclass(frozen=True)
class Protocol:
    name: str
    split: str
    n_folds: int
    n_images: int | None  # asserted on the split when set
    description: str


PROTOCOLS = {
    p.name: p for p in (
        Protocol("f30k_1k", "test", 1, 1000, "Flickr30K Karpathy test, 1,000 images / 5,000 captions"),
        Protocol("coco_1k_5fold", "testall", 5, 5000,
                 "COCO 5K testall in 5 consecutive folds of 1,000 images; every metric averaged over folds"),
        Protocol("coco_5k", "testall", 1, 5000, "COCO Karpathy test, all 5,000 images / 25,000 captions"),
        Protocol("synthetic_test", "test", 1, None, "synthetic test split, all images at once"),
    )
}


def get_protocol(name: str) -> Protocol:
    if name not in PROTOCOLS:
        raise HarnessError(f"unknown protocol '{name}'; known: {', '.join(sorted(PROTOCOLS))}")
    return PROTOCOLS[name]


def evaluate_protocol(scores: torch.Tensor | np.ndarray, protocol: Protocol) -> dict:
    """Metrics of ``scores`` (N, 5N) under ``protocol``; folds are consecutive image blocks."""
    scores = torch.as_tensor(scores)
    n = scores.shape[0]
    if protocol.n_images is not None and n != protocol.n_images:
        raise HarnessError(f"protocol {protocol.name} expects {protocol.n_images} images in split "
                           f"'{protocol.split}', the score matrix has {n}")
    if n % protocol.n_folds:
        raise HarnessError(f"protocol {protocol.name}: {n} images do not split into {protocol.n_folds} folds")
    size = n // protocol.n_folds
    folds = [retrieval_metrics(scores[f * size:(f + 1) * size,
                                      f * size * CAPTIONS_PER_IMAGE:(f + 1) * size * CAPTIONS_PER_IMAGE])
             for f in range(protocol.n_folds)]
    mean = {k: float(np.mean([m[k] for m in folds])) for k in METRIC_NAMES}
    return {"protocol": protocol.name, "split": protocol.split, "n_images": n, "n_folds": protocol.n_folds,
            "metrics": mean, "folds": folds if protocol.n_folds > 1 else None}
