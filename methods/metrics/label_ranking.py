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
  code's ``validate`` does: ``methods.metrics.protocols``). Ideal DCG from the sorted gains. A query
  that shares no label with any candidate scores 0 and counts in the mean, as in that code (and
  scikit-learn's ``ndcg_score``). The relevance's ``ndcg_discount: coco_t2i_code`` gives text
  queries the discount of that code's COCO ``t2i``, 1 / log2(5 (rank - 1) + c + 2) with c the
  caption's index within its image, in the DCG and the ideal DCG alike (i2t keeps log2(rank + 1)).
- ``{i2t,t2i}_own_r{1,5,10}``: the label-wise code's R@K (``i2t_one`` / ``i2t`` / ``t2i``): the
  share of queries whose own item is among their first K. An image's own texts are its captions, or
  on a tag dataset the one distinct tag set equal to its own; a text's own images are its image, or
  every image with that identical tag set. Sharing a label is not enough (that R@K saturates on a
  few labels).
- ``ndcg500_sum``: i2t + t2i NDCG@500, for model selection (not a table column) and the main
  metric of the label-wise protocols' training check, whose chance value ``chance_ndcg`` gives.

Ties (``SharedLabels.tie_order``): ``against_model`` ranks the less relevant item first among
equal scores, as ``methods.metrics.retrieval`` does; ``argsort_reversed`` ranks the later
candidate first: the code's ``np.argsort(d)[::-1]`` with numpy's stable sort. The code's own
default sort leaves the order of equal scores unspecified (numpy of its time: introsort, index
order kept only within runs of up to 16; numpy >= 1.25 on AVX-512 / AVX2 hosts: SIMD sorting
networks, not even then), so it depends on numpy's version and the host's CPU and no fixed rule
reproduces it everywhere; the stable reading is the one that gives the same numbers on every
machine. All values in percent. The metrics are declared in ``methods.metrics.declarations``; this
module implements them.
"""
from __future__ import annotations

import numpy as np

from methods.metrics.declarations import DIRECTIONS, NDCG_KS, OWN_RECALL_KS
from methods.metrics.implementations import EvaluationContext, implement_metric


def graded_orientation(context: EvaluationContext, direction: str) -> tuple[np.ndarray, np.ndarray]:
    """(scores, gains) with queries as rows for ``direction``."""
    def compute():
        scores = context.scores.double().cpu().numpy()
        gains = context.relevance.graded()
        return (scores, gains) if direction == "i2t" else (scores.T, gains.T)
    return context.cached(f"{direction}_oriented", compute)


def ranked_order(context: EvaluationContext, direction: str) -> np.ndarray:
    """(queries, candidates): each query's candidates in ranked order, descending score, equal
    scores in the relevance's ``tie_order``."""
    def compute():
        scores, gains = graded_orientation(context, direction)
        if context.relevance.tie_order == "against_model":
            return np.lexsort((gains, -scores), axis=1)   # last key primary: then ascending gain
        m = scores.shape[1]
        # a stable descending sort of the reversed row: equal scores keep the later candidate first
        return (m - 1) - np.argsort(-scores[:, ::-1], axis=1, kind="stable")
    return context.cached(f"{direction}_ranked_order", compute)


def ranked_gains(context: EvaluationContext, direction: str) -> np.ndarray:
    """(queries, candidates) gains in ranked order (``ranked_order``)."""
    def compute():
        _, gains = graded_orientation(context, direction)
        return np.take_along_axis(gains, ranked_order(context, direction), axis=1)
    return context.cached(f"{direction}_ranked_gains", compute)


def discounts(context: EvaluationContext, direction: str, length: int) -> np.ndarray:
    """(queries or 1, length) NDCG discounts of ranks 1..length (``SharedLabels.ndcg_discount``)."""
    ranks = np.arange(length)
    if context.relevance.ndcg_discount == "rank" or direction == "i2t":
        return 1.0 / np.log2(ranks + 2)[None, :]
    n_images, n_texts = context.scores.shape
    caption = np.arange(n_texts) % (n_texts // n_images)   # the query's index among its image's captions
    return 1.0 / np.log2(5 * ranks[None, :] + caption[:, None] + 2)


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
        weights = discounts(context, direction, gains.shape[1])
        dcg = (gains * weights).sum(axis=1)
        _, all_gains = graded_orientation(context, direction)
        ideal = (-np.sort(-all_gains, axis=1)[:, :k] * weights).sum(axis=1)
        return np.divide(dcg, ideal, out=np.zeros_like(dcg), where=ideal > 0)
    return context.cached(f"{direction}_ndcg{k}_fractions", compute)


def ndcg_at(context: EvaluationContext, direction: str, k: int) -> float:
    return 100.0 * float(ndcg_fractions(context, direction, k).mean())


def own_hits(context: EvaluationContext, direction: str, k: int) -> np.ndarray:
    """Per query: one of its own items (``SharedLabels.own_keys``) is among its first k."""
    image_keys, text_keys = context.relevance.own_keys(context.scores)
    top = ranked_order(context, direction)[:, :k]
    if direction == "i2t":   # (images, k) texts: a text's key among the image's keys
        return (text_keys[top][:, :, None] == image_keys[:, None, :]).any(axis=(1, 2))
    return (image_keys[top] == text_keys[:, None, None]).any(axis=(1, 2))


def own_recall_at(context: EvaluationContext, direction: str, k: int) -> float:
    return 100.0 * float(own_hits(context, direction, k).mean())


for _d in DIRECTIONS:
    implement_metric(f"{_d}_map", lambda c, d=_d: mean_average_precision(c, d),
                     per_query=lambda c, d=_d: 100.0 * average_precisions(c, d))
    implement_metric(f"{_d}_map_at_r", lambda c, d=_d: map_at_r(c, d),
                     per_query=lambda c, d=_d: 100.0 * average_precisions_at_r(c, d))
    for _k in NDCG_KS:
        implement_metric(f"{_d}_ndcg{_k}", lambda c, d=_d, k=_k: ndcg_at(c, d, k),
                         per_query=lambda c, d=_d, k=_k: 100.0 * ndcg_fractions(c, d, k))
    for _k in OWN_RECALL_KS:
        implement_metric(f"{_d}_own_r{_k}", lambda c, d=_d, k=_k: own_recall_at(c, d, k),
                         per_query=lambda c, d=_d, k=_k: 100.0 * own_hits(c, d, k))


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

