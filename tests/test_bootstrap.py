"""The paired bootstrap over test images (methods/report/bootstrap.py): per-image units against a
brute-force count, a resample of images equal to scoring those images' own queries, scipy's BCa
interval equal to a direct implementation on the same draws, and verdicts on planted orderings."""
import numpy as np
import pytest
from scipy.special import ndtr, ndtri

from methods.report.bootstrap import image_units, mean_over_seeds, paired_difference_interval, rsum_of, verdict

TPI = 5


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


def test_units_are_each_images_query_hits_and_its_texts_mean_hits():
    scores = np.random.default_rng(0).integers(0, 6, size=(9, 9 * TPI)).astype(np.float64)   # ties
    units = image_units(scores, TPI)
    for col, k in enumerate((1, 5, 10)):
        i2t, t2i = brute_hits(scores, TPI, k)
        np.testing.assert_array_equal(units[:, col], i2t)
        np.testing.assert_allclose(units[:, 3 + col], t2i.reshape(-1, TPI).mean(axis=1))


def test_a_resample_of_images_scores_their_own_queries_with_all_their_texts():
    rng = np.random.default_rng(1)
    scores = rng.normal(size=(8, 8 * TPI))
    units = image_units(scores, TPI)
    picked = rng.integers(0, 8, size=8)              # images drawn with replacement
    for col, k in enumerate((1, 5, 10)):
        i2t, t2i = brute_hits(scores, TPI, k)
        texts = np.concatenate([np.arange(i * TPI, (i + 1) * TPI) for i in picked])   # every text of each drawn image
        assert units[picked, col].mean() == pytest.approx(i2t[picked].mean())
        assert units[picked, 3 + col].mean() == pytest.approx(t2i[texts].mean())
    assert rsum_of(units.T[:, picked]) == pytest.approx(100 * units[picked].mean(axis=0).sum())


def direct_bca(a: np.ndarray, b: np.ndarray, n_resamples: int, seed: int, confidence: float):
    """BCa (Efron and Tibshirani, ch. 14) of RSUM(A) - RSUM(B), resampling images with the draws
    scipy makes (one integer matrix from the seeded generator), jackknife acceleration."""
    stat = lambda x, y: 100 * (x.mean(axis=0).sum() - y.mean(axis=0).sum())  # noqa: E731
    n = len(a)
    draws = np.random.default_rng(seed).integers(0, n, (n_resamples, n))
    theta_b = np.array([stat(a[i], b[i]) for i in draws])
    theta = stat(a, b)
    z0 = ndtri(((theta_b < theta).sum() + (theta_b <= theta).sum()) / (2 * n_resamples))
    jack = np.array([stat(np.delete(a, j, 0), np.delete(b, j, 0)) for j in range(n)])
    d = jack.mean() - jack
    accel = (d ** 3).sum() / (6 * (d ** 2).sum() ** 1.5)
    alpha = (1 - confidence) / 2
    ends = []
    for z in (ndtri(alpha), ndtri(1 - alpha)):
        ends.append(np.percentile(theta_b, 100 * ndtr(z0 + (z0 + z) / (1 - accel * (z0 + z)))))
    return theta, ends[0], ends[1]


def test_scipy_bca_interval_equals_a_direct_implementation_with_the_same_seed():
    rng = np.random.default_rng(2)
    good, bad = rng.normal(size=(12, 12 * TPI)), rng.normal(size=(12, 12 * TPI))
    good += 1.5 * np.repeat(np.eye(12), TPI, axis=1)     # A ranks its own texts higher
    a, b = image_units(good, TPI), image_units(bad, TPI)
    got = paired_difference_interval(a, b, n_resamples=500, seed=7)
    theta, low, high = direct_bca(a, b, 500, 7, 0.95)
    assert got["estimate"] == pytest.approx(theta)
    assert (got["low"], got["high"]) == (pytest.approx(low, rel=1e-12), pytest.approx(high, rel=1e-12))
    assert paired_difference_interval(a, b, n_resamples=500, seed=7) == got      # byte-identical when re-run


def test_planted_orderings_give_each_verdict():
    rng = np.random.default_rng(3)
    n = 40
    truth = np.repeat(np.eye(n), TPI, axis=1)
    strong = image_units(rng.normal(size=(n, n * TPI)) + 2.0 * truth, TPI)
    weak = image_units(rng.normal(size=(n, n * TPI)) + 0.3 * truth, TPI)
    assert verdict(**{k: paired_difference_interval(strong, weak)[k] for k in ("low", "high")}) == "supported"
    reversed_ = paired_difference_interval(weak, strong)      # the claim "weak above strong": planted reversal
    assert reversed_["high"] < 0 and verdict(reversed_["low"], reversed_["high"]) == "contradicted"
    twin = image_units(rng.normal(size=(n, n * TPI)) + 2.0 * truth, TPI)     # the same model, another draw
    close = paired_difference_interval(strong, twin)
    assert verdict(close["low"], close["high"]) == "inconclusive"


def test_seeds_are_paired_by_image():
    a0, a1 = np.eye(3, 6), np.ones((3, 6))
    np.testing.assert_array_equal(mean_over_seeds([a0, a1]), (a0 + a1) / 2)
    with pytest.raises(Exception, match="different test sets"):
        mean_over_seeds([a0, np.ones((4, 6))])
