"""Ranking metrics with ``shared_labels`` relevance (label-wise retrieval): a text is relevant
to an image when they share a label; its gain is the number of labels they share.

- ``{i2t,t2i}_map``: mean over queries of average precision over the whole ranked list (binary
  relevance); queries without any relevant item are left out.
- ``{i2t,t2i}_map_at_r``: mAP@R (Musgrave et al., ECCV 2020), R the query's number of relevant
  items: the mean over the first R ranks of precision at each relevant rank, divided by R;
  queries without any relevant item are left out.
- ``{i2t,t2i}_ndcg500``: NDCG@500 with graded relevance (shared-label count) as the gain and
  log2(rank + 1) discount, the label-wise code's metric (njustkmg/IJCAI21... utils/evaluation.py
  i2t_one, threshold 500; on the tag datasets the protocol ranks each distinct tag set once, as that
  code's ``validate`` does: ``methods.metrics.protocols``). Ideal DCG from the sorted gains. A query that shares no label with any
  candidate scores 0 and counts in the mean, as in that code (and scikit-learn's ``ndcg_score``).
- ``{i2t,t2i}_label_r{1,5,10}``: R@K with label relevance: the share of queries with an item
  that shares a label among their first K (the caption protocols' R@K, with every item sharing a
  label counted as a match); queries without any relevant item count as misses.
- ``ndcg500_sum``: i2t + t2i NDCG@500, for model selection (not a table column) and the main
  metric of the label-wise protocols' training check, whose chance value ``chance_ndcg`` gives.

Ties count against the model as in ``methods.metrics.retrieval``: among equal scores, the less
relevant item is ranked first. All values in percent.
"""
from __future__ import annotations

import numpy as np

from methods.metrics.registry import EvaluationContext, register_metric
from methods.metrics.retrieval import ARROW, QUERIES

NDCG_KS = (500,)
LABEL_RECALL_KS = (1, 5, 10)


def graded_orientation(context: EvaluationContext, direction: str) -> tuple[np.ndarray, np.ndarray]:
    """(scores, gains) with queries as rows for ``direction``."""
    def compute():
        scores = context.scores.double().cpu().numpy()
        gains = context.relevance.graded()
        return (scores, gains) if direction == "i2t" else (scores.T, gains.T)
    return context.cached(f"{direction}_oriented", compute)


def ranked_gains(context: EvaluationContext, direction: str) -> np.ndarray:
    """(queries, candidates) gains in ranked order, ties broken against the model."""
    def compute():
        scores, gains = graded_orientation(context, direction)
        # lexsort: last key is primary; descending score, then ascending gain among ties
        order = np.lexsort((gains, -scores), axis=1)
        return np.take_along_axis(gains, order, axis=1)
    return context.cached(f"{direction}_ranked_gains", compute)


def average_precisions(context: EvaluationContext, direction: str) -> np.ndarray:
    """Each query's average precision over the whole ranked list (a fraction), NaN for a query
    without any relevant item (mAP leaves it out)."""
    def compute():
        relevant = ranked_gains(context, direction) > 0
        precision = np.cumsum(relevant, axis=1) / np.arange(1, relevant.shape[1] + 1)[None, :]
        n_rel = relevant.sum(axis=1)
        return np.divide((precision * relevant).sum(axis=1), n_rel, out=np.full(len(n_rel), np.nan), where=n_rel > 0)
    return context.cached(f"{direction}_average_precisions", compute)


def average_precisions_at_r(context: EvaluationContext, direction: str) -> np.ndarray:
    """Each query's AP@R (a fraction), NaN for a query without any relevant item (left out)."""
    def compute():
        relevant = ranked_gains(context, direction) > 0
        n_rel = relevant.sum(axis=1)
        ranks = np.arange(1, relevant.shape[1] + 1)[None, :]
        precision = np.cumsum(relevant, axis=1) / ranks
        summed = (precision * relevant * (ranks <= n_rel[:, None])).sum(axis=1)
        return np.divide(summed, n_rel, out=np.full(len(n_rel), np.nan), where=n_rel > 0)
    return context.cached(f"{direction}_average_precisions_at_r", compute)


def mean_of_counted(fractions: np.ndarray) -> float:
    """The mean in % over the queries that count (not NaN); 0 when none does."""
    counted = fractions[~np.isnan(fractions)]
    return 100.0 * float(counted.mean()) if counted.size else 0.0


def mean_average_precision(context: EvaluationContext, direction: str) -> float:
    return mean_of_counted(average_precisions(context, direction))


def map_at_r(context: EvaluationContext, direction: str) -> float:
    return mean_of_counted(average_precisions_at_r(context, direction))


def ndcg_fractions(context: EvaluationContext, direction: str, k: int) -> np.ndarray:
    """Each query's NDCG@k in [0, 1] (0 for a query that shares no label with any candidate)."""
    def compute():
        gains = ranked_gains(context, direction)[:, :k]
        discounts = 1.0 / np.log2(np.arange(2, gains.shape[1] + 2))
        dcg = (gains * discounts[None, :]).sum(axis=1)
        _, all_gains = graded_orientation(context, direction)
        ideal = (-np.sort(-all_gains, axis=1)[:, :k] * discounts[None, :]).sum(axis=1)
        return np.divide(dcg, ideal, out=np.zeros_like(dcg), where=ideal > 0)
    return context.cached(f"{direction}_ndcg{k}_fractions", compute)


def ndcg_at(context: EvaluationContext, direction: str, k: int) -> float:
    return 100.0 * float(ndcg_fractions(context, direction, k).mean())


def label_hits(context: EvaluationContext, direction: str, k: int) -> np.ndarray:
    """Per query: an item sharing a label is among its first k."""
    return (ranked_gains(context, direction)[:, :k] > 0).any(axis=1)


def label_recall_at(context: EvaluationContext, direction: str, k: int) -> float:
    return 100.0 * float(label_hits(context, direction, k).mean())


for _d in ("i2t", "t2i"):
    register_metric(f"{_d}_map", lambda c, d=_d: mean_average_precision(c, d), relevance="shared_labels",
                    direction="higher", label=f"{ARROW[_d]} mAP", tolerance="ranking", scale="percent",
                    per_query=lambda c, d=_d: 100.0 * average_precisions(c, d), queries=QUERIES[_d])
    register_metric(f"{_d}_map_at_r", lambda c, d=_d: map_at_r(c, d), relevance="shared_labels",
                    direction="higher", label=f"{ARROW[_d]} mAP@R", tolerance="ranking", scale="percent",
                    per_query=lambda c, d=_d: 100.0 * average_precisions_at_r(c, d), queries=QUERIES[_d])
    for _k in NDCG_KS:
        register_metric(f"{_d}_ndcg{_k}", lambda c, d=_d, k=_k: ndcg_at(c, d, k), relevance="shared_labels",
                        direction="higher", label=f"{ARROW[_d]} NDCG@{_k}", tolerance="ranking", scale="percent",
                        per_query=lambda c, d=_d, k=_k: 100.0 * ndcg_fractions(c, d, k), queries=QUERIES[_d])
    for _k in LABEL_RECALL_KS:
        register_metric(f"{_d}_label_r{_k}", lambda c, d=_d, k=_k: label_recall_at(c, d, k), relevance="shared_labels",
                        direction="higher", label=f"{ARROW[_d]} R@{_k} (label)", tolerance="recall", scale="percent",
                        per_query=lambda c, d=_d, k=_k: 100.0 * label_hits(c, d, k), queries=QUERIES[_d])
LABEL_RANKING_METRICS = tuple(f"{d}_{m}" for d in ("i2t", "t2i")
                              for m in (*(f"ndcg{k}" for k in NDCG_KS), "map", "map_at_r",
                                        *(f"label_r{k}" for k in LABEL_RECALL_KS)))
# model selection on both directions at once (label-wise retrieval: validation NDCG@500 i2t + t2i)
for _k in NDCG_KS:
    register_metric(f"ndcg{_k}_sum", None, components=(f"i2t_ndcg{_k}", f"t2i_ndcg{_k}"), relevance="shared_labels",
                    direction="higher", label=f"NDCG@{_k} sum", tolerance=None, scale="percent_sum", in_table=False)


CHANCE_CHUNK_ELEMENTS = 1 << 22   # (query, candidate) gains held at once (bounds memory on COCO 5K)


def chance_ndcg(query_labels: np.ndarray, candidate_labels: np.ndarray, k: int) -> float:
    """Expected NDCG@k (%) of random scores, over the queries (rows of ``query_labels``) ranking the
    candidates (rows of ``candidate_labels``), gains the shared-label counts. Under random scores
    each of the first min(k, M) ranks holds a uniformly drawn candidate, so E[DCG@k] = (the query's
    mean gain over its M candidates) x sum_{i <= min(k, M)} 1 / log2(i + 1); the ideal DCG does not
    depend on the scores, so E[NDCG@k] = E[DCG@k] / IDCG@k (0 for a query sharing no label with any
    candidate, as the metric counts it)."""
    queries = np.asarray(query_labels, dtype=np.float64)
    candidates = np.asarray(candidate_labels, dtype=np.float64)
    m = candidates.shape[0]
    top = min(k, m)
    discounts = 1.0 / np.log2(np.arange(2, top + 2))
    expected_dcg = (queries @ candidates.sum(axis=0)) / m * discounts.sum()
    chance = np.zeros(len(queries))
    chunk = max(1, CHANCE_CHUNK_ELEMENTS // max(1, m))
    for start in range(0, len(queries), chunk):
        gains = queries[start:start + chunk] @ candidates.T
        best = -np.sort(np.partition(-gains, top - 1, axis=1)[:, :top], axis=1)   # the top gains, descending
        ideal = (best * discounts[None, :]).sum(axis=1)
        rows = slice(start, start + len(gains))
        chance[rows] = np.divide(expected_dcg[rows], ideal, out=np.zeros_like(ideal), where=ideal > 0)
    return 100.0 * float(chance.mean())

