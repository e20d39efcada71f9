"""The paired bootstrap over test images (methods/report/bootstrap.py) on per-image units
(methods/metrics/query_units.py): per-image units against a brute-force count, a resample of
images equal to scoring those images' own queries, scipy's BCa interval equal to a direct
implementation on the same draws, and verdicts on planted orderings."""
import numpy as np
import pytest
from scipy.special import ndtr, ndtri

from methods.metrics.declarations import RECALLS
from methods.metrics.protocols import get_protocol
from methods.metrics.query_units import protocol_units
from methods.metrics.relevance import CaptionsOfImage
from methods.report.bootstrap import mean_over_seeds, paired_difference_interval, side_value, verdict

TPI = 5


def units(scores: np.ndarray, texts_per_image: int = TPI):
    return protocol_units(scores, get_protocol("synthetic_test"), CaptionsOfImage(texts_per_image), ["rsum"])


def brute_hits(scores: np.ndarray, texts_per_image: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per image query: is one of its own texts among its k best (ties against the model); per text
    query: is its image among its k best."""
    n, m = scores.shape
    i2t = np.zeros(n)
    for i in range(n):
        own = set(range(i * texts_per_image, (i + 1) * texts_per_image))
        best_own = max(scores[i, j] for j in own)
        rank = sum(1 for j in range(m) if j not in own and scores[i, j] >= best_own)
        i2t[i] = rank < k
    t2i = np.zeros(m)
    for j in range(m):
        own = j // texts_per_image
        rank = sum(1 for i in range(n) if i != own and scores[i, j] >= scores[own, j])
        t2i[j] = rank < k
    return i2t, t2i


def test_units_are_each_images_query_hits_and_its_texts_hits():
    scores = np.random.default_rng(0).integers(0, 6, size=(9, 9 * TPI)).astype(np.float64)   # ties
    u = units(scores)
    assert u.metrics == RECALLS
    for col, k in enumerate((1, 5, 10)):
        i2t, t2i = brute_hits(scores, TPI, k)
        np.testing.assert_array_equal(u.sums[col], 100 * i2t)
        np.testing.assert_array_equal(u.counts[col], np.ones(9))
        np.testing.assert_allclose(u.sums[3 + col], 100 * t2i.reshape(-1, TPI).sum(axis=1))
        np.testing.assert_array_equal(u.counts[3 + col], np.full(9, TPI))


def test_a_resample_of_images_scores_their_own_queries_with_all_their_texts():
    rng = np.random.default_rng(1)
    scores = rng.normal(size=(8, 8 * TPI))
    u = units(scores)
    picked = rng.integers(0, 8, size=8)              # images drawn with replacement
    expected = 0.0
    for k in (1, 5, 10):
        i2t, t2i = brute_hits(scores, TPI, k)
        texts = np.concatenate([np.arange(i * TPI, (i + 1) * TPI) for i in picked])   # every text of each drawn image
        expected += 100 * (i2t[picked].mean() + t2i[texts].mean())
    assert side_value(u.sums[None][:, :, picked], u.counts[:, picked]) == pytest.approx(expected)


def direct_bca(a, b, counts, n_resamples: int, seed: int, confidence: float):
    """BCa (Efron and Tibshirani, ch. 14) of side(A) - side(B), a side the mean over its rows of
    the summed ratio metrics, resampling images with the draws scipy makes (one integer matrix
    from the seeded generator), jackknife acceleration; loops, no vectorisation."""
    def side(sums, picked):
        return np.mean([sum(r[m, picked].sum() / counts[m, picked].sum() for m in range(len(counts))) for r in sums])

    def stat(picked):
        return side(a, picked) - side(b, picked)
    n = counts.shape[1]
    draws = np.random.default_rng(seed).integers(0, n, (n_resamples, n))
    theta_b = np.array([stat(i) for i in draws])
    theta = stat(np.arange(n))
    z0 = ndtri(((theta_b < theta).sum() + (theta_b <= theta).sum()) / (2 * n_resamples))
    jack = np.array([stat(np.delete(np.arange(n), j)) for j in range(n)])
    d = jack.mean() - jack
    accel = (d ** 3).sum() / (6 * (d ** 2).sum() ** 1.5)
    alpha = (1 - confidence) / 2
    ends = []
    for z in (ndtri(alpha), ndtri(1 - alpha)):
        ends.append(np.percentile(theta_b, 100 * ndtr(z0 + (z0 + z) / (1 - accel * (z0 + z)))))
    return theta, ends[0], ends[1]


def test_scipy_bca_interval_equals_a_direct_implementation_with_the_same_seed():
    rng = np.random.default_rng(2)
    truth = np.repeat(np.eye(12), TPI, axis=1)
    good = [units(rng.normal(size=(12, 12 * TPI)) + 1.5 * truth) for _ in range(2)]   # A: two rows, its own texts higher
    bad = units(rng.normal(size=(12, 12 * TPI)))
    a, b = np.stack([u.sums for u in good]), bad.sums[None]
    got = paired_difference_interval(a, b, bad.counts, n_resamples=500, seed=7)
    theta, low, high = direct_bca(a, b, bad.counts, 500, 7, 0.95)
    assert got["estimate"] == pytest.approx(theta)
    assert got["estimate"] == pytest.approx(np.mean([u.value("rsum") for u in good]) - bad.value("rsum"))
    assert (got["low"], got["high"]) == (pytest.approx(low, rel=1e-12), pytest.approx(high, rel=1e-12))
    assert paired_difference_interval(a, b, bad.counts, n_resamples=500, seed=7) == got   # identical when re-run


def test_uneven_counts_are_a_ratio_not_a_mean_of_image_means():
    """Images carrying different numbers of counted queries (tag sets ranked once, queries with no
    relevant item): the side's value is the metric over the resampled queries."""
    sums = np.array([[[100.0, 0.0, 300.0]]])     # one row, one metric, three images
    counts = np.array([[1.0, 0.0, 3.0]])
    assert side_value(sums, counts) == pytest.approx(400 / 4)
    picked = np.array([0, 0, 1])
    assert side_value(sums[:, :, picked], counts[:, picked]) == pytest.approx(100.0)


def test_planted_orderings_give_each_verdict():
    rng = np.random.default_rng(3)
    n = 40
    truth = np.repeat(np.eye(n), TPI, axis=1)
    strong = units(rng.normal(size=(n, n * TPI)) + 2.0 * truth)
    weak = units(rng.normal(size=(n, n * TPI)) + 0.3 * truth)
    twin = units(rng.normal(size=(n, n * TPI)) + 2.0 * truth)     # the same model, another draw

    def judged(a, b, margin=0.0):
        got = paired_difference_interval(a.sums[None], b.sums[None], a.counts)
        return got, verdict(got["low"], got["high"], margin)
    assert judged(strong, weak)[1] == "supported"
    reversed_, said = judged(weak, strong)      # the claim "weak above strong": planted reversal
    assert reversed_["high"] < 0 and said == "contradicted"
    assert judged(strong, twin)[1] == "inconclusive"
    gap = judged(strong, weak)[0]
    assert verdict(gap["low"], gap["high"], margin=gap["high"] + 1) == "contradicted"   # a claimed margin too large


def test_identical_rows_give_the_point_interval_zero_and_no_verdict_either_way():
    u = units(np.random.default_rng(6).normal(size=(10, 10 * TPI)))
    got = paired_difference_interval(u.sums[None], u.sums[None], u.counts, n_resamples=200)
    assert (got["estimate"], got["low"], got["high"]) == (0.0, 0.0, 0.0)
    assert verdict(got["low"], got["high"]) == "inconclusive"


def test_seeds_are_paired_by_image():
    a0, a1 = np.eye(3, 6), np.ones((3, 6))     # (metrics, images) of two seeds
    np.testing.assert_array_equal(mean_over_seeds([a0, a1]), (a0 + a1) / 2)
    with pytest.raises(Exception, match="different test sets"):
        mean_over_seeds([a0, np.ones((4, 6))])
