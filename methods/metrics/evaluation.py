"""Evaluating score matrices: the named metrics of one matrix (``evaluate``, from
``methods.metrics.implementations``), a protocol's result with its folds and training check
(``evaluate_protocol``, ``evaluate_split``: the one road of validation and test evaluation) and the
relevances a dataset's protocols need (``split_relevances``; built by relevance kind in
``methods.metrics.relevance_builders``).

Importing this module imports every metric module, which registers its implementations
(``methods.metrics.implementations``): whatever computes metrics through it finds each declared
metric implemented.
"""
from __future__ import annotations

import numpy as np
import torch

from methods.data.datasets import DatasetPayload
from methods.errors import HarnessError
from methods.metrics import statistics  # noqa: F401  (registers the statistics' implementations)
from methods.metrics import plausible_match  # noqa: F401  (registers PMRP's implementations)
from methods.metrics.declarations import METRICS, value_from
from methods.metrics.eccv import chance_map_at_r
from methods.metrics.implementations import evaluate
from methods.metrics.label_prediction import LabelPredictions
from methods.metrics.label_ranking import chance_ndcg
from methods.metrics.protocol_scores import protocol_scores
from methods.metrics.protocols import MAIN_METRICS, Protocol, dataset_protocol, get_protocol
from methods.metrics.query_units import pooled_metrics, protocol_units, units_record
from methods.metrics.relevance import CaptionsOfImage, SharedLabels
from methods.metrics.relevance_builders import KarpathySplitItems, build_relevances, shared_labels
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


def evaluate_split(scores: torch.Tensor | np.ndarray, protocols: list[str | Protocol], split: str,
                   relevances: dict | None = None, dataset: dict | None = None,
                   predictions: tuple[np.ndarray, np.ndarray] | None = None) -> list[dict]:
    """Results of every protocol (of ``protocols``: a dataset's names, or protocols such as
    validation's) that evaluates ``split``: the one road of test evaluation, ensembles and validation
    during training. ``relevances``: relevance key -> relevance (``build_relevances``), default
    captions_of_image; ``dataset``: the dataset's config (a smoke run's protocols take its sub-sampled
    split); ``predictions``: the model's per-item label probabilities
    (``RetrievalModel.label_predictions``), joined to the labels of label-prediction protocols, which
    a model without them skips."""
    relevances = relevances or {}
    chosen = [p if isinstance(p, Protocol) else dataset_protocol(p, dataset or {}) for p in protocols]
    results = []
    for protocol in chosen:
        if protocol.split != split or (protocol.relevance == "label_predictions" and predictions is None):
            continue
        relevance = relevances.get(protocol.relevance_key)
        if protocol.relevance == "label_predictions":
            relevance = label_prediction_relevance(relevance, predictions)
        results.append(evaluate_protocol(scores, protocol, relevance))
    return results


def split_relevances(payload: DatasetPayload, split: str) -> dict:
    """The relevance of every kind that the protocols of a dataset payload (``dataset.json``)
    evaluating harness split ``split`` need, by relevance key (``build_relevances`` of the split's
    items in its Karpathy file: captions_of_image, extended_positives from the payload's
    ``paths.positives`` file, shared labels, COCO ids)."""
    protocols = [p for p in map(get_protocol, payload.dataset["protocols"]) if p.split == split]
    return build_relevances(protocols, KarpathySplitItems(payload, split))


def split_labels(payload: DatasetPayload, split: str, protocol: Protocol) -> SharedLabels:
    """The shared labels ``protocol`` reads of a dataset's split (``relevance_builders.shared_labels``)."""
    return shared_labels(protocol, KarpathySplitItems(payload, split))


def label_prediction_relevance(labels: SharedLabels, predictions: tuple[np.ndarray, np.ndarray]) -> LabelPredictions:
    """A model's per-item label probabilities (``RetrievalModel.label_predictions``) beside the split's labels."""
    image_scores, text_scores = predictions
    return LabelPredictions(image_scores, labels.image_labels, text_scores, labels.text_labels)


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
    pooled = pooled_metrics(protocol.metrics)
    if pooled:   # a label head's predictions are not in the score matrix: the claims read these
        result["units"] = units_record(protocol_units(scores, protocol, relevance, pooled))
    return result


def training_check(scores: torch.Tensor, protocol: Protocol, relevance, metrics: dict[str, float]) -> dict:
    """The protocol's ``training_check`` (``methods.metrics.training_check.measure``) from its scores
    (``protocol_scores``) and its fold-mean ``metrics``: the main metric's chance value is the mean
    of its folds' (equal folds, as the metric)."""
    name = protocol.main_metric
    chance = float(np.mean([MAIN_METRIC_CHANCE[name](*relevance.fold(scores, f, protocol.n_folds))
                            for f in range(protocol.n_folds)]))
    return measure(name, value_from(metrics, name), chance, METRICS.get(name).best, scores.cpu().numpy())
