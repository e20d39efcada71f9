"""Retrieval metrics against a brute-force, sort-based implementation (ties included)."""
import math

import numpy as np
import pytest
import torch

from methods.errors import HarnessError
from methods.metrics.evaluation import evaluate_protocol
from methods.metrics.protocols import PROTOCOLS, get_protocol
from methods.metrics.retrieval import chance_recalls, i2t_ranks, retrieval_metrics, t2i_ranks


def brute_force_ranks(scores: np.ndarray):
    """Explicit sorting: stable order with negatives placed before tied ground truths."""
    n, n_cap = scores.shape
    i2t = []
    for i in range(n):
        gts = set(range(5 * i, 5 * i + 5))
        # sort key: descending score, and among equal scores negatives first (ties against the model)
        order = sorted(range(n_cap), key=lambda c: (-scores[i, c], c in gts))
        i2t.append(min(order.index(c) for c in gts))
    t2i = []
    for c in range(n_cap):
        gt = c // 5
        order = sorted(range(n), key=lambda i: (-scores[i, c], i == gt))
        t2i.append(order.index(gt))
    return np.array(i2t), np.array(t2i)


def brute_force_metrics(scores):
    i2t, t2i = brute_force_ranks(scores)
    out = {}
    for name, r in (("i2t", i2t), ("t2i", t2i)):
        for k in (1, 5, 10):
            out[f"{name}_r{k}"] = 100.0 * sum(x < k for x in r) / len(r)
        srt = sorted(r)
        m = len(srt)
        median = srt[m // 2] if m % 2 else (srt[m // 2 - 1] + srt[m // 2]) / 2
        out[f"{name}_medr"] = math.floor(median) + 1
        out[f"{name}_meanr"] = sum(r) / len(r) + 1
    out["rsum"] = sum(out[f"{d}_r{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_ranks_match_brute_force_with_ties(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 24))
    # few distinct values -> many ties, including ties between ground truths and negatives
    scores = rng.integers(0, 4, size=(n, 5 * n)).astype(np.float32)
    bf_i2t, bf_t2i = brute_force_ranks(scores)
    np.testing.assert_array_equal(i2t_ranks(torch.from_numpy(scores), chunk=5).numpy(), bf_i2t)
    np.testing.assert_array_equal(t2i_ranks(torch.from_numpy(scores), chunk=7).numpy(), bf_t2i)


@pytest.mark.parametrize("seed", range(4))
def test_metrics_match_brute_force_continuous(seed):
    rng = np.random.default_rng(100 + seed)
    n = 30
    scores = rng.normal(size=(n, 5 * n)).astype(np.float32)
    scores[np.arange(n), 5 * np.arange(n)] += 2.0  # some signal
    got = retrieval_metrics(scores)
    want = brute_force_metrics(scores)
    for k, v in want.items():
        assert got[k] == pytest.approx(v), k


def test_constant_scores_rank_last_not_first():
    scores = np.zeros((10, 50), dtype=np.float32)
    m = retrieval_metrics(scores)
    assert m["i2t_r10"] == 0.0 and m["t2i_r1"] == 0.0
    assert m["i2t_medr"] == 46  # 45 negatives above the best ground truth, 1-based


def test_perfect_scores():
    n = 8
    scores = -np.ones((n, 5 * n), dtype=np.float32)
    for i in range(n):
        scores[i, 5 * i:5 * i + 5] = 1.0
    m = retrieval_metrics(scores)
    assert m["rsum"] == 600.0 and m["i2t_medr"] == 1 and m["t2i_meanr"] == 1


def test_five_fold_protocol_averages_every_metric_over_consecutive_folds():
    rng = np.random.default_rng(7)
    n = 50
    scores = rng.normal(size=(n, 5 * n)).astype(np.float32)
    proto = PROTOCOLS["coco_1k_5fold"].__class__("test5", "testall", 5, None, "")
    res = evaluate_protocol(scores, proto)
    folds = [brute_force_metrics(scores[f * 10:(f + 1) * 10, f * 50:(f + 1) * 50]) for f in range(5)]
    for k in ("i2t_r1", "t2i_r5", "i2t_medr", "rsum"):
        assert res["metrics"][k] == pytest.approx(np.mean([f[k] for f in folds]))
    # RSUM of the averaged recalls equals the average RSUM (recomputed, not the scripts' mislabelled one)
    m = res["metrics"]
    assert m["rsum"] == pytest.approx(sum(m[f"{d}_r{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10)))


def test_protocol_checks_image_count_and_layout():
    with pytest.raises(HarnessError, match="expects 1000 images"):
        evaluate_protocol(np.zeros((10, 50), np.float32), get_protocol("f30k_1k"))
    with pytest.raises(HarnessError, match="expected \\(N, 5N\\)"):
        retrieval_metrics(np.zeros((10, 40), np.float32))
    with pytest.raises(HarnessError, match="unknown protocol"):
        get_protocol("coco_1k")


def test_chance_recalls_match_random_scores():
    """The closed form of random-score recalls against the metric code on random matrices."""
    n, trials = 12, 600
    gen = torch.Generator().manual_seed(0)
    mean = {}
    for _ in range(trials):
        for k, v in retrieval_metrics(torch.rand(n, 5 * n, generator=gen)).items():
            mean[k] = mean.get(k, 0.0) + v / trials
    expected = chance_recalls(n)
    for k in ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum"):
        assert abs(mean[k] - expected[k]) < (6.0 if k == "rsum" else 3.0), (k, mean[k], expected[k])
    # by hand: 12 images, 60 captions; i2t R@1 = 5/60, t2i R@10 = 10/12
    assert expected["i2t_r1"] == pytest.approx(100 * 5 / 60)
    assert expected["t2i_r10"] == pytest.approx(100 * 10 / 12)


def test_api_evaluate_is_the_brute_force_metrics_of_a_score_matrix():
    from methods import api

    rng = np.random.default_rng(7)
    scores = rng.normal(size=(1000, 5000)).astype(np.float32)
    scores[np.arange(1000)[:, None], 5 * np.arange(1000)[:, None] + np.arange(5)] += 2.5   # a model that learned
    result = api.evaluate(torch.from_numpy(scores), "f30k_1k")
    sub = scores[:40, :200]   # brute force is slow: check the protocol's arithmetic on a block too
    assert api.evaluate(sub, "synthetic_test")["metrics"] == pytest.approx(brute_force_metrics(sub), abs=1e-9)
    images = np.arange(1000)   # continuous scores, no ties: R@K by counting, independently
    assert result["metrics"]["i2t_r1"] == pytest.approx(100.0 * np.mean(scores.argmax(1) // 5 == images))
    gt = scores[np.arange(5000) // 5, np.arange(5000)]
    assert result["metrics"]["t2i_r10"] == pytest.approx(100.0 * np.mean((scores > gt).sum(0) < 10))
    assert result["n_images"] == 1000 and result["protocol"] == "f30k_1k"
    with pytest.raises(HarnessError, match="protocol synthetic_eccv needs its extended_positives relevance"):
        api.evaluate(sub, "synthetic_eccv")
    with pytest.raises(HarnessError, match=r"score matrix has shape \(40, 199\); expected \(N, 5N\)"):
        api.evaluate(sub[:, :199], "synthetic_test")
