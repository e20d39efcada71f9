"""Metrics as registered declarations: each says its name, how it is computed from a score
matrix and a relevance description, its direction, its table label and its tolerance key.
Tables, model selection and figures read these declarations; nothing else lists metric names.

``evaluate(scores, relevance, names)`` computes several metrics of one score matrix, sharing
the expensive intermediates (ranks per direction) through an ``EvaluationContext``.

A metric that is a mean over queries also declares ``per_query`` (each query's value in the
metric's scale, NaN for a query the mean leaves out) and which items are its ``queries`` (images
or texts): the claim checks resample test images with their queries (``methods.metrics.query_units``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from methods.errors import HarnessError
from methods.registry import Registry


class EvaluationContext:
    """One score matrix and its relevance; intermediates are computed once and cached."""

    def __init__(self, scores: torch.Tensor | np.ndarray, relevance):
        self.scores = torch.as_tensor(scores)
        self.relevance = relevance
        relevance.check(self.scores)
        self._cache: dict[str, Any] = {}

    def cached(self, key: str, compute: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def value(self, metric: str) -> float:
        """A metric of this matrix (metrics may be built from other metrics, e.g. RSUM)."""
        return self.cached(f"metric:{metric}", lambda: float(METRICS.get(metric).compute(self)))


@dataclass(frozen=True)
class Metric:
    name: str
    compute: Callable[[EvaluationContext], float]
    relevance: str              # the relevance kind it is defined for
    direction: str              # "higher" or "lower" is better
    label: str                  # column label in tables
    tolerance: str | None       # key of config `tolerance` for verdicts; None: never judged
    scale: str                  # "percent" (0-100), "percent_sum", "rank", "unit" (0-1)
    in_table: bool = True       # shown as a table column (else computed, e.g. for selection)
    components: tuple[str, ...] = ()   # a sum of these metrics (RSUM), computable from their values
    # the metric is the mean of these per-query values over the queries (NaN: left out), or None
    per_query: Callable[[EvaluationContext], np.ndarray] | None = None
    queries: str | None = None  # "images" or "texts": the items that query (with per_query)

    def better(self, new: float, old: float) -> bool:
        return new > old if self.direction == "higher" else new < old

    @property
    def best(self) -> float | None:
        """The best value the metric can take: 100 for a percentage, 100 per part of a sum of
        percentages, 1 for a rank; None for a unit-scale value (a log variance has no best)."""
        if self.scale == "percent":
            return 100.0
        if self.scale == "percent_sum":
            return 100.0 * len(self.components)
        return 1.0 if self.scale == "rank" else None


METRICS: Registry[Metric] = Registry("metric")


def register_metric(name: str, compute: Callable[[EvaluationContext], float] | None, *, relevance: str,
                    direction: str, label: str, tolerance: str | None, scale: str, in_table: bool = True,
                    components: tuple[str, ...] = (), per_query: Callable[[EvaluationContext], np.ndarray] | None = None,
                    queries: str | None = None) -> Metric:
    """Register a metric; ``compute`` None with ``components``: the sum of those metrics.
    ``per_query`` with ``queries``: the per-query values whose mean (NaN left out) is the metric."""
    if direction not in ("higher", "lower"):
        raise ValueError(f"metric {name}: direction must be 'higher' or 'lower'")
    if (per_query is None) != (queries is None) or queries not in (None, "images", "texts"):
        raise ValueError(f"metric {name}: per_query needs queries 'images' or 'texts' (and the reverse)")
    if compute is None:
        if not components:
            raise ValueError(f"metric {name}: give compute or components")
        compute = lambda context: sum(context.value(c) for c in components)  # noqa: E731
    return METRICS.register(name, Metric(name, compute, relevance, direction, label, tolerance, scale, in_table,
                                         components, per_query, queries))


def value_from(metrics: dict[str, float], name: str) -> float:
    """Metric ``name`` from already computed values: itself, or the sum of its components."""
    metric = METRICS.get(name)
    if metric.components:
        return float(sum(metrics[c] for c in metric.components))
    return float(metrics[name])


def evaluate(scores: torch.Tensor | np.ndarray, relevance, names: list[str] | tuple[str, ...]) -> dict[str, float]:
    """The named metrics of one score matrix (one fold), in the order given."""
    context = EvaluationContext(scores, relevance)
    out = {}
    for name in names:
        metric = METRICS.get(name)
        if metric.relevance != relevance.kind:
            raise HarnessError(f"metric '{name}' is defined for {metric.relevance} relevance, "
                               f"not {relevance.kind}")
        out[name] = context.value(name)
    return out


def base_metrics(name: str) -> tuple[str, ...]:
    """The metrics ``name`` sums (its components), or itself."""
    return METRICS.get(name).components or (name,)


def table_metrics(names: list[str] | tuple[str, ...]) -> list[str]:
    """The metrics among ``names`` that tables show, in that order."""
    return [n for n in names if METRICS.get(n).in_table]
