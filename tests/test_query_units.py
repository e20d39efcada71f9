"""Per-image units of a protocol's metrics (methods/metrics/query_units.py): every metric that
declares per-query values averages them to its own value; units of tag sets ranked once and of
folded protocols against brute-force loops; metrics that are no mean over queries are refused."""
import numpy as np
import pytest
import torch

from methods.errors import HarnessError
from methods.metrics.declarations import check_claimable
from methods.metrics.evaluation import evaluate_protocol
# the implemented metrics: declarations with their computation (each per-query metric's ``per_query``)
from methods.metrics.implementations import IMPLEMENTED_METRICS as METRICS
from methods.metrics.implementations import EvaluationContext
from methods.metrics.protocols import Protocol, get_protocol
from methods.metrics.query_units import protocol_units
from methods.metrics.relevance import CaptionsOfImage, ExtendedPositives, PlausibleMatches, SharedLabels

TPI = 5


def relevances(rng):
    n = 7
    labels = rng.integers(0, 2, size=(n, 4)).astype(np.uint8)
    labels[2] = 0     # an image without labels: mAP and mAP@R leave its queries out
    positives = rng.random((n, n * TPI)) < 0.15
    positives[np.arange(n * TPI) // TPI, np.arange(n * TPI)] = True
    categories = (rng.random((n, 90)) < 0.05).astype(np.uint8)
    categories[4] = 0   # an image without instance annotations: PMRP leaves its queries out
    return n, {"captions_of_image": CaptionsOfImage(TPI),
               "shared_labels": SharedLabels(labels, np.repeat(labels, TPI, axis=0)),
               "extended_positives": ExtendedPositives(positives, TPI),
               "plausible_matches": PlausibleMatches(categories, TPI, last="dropped")}


@pytest.mark.parametrize("name", sorted(n for n, m in METRICS.items() if m.per_query is not None and not m.pooled))
def test_the_mean_of_counted_per_query_values_is_the_metric(name):
    rng = np.random.default_rng(0)
    n, by_kind = relevances(rng)
    metric = METRICS.get(name)
    scores = torch.as_tensor(rng.integers(0, 4, size=(n, n * TPI)).astype(np.float64))   # many ties
    context = EvaluationContext(scores, by_kind[metric.relevance])
    values = np.asarray(metric.per_query(context))
    assert len(values) == (n if metric.queries == "images" else n * TPI)
    assert np.nanmean(values) == pytest.approx(context.value(name), rel=1e-12)


def test_sums_of_metrics_means_and_pools_over_queries_are_claimable_others_are_not():
    check_claimable("rsum", "here")
    check_claimable("image_micro_f1", "here")
    check_claimable("t2i_ndcg500", "here")
    for name in ("i2t_medr", "i2t_r1_cxc"):
        with pytest.raises(HarnessError, match="not a mean over test queries"):
            check_claimable(name, "claims.x")
    with pytest.raises(HarnessError, match="unknown metric 'rsumm'"):
        check_claimable("rsumm", "claims.x")


def brute_ndcg_and_ap(scores: np.ndarray, gains: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query (rows): NDCG@k and AP, ranking by score with ties against the model (the less
    relevant first); AP NaN without a relevant item."""
    ndcg, ap = np.zeros(len(scores)), np.full(len(scores), np.nan)
    for q in range(len(scores)):
        order = sorted(range(scores.shape[1]), key=lambda j: (-scores[q, j], gains[q, j]))
        ranked = gains[q, order]
        dcg = sum(g / np.log2(i + 2) for i, g in enumerate(ranked[:k]))
        ideal = sum(g / np.log2(i + 2) for i, g in enumerate(sorted(gains[q], reverse=True)[:k]))
        ndcg[q] = 100 * dcg / ideal if ideal > 0 else 0.0
        hits = np.flatnonzero(ranked > 0)
        if hits.size:
            ap[q] = 100 * np.mean([(j + 1) / (h + 1) for j, h in enumerate(hits)])
    return ndcg, ap


def test_tag_sets_ranked_once_belong_to_their_first_image():
    """Images 1 and 3 repeat image 0's tags: the protocol ranks texts 0, 2, 4 only, text 0 for
    image 0, and images 1 and 3 carry no text query."""
    rng = np.random.default_rng(4)
    labels = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 1], [1, 0, 0]], dtype=np.uint8)
    columns = np.array([0, 2, 4])
    relevance = SharedLabels(labels, labels[columns], text_columns=columns, text_owners=columns,
                             tie_order="argsort_reversed")
    scores = rng.normal(size=(5, 5))
    u = protocol_units(scores, get_protocol("labelwise_test"), relevance, ["t2i_ndcg500", "i2t_map"])
    gains = labels.astype(float) @ labels[columns].T.astype(float)
    ndcg_t2i, _ = brute_ndcg_and_ap(scores[:, columns].T, gains.T, 500)
    _, ap_i2t = brute_ndcg_and_ap(scores[:, columns], gains, 500)
    t2i, i2t = u.metrics.index("t2i_ndcg500"), u.metrics.index("i2t_map")
    np.testing.assert_allclose(u.sums[t2i], [ndcg_t2i[0], 0, ndcg_t2i[1], 0, ndcg_t2i[2]])
    np.testing.assert_array_equal(u.counts[t2i], [1, 0, 1, 0, 1])
    np.testing.assert_allclose(u.sums[i2t], np.nan_to_num(ap_i2t))
    np.testing.assert_array_equal(u.counts[i2t], ~np.isnan(ap_i2t))
    assert u.value("t2i_ndcg500") == pytest.approx(ndcg_t2i.mean())


def test_folded_protocols_score_each_image_within_its_fold():
    rng = np.random.default_rng(5)
    scores = rng.normal(size=(6, 6 * TPI))
    folded = Protocol("test_3fold", "test", 3, None, "three folds of two images")
    u = protocol_units(scores, folded, CaptionsOfImage(TPI), ["rsum", "t2i_meanr"])
    for f in range(3):
        block = scores[2 * f:2 * f + 2, 2 * f * TPI:(2 * f + 2) * TPI]
        context = EvaluationContext(torch.as_tensor(block), CaptionsOfImage(TPI))
        images = slice(2 * f, 2 * f + 2)
        for name in ("i2t_r1", "t2i_r5", "t2i_meanr"):
            row = u.metrics.index(name)
            assert u.sums[row, images].sum() / u.counts[row, images].sum() == pytest.approx(context.value(name))
    assert u.value("rsum") == pytest.approx(np.mean([
        EvaluationContext(torch.as_tensor(scores[2 * f:2 * f + 2, 2 * f * TPI:(2 * f + 2) * TPI]),
                          CaptionsOfImage(TPI)).value("rsum") for f in range(3)]))


def test_a_protocol_that_does_not_report_the_metric_is_refused():
    with pytest.raises(HarnessError, match="does not report metric 't2i_ndcg500'"):
        protocol_units(np.zeros((2, 10)), get_protocol("synthetic_test"), CaptionsOfImage(TPI), ["t2i_ndcg500"])


def test_folds_that_leave_out_different_numbers_of_queries_average_as_the_table_does():
    """mAP leaves out queries without a relevant item; with more of them in one fold, the units
    still give the mean over folds, the value the table reports."""
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 2, size=(8, 3)).astype(np.uint8)
    labels[[0, 1, 2]] = 0            # fold 0 (images 0-3) has three images without labels, fold 1 none
    labels[4:, 0] = 1
    relevance = SharedLabels(labels, np.repeat(labels, TPI, axis=0))
    scores = rng.normal(size=(8, 8 * TPI))
    folded = Protocol("labels_2fold", "test", 2, None, "two folds", relevance="shared_labels",
                      metrics=("i2t_map", "t2i_map", "i2t_ndcg500"))
    u = protocol_units(scores, folded, relevance, ["i2t_map", "t2i_map", "i2t_ndcg500"])
    table = evaluate_protocol(scores, folded, relevance)["metrics"]
    for name in ("i2t_map", "t2i_map", "i2t_ndcg500"):
        assert u.value(name) == pytest.approx(table[name], rel=1e-12)
