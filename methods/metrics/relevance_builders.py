"""The relevance a protocol reads, built by its relevance kind from a split's items: one builder per
kind (``RELEVANCE_BUILDERS``), the same for validation during training and for test evaluation.

The items are images in order, each with ``texts_per_image`` texts (text k is of image
k // texts_per_image). Two sources give them: a harness split of a dataset's Karpathy file
(``KarpathySplitItems``: test evaluation, ensembles, claims; the payload reads the file once) and a split already in memory, such as the dev split's first images that validation ranks
(``ItemsInOrder``: its labels only, so a kind that needs more of the file names what is missing in
one line).
"""
from __future__ import annotations

from typing import Callable, Protocol as Interface

import numpy as np

from methods.data.datasets import DatasetPayload
from methods.data.inputs import label_matrix
from methods.data.instance_categories import read_categories
from methods.data.karpathy import Split
from methods.data.positives import split_positives
from methods.errors import HarnessError
from methods.metrics.eccv_caption import split_coco_ids
from methods.metrics.protocols import Protocol
from methods.metrics.relevance import CaptionsOfImage, ExtendedPositives, PlausibleMatches, SharedLabels
from methods.registry import Registry


class SplitItems(Interface):
    """What relevance builders read of a split (images in order with their texts)."""

    texts_per_image: int

    def image_labels(self, protocol: Protocol) -> np.ndarray: ...      # uint8 (N, C), multi-hot
    def captions(self, protocol: Protocol) -> list[str]: ...           # N * texts_per_image
    def positives(self, protocol: Protocol) -> np.ndarray: ...         # extended positives (N, N * t)
    def coco_ids(self, protocol: Protocol): ...                         # methods.metrics.eccv_caption.CocoIds
    def instance_categories(self, protocol: Protocol) -> np.ndarray: ...   # uint8 (N, C), multi-hot


class KarpathySplitItems:
    """Harness split ``split`` of a dataset (the ``dataset.json`` payload), read from its Karpathy
    file on first need (``DatasetPayload.split``: once per payload)."""

    def __init__(self, payload: DatasetPayload, split: str):
        self.payload, self.split = payload, split
        self.texts_per_image = payload.dataset["texts_per_image"]

    def loaded(self) -> Split:
        return self.payload.split(self.split)

    def image_labels(self, protocol: Protocol) -> np.ndarray:
        loaded = self.loaded()
        if loaded.labels is None:
            raise HarnessError(f"dataset {self.payload.name}: protocol {protocol.name} needs labels, but the images "
                               f"of split '{self.split}' in {self.payload.paths['karpathy_json']} have no 'labels'")
        return label_matrix(loaded)   # uint8 (N, C), checked multi-hot

    def captions(self, protocol: Protocol) -> list[str]:
        return self.loaded().captions

    def positives(self, protocol: Protocol) -> np.ndarray:
        path = self.payload.paths.get("positives")
        if not path:
            raise HarnessError(f"dataset {self.payload.name}: protocol {protocol.name} needs extended positives "
                               f"(every image each caption describes), but the dataset has no positives file")
        return split_positives(path, self.loaded(), self.payload.paths["karpathy_json"])

    def coco_ids(self, protocol: Protocol):
        return split_coco_ids(self.payload.paths["karpathy_json"], self.loaded())

    def instance_categories(self, protocol: Protocol) -> np.ndarray:
        path = self.payload.paths.get("instance_categories")
        if not path:
            raise HarnessError(f"dataset {self.payload.name}: protocol {protocol.name} needs the COCO instance "
                               f"annotations of its images: set datasets.{self.payload.name}.instance_annotations")
        return read_categories(path, self.split, len(self.loaded()))


class ItemsInOrder:
    """Images in order with their texts, held in memory: ``texts_per_image`` and each image's
    multi-hot ``labels`` (None: it has none). Validation's dev items."""

    def __init__(self, texts_per_image: int, labels: np.ndarray | None = None):
        self.texts_per_image, self.labels = texts_per_image, labels

    def _missing(self, protocol: Protocol, what: str) -> HarnessError:
        return HarnessError(f"protocol {protocol.name} needs {protocol.relevance} relevance{what}, which images "
                            f"with their texts in order do not give")

    def image_labels(self, protocol: Protocol) -> np.ndarray:
        if self.labels is None:
            raise HarnessError(f"protocol {protocol.name} needs labels, but the images have none")
        return self.labels

    def captions(self, protocol: Protocol) -> list[str]:
        raise self._missing(protocol, " of unique texts")

    def positives(self, protocol: Protocol) -> np.ndarray:
        raise self._missing(protocol, "")

    def coco_ids(self, protocol: Protocol):
        raise self._missing(protocol, "")

    def instance_categories(self, protocol: Protocol) -> np.ndarray:
        raise self._missing(protocol, "")


# relevance kind -> builder(protocol, items); label_predictions: the labels its predictions are
# joined to (``methods.metrics.evaluation.evaluate_split`` joins the model's predictions)
RELEVANCE_BUILDERS: Registry[Callable[[Protocol, SplitItems], object]] = Registry("relevance kind")


@RELEVANCE_BUILDERS.register("captions_of_image")
def captions_of_image(protocol: Protocol, items: SplitItems) -> CaptionsOfImage:
    return CaptionsOfImage(items.texts_per_image)


@RELEVANCE_BUILDERS.register("extended_positives")
def extended_positives(protocol: Protocol, items: SplitItems) -> ExtendedPositives:
    return ExtendedPositives(items.positives(protocol), items.texts_per_image)


@RELEVANCE_BUILDERS.register("coco_ids")
def coco_ids(protocol: Protocol, items: SplitItems):
    return items.coco_ids(protocol)


@RELEVANCE_BUILDERS.register("plausible_matches")
def plausible_matches(protocol: Protocol, items: SplitItems) -> PlausibleMatches:
    return PlausibleMatches(items.instance_categories(protocol), items.texts_per_image, last=protocol.last_ranked)


def shared_labels(protocol: Protocol, items: SplitItems) -> SharedLabels:
    """The multi-hot labels of the images and of their texts (each text has its image's labels),
    with the protocol's tie order and NDCG discount; with ``protocol.unique_texts`` only the first of
    identical texts, in the order of their first occurrence (``SharedLabels.text_columns``: their
    columns of the split's score matrix), and each image's own among them (``image_texts``)."""
    image_labels = items.image_labels(protocol)
    tpi = items.texts_per_image
    text_labels = np.repeat(image_labels, tpi, axis=0)
    conventions = {"tie_order": protocol.tie_order, "ndcg_discount": protocol.ndcg_discount}
    if not protocol.unique_texts:
        return SharedLabels(image_labels, text_labels, **conventions)
    _, first, inverse = np.unique(np.asarray(items.captions(protocol), dtype=object).astype(str), return_index=True,
                                  return_inverse=True)
    columns = np.sort(first)
    position = np.empty(len(first), dtype=np.int64)   # np.unique's (sorted) id -> rank of its first occurrence
    position[np.argsort(first)] = np.arange(len(first))
    image_texts = position[inverse.reshape(-1)].reshape(len(image_labels), tpi)
    return SharedLabels(image_labels, text_labels[columns], text_columns=columns,
                        text_owners=columns // tpi, image_texts=image_texts, **conventions)


RELEVANCE_BUILDERS.register("shared_labels", shared_labels)
RELEVANCE_BUILDERS.register("label_predictions", shared_labels)


def build_relevances(protocols: list[Protocol], items: SplitItems) -> dict:
    """The relevance every protocol of ``protocols`` reads, by ``relevance_key``, each built once."""
    relevances = {}
    for protocol in protocols:
        if protocol.relevance_key not in relevances:
            relevances[protocol.relevance_key] = RELEVANCE_BUILDERS.get(protocol.relevance)(protocol, items)
    return relevances
