"""Per-image units of a protocol's metrics: what the claim checks' paired bootstrap resamples.

A metric that is a mean over queries (``Metric.queries``: image queries or text queries; its
implementation's ``per_query`` gives each query's value) is, on any multiset of test images, the
sum of the per-query values of those images' queries divided by the number of those queries that
count (a query a metric leaves out, e.g. one without a
relevant item for mAP, does not count). So each test image carries, per metric, the sum of its
queries' values and their count: its own query for an image→text metric, the queries of its
texts for a text→image one (each text belongs to one image; on tag datasets that rank identical
tag sets once, an image whose tags repeat an earlier image's carries no text). Resampling these
units resamples each image with all of its texts; the gallery stays the whole split (a query's
value is the one it has against the whole test split, or its fold).

Sum of the sums over images / sum of the counts = the metric on the split. Folded protocols
(COCO 1K) score each image within its fold, and the tables report the mean over folds: where a
metric leaves out a different number of queries in each fold (mAP on images without labels), each
fold's units are weighted by (mean counted queries per fold / the fold's), which makes the ratio
the mean over folds (equal counts: weight 1, the units as they are).

A pooled metric (micro-F1: Σ 2 TP / Σ (2 TP + FP + FN) over the items) is such a ratio by
definition: each image carries the sums of its queries' numerators and denominators, which are the
row's own (two rows' micro-F1 denominators differ; the queries' counts of a mean are the relevance's,
the same for every row). Its queries are a label head's predictions, which the score matrix does not
hold: evaluation stores the units of a protocol with pooled metrics in its result (``units_record``),
and the claims read them back (``units_from_record``).

Metrics that are neither (median rank, the ``eccv_caption`` package's metrics, embedding
statistics) have no units: a claim cannot test them (``check_claimable``, in
``methods.metrics.declarations``: the plan checks the claims before any evaluation).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from methods.errors import HarnessError
from methods.metrics.declarations import METRICS, base_metrics, check_claimable
from methods.metrics.implementations import EvaluationContext, implementation
from methods.metrics.protocol_scores import protocol_scores
from methods.metrics.protocols import Protocol


@dataclass(frozen=True)
class QueryUnits:
    """Per test image (last axis) and base metric (first axis): the sum of its queries' values and
    the number of its queries that count (pooled metrics: of their numerators and denominators)."""
    metrics: tuple[str, ...]
    sums: np.ndarray     # (metrics, images) float64
    counts: np.ndarray   # (metrics, images) float64

    def rows(self, metric: str) -> list[int]:
        """The rows of the base metrics a metric sums (itself, or e.g. RSUM's six recalls)."""
        return [self.metrics.index(m) for m in base_metrics(metric)]

    def value(self, metric: str) -> float:
        """A metric (a base metric, or a sum of them such as RSUM) over every test image."""
        return float(sum(self.sums[r].sum() / self.counts[r].sum() for r in self.rows(metric)))


def protocol_units(scores: torch.Tensor | np.ndarray, protocol: Protocol, relevance, metrics: list[str]) -> QueryUnits:
    """Units of the base metrics of ``metrics`` for the score matrix of one split under ``protocol``
    (``relevance``: that protocol's, from ``split_relevances``)."""
    base = tuple(dict.fromkeys(m for name in metrics for m in base_metrics(name)))
    for name in base:
        check_claimable(name, f"protocol {protocol.name}")
        if name not in protocol.metrics:
            raise HarnessError(f"protocol {protocol.name} does not report metric '{name}'")
    scores, n = protocol_scores(scores, protocol, relevance)
    size = n // protocol.n_folds
    sums, counts = np.zeros((len(base), n)), np.zeros((len(base), n))
    for fold in range(protocol.n_folds):
        # one fold: the relevance itself (it may name the image of each text), else its fold
        fold_scores, fold_relevance = (scores, relevance) if protocol.n_folds == 1 else relevance.fold(
            scores, fold, protocol.n_folds)
        context = EvaluationContext(fold_scores, fold_relevance)
        owners = {"images": np.arange(size), "texts": fold_relevance.text_images(fold_scores)}
        images = slice(fold * size, (fold + 1) * size)
        for row, name in enumerate(base):
            metric = implementation(name)
            values = np.asarray(metric.per_query(context), dtype=np.float64)
            if metric.pooled:   # (queries, 2): numerator and denominator
                values, counted = values[:, 0], values[:, 1]
            else:
                counted = (~np.isnan(values)).astype(np.float64)
                values = np.where(counted > 0, values, 0.0)
            owner = owners[metric.queries]
            sums[row, images] = np.bincount(owner, weights=values, minlength=size)
            counts[row, images] = np.bincount(owner, weights=counted, minlength=size)
    fold_counts = counts.reshape(len(base), protocol.n_folds, size).sum(axis=2)   # (metrics, folds)
    empty = [m for m, c in zip(base, fold_counts) if (c == 0).any()]
    if empty:
        raise HarnessError(f"protocol {protocol.name}: nothing counts for {', '.join(empty)} in a fold (no test "
                           f"query counted; of micro-F1: no label predicted or true)")
    for row, totals in enumerate(fold_counts):
        if (totals != totals[0]).any():   # weight each fold's queries by mean count / fold count: ratio = fold mean
            weights = np.repeat(totals.mean() / totals, size)
            sums[row] *= weights
            counts[row] *= weights
    return QueryUnits(base, sums, counts)


def pooled_metrics(names) -> list[str]:
    """The pooled metrics among ``names`` (whose units evaluation stores with its result)."""
    return [n for n in names if METRICS.get(n).pooled]


def units_record(units: QueryUnits) -> dict:
    """Units as an evaluation result stores them (JSON: per metric, per test image)."""
    return {name: {"sums": units.sums[row].tolist(), "counts": units.counts[row].tolist()}
            for row, name in enumerate(units.metrics)}


def units_from_record(record: dict, metrics: list[str], where: str) -> QueryUnits:
    """The units of ``metrics``' base metrics from an evaluation result's ``units`` (``units_record``)."""
    base = tuple(dict.fromkeys(m for name in metrics for m in base_metrics(name)))
    missing = [m for m in base if m not in (record or {})]
    if missing:
        raise HarnessError(f"{where}: the evaluation holds no per-image units of {', '.join(missing)} (evaluated "
                           f"before they were stored: re-run its evaluation)")
    sums = np.array([record[m]["sums"] for m in base], dtype=np.float64)
    counts = np.array([record[m]["counts"] for m in base], dtype=np.float64)
    if sums.ndim != 2 or sums.shape != counts.shape:
        raise HarnessError(f"{where}: per-image units of {', '.join(base)} are not one value per test image each")
    return QueryUnits(base, sums, counts)
