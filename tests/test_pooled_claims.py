"""Claims on a pooled metric (micro-F1 of a label head, methods/metrics/label_prediction.py): each
item's (2 TP, 2 TP + FP + FN) against counting loops, per-image units with a text's part counted
with its image and folds averaged as the table does, the units an evaluation stores, the paired
bootstrap with each row's own denominators against a direct implementation on the same draws, and
the claims job on planted label predictions (supported, contradicted, the seed-mean difference)."""
import copy
import json

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.special import ndtr, ndtri

from methods.config import REPO_ROOT
from methods.data.datasets import dataset_payload
from methods.errors import HarnessError
from methods.job_records import ClaimsSpec, RunEvaluation
from methods.metrics.evaluation import evaluate_protocol
from methods.metrics.implementations import IMPLEMENTED_METRICS, EvaluationContext
from methods.metrics.label_prediction import LabelPredictions
from methods.metrics.protocols import Protocol, get_protocol
from methods.metrics.query_units import protocol_units, units_from_record
from methods.plan import Plan
from methods.report import claims as claims_job
from methods.report.aggregate import aggregate
from methods.report.bootstrap import paired_difference_interval, side_value
from tests.conftest import config_with_every_table
from tests.records import run_evaluation

TPI = 5
LABELS = 6


def counted_f1(scores: np.ndarray, labels: np.ndarray) -> tuple[float, list[tuple[int, int]]]:
    """micro-F1 by counting every (item, label) in loops, and each item's (2 TP, 2 TP + FP + FN)."""
    parts = []
    for s, y in zip(scores, labels):
        tp = sum(1 for c in range(len(y)) if s[c] >= 0.5 and y[c])
        fp = sum(1 for c in range(len(y)) if s[c] >= 0.5 and not y[c])
        fn = sum(1 for c in range(len(y)) if s[c] < 0.5 and y[c])
        parts.append((2 * tp, 2 * tp + fp + fn))
    total = sum(d for _, d in parts)
    return (sum(n for n, _ in parts) / total if total else 0.0), parts


def predictions(rng, n: int, accuracy: float) -> LabelPredictions:
    """Label scores of n images and their n x TPI texts that agree with the labels on a share
    ``accuracy`` of (item, label) cells."""
    image_labels = (rng.random((n, LABELS)) < 0.4).astype(np.uint8)
    text_labels = np.repeat(image_labels, TPI, axis=0)

    def scores(labels):
        right = rng.random(labels.shape) < accuracy
        return np.where(right == labels.astype(bool), rng.uniform(0.5, 1.0, labels.shape),
                        rng.uniform(0.0, 0.5, labels.shape))
    return LabelPredictions(scores(image_labels), image_labels, scores(text_labels), text_labels)


def test_each_items_parts_are_its_counts_and_pool_to_micro_f1():
    rng = np.random.default_rng(0)
    rel = predictions(rng, 7, 0.7)
    context = EvaluationContext(np.zeros((7, 7 * TPI)), rel)
    for side in ("image", "text"):
        metric = IMPLEMENTED_METRICS.get(f"{side}_micro_f1")
        value, parts = counted_f1(getattr(rel, f"{side}_scores"), getattr(rel, f"{side}_labels"))
        got = np.asarray(metric.per_query(context))
        np.testing.assert_array_equal(got, np.array(parts, dtype=np.float64))
        assert got[:, 0].sum() / got[:, 1].sum() == pytest.approx(value, rel=1e-15)
        assert context.value(f"{side}_micro_f1") == pytest.approx(value, rel=1e-15)


def test_units_count_each_text_with_its_image_and_folds_average_as_the_table():
    rng = np.random.default_rng(1)
    rel = predictions(rng, 6, 0.6)
    scores = np.zeros((6, 6 * TPI))
    u = protocol_units(scores, get_protocol("label_prediction"), rel, ["image_micro_f1", "text_micro_f1"])
    _, image_parts = counted_f1(rel.image_scores, rel.image_labels)
    _, text_parts = counted_f1(rel.text_scores, rel.text_labels)
    row = u.metrics.index("text_micro_f1")
    for i in range(6):
        own = text_parts[i * TPI:(i + 1) * TPI]
        assert (u.sums[row, i], u.counts[row, i]) == (sum(n for n, _ in own), sum(d for _, d in own))
        assert (u.sums[0, i], u.counts[0, i]) == image_parts[i]
    folded = Protocol("label_2fold", "test", 2, None, "two folds", relevance="label_predictions",
                      metrics=("image_micro_f1", "text_micro_f1"))
    table = evaluate_protocol(scores, folded, rel)["metrics"]
    halves = [counted_f1(rel.text_scores[f * 3 * TPI:(f + 1) * 3 * TPI], rel.text_labels[f * 3 * TPI:(f + 1) * 3 * TPI])[0]
              for f in range(2)]
    assert table["text_micro_f1"] == pytest.approx(np.mean(halves), rel=1e-12)
    folded_units = protocol_units(scores, folded, rel, ["text_micro_f1"])
    assert folded_units.value("text_micro_f1") == pytest.approx(np.mean(halves), rel=1e-12)


def test_an_evaluation_stores_the_units_the_claims_read_back():
    rel = predictions(np.random.default_rng(2), 5, 0.8)
    result = evaluate_protocol(np.zeros((5, 5 * TPI)), get_protocol("label_prediction"), rel)
    back = units_from_record(json.loads(json.dumps(result["units"])), ["image_micro_f1", "text_micro_f1"], "here")
    for name in ("image_micro_f1", "text_micro_f1"):
        assert back.value(name) == pytest.approx(result["metrics"][name], rel=1e-15)
    assert "units" not in evaluate_protocol(np.zeros((2, 10)), get_protocol("synthetic_test"))   # score matrices hold those
    with pytest.raises(HarnessError, match="here: the evaluation holds no per-image units of text_micro_f1"):
        units_from_record({"image_micro_f1": result["units"]["image_micro_f1"]}, ["text_micro_f1"], "here")


def test_each_rows_own_denominators_make_a_ratio_per_row_hand_worked():
    sums = np.array([[[2.0, 4.0]], [[0.0, 6.0]]])       # two rows, one metric, two images
    counts = np.array([[[4.0, 4.0]], [[2.0, 8.0]]])     # each row's own denominators
    assert side_value(sums, counts) == pytest.approx((6 / 8 + 6 / 10) / 2)
    assert side_value(sums, counts, np.array([0.75, 0.25])) == pytest.approx(0.75 * 6 / 8 + 0.25 * 6 / 10)
    picked = np.array([1, 1])
    assert side_value(sums[:, :, picked], counts[:, :, picked]) == pytest.approx((8 / 8 + 12 / 16) / 2)


def direct_bca_per_row(a, ca, wa, b, cb, wb, n_resamples: int, seed: int, confidence: float = 0.95):
    """BCa (Efron and Tibshirani, ch. 14) of Σ_r w_r Σ a_r / Σ ca_r − the same of B, resampling
    images with the draws scipy makes; loops."""
    def side(sums, counts, weights, picked):
        return sum(w * sums[r, 0, picked].sum() / counts[r, 0, picked].sum() for r, w in enumerate(weights))

    def stat(picked):
        return side(a, ca, wa, picked) - side(b, cb, wb, picked)
    n = a.shape[-1]
    draws = np.random.default_rng(seed).integers(0, n, (n_resamples, n))
    theta_b = np.array([stat(i) for i in draws])
    theta = stat(np.arange(n))
    z0 = ndtri(((theta_b < theta).sum() + (theta_b <= theta).sum()) / (2 * n_resamples))
    jack = np.array([stat(np.delete(np.arange(n), j)) for j in range(n)])
    d = jack.mean() - jack
    accel = (d ** 3).sum() / (6 * (d ** 2).sum() ** 1.5)
    alpha = (1 - confidence) / 2
    ends = [np.percentile(theta_b, 100 * ndtr(z0 + (z0 + z) / (1 - accel * (z0 + z))))
            for z in (ndtri(alpha), ndtri(1 - alpha))]
    return theta, ends[0], ends[1]


def test_per_row_denominators_bootstrap_equals_a_direct_implementation():
    rng = np.random.default_rng(3)
    units = []
    for accuracy in (0.85, 0.85, 0.6):          # A: one row of two seeds; B: one row of one seed
        u = protocol_units(np.zeros((20, 20 * TPI)), get_protocol("label_prediction"),
                           predictions(rng, 20, accuracy), ["image_micro_f1"])
        units.append(u)
    a, ca = np.stack([u.sums for u in units[:2]]), np.stack([u.counts for u in units[:2]])
    b, cb = units[2].sums[None], units[2].counts[None]
    wa, wb = np.array([0.5, 0.5]), np.array([1.0])
    got = paired_difference_interval(a, b, ca, counts_b=cb, weights_a=wa, weights_b=wb, n_resamples=400, seed=5)
    theta, low, high = direct_bca_per_row(a, ca, wa, b, cb, wb, 400, 5)
    assert got["estimate"] == pytest.approx(theta, rel=1e-12)
    assert got["estimate"] == pytest.approx(np.mean([u.value("image_micro_f1") for u in units[:2]])
                                            - units[2].value("image_micro_f1"), rel=1e-12)
    assert (got["low"], got["high"]) == (pytest.approx(low, rel=1e-12), pytest.approx(high, rel=1e-12))
    with pytest.raises(HarnessError, match="row weights"):
        paired_difference_interval(a, b, ca, counts_b=cb, weights_a=np.array([1.0, 1.0]))


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Rows ``good`` and ``poor`` (2 seeds each) with label predictions on 40 test images, their
    evaluations as a training job writes them, and a claims spec comparing them on micro-F1."""
    root = tmp_path_factory.mktemp("pooled")
    rng = np.random.default_rng(4)
    protocol = get_protocol("label_prediction")
    values, rows = {}, {}
    for row_id, accuracy in (("good", 0.9), ("poor", 0.6)):
        files, evals = [], []
        for seed in (0, 1):
            rel = predictions(rng, 40, accuracy)
            scores = rng.normal(size=(40, 40 * TPI)) + 2.0 * np.repeat(np.eye(40), TPI, axis=1)
            results = [evaluate_protocol(scores, get_protocol("synthetic_test")),
                       evaluate_protocol(scores, protocol, rel)]
            values[(row_id, seed)] = {s: counted_f1(getattr(rel, f"{s}_scores"), getattr(rel, f"{s}_labels"))[0]
                                      for s in ("image", "text")}
            ev = RunEvaluation.from_json(run_evaluation(seed, results), "test")
            path = root / f"{row_id}{seed}.json"
            ev.write(path)
            files.append(str(path))
            evals.append(ev)
        aggregate(evals).write(root / f"{row_id}.agg.json")
        rows[f"t/{row_id}"] = {"table": "t", "id": row_id, "label": row_id, "seeds": [0, 1], "ensemble_size": 1,
                               "view": None, "reported": {}, "scores": {}, "evaluations": {protocol.name: files},
                               "aggregate": str(root / f"{row_id}.agg.json")}
    claim = {"words": "w", "paraphrased": False, "where": "Table 1", "table": "t", "margin": 0.0,
             "left_reduce": "mean", "right_reduce": "mean", "best": None, "rank": None, "bound": None,
             "bound_reason": "", "printed": {}, "reported_only": [],
             "protocols": [protocol.name]}
    spec = {"paper": "toy", "paper_name": "Toy paper", "dataset": "toy", "dataset_kind": "real",
            "reported_dataset": "toy", "rows": rows,
            "training_check": {"min_gain_share": 0.05, "min_score_spread": 1e-4, "saturated_share": 0.99},
            "bootstrap": {"n_resamples": 500, "confidence": 0.95, "method": "BCa", "seed": 0},
            "claims": [{**claim, "id": f"{l}_beats_{r}_{side}", "form": f"{l}.{side}_micro_f1 > {r}.{side}_micro_f1",
                        "metric": f"{side}_micro_f1", "left": [l], "right": [r]}
                       for l, r in (("good", "poor"), ("poor", "good")) for side in ("image", "text")]}
    return ClaimsSpec.from_json(spec, "test"), values


def test_micro_f1_claims_are_the_seed_mean_differences_with_each_rows_denominators(planted, harness):
    spec, values = planted
    frame = claims_job.claims_frame(spec, dataset_payload(harness, "synthetic")).set_index("claim")
    for side in ("image", "text"):
        good = np.mean([values[("good", s)][side] for s in (0, 1)])
        poor = np.mean([values[("poor", s)][side] for s in (0, 1)])
        row = frame.loc[f"good_beats_poor_{side}"]
        assert row["left_reproduced"] == pytest.approx(good, abs=1e-4)
        assert row["reproduced_difference"] == pytest.approx(good - poor, abs=1e-4)
        assert row["ci_low"] > 0 and row["verdict"] == "supported"
        reversed_ = frame.loc[f"poor_beats_good_{side}"]
        assert reversed_["ci_high"] < 0 and reversed_["verdict"] == "contradicted"


def test_a_row_whose_model_makes_no_label_predictions_is_one_line_naming_its_file(planted, harness, tmp_path):
    spec, _ = planted
    path = tmp_path / "nolabels.json"
    RunEvaluation.from_json(run_evaluation(0, [evaluate_protocol(np.eye(4).repeat(TPI, axis=1),
                                                                 get_protocol("synthetic_test"))]), "t").write(path)
    rows = copy.deepcopy({k: r.to_json() for k, r in spec.rows.items()})
    rows["t/poor"]["evaluations"]["label_prediction"] = [str(path), str(path)]
    broken = ClaimsSpec.from_json({**spec.to_json(), "rows": rows}, "test")
    with pytest.raises(HarnessError, match=f"{path}: row poor has no label_prediction result") as err:
        claims_job.claims_frame(broken, dataset_payload(harness, "synthetic"))
    assert "\n" not in str(err.value)


@pytest.fixture(scope="module")
def harness():
    return config_with_every_table()


def test_the_plan_reads_micro_f1_from_the_runs_evaluations_and_refuses_ensembles(harness, tmp_path):
    spec = Plan(harness).claims_spec("label_wise", "synthtags").to_json()
    ours = spec["rows"]["label_wise_t1/ours"]
    assert list(ours["evaluations"]) == ["label_prediction"] and "label_prediction" not in ours["scores"]
    assert len(ours["evaluations"]["label_prediction"]) == len(ours["seeds"])
    assert all(f.endswith("/eval_test.json") for f in ours["evaluations"]["label_prediction"])
    paper = yaml.safe_load((REPO_ROOT / "methods/papers/label_wise.yaml").read_text())
    rows = paper["tables"]["label_wise_t1"]["rows"]
    ours_row = next(r for r in rows if r["id"] == "ours")
    rows.append({"id": "pair", "label": "pair", "not_reported": "a test row", "seeds": [0],
                 "ensemble": [{"method": ours_row["method"]}, {"method": ours_row["method"]}]})
    paper["claims"] = {"pair_claim": {"words": "w", "where": "x", "table": "label_wise_t1",
                                      "compare": "pair.image_micro_f1 > ours.image_micro_f1"}}
    path = tmp_path / "label_wise.yaml"
    path.write_text(yaml.safe_dump(paper, allow_unicode=True))
    cfg = copy.deepcopy(harness)
    cfg["papers"] = [p for p in cfg["papers"] if not p.endswith("label_wise.yaml")] + [str(path)]
    with pytest.raises(HarnessError, match="claims.pair_claim.compare: row 'pair' is an ensemble") as err:
        Plan(cfg)
    assert "\n" not in str(err.value)


def test_the_claims_figure_gives_metrics_of_another_scale_their_own_axis(planted, harness, tmp_path, monkeypatch):
    from methods.report import claims_figure
    spec, _ = planted
    frame = claims_job.claims_frame(spec, dataset_payload(harness, "synthetic"))
    rsum = frame.iloc[[0]].assign(claim="an_rsum_claim", metric="rsum", reproduced_difference=12.0, ci_low=8.0,
                                  ci_high=15.0)
    pd.concat([frame.iloc[:2], rsum], ignore_index=True).to_csv(tmp_path / "claims.csv", index=False)
    drawn = {}
    monkeypatch.setattr(claims_figure, "save_figure", lambda fig, out: drawn.setdefault("fig", fig))
    assert claims_figure.plot_claims(str(tmp_path / "claims.csv"), str(tmp_path / "claims.png")) == 3
    axes = drawn["fig"].axes
    assert [a.get_xlabel() for a in axes] == ["difference, left − right, in the metric's units (0–1 scale)",
                                              "difference, left − right, in percentage points"]
    assert [len(a.get_yticks()) for a in axes] == [2, 1]
    assert axes[1].get_xlim()[1] > 15 and axes[0].get_xlim()[1] < 1    # each axis spans its own claims
