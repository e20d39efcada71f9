"""How declared metrics are computed: each compute module registers, for a metric declared in
``methods.metrics.declarations``, the function of an ``EvaluationContext`` that gives its value
and, for a mean over queries, the one that gives each query's value (in the metric's scale, NaN
for a query the mean leaves out; for a pooled metric, each query's numerator and denominator). A sum of metrics (RSUM) needs no implementation: the context
adds its components.

An ``EvaluationContext`` holds one score matrix and its relevance and caches the expensive
intermediates (ranks per direction) that several metrics share; ``evaluate`` computes named
metrics through one. ``methods.metrics.evaluation`` imports every compute module (and ``evaluate``
from here), so whatever evaluates through it finds each metric implemented.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable

import numpy as np
import torch

from methods.errors import HarnessError
from methods.metrics.declarations import METRICS, Metric
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
        return self.cached(f"metric:{metric}", lambda: float(self._compute(metric)))

    def _compute(self, metric: str) -> float:
        components = METRICS.get(metric).components
        if components:
            return sum(self.value(c) for c in components)
        return implementation(metric).compute(self)


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


@dataclass(frozen=True, kw_only=True)
class ImplementedMetric(Metric):
    """A declared metric with its computation."""
    compute: Callable[[EvaluationContext], float]
    # each query's value (with the declaration's ``queries``), whose mean is the metric; of a pooled
    # metric, (queries, 2): each query's numerator and denominator
    per_query: Callable[[EvaluationContext], np.ndarray] | None = None


IMPLEMENTED_METRICS: Registry[ImplementedMetric] = Registry("metric implementation", declared=METRICS)


def implement_metric(name: str, compute: Callable[[EvaluationContext], float],
                     per_query: Callable[[EvaluationContext], np.ndarray] | None = None) -> ImplementedMetric:
    """Register the computation of declared metric ``name``; ``per_query`` exactly when the
    declaration names its ``queries``."""
    metric = METRICS.get(name)
    if metric.components:
        raise ValueError(f"metric {name}: a sum of metrics is computed from its components, not implemented")
    if (per_query is None) != (metric.queries is None):
        raise ValueError(f"metric {name}: give per_query exactly when the declaration names its queries")
    declared = {f.name: getattr(metric, f.name) for f in fields(metric)}
    return IMPLEMENTED_METRICS.register(name, ImplementedMetric(**declared, compute=compute, per_query=per_query))


def implementation(name: str) -> ImplementedMetric:
    """The implementation of declared metric ``name`` (an unknown name: the declarations' error)."""
    METRICS.get(name)
    if name not in IMPLEMENTED_METRICS:
        raise HarnessError(f"metric '{name}' is declared but its implementation is not registered: compute "
                           f"metrics through methods.metrics.evaluation, which imports every metric module")
    return IMPLEMENTED_METRICS.get(name)
