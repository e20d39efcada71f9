"""Rank claims (``rank(a among b, c, d).m <= k``: a above the k-th best of the others) and
equivalence claims (``|a.m - b.m| <= d``, TOST on the claims' interval): the machine forms, the
k-th-best reduction by hand, the verdicts on hand-worked intervals, the paired bootstrap of
a − (k-th best of the others) against a direct implementation on the same draws, and the claims
job on planted rows."""
import numpy as np
import pytest

from methods.data.datasets import dataset_payload
from methods.errors import HarnessError
from methods.job_records import ClaimsSpec
from methods.metrics.protocols import get_protocol
from methods.metrics.retrieval import retrieval_metrics
from methods.report import claims as claims_job
from methods.report.bootstrap import equivalence_verdict, paired_difference_interval, reduce_rows
from methods.report.claim_form import parse_comparison
from tests.conftest import config_with_every_table
from tests.records import claim_record, claims_spec_record, planted_claim_row
from tests.test_best_of_set_claims import planted, units


def test_a_rank_reads_the_row_above_the_kth_best_of_the_others():
    c = parse_comparison("rank(ours among a, b, c).i2t_r1 <= 2", "here")
    assert (c.left, c.right, c.right_reduce, c.best, c.rank) == (("ours",), ("a", "b", "c"), "max2", "ours", 2)
    assert c.text() == "rank(ours among a, b, c).i2t_r1 <= 2" and c.members == ("ours", "a", "b", "c")
    lower = parse_comparison("rank(ours among a, b).t2i_meanr <= 2", "here")   # lower is better: the 2nd lowest
    assert (lower.left, lower.right, lower.left_reduce) == (("a", "b"), ("ours",), "min2")
    assert parse_comparison("rank(ours among a, b).rsum <= 1", "here").right_reduce == "max"   # best of the set
    for bad, message in (("rank(ours among a, b).rsum <= 3", "holds whatever the numbers"),
                         ("rank(ours among ours, b).rsum <= 1", "among the others too"),
                         ("rank(ours among a, b).rsum <= 0", "is not a rank"),
                         ("rank(ours among a, a).rsum <= 1", "twice")):
        with pytest.raises(HarnessError, match=message):
            parse_comparison(bad, "claims.x.compare")


def test_an_equivalence_reads_the_difference_within_its_bound():
    c = parse_comparison("|mean(a_1, a_2).rsum - b.rsum| <= 5.5", "here")
    assert (c.left, c.right, c.bound, c.best) == (("a_1", "a_2"), ("b",), 5.5, None)
    assert c.text() == "|mean(a_1, a_2).rsum - b.rsum| <= 5.5"
    for bad, message in (("|a.rsum - b.t2i_r1| <= 5", "both sides need the same metric"),
                         ("|a.rsum - b.rsum| <= 0", "bound must be positive"),
                         ("|a.rsum - a.rsum| <= 1", "on both sides"),
                         ("|a.rsum - b.rsum| < 1", "is not")):
        with pytest.raises(HarnessError, match=message):
            parse_comparison(bad, "claims.x.compare")


def test_the_kth_best_of_rows_hand_worked():
    values = np.array([[40.0, 1.0], [50.0, 3.0], [45.0, 2.0]])   # rows x resamples
    assert reduce_rows(values, "max").tolist() == [50.0, 3.0]
    assert reduce_rows(values, "max2").tolist() == [45.0, 2.0]
    assert reduce_rows(values, "max3").tolist() == [40.0, 1.0]
    assert reduce_rows(values, "min2").tolist() == [45.0, 2.0]
    assert reduce_rows(values, "mean").tolist() == [45.0, 2.0]
    assert reduce_rows(values, "mean", np.array([0.5, 0.5, 0.0])).tolist() == [45.0, 2.0]
    with pytest.raises(HarnessError, match="the max4 of 3 rows"):
        reduce_rows(values, "max4")


@pytest.mark.parametrize("low,high,expected", [
    (-1.0, 1.0, "supported"), (-1.9, 1.9, "supported"),
    (1.5, 2.5, "inconclusive"), (-2.0, 1.0, "inconclusive"),   # an end on the bound is not inside it
    (-3.0, 3.0, "inconclusive"),                              # wider than the bound: cannot tell
    (2.1, 3.0, "contradicted"), (-3.0, -2.5, "contradicted"),
    (float("nan"), 1.0, "undetermined")])
def test_equivalence_verdicts_on_hand_worked_intervals(low, high, expected):
    assert equivalence_verdict(low, high, 2.0) == expected


def test_rank_bootstrap_equals_a_direct_implementation_on_the_same_draws():
    rng = np.random.default_rng(4)
    a, b, c, d = (units(planted(rng, 15, s)) for s in (1.2, 1.8, 1.0, 0.6))
    got = paired_difference_interval(a.sums[None], np.stack([b.sums, c.sums, d.sums]), a.counts, n_resamples=400,
                                     seed=5, method="percentile", reduce_b="max2")
    counts = a.counts

    def value(u, picked):
        return sum(u.sums[m, picked].sum() / counts[m, picked].sum() for m in range(len(counts)))

    def stat(picked):   # a minus the second best of the others
        return value(a, picked) - sorted((value(u, picked) for u in (b, c, d)), reverse=True)[1]
    draws = np.random.default_rng(5).integers(0, 15, (400, 15))
    theta_b = np.array([stat(i) for i in draws])
    assert got["estimate"] == pytest.approx(stat(np.arange(15)), rel=1e-12)
    assert (got["low"], got["high"]) == (pytest.approx(np.percentile(theta_b, 2.5), rel=1e-12),
                                         pytest.approx(np.percentile(theta_b, 97.5), rel=1e-12))
    assert got["share_above"] == pytest.approx(np.mean(theta_b > 0))   # P(rank <= 2)


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """Rows on 40 test images, one seed each: ``strong`` and ``twin`` (the same planted strength,
    other draws), ``mid``, ``low``, ``weak``, and ``copy`` (strong's scores under another id)."""
    root = tmp_path_factory.mktemp("forms")
    rng = np.random.default_rng(2)
    protocol = get_protocol("synthetic_test")
    rows, rsum = {}, {}
    for row_id, strength in (("strong", 2.0), ("twin", 2.0), ("mid", 1.5), ("low", 0.7), ("weak", 0.5)):
        scores = planted(rng, 40, strength)
        rsum[row_id] = retrieval_metrics(scores.astype(np.float32).astype(np.float64))["rsum"]
        rows[f"t/{row_id}"] = planted_claim_row(root, row_id, scores, protocol, {protocol.name: {
            "source": f"paper, row '{row_id}'", "ensemble_size": 1,
            "metrics": {"rsum": {"strong": 520, "twin": 518, "mid": 480}.get(row_id, 300)}}})
        if row_id == "strong":
            rows["t/copy"] = planted_claim_row(root, "copy", scores, protocol)
    name = protocol.name
    printed = {"camp": {name: {"source": "paper, row 'camp'", "ensemble_size": 1, "metrics": {"rsum": 490}}}}
    claims = [claim_record("mid_second", "rank(mid among strong, low, weak).rsum <= 2", name, printed),
              claim_record("mid_second_of_twins", "rank(mid among strong, twin, weak).rsum <= 2", name),
              claim_record("mid_third_of_twins", "rank(mid among strong, twin, weak).rsum <= 3", name),
              claim_record("copy_equivalent", "|strong.rsum - copy.rsum| <= 0.5", name, bound_reason="same scores"),
              claim_record("twins_within_1", "|strong.rsum - twin.rsum| <= 1", name, bound_reason="tight"),
              claim_record("strong_weak_within_5", "|strong.rsum - weak.rsum| <= 5", name, bound_reason="r")]
    spec = ClaimsSpec.from_json(claims_spec_record(rows, claims), "test")
    payload = dataset_payload(config_with_every_table(), "synthetic")
    return claims_job.claims_frame(spec, payload).set_index("claim"), rsum, spec


def test_rank_claims_on_planted_rows(judged):
    frame, rsum, _ = judged
    second = frame.loc["mid_second"]
    assert second["rival"] == "low" and second["right_reproduced"] == pytest.approx(rsum["low"], abs=1e-3)
    assert second["reproduced_difference"] == pytest.approx(rsum["mid"] - rsum["low"], abs=1e-3)
    assert second["verdict"] == "supported" and second["p_holds"] > 0.99 and second["rank"] == 2
    # printed: strong 520, camp 490 (printed only), mid 480: mid is third there
    assert second["printed_verdict"] == ("does not hold on the printed numbers of 5 rows: mid 480, 2nd best of the "
                                         "others camp 490")
    assert frame.loc["mid_second_of_twins", "verdict"] == "contradicted"        # below strong and twin
    assert frame.loc["mid_second_of_twins", "p_holds"] < 0.01
    assert frame.loc["mid_third_of_twins", "verdict"] == "supported"


def test_equivalence_claims_on_planted_rows(judged):
    frame, rsum, spec = judged
    copy = frame.loc["copy_equivalent"]   # the same scores: the interval is the point 0
    assert (copy["ci_low"], copy["ci_high"], copy["verdict"]) == (0.0, 0.0, "supported")
    twins = frame.loc["twins_within_1"]
    assert twins["verdict"] == "inconclusive" and twins["ci_high"] - twins["ci_low"] > 2   # 40 images cannot show 1
    far = frame.loc["strong_weak_within_5"]
    assert far["verdict"] == "contradicted" and far["ci_low"] > 5
    assert far["reproduced_difference"] == pytest.approx(rsum["strong"] - rsum["weak"], abs=1e-3)
    assert far["bound"] == 5 and np.isnan(far["p_holds"]) and far["seeds_above_margin"] is pd_na()
    text = claims_job.markdown(frame.reset_index(), spec)
    assert "- `twins_within_1`: bound 1 rsum: tight" in text
    assert "supported; P(rank ≤ 2) 1.00, 2nd best of the others low" in text


def pd_na():
    import pandas as pd
    return pd.NA
