"""Named evaluation protocols: the split, the folds, the relevance and the metrics reported.
The protocol name is written into every result row.

A protocol scored from the score matrix declares its main metric: evaluation writes its training
check beside the metrics (``methods.metrics.training_check``: the main metric against its chance
value, ``MAIN_METRIC_CHANCE``, and the spread of the scores)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from methods.data.karpathy import Split
from methods.data.datasets import payload_splits
from methods.data.inputs import label_matrix
from methods.data.positives import split_positives
from methods.errors import HarnessError
from methods.metrics.eccv import ECCV_METRICS, chance_map_at_r
from methods.metrics.eccv_caption import ECCV_CAPTION_METRICS, split_coco_ids
from methods.metrics.label_prediction import LABEL_PREDICTION_METRICS, LabelPredictions
from methods.metrics.label_ranking import LABEL_RANKING_METRICS, chance_ndcg
from methods.metrics.registry import METRICS, base_metrics, evaluate, value_from
from methods.metrics.relevance import CaptionsOfImage, ExtendedPositives, SharedLabels
from methods.metrics.retrieval import RETRIEVAL_METRICS, chance_recalls
from methods.metrics.statistics import STATISTICS
from methods.metrics.training_check import measure
from methods.registry import Registry

# The expected value of a main metric under random scores on one fold (its score matrix and its
# relevance), in closed form; the tests check each against the mean over random score matrices.
MAIN_METRIC_CHANCE = {
    "rsum": lambda scores, relevance: chance_recalls(scores.shape[0], relevance.captions_per_image)["rsum"],
    "map_r_ext_sum": lambda scores, relevance: (chance_map_at_r(relevance.positives)
                                                + chance_map_at_r(relevance.positives.T)),
    "ndcg500_sum": lambda scores, relevance: (chance_ndcg(relevance.image_labels, relevance.text_labels, 500)
                                              + chance_ndcg(relevance.text_labels, relevance.image_labels, 500)),
}


@dataclass(frozen=True)
class Protocol:
    name: str
    split: str
    n_folds: int
    n_images: int | None  # asserted on the split when set
    description: str
    relevance: str = "captions_of_image"
    metrics: tuple[str, ...] = RETRIEVAL_METRICS
    # shared-label protocols of tag datasets: identical texts (tag sets) are ranked once, each with
    # the labels of its first image, as the label-wise code evaluates MIRFlickr and NUS-WIDE
    # (njustkmg/IJCAI21... utils/evaluation.py ``validate``: np.unique over the tag vectors)
    unique_texts: bool = False
    # the metric whose gain over chance says whether the model learned (``MAIN_METRIC_CHANCE``);
    # None: no training check (label predictions, package metrics, embedding statistics)
    main_metric: str | None = None
    # shared-label protocols: the order of equal scores and the NDCG discount
    # (``methods.metrics.relevance.TIE_ORDERS`` / ``NDCG_DISCOUNTS``)
    tie_order: str = "against_model"
    ndcg_discount: str = "rank"

    def __post_init__(self) -> None:
        for m in self.metrics:
            if METRICS.get(m).relevance != self.relevance:
                raise ValueError(f"protocol {self.name}: metric {m} is not defined for {self.relevance} relevance")
        if self.main_metric is not None and (self.main_metric not in MAIN_METRIC_CHANCE or not set(
                base_metrics(self.main_metric)) <= set(self.metrics)):
            raise ValueError(f"protocol {self.name}: main metric {self.main_metric} needs a chance value "
                             f"({', '.join(MAIN_METRIC_CHANCE)}) and the protocol's metrics to compute it")
        if self.unique_texts and (self.relevance != "shared_labels" or self.n_folds != 1):
            raise ValueError(f"protocol {self.name}: unique texts are a shared-label protocol of one fold")
        if (self.tie_order, self.ndcg_discount) != ("against_model", "rank") and self.relevance != "shared_labels":
            raise ValueError(f"protocol {self.name}: tie order and NDCG discount are shared-label conventions")

    @property
    def relevance_key(self) -> str:
        """Which relevance object of a split the protocol reads (``split_relevances``)."""
        if self.relevance != "shared_labels":
            return self.relevance
        return ":".join((self.relevance, *(["unique_texts"] if self.unique_texts else []),
                         self.tie_order, self.ndcg_discount))


PROTOCOLS: Registry[Protocol] = Registry("protocol")
for _p in (
    Protocol("f30k_1k", "test", 1, 1000, "Flickr30K Karpathy test, 1,000 images / 5,000 captions",
             main_metric="rsum"),
    Protocol("coco_1k_5fold", "testall", 5, 5000,
             "COCO 5K testall in 5 consecutive folds of 1,000 images; every metric averaged over folds",
             main_metric="rsum"),
    Protocol("coco_5k", "testall", 1, 5000, "COCO Karpathy test, all 5,000 images / 25,000 captions",
             main_metric="rsum"),
    # no training check: the package scores the matrix coco_5k checks, against associations it holds
    Protocol("coco_5k_eccv", "testall", 1, 5000,
             "COCO 5K testall against ECCV Caption's and CxC's verified associations (the eccv_caption "
             "package: mAP@R, R-Precision, R@1; CxC R@K)", relevance="coco_ids", metrics=ECCV_CAPTION_METRICS),
    Protocol("synthetic_test", "test", 1, None, "synthetic test split, all images at once", main_metric="rsum"),
    Protocol("synthetic_eccv", "test", 1, None,
             "synthetic test split, all images at once, against every image a caption truly describes "
             "(extended positives; ECCV Caption's mAP@R, R-Precision and R@1)",
             relevance="extended_positives", metrics=ECCV_METRICS, main_metric="map_r_ext_sum"),
    # the label-wise code's evaluation (njustkmg/IJCAI21... utils/evaluation.py): equal scores in
    # reversed argsort order; on COCO also its t2i discount (the *_code protocols)
    Protocol("labelwise_test", "test", 1, None,
             "label-wise retrieval on the test split of a tag dataset, all items at once: an item is relevant "
             "when it shares a label with the query, graded by the number of shared labels (NDCG@500, mAP, "
             "mAP@R; R@K counts the query's own tag set); identical tag sets are one text, with its first "
             "image's labels, as the label-wise code ranks them", relevance="shared_labels",
             metrics=LABEL_RANKING_METRICS, unique_texts=True, main_metric="ndcg500_sum",
             tie_order="argsort_reversed"),
    Protocol("labelwise_coco_1k_5fold", "testall", 5, 5000,
             "label-wise retrieval on COCO 5K testall (80 object labels) in 5 consecutive folds of 1,000 images "
             "and their captions; every metric averaged over folds", relevance="shared_labels",
             metrics=LABEL_RANKING_METRICS, main_metric="ndcg500_sum", tie_order="argsort_reversed"),
    Protocol("labelwise_coco_5k", "testall", 1, 5000,
             "label-wise retrieval on COCO 5K testall (80 object labels), all 5,000 images / 25,000 captions",
             relevance="shared_labels", metrics=LABEL_RANKING_METRICS, main_metric="ndcg500_sum",
             tie_order="argsort_reversed"),
    Protocol("labelwise_coco_1k_5fold_code", "testall", 5, 5000,
             "labelwise_coco_1k_5fold with the label-wise code's COCO t2i NDCG discount, log2(5 (rank - 1) + c + 2) "
             "for the c-th caption of an image (utils/evaluation.py t2i)", relevance="shared_labels",
             metrics=LABEL_RANKING_METRICS, main_metric="ndcg500_sum", tie_order="argsort_reversed",
             ndcg_discount="coco_t2i_code"),
    Protocol("labelwise_coco_5k_code", "testall", 1, 5000,
             "labelwise_coco_5k with the label-wise code's COCO t2i NDCG discount, log2(5 (rank - 1) + c + 2) "
             "for the c-th caption of an image (utils/evaluation.py t2i)", relevance="shared_labels",
             metrics=LABEL_RANKING_METRICS, main_metric="ndcg500_sum", tie_order="argsort_reversed",
             ndcg_discount="coco_t2i_code"),
    # no training check: micro-F1 scores a label head, not the score matrix (whose ranking protocols
    # check the same model); a head predicting every label has no single chance value to compare with
    Protocol("label_prediction", "test", 1, None,
             "micro-F1 of each modality's label prediction on the test split (models with a label head)",
             relevance="label_predictions", metrics=LABEL_PREDICTION_METRICS),
    Protocol("label_prediction_coco_1k_5fold", "testall", 5, 5000,
             "micro-F1 of each modality's label prediction on COCO 5K testall in 5 consecutive folds of 1,000 "
             "images and their captions, averaged over folds (models with a label head)",
             relevance="label_predictions", metrics=LABEL_PREDICTION_METRICS),
    Protocol("label_prediction_coco_5k", "testall", 1, 5000,
             "micro-F1 of each modality's label prediction on COCO 5K testall (models with a label head)",
             relevance="label_predictions", metrics=LABEL_PREDICTION_METRICS),
    Protocol("set_statistics", "each test split", 1, None,
             "statistics of the test embeddings of set models (within-set circular variance); not a protocol a "
             "dataset lists: evaluation adds it for models that report statistics",
             relevance="embeddings", metrics=tuple(STATISTICS)),
):
    PROTOCOLS.register(_p.name, _p)
STATISTICS_PROTOCOL = "set_statistics"
# the protocols whose results carry a training check (``evaluate_protocol``)
CHECKED_PROTOCOLS = frozenset(name for name, p in PROTOCOLS.items() if p.main_metric is not None)


def statistics_result(statistics: dict[str, float], split: str, n_images: int) -> dict:
    """The result entry of a model's embedding statistics on one split (``evaluate_run``)."""
    return {"protocol": STATISTICS_PROTOCOL, "split": split, "n_images": n_images, "n_folds": 1,
            "metrics": {k: statistics[k] for k in STATISTICS}, "folds": None}


def get_protocol(name: str) -> Protocol:
    return PROTOCOLS.get(name)


def check_split_sizes(dataset: str, protocols: list[str], split_sizes: dict[str, int], where: str) -> None:
    """Each protocol's split has the image count the protocol is defined on (and splits into its
    folds), checked when the DAG is built: evaluation would find out only after training.
    ``split_sizes``: harness split -> images; ``where``: the file the splits come from."""
    for name in protocols:
        protocol = get_protocol(name)
        n = split_sizes.get(protocol.split)
        if n is None:
            continue  # a protocol whose split is not defined is named by methods.plan.test_splits
        if protocol.n_images is not None and n != protocol.n_images:
            raise HarnessError(f"datasets.{dataset}.splits.{protocol.split}: {n} images in {where}, but protocol "
                               f"{name} (datasets.{dataset}.protocols) needs {protocol.n_images} "
                               f"({protocol.description})")
        if n % protocol.n_folds:
            raise HarnessError(f"datasets.{dataset}.splits.{protocol.split}: {n} images in {where} do not split "
                               f"into the {protocol.n_folds} folds of protocol {name}")


def check_coco_ids(protocols: list[str], splits: dict, karpathy_json) -> None:
    """Protocols scored by COCO ids (ECCV Caption / CxC): the split's images are the COCO 5K test
    images in eccv_caption's order, checked when the DAG is built (the first differing row is
    named); evaluation would find out only after training. ``splits``: harness split -> Split or
    SplitIndex."""
    for name in protocols:
        protocol = get_protocol(name)
        if protocol.relevance == "coco_ids" and protocol.split in splits:
            split_coco_ids(karpathy_json, splits[protocol.split])


def evaluate_split(scores: torch.Tensor | np.ndarray, protocols: list[str], split: str,
                   relevances: dict | None = None) -> list[dict]:
    """Results of every protocol (of ``protocols``, a dataset's list) that evaluates ``split``;
    ``relevances``: relevance kind -> relevance (``split_relevances``), default captions_of_image."""
    relevances = relevances or {}
    return [evaluate_protocol(scores, get_protocol(p), relevances.get(get_protocol(p).relevance_key))
            for p in protocols if get_protocol(p).split == split]


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
