"""The score matrix a protocol ranks: its columns (on tag datasets, the first of identical texts),
checked against the protocol's relevance, image count and folds. Evaluation and the claims'
per-image units (``methods.metrics.query_units``) both start from it."""
from __future__ import annotations

import numpy as np
import torch

from methods.errors import HarnessError
from methods.metrics.protocols import Protocol


def protocol_scores(scores: torch.Tensor | np.ndarray, protocol: Protocol, relevance) -> tuple[torch.Tensor, int]:
    """The columns of ``scores`` the protocol ranks (on tag datasets, the first of identical texts),
    checked against its relevance, image count and folds; and the number of images."""
    scores = torch.as_tensor(scores)
    if relevance.kind != protocol.relevance:
        raise HarnessError(f"protocol {protocol.name} needs {protocol.relevance} relevance, got {relevance.kind}")
    if relevance.kind == "shared_labels" and (relevance.tie_order, relevance.ndcg_discount) != (
            protocol.tie_order, protocol.ndcg_discount):
        raise HarnessError(f"protocol {protocol.name} ranks with tie order {protocol.tie_order} and NDCG discount "
                           f"{protocol.ndcg_discount}; its relevance has {relevance.tie_order} and "
                           f"{relevance.ndcg_discount} (split_labels builds the protocol's)")
    if protocol.unique_texts:   # the columns of the first of identical texts
        if relevance.text_columns is None:
            raise HarnessError(f"protocol {protocol.name} ranks unique texts, but its relevance names no text columns")
        scores = scores[:, torch.as_tensor(relevance.text_columns)]
    relevance.check(scores)
    n = relevance.n_images(scores)
    if protocol.n_images is not None and n != protocol.n_images:
        raise HarnessError(f"protocol {protocol.name} expects {protocol.n_images} images in split "
                           f"'{protocol.split}', the score matrix has {n}")
    if n % protocol.n_folds:
        raise HarnessError(f"protocol {protocol.name}: {n} images do not split into {protocol.n_folds} folds")
    return scores, n
