"""The training check: chance values in closed form against Monte-Carlo means through each
protocol's own metric code (and hand-worked cases), the score spread worked by hand, planted score
matrices (chance-level, constant, a plateau, saturated, trained) through evaluation, row verdicts
from aggregates and an ensemble's members, and the tables and report that say which rows did not
train and which columns saturate."""
import argparse
import math

import numpy as np
import pandas as pd
import pytest

from methods import ensemble
from methods.config import REPO_ROOT, load_harness_config
from methods.data.datasets import dataset_payload
from methods.io import read_json, save_npy, write_json
from methods.job_records import EnsembleEvaluation, ReportSpec, RunEvaluation
from methods.metrics.declarations import ECCV_METRICS, LABEL_RANKING_METRICS, METRICS
from methods.metrics.eccv import chance_map_at_r
from methods.metrics.evaluation import MAIN_METRIC_CHANCE, evaluate_protocol
from methods.metrics.label_ranking import chance_ndcg
from methods.metrics.protocols import CHECKED_PROTOCOLS, PROTOCOLS, Protocol
from methods.metrics.relevance import ExtendedPositives, SharedLabels
from methods.metrics.retrieval import chance_recalls, retrieval_metrics
from methods.metrics.training_check import (NOT_TRAINED, TRAINED, UNKNOWN, TrainingThresholds, failures, row_training,
                                            saturated, score_spread)
from methods.report import markdown_table, table_rows
from methods.report.aggregate import aggregate
from methods.report.reproduction import build_report
from tests.records import run_evaluation, table_spec

TPI = 5
CONFIG = {"min_gain_share": 0.05, "min_score_spread": 1e-4, "saturated_share": 0.99}
THRESHOLDS = TrainingThresholds.from_config(CONFIG)
SYNTHETIC = PROTOCOLS.get("synthetic_test")


def captions_of_image(rng, n: int, strength: float) -> np.ndarray:
    """Random scores, each image's own captions ``strength`` above the rest on average."""
    return rng.normal(size=(n, TPI * n)) + strength * np.repeat(np.eye(n), TPI, axis=1)


def within_monte_carlo(values: list[float], expected: float) -> bool:
    """The Monte-Carlo mean is within four standard errors of ``expected``."""
    return abs(np.mean(values) - expected) <= 4 * np.std(values) / math.sqrt(len(values)) + 1e-9


# -- chance values -----------------------------------------------------------------------------
def test_chance_rsum_of_the_synthetic_test_split_worked_by_hand():
    # 200 images, 1,000 captions: t->i R@K = K / 200; i->t R@K = 1 - (995 choose K) / (1000 choose K)
    i2t = [1 - math.prod((995 - j) / (1000 - j) for j in range(k)) for k in (1, 5, 10)]
    by_hand = 100 * (sum(i2t) + sum(k / 200 for k in (1, 5, 10)))
    assert chance_recalls(200)["rsum"] == pytest.approx(by_hand) and by_hand == pytest.approx(15.89, abs=0.01)
    # 5 % of the way from chance to 600: RSUM 45.1 (about 2.8 x chance) is where "did not train" ends
    check = {"main_metric": "rsum", "chance": by_hand, "max": 600.0, "score_spread": 0.5}
    for value, trained in ((45.0, False), (45.3, True)):
        share = (value - by_hand) / (600 - by_hand)
        assert (failures({**check, "value": value, "gain_share": share}, THRESHOLDS) == []) is trained


def test_chance_rsum_is_the_mean_rsum_of_random_scores_and_folds_average_it():
    rng = np.random.default_rng(0)
    values = [evaluate_protocol(rng.random((12, 60)), SYNTHETIC)["metrics"]["rsum"] for _ in range(400)]
    assert within_monte_carlo(values, chance_recalls(12)["rsum"])
    folded = Protocol("two_folds", "test", 2, None, "two folds of 6 images", main_metric="rsum")
    assert evaluate_protocol(rng.random((12, 60)), folded)["training_check"]["chance"] == pytest.approx(
        chance_recalls(6)["rsum"])


def test_chance_map_at_r_worked_by_hand_and_against_random_scores():
    # one positive among N: AP@R is 1 when it comes first, so 1 / N; every item positive: 1
    assert chance_map_at_r(np.eye(4, dtype=bool)) == pytest.approx(100 / 4)
    assert chance_map_at_r(np.ones((3, 7), dtype=bool)) == pytest.approx(100.0)
    # two positives among 4: the 24 orders of the items, enumerated
    orders = [[a, b, c, d] for a in range(4) for b in range(4) for c in range(4) for d in range(4)
              if len({a, b, c, d}) == 4]
    ap = [(1.0 * (o[0] < 2) + (o[1] < 2) * ((o[0] < 2) + 1) / 2) / 2 for o in orders]   # items 0 and 1 positive
    assert chance_map_at_r(np.array([[True, True, False, False]])) == pytest.approx(100 * np.mean(ap))
    rng = np.random.default_rng(1)
    n = 8
    positives = rng.random((n, TPI * n)) < 0.1
    positives[np.arange(TPI * n) // TPI, np.arange(TPI * n)] = True     # every caption's own image
    protocol = Protocol("ext", "test", 1, None, "", relevance="extended_positives", metrics=ECCV_METRICS,
                        main_metric="map_r_ext_sum")
    relevance = ExtendedPositives(positives)
    chance = evaluate_protocol(rng.random((n, TPI * n)), protocol, relevance)["training_check"]["chance"]
    values = []
    for _ in range(400):
        m = evaluate_protocol(rng.random((n, TPI * n)), protocol, relevance)["metrics"]
        values.append(m["i2t_map_r_ext"] + m["t2i_map_r_ext"])
    assert within_monte_carlo(values, chance)
    assert chance == pytest.approx(chance_map_at_r(positives) + chance_map_at_r(positives.T))


def brute_force_ndcg(scores: np.ndarray, gains: np.ndarray, k: int) -> np.ndarray:
    """NDCG@k per query (rows), gains as given, the ideal from the sorted gains; 0 without a gain."""
    order = np.argsort(-scores, axis=1, kind="stable")
    ranked = np.take_along_axis(gains, order, axis=1)[:, :k]
    discounts = 1 / np.log2(np.arange(2, ranked.shape[1] + 2))
    ideal = (-np.sort(-gains, axis=1)[:, :k] * discounts).sum(axis=1)
    return np.divide((ranked * discounts).sum(axis=1), ideal, out=np.zeros(len(gains)), where=ideal > 0)


def test_chance_ndcg_against_random_scores():
    rng = np.random.default_rng(2)
    images = (rng.random((10, 4)) < 0.4).astype(np.uint8)
    images[0] = 0                                  # an image sharing no label: NDCG 0 whatever the scores
    texts = np.repeat(images, 2, axis=0)
    texts[3] = 1 - texts[3]
    gains = images.astype(float) @ texts.T.astype(float)
    # a cut-off inside the list (k = 3 of 20 candidates), against an independent NDCG
    values = [100 * brute_force_ndcg(rng.random(gains.shape), gains, 3).mean() for _ in range(2000)]
    assert within_monte_carlo(values, chance_ndcg(images, texts, 3))
    # the protocol's own NDCG@500 (the whole list here), both directions
    protocol = Protocol("labels", "test", 1, None, "", relevance="shared_labels", metrics=LABEL_RANKING_METRICS,
                        main_metric="ndcg500_sum")
    relevance = SharedLabels(images, texts)
    chance = evaluate_protocol(rng.random((10, 20)), protocol, relevance)["training_check"]["chance"]
    values = []
    for _ in range(400):
        m = evaluate_protocol(rng.random((10, 20)), protocol, relevance)["metrics"]
        values.append(m["i2t_ndcg500"] + m["t2i_ndcg500"])
    assert within_monte_carlo(values, chance)


# -- the score spread and the verdicts ---------------------------------------------------------
def test_score_spread_worked_by_hand():
    # scale 4; ranges: rows 3, 1; columns 1, 2, 3 -> median 2 -> 0.5
    assert score_spread(np.array([[1.0, 2.0, 4.0], [0.0, 0.0, 1.0]])) == pytest.approx(0.5)
    # negative scores: scale max |s| = 4; ranges: rows 4, 2; columns 2, 0 -> median 2
    assert score_spread(np.array([[-4.0, 0.0], [-2.0, 0.0]])) == pytest.approx(0.5)
    assert score_spread(np.zeros((3, 15))) == 0.0 and score_spread(np.full((3, 15), 7.0)) == 0.0


def planted_check(scores: np.ndarray) -> dict:
    return evaluate_protocol(scores.astype(np.float32), SYNTHETIC)["training_check"]


def verdict_of(check: dict) -> tuple[str, str]:
    state = row_training([{"seed": 0, "protocol": "synthetic_test", "check": check}], CHECKED_PROTOCOLS, THRESHOLDS)
    return state.status, state.reason


def test_planted_score_matrices_on_the_synthetic_test_split():
    rng = np.random.default_rng(3)
    chance = chance_recalls(200)["rsum"]
    # chance-level random scores: at chance, well spread
    check = planted_check(rng.random((200, 1000)))
    assert check["chance"] == pytest.approx(chance) and check["max"] == 600 and abs(check["gain_share"]) < 0.03
    status, reason = verdict_of(check)
    assert status == NOT_TRAINED and f"vs chance {chance:.1f}" in reason and "near-constant" not in reason
    # a constant matrix: ties count against the model (RSUM 0, below chance) and no spread at all
    check = planted_check(np.full((200, 1000), 0.4))
    assert check["value"] == 0.0 and check["gain_share"] == pytest.approx(-chance / (600 - chance))
    assert check["score_spread"] == 0.0
    status, reason = verdict_of(check)
    assert status == NOT_TRAINED and "vs chance" in reason and "near-constant" in reason
    # the SGR plateau as evaluated: every score within 2.3e-5 of 0.4016, ranked at random
    check = planted_check(0.4016 + 2.3e-5 * rng.random((200, 1000)))
    assert check["score_spread"] < 1e-4 and verdict_of(check)[0] == NOT_TRAINED
    # a plateau whose tiny differences rank well: trained by its metric, near-constant by its spread
    check = planted_check(0.4016 + 1e-6 * captions_of_image(rng, 200, 4.0))
    status, reason = verdict_of(check)
    assert check["gain_share"] > 0.5 and status == NOT_TRAINED and "near-constant" in reason and "vs chance" not in reason
    # saturated: every true pair far above: RSUM 600, trained, and R@10 saturated
    saturating = captions_of_image(rng, 200, 50.0)
    check = planted_check(saturating)
    assert check["value"] == 600.0 and check["gain_share"] == 1.0 and verdict_of(check) == (TRAINED, "")
    r10 = retrieval_metrics(saturating.astype(np.float32))["i2t_r10"]
    assert r10 == 100.0 and saturated(r10, METRICS.get("i2t_r10").best, "higher", 0.99)
    # trained-like: well above chance, far from saturated
    trained = captions_of_image(rng, 200, 2.0)
    check = planted_check(trained)
    assert 0.3 < check["gain_share"] < 0.95 and verdict_of(check) == (TRAINED, "")
    assert not saturated(check["value"], 600.0, "higher", 0.99)


def test_saturation_and_the_best_value_of_each_scale():
    assert [METRICS.get(m).best for m in ("rsum", "r1_r10_sum", "i2t_r1", "i2t_medr", "log_circular_variance")] \
        == [600.0, 400.0, 100.0, 1.0, None]
    assert saturated(99.0, 100.0, "higher", 0.99) and not saturated(98.9, 100.0, "higher", 0.99)
    assert saturated(1.0, 1.0, "lower", 0.99) and not saturated(2.0, 1.0, "lower", 0.99)
    assert not saturated(0.0, None, "higher", 0.99)


def passing(value=300.0) -> dict:
    return {"main_metric": "rsum", "value": value, "chance": 15.9, "max": 600.0,
            "gain_share": (value - 15.9) / (600 - 15.9), "score_spread": 0.5}


def test_a_row_did_not_train_when_any_run_or_member_did_not_and_is_unknown_without_checks():
    entries = [{"seed": 0, "protocol": "synthetic_test", "check": passing()},
               {"seed": 1, "protocol": "synthetic_test", "check": passing(20.0)},
               {"seed": 1, "protocol": "label_prediction", "check": None}]   # no main metric: not checked
    state = row_training(entries, CHECKED_PROTOCOLS, THRESHOLDS)
    assert state.status == NOT_TRAINED and "seed 1 synthetic_test: rsum 20.0 vs chance 15.9" in state.reason
    assert "seed 0" not in state.reason
    assert row_training(entries[:1] + entries[2:], CHECKED_PROTOCOLS, THRESHOLDS).status == TRAINED
    # an ensemble whose own matrix trained, one of whose members did not
    member = {"seed": 0, "protocol": "synthetic_test", "check": passing(), "members": [
        {"run_dir": "results/synthetic/runs/sgraf-aaa/seed0", "seed": 0, "check": passing()},
        {"run_dir": "results/synthetic/runs/sgraf-bbb/seed0", "seed": 0, "check": {**passing(), "score_spread": 2e-5}}]}
    state = row_training([member], CHECKED_PROTOCOLS, THRESHOLDS)
    assert state.status == NOT_TRAINED and "member sgraf-bbb" in state.reason and "sgraf-aaa" not in state.reason
    # evaluations and aggregates written before the check: unknown, never trained
    old = row_training([{"seed": 0, "protocol": "synthetic_test", "check": None}], CHECKED_PROTOCOLS, THRESHOLDS)
    assert old.status == UNKNOWN and "seed 0 synthetic_test" in old.reason
    assert row_training(None, CHECKED_PROTOCOLS, THRESHOLDS).status == UNKNOWN


def test_every_protocol_scored_from_the_score_matrix_declares_a_main_metric_with_a_chance():
    scored = {"captions_of_image", "extended_positives", "shared_labels"}
    assert CHECKED_PROTOCOLS == {name for name, p in PROTOCOLS.items() if p.relevance in scored}
    for name in CHECKED_PROTOCOLS:
        metric = METRICS.get(PROTOCOLS.get(name).main_metric)
        assert metric.name in MAIN_METRIC_CHANCE and metric.direction == "higher" and metric.best is not None
    with pytest.raises(ValueError, match="main metric i2t_r1 needs a chance value"):
        Protocol("p", "test", 1, None, "", main_metric="i2t_r1")
    with pytest.raises(ValueError, match="main metric rsum"):
        Protocol("p", "test", 1, None, "", relevance="shared_labels", metrics=LABEL_RANKING_METRICS, main_metric="rsum")


# -- an ensemble and its members ---------------------------------------------------------------
def test_an_ensemble_carries_its_members_checks_and_is_flagged_for_a_member_that_did_not_train(tmp_path):
    rng = np.random.default_rng(4)
    harness = load_harness_config(REPO_ROOT / "config" / "config.yaml")
    payload = dataset_payload(harness, "synthetic")
    payload.dataset["protocols"] = ["synthetic_test"]   # captions of image: nothing to read from disk
    write_json(tmp_path / "dataset.json", payload.to_json())
    matrices = {"good-0": captions_of_image(rng, 20, 3.0), "flat-1": 0.4016 + 1e-6 * rng.random((20, 100))}
    members = []
    for name, sims in matrices.items():
        run = tmp_path / "runs" / name / "seed0"
        run.mkdir(parents=True)
        save_npy(run / "sims_test.npy", sims.astype(np.float32))
        write_json(run / "eval_test.json", run_evaluation(0, [evaluate_protocol(sims.astype(np.float32), SYNTHETIC)],
                                                          config_hash=name))
        members.append(str(run))
    out = tmp_path / "ensemble.json"
    ensemble._ensemble(argparse.Namespace(dataset_config=str(tmp_path / "dataset.json"), split="test",
                                          members=members, out=str(out)))
    ev = read_json(out)
    average = (matrices["good-0"].astype(np.float32).astype(np.float64) + matrices["flat-1"].astype(np.float32)) / 2
    own = ev["results"][0]["training_check"]
    assert own["value"] == pytest.approx(retrieval_metrics(average)["rsum"]) and own["chance"] == pytest.approx(
        chance_recalls(20)["rsum"])
    assert [m["training_checks"]["synthetic_test"]["value"] for m in ev["members"]] == pytest.approx(
        [retrieval_metrics(m.astype(np.float32))["rsum"] for m in matrices.values()])
    state = row_training(aggregate([EnsembleEvaluation.from_json(ev, "test")]).training_checks, CHECKED_PROTOCOLS,
                         THRESHOLDS)
    assert state.status == NOT_TRAINED and "member flat-1 (seed 0)" in state.reason and "good-0" not in state.reason


# -- tables and the reproduction report ---------------------------------------------------------
def evaluation(seed: int, check: dict | None, **metrics) -> RunEvaluation:
    values = {m: 50.0 for m in PROTOCOLS.get("f30k_1k").metrics} | {"i2t_r10": 99.5} | metrics
    result = {"protocol": "f30k_1k", "metrics": values}
    if check is not None:
        result["training_check"] = check
    return RunEvaluation.from_json(run_evaluation(seed, [result]), "test")


@pytest.fixture
def planted_table():
    """Rows ``good`` (trained), ``flat`` (seed 1 at chance), ``old`` (evaluations without a check);
    i->t R@10 at least 99.5 on every row, t->i R@10 at 50 on one."""
    aggregates = {"good": aggregate([evaluation(0, passing()), evaluation(1, passing())]),
                  "flat": aggregate([evaluation(0, passing()), evaluation(1, passing(20.0), t2i_r10=50.0)]),
                  "old": aggregate([evaluation(0, None), evaluation(1, None)])}
    rows = [{"id": r, "label": r.upper(), "paper": "p", "not_reported": None, "ensemble_size": 1,
             "reported": {"f30k_1k": {"ensemble_size": 1, "metrics": {"i2t_r1": 50.5}, "source": "paper, Table 1"}},
             "ledger": [], "compare_to": None, "seeds": [0, 1], "ran": "", "reported_only": None}
            for r in aggregates]
    spec = table_spec(rows, dataset="flickr", dataset_kind="real", titles=["P: Table 1"], protocols=["f30k_1k"],
                      tolerance={"recall": 2.0, "rsum": 6.0, "rank": 1.0}, training_check=CONFIG)
    return spec, table_rows.build_rows(spec, aggregates)


def test_the_cells_of_a_row_that_did_not_train_say_so_and_saturated_columns_are_named(planted_table):
    spec, rows = planted_table
    by_row = {r: cells.set_index("metric") for r, cells in rows.groupby("row")}
    assert set(by_row["flat"]["verdict"]) == {"did not train"} and set(by_row["flat"]["trained"]) == {"no"}
    reason = by_row["flat"].loc["rsum", "training_check"]
    assert "seed 1 f30k_1k: rsum 20.0 vs chance 15.9" in reason and "seed 0" not in reason
    assert by_row["good"].loc["i2t_r1", "verdict"] == "within" and by_row["good"].loc["i2t_r1", "trained"] == "yes"
    assert by_row["old"].loc["i2t_r1", "verdict"] == "within" and by_row["old"].loc["i2t_r1", "trained"] == "unknown"
    assert "no training check" in by_row["old"].loc["i2t_r1", "training_check"]
    md = markdown_table.to_markdown(spec, rows)
    lines = {line.split(" |")[0]: line for line in md.splitlines() if line.startswith("| ")}
    assert lines["| FLAT"].startswith("| FLAT | 0 1 | 1 | 50.0 ± 0.0 / 50.5 | 50.0 ± 0.0 |")
    assert lines["| FLAT"].endswith("| did not train |")   # the row's verdict, reported numbers or not
    assert lines["| GOOD"].startswith("| GOOD | 0 1 | 1 | 50.0 ± 0.0 / 50.5 | 50.0 ± 0.0 |")
    assert lines["| GOOD"].endswith("| within |")
    assert "Rows that did not train" in md and "- FLAT: seed 1 f30k_1k: rsum 20.0 vs chance 15.9" in md
    assert "Rows whose training was not checked" in md and "- OLD: no training check" in md
    assert "- i2t_r10 (i→t R@10): every row ≥ 99, within 1% of its best (100)" in md
    assert "t2i_r10 (" not in md.split("Saturated columns:")[1].split("##")[0]   # one row at 50


def test_the_report_lists_rows_that_did_not_train_and_the_claims_they_leave_undetermined(planted_table, tmp_path):
    spec, rows = planted_table
    (tmp_path / "t_flickr.csv").write_text(table_rows.to_csv(rows))
    write_json(tmp_path / "t.spec.json", spec.to_json())
    claims = pd.DataFrame([
        {"claim": "flat_beats_good", "words": "w", "paraphrased": False, "where": "T1", "table": "t",
         "compare": "flat.rsum > good.rsum", "margin": 0.0, "bound": None, "protocol": "f30k_1k", "metric": "rsum",
         "left_rows": "flat", "right_rows": "good", "reproduced_difference": 1.0, "difference_seed_std": None,
         "seeds_above_margin": None, "n_seeds": 2, "ci_low": 0.5, "ci_high": 1.5, "n_images": 1000,
         "reported_difference": None, "untrained_rows": "flat", "saturated": False, "training_check": "x",
         "verdict": "undetermined: flat did not train"},
        {"claim": "good_r10", "words": "w", "paraphrased": False, "where": "T1", "table": "t",
         "compare": "good.i2t_r10 > old.i2t_r10", "margin": 0.0, "bound": None, "protocol": "f30k_1k",
         "metric": "i2t_r10",
         "left_rows": "good", "right_rows": "old", "reproduced_difference": 0.0, "difference_seed_std": None,
         "seeds_above_margin": None, "n_seeds": 2, "ci_low": 0.0, "ci_high": 0.0, "n_images": 1000,
         "reported_difference": None, "untrained_rows": None, "saturated": True, "training_check": "",
         "verdict": "undetermined: saturated"}])
    claims.to_csv(tmp_path / "claims.csv", index=False)
    report_spec = ReportSpec.from_json({
        "paper": "p", "paper_name": "Paper P", "notes": "", "dataset": "flickr", "dataset_kind": "karpathy",
        "reported_dataset": "flickr", "tolerance": spec.tolerance, "training_check": CONFIG,
        "bootstrap": {"n_resamples": 2000, "confidence": 0.95, "method": "BCa", "seed": 0}, "tables": ["t"],
        "has_claims": True, "skipped_tables": [], "all_tables_config": "config/synthetic_all_tables.yaml"}, "test")
    text = build_report(report_spec, [str(tmp_path / "t_flickr.csv")], [str(tmp_path / "t.spec.json")],
                        str(tmp_path / "claims.csv"))
    # section 3: 2 claims undetermined; the flat row's 9 cells counted as did not train, 1 within per other row
    assert "2 checks (claim × protocol): 0 supported, 0 contradicted, 0 inconclusive, 2 undetermined." in text
    assert "| `tables/t_flickr.md` | 2 | 0 | 0 | 16 | 0 | 9 |" in text
    section4 = text.split("## 4.")[1]
    assert "- Claim `flat_beats_good` (f30k_1k) is undetermined: flat did not train" in section4
    assert "- Claim `good_r10` (f30k_1k) is undetermined: i2t_r10 is saturated on every compared row" in section4
    assert "- Row `flat` (table `t`) did not train: seed 1 f30k_1k: rsum 20.0 vs chance 15.9" in section4
    assert "- Row `old` (table `t`) was not checked for training: no training check" in section4
    assert "Row `good`" not in section4
