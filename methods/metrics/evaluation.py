"""Evaluating score matrices: the named metrics of one matrix (``evaluate``, from
``methods.metrics.implementations``), a protocol's result with its folds and training check
(``evaluate_protocol``, ``evaluate_split``) and the relevances a dataset's protocols need
(``split_relevances``).

Importing this module imports every metric module, which registers its implementations
(``methods.metrics.implementations``): whatever computes metrics through it finds each declared
metric implemented.
"""
from __future__ import annotations

import numpy as np
import torch

from methods.data.datasets import payload_splits
from methods.data.inputs import label_matrix
from methods.data.karpathy import Split
from methods.data.positives import split_positives
from methods.errors import HarnessError
from methods.metrics import statistics  # noqa: F401  (registers the statistics' implementations)
from methods.metrics.declarations import METRICS, value_from
from methods.metrics.eccv import chance_map_at_r
from methods.metrics.eccv_caption import split_coco_ids
from methods.metrics.implementations import evaluate
from methods.metrics.label_prediction import LabelPredictions
from methods.metrics.label_ranking import chance_ndcg
from methods.metrics.protocols import MAIN_METRICS, Protocol, dataset_protocol, get_protocol
from methods.metrics.relevance import CaptionsOfImage, ExtendedPositives, SharedLabels
from methods.metrics.retrieval import chance_recalls
from methods.metrics.training_check import measure

# The expected value of a main metric under random scores on one fold (its score matrix and its
# relevance), in closed form; the tests check each against the mean over random score matrices.
MAIN_METRIC_CHANCE = {
    "rsum": lambda scores, relevance: chance_recalls(scores.shape[0], relevance.captions_per_image)["rsum"],
    "map_r_ext_sum": lambda scores, relevance: (chance_map_at_r(relevance.positives)
                                                + chance_map_at_r(relevance.positives.T)),
    "ndcg500_sum": lambda scores, relevance: (chance_ndcg(relevance.image_labels, relevance.text_labels, 500)
                                              + chance_ndcg(relevance.text_labels, relevance.image_labels, 500)),
}
if set(MAIN_METRIC_CHANCE) != set(MAIN_METRICS):   # the protocols accept exactly the main metrics computed here
    raise ValueError(f"main metrics with a chance value: {', '.join(MAIN_METRIC_CHANCE)}; the protocols "
                     f"declare {', '.join(MAIN_METRICS)} (methods.metrics.protocols.MAIN_METRICS)")


def evaluate_split(scores: torch.Tensor | np.ndarray, protocols: list[str], split: str,
                   relevances: dict | None = None, dataset: dict | None = None) -> list[dict]:
    """Results of every protocol (of ``protocols``, a dataset's list) that evaluates ``split``;
    ``relevances``: relevance kind -> relevance (``split_relevances``), default captions_of_image;
    ``dataset``: the dataset's config (a smoke run's protocols take its sub-sampled split)."""
    relevances = relevances or {}
    chosen = [dataset_protocol(p, dataset or {}) for p in protocols]
    return [evaluate_protocol(scores, p, relevances.get(p.relevance_key)) for p in chosen if p.split == split]


def split_relevances(payload: dict, split: str) -> dict:
    """The relevance of every kind that the protocols of a dataset payload (``dataset.json``)
    evaluating harness split ``split`` need, by kind: captions_of_image, or extended_positives from
    the payload's ``paths.positives`` file (read with the Karpathy file; an error if it has none)."""
    needed = {}
    for name in payload["dataset"]["protocols"]:
        protocol = get_protocol(name)
        if protocol.split == split:
            needed.setdefault(protocol.relevance_key, name)
    relevances = {}
    loaded = None   # the split, read from the Karpathy file once for every kind that needs it
    for key, name in needed.items():
        kind = get_protocol(name).relevance
        if kind == "captions_of_image":
            relevances[key] = CaptionsOfImage(payload["dataset"]["texts_per_image"])
        elif kind == "extended_positives":
            path = payload["paths"].get("positives")
            if not path:
                raise HarnessError(f"dataset {payload['name']}: protocol {name} needs extended positives (every image "
                                   f"each caption describes), but the dataset has no positives file")
            loaded = payload_splits(payload, [split])[split] if loaded is None else loaded
            relevances[key] = ExtendedPositives(split_positives(path, loaded, payload["paths"]["karpathy_json"]),
                                                loaded.texts_per_image)
        elif kind in ("shared_labels", "label_predictions"):
            # label predictions need the model: evaluation joins them to these labels (label_prediction_relevance)
            loaded = payload_splits(payload, [split])[split] if loaded is None else loaded
            relevances[key] = split_labels(payload, split, get_protocol(name), loaded)
        elif kind == "coco_ids":
            loaded = payload_splits(payload, [split])[split] if loaded is None else loaded
            relevances[key] = split_coco_ids(payload["paths"]["karpathy_json"], loaded)
        else:
            raise HarnessError(f"dataset {payload['name']}: protocol {name} needs {kind} relevance, which "
                               f"evaluation cannot build from a dataset")
    return relevances


def split_labels(payload: dict, split: str, protocol: Protocol, loaded: Split | None = None) -> SharedLabels:
    """The multi-hot labels of a split's images and of its texts (each text has its image's labels),
    with the protocol's tie order and NDCG discount; with ``protocol.unique_texts`` only the first of
    identical texts, in the order of their first occurrence (``SharedLabels.text_columns``: their
    columns of the split's score matrix), and each image's own among them (``image_texts``). ``loaded``:
    the split, when the caller has read it already."""
    loaded = payload_splits(payload, [split])[split] if loaded is None else loaded
    if loaded.labels is None:
        raise HarnessError(f"dataset {payload['name']}: protocol {protocol.name} needs labels, but the images of "
                           f"split '{split}' in {payload['paths']['karpathy_json']} have no 'labels'")
    image_labels = label_matrix(loaded)   # uint8 (N, C), checked multi-hot
    text_labels = np.repeat(image_labels, loaded.texts_per_image, axis=0)
    conventions = {"tie_order": protocol.tie_order, "ndcg_discount": protocol.ndcg_discount}
    if not protocol.unique_texts:
        return SharedLabels(image_labels, text_labels, **conventions)
    _, first, inverse = np.unique(np.asarray(loaded.captions, dtype=object).astype(str), return_index=True,
                                  return_inverse=True)
    columns = np.sort(first)
    position = np.empty(len(first), dtype=np.int64)   # np.unique's (sorted) id -> rank of its first occurrence
    position[np.argsort(first)] = np.arange(len(first))
    image_texts = position[inverse.reshape(-1)].reshape(len(image_labels), loaded.texts_per_image)
    return SharedLabels(image_labels, text_labels[columns], text_columns=columns,
                        text_owners=columns // loaded.texts_per_image, image_texts=image_texts, **conventions)


def items_relevance(protocol: Protocol, texts_per_image: int, image_labels: np.ndarray | None = None,
                    predictions: tuple[np.ndarray, np.ndarray] | None = None):
    """The relevance ``protocol`` needs for images in order, each with its ``texts_per_image`` texts
    (validation's dev items, ``methods.training.loop.validate``): captions of their image, or shared
    labels from ``image_labels`` (each text has its image's) with the protocol's conventions, joined to
    the model's label ``predictions`` for label-prediction protocols."""
    if protocol.relevance == "captions_of_image":
        return CaptionsOfImage(texts_per_image)
    if protocol.relevance not in ("shared_labels", "label_predictions") or protocol.unique_texts:
        raise HarnessError(f"protocol {protocol.name} needs {protocol.relevance} relevance"
                           f"{' of unique texts' if protocol.unique_texts else ''}, which images with their "
                           f"texts in order do not give")
    if image_labels is None:
        raise HarnessError(f"protocol {protocol.name} needs labels, but the images have none")
    labels = SharedLabels(image_labels, np.repeat(image_labels, texts_per_image, axis=0),
                          tie_order=protocol.tie_order, ndcg_discount=protocol.ndcg_discount)
    if protocol.relevance == "shared_labels":
        return labels
    if predictions is None:
        raise HarnessError(f"protocol {protocol.name} needs the model's label predictions; it makes none")
    return label_prediction_relevance(labels, predictions)


def label_prediction_relevance(labels: SharedLabels, predictions: tuple[np.ndarray, np.ndarray]) -> LabelPredictions:
    """A model's per-item label probabilities (``RetrievalModel.label_predictions``) beside the split's labels."""
    image_scores, text_scores = predictions
    return LabelPredictions(image_scores, labels.image_labels, text_scores, labels.text_labels)


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


def evaluate_protocol(scores: torch.Tensor | np.ndarray, protocol: Protocol, relevance=None) -> dict:
    """Metrics of ``scores`` under ``protocol``; folds are consecutive image (and text) blocks.
    ``relevance`` defaults to captions_of_image with 5 captions per image."""
    relevance = relevance if relevance is not None else CaptionsOfImage()
    scores, n = protocol_scores(scores, protocol, relevance)
    folds = [evaluate(*relevance.fold(scores, f, protocol.n_folds), protocol.metrics)
             for f in range(protocol.n_folds)]
    mean = {k: float(np.mean([m[k] for m in folds])) for k in protocol.metrics}
    result = {"protocol": protocol.name, "split": protocol.split, "n_images": n, "n_folds": protocol.n_folds,
              "metrics": mean, "folds": folds if protocol.n_folds > 1 else None}
    if protocol.main_metric is not None:
        result["training_check"] = training_check(scores, protocol, relevance, mean)
    return result


def training_check(scores: torch.Tensor, protocol: Protocol, relevance, metrics: dict[str, float]) -> dict:
    """The protocol's ``training_check`` (``methods.metrics.training_check.measure``) from its scores
    (``protocol_scores``) and its fold-mean ``metrics``: the main metric's chance value is the mean
    of its folds' (equal folds, as the metric)."""
    name = protocol.main_metric
    chance = float(np.mean([MAIN_METRIC_CHANCE[name](*relevance.fold(scores, f, protocol.n_folds))
                            for f in range(protocol.n_folds)]))
    return measure(name, value_from(metrics, name), chance, METRICS.get(name).best, scores.cpu().numpy())
