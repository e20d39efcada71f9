"""Claims: their machine form, the plan's checks of each paper file's claims, and the claims job on
planted score matrices (values against the metrics of each run, a planted reversal contradicted,
a rebuild byte-identical)."""
import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from methods.config import REPO_ROOT, load_harness_config
from methods.errors import HarnessError
from methods.data.datasets import dataset_payload
from methods.io import save_npy
from methods.job_records import EVALUATION_KINDS, ClaimsSpec, ReportSpec
from methods.metrics.evaluation import evaluate_protocol
from methods.metrics.protocols import get_protocol
from methods.metrics.retrieval import chance_recalls, retrieval_metrics
from methods.plan import Plan
from methods.report import claims as claims_job
from methods.report.aggregate import aggregate
from methods.report.bootstrap import verdict
from methods.report.claim_form import parse_comparison
from methods.report.claims_figure import plot_claims
from methods.report.reproduction import build_report
from tests.conftest import config_with_every_table
from tests.records import ensemble_evaluation, run_evaluation, table_spec

CONFIG = REPO_ROOT / "config" / "config.yaml"
TPI = 5
TRAINING_CHECK = {"min_gain_share": 0.05, "min_score_spread": 1e-4, "saturated_share": 0.99}


@pytest.fixture(scope="module")
def harness():
    return config_with_every_table()


@pytest.fixture(scope="module")
def plan(harness):
    return Plan(harness)


def test_a_comparison_reads_left_above_right():
    c = parse_comparison("mean(a, b_2).rsum > c.rsum", "here")
    assert (c.left, c.right, c.metric) == (("a", "b_2"), ("c",), "rsum")
    swapped = parse_comparison(" x.i2t_meanr<mean( y ,z ).i2t_meanr ", "here")
    assert (swapped.left, swapped.right) == (("y", "z"), ("x",))
    assert swapped.text() == "mean(y, z).i2t_meanr > x.i2t_meanr"
    for bad, message in (("a.rsum > b.i2t_r1", "same metric"), ("a.rsum > mean(a, b).rsum", "both sides"),
                         ("mean(a, a).rsum > b.rsum", "twice"), ("a > b", "is not")):
        with pytest.raises(HarnessError, match=message):
            parse_comparison(bad, "claims.x.compare")


def test_every_paper_states_claims_checked_on_the_built_in_data(plan):
    papers = {paper for paper, dataset in plan.claims if dataset in ("synthetic", "synthtags")}
    assert papers == {"vsepp", "metric_learning", "sgraf", "scan", "mvsa", "set_embeddings", "label_wise"}
    by_id = {c.id: c for c in plan.claims[("sgraf", "coco")]}
    assert by_id["sgraf_beats_sgr"].protocols == ["coco_1k_5fold", "coco_5k"]
    assert "reasoning_beats_none" not in by_id   # Table 3 is a Flickr30K table
    label = {c.id: c for c in plan.claims[("label_wise", "cocolabelwise")]}
    assert label["consistency_lowers_retrieval"].protocols == ["labelwise_coco_1k_5fold", "labelwise_coco_5k",
                                                               "labelwise_coco_1k_5fold_code", "labelwise_coco_5k_code"]
    # a claim may compare with another paper file's row of a merged table (SCAN vs VSE++ in table1)
    scan = plan.claims[("scan", "flickr")][0]
    assert scan.comparison.right == ("vsepp_resnet152_ft",) and plan.row("table1", "flickr", "vsepp_resnet152_ft").paper == "vsepp"
    targets = plan.default_targets()
    assert {"reports/sgraf_synthetic.md", "tables/claims_sgraf_synthetic.csv", "figures/claims_sgraf_synthetic.png",
            "reports/label_wise_synthtags.md", "reports/deviations_synthetic.md"} <= set(targets)
    assert "tables/claims_deviations_synthetic.csv" not in targets   # a paper with no claim still gets its report


def test_a_report_of_an_unknown_paper_or_of_a_dataset_without_its_tables_is_refused(plan):
    with pytest.raises(HarnessError, match="no paper file has key 'nopaper'"):
        plan.paper_claims("nopaper", "synthetic")
    with pytest.raises(HarnessError, match="paper 'sgraf' has no table on dataset 'synthtags'"):
        plan.paper_claims("sgraf", "synthtags")
    assert plan.paper_claims("deviations", "synthetic") == []


def with_claim(harness, tmp_path, claim: dict, extra_rows=()):
    paper = yaml.safe_load((REPO_ROOT / "methods/papers/scan.yaml").read_text())
    paper["tables"]["table1"]["rows"] += list(extra_rows)
    paper["claims"] = {"the_claim": {"words": "w", "where": "Table 1", "table": "table1", **claim}}
    path = tmp_path / "scan.yaml"
    path.write_text(yaml.safe_dump(paper, allow_unicode=True))
    cfg = copy.deepcopy(harness)
    cfg["papers"] = ["methods/papers/vsepp.yaml", str(path)]
    return cfg


@pytest.mark.parametrize("claim,rows,message", [
    ({"compare": "scan_ensemble.rsum > nobody.rsum"}, (), "table table1 has no row 'nobody' on flickr"),
    ({"compare": "|scan_ensemble.rsum - vsepp_resnet152_ft.rsum| <= 5"}, (), "bound_reason: an equivalence claim says"),
    ({"compare": "|scan_ensemble.rsum - vsepp_resnet152_ft.rsum| <= 5", "bound_reason": "r", "margin": 1.0}, (),
     "margin: an equivalence claim has a bound, not a margin"),
    ({"compare": "scan_ensemble.rsum > vsepp_resnet152_ft.rsum", "bound_reason": "r"}, (),
     "bound_reason: only an equivalence claim"),
    ({"compare": "rank(scan_ensemble among vsepp_resnet152_ft).rsum <= 2"}, (), "holds whatever the numbers"),
    ({"compare": "scan_ensemble.i2t_medr < vsepp_resnet152_ft.i2t_medr"}, (), "not a mean over test queries"),
    ({"compare": "scan_ensemble.t2i_ndcg500 > vsepp_resnet152_ft.t2i_ndcg500"}, (), "no protocol of datasets.flickr"),
    ({"compare": "scan_ensemble.rsum > vsepp_resnet152_ft.rsum", "table": "sgraf_t1"}, (), "not a table of this paper"),
    ({"compare": "scan_ensemble.rsum >> vsepp_resnet152_ft.rsum"}, (), "claims.the_claim.compare"),
])
def test_a_claim_the_plan_cannot_check_is_one_line_naming_it(harness, tmp_path, claim, rows, message):
    with pytest.raises(HarnessError, match=message) as err:
        Plan(with_claim(harness, tmp_path, claim, rows))
    assert "claims.the_claim" in str(err.value) and "\n" not in str(err.value)


def test_a_claim_on_a_row_the_harness_does_not_run_is_undetermined_with_the_papers_difference(harness, tmp_path):
    printed = {"f30k_1k": {"source": "paper, row 'camp'", "ensemble_size": 1,
                           "metrics": {"i2t_r1": 68.1, "i2t_r5": 89.7, "i2t_r10": 95.2, "t2i_r1": 51.5, "t2i_r5": 77.1,
                                       "t2i_r10": 85.3}}}
    cfg = with_claim(harness, tmp_path, {"compare": "scan_ensemble.rsum > camp.rsum"},
                     ({"id": "camp", "label": "CAMP", "reported_only": "no public code", "reported": {"flickr": printed}},))
    plan = Plan(cfg)
    claim = plan.claims[("scan", "flickr")][0]
    assert claim.reported_only == ["camp"] and not claim.runs and set(claim.printed) == {"scan_ensemble", "camp"}
    spec = plan.claims_spec("scan", "flickr")
    assert spec.rows == {} and plan.claims_score_files("scan", "flickr") == []   # nothing to score: no DAG input
    frame = claims_job.claims_frame(spec, dataset_payload(harness, "synthetic"))
    row = frame.iloc[0]
    assert row["verdict"] == "undetermined: camp is reported only" and pd.isna(row["ci_low"])
    scan = plan.row("table1", "flickr", "scan_ensemble").reported["f30k_1k"]["metrics"]
    assert row["reported_difference"] == pytest.approx(sum(scan[m] for m in printed["f30k_1k"]["metrics"])
                                                       - sum(printed["f30k_1k"]["metrics"].values()), abs=1e-3)


def test_paper_keys_are_unique_and_claim_table_names_are_taken(harness, tmp_path):
    cfg = copy.deepcopy(harness)
    cfg["papers"] = ["methods/papers/vsepp.yaml", "methods/papers/vsepp.yaml"]
    with pytest.raises(HarnessError, match="key 'vsepp' is the key of another paper file"):
        Plan(cfg)
    paper = yaml.safe_load((REPO_ROOT / "methods/papers/scan.yaml").read_text())
    paper["tables"] = {"claims_scan": paper["tables"]["table1"]}
    (tmp_path / "named.yaml").write_text(yaml.safe_dump(paper))
    cfg["papers"] = ["methods/papers/vsepp.yaml", str(tmp_path / "named.yaml")]
    with pytest.raises(HarnessError, match="names starting 'claims_' are taken"):
        Plan(cfg)


def test_the_claims_spec_names_each_rows_score_files_per_seed(plan):
    spec = plan.claims_spec("sgraf", "coco").to_json()
    ensemble = spec["rows"]["sgraf_t1/sgraf"]
    assert ensemble["ensemble_size"] == 2 and ensemble["seeds"] == [0, 1, 2]
    files = ensemble["scores"]["coco_5k"]
    assert len(files) == 3 and all(len(members) == 2 and all(f.endswith("/sims_testall.npy") for f in members)
                                   for members in files)
    sets = plan.claims_spec("set_embeddings", "flickr").to_json()["rows"]["set_embeddings_t5/image_only_1"]
    assert all(f.endswith("/sims_test@i0_tall.npy") for per_seed in sets["scores"]["f30k_1k"] for f in per_seed)
    assert spec["bootstrap"] == {"n_resamples": 2000, "confidence": 0.95, "method": "BCa", "seed": 0}
    # the rows' aggregates (their training checks), as rule aggregate_row writes them, with the thresholds
    assert ensemble["aggregate"] == "results/coco/rows/sgraf_t1/sgraf.json"
    assert spec["training_check"] == plan.cfg["training_check"]
    assert "results/coco/rows/sgraf_t1/sgraf.json" in plan.claims_row_aggregates("sgraf", "coco")


# -- the claims job on planted score matrices --------------------------------------------------
def planted_scores(rng, n: int, strength: float) -> np.ndarray:
    return rng.normal(size=(n, n * TPI)) + strength * np.repeat(np.eye(n), TPI, axis=1)


def write_aggregate(path, seeds: list[int], files: list[list[str]]) -> str:
    """The row aggregate rule aggregate_row writes from the runs' evaluations: each seed's run (one
    file), or an ensemble's members (several) evaluated alone and averaged, under synthetic_test."""
    protocol = get_protocol("synthetic_test")
    evals = []
    for seed, members in zip(seeds, files):
        matrices = [np.load(f) for f in members]
        result = evaluate_protocol(np.mean(matrices, axis=0), protocol)
        ev = run_evaluation(seed, [result])
        if len(members) > 1:
            ev = ensemble_evaluation(seed, [result], [
                {"run_dir": f"runs/{Path(f).stem}/seed{seed}", "config_hash": "cfg", "seed": seed,
                 "training_checks": {protocol.name: evaluate_protocol(m, protocol)["training_check"]}}
                for f, m in zip(members, matrices)])
        evals.append(EVALUATION_KINDS[ev["kind"]].from_json(ev, "test"))
    aggregate(evals).write(path)
    return str(path)


@pytest.fixture(scope="module")
def planted(tmp_path_factory, harness):
    """Rows ``strong`` (2 seeds), ``weak`` (2 seeds) and an ensemble ``pair`` (2 members a seed),
    scored on 30 test images; the claims spec the plan would write for them."""
    root = tmp_path_factory.mktemp("claims")
    rng = np.random.default_rng(0)
    sims = {}

    def write(name, strength):
        sims[name] = planted_scores(rng, 30, strength)
        save_npy(root / f"{name}.npy", sims[name].astype(np.float32))
        return str(root / f"{name}.npy")
    rows = {
        "t/strong": {"table": "t", "id": "strong", "label": "strong", "seeds": [0, 1], "ensemble_size": 1, "view": None,
                     "reported": {"synthetic_test": {"source": "paper, Table 1, row 'strong'", "ensemble_size": 1,
                                                     "metrics": {"i2t_r1": 60, "i2t_r5": 80, "i2t_r10": 90, "t2i_r1": 40,
                                                                 "t2i_r5": 70, "t2i_r10": 80}}},
                     "scores": {"synthetic_test": [[write("strong0", 2.0)], [write("strong1", 2.0)]]},
                     "evaluations": {}},
        "t/weak": {"table": "t", "id": "weak", "label": "weak", "seeds": [0, 1], "ensemble_size": 1, "view": None,
                   "reported": {"synthetic_test": {"source": "paper, Table 1, row 'weak'", "ensemble_size": 1,
                                                   "metrics": {"rsum": 300.0}}},
                   "scores": {"synthetic_test": [[write("weak0", 0.4)], [write("weak1", 0.4)]]}, "evaluations": {}},
        "t/pair": {"table": "t", "id": "pair", "label": "pair", "seeds": [0, 1], "ensemble_size": 2, "view": None,
                   "reported": {}, "scores": {"synthetic_test": [[write("pa0", 1.0), write("pb0", 1.0)],
                                                                 [write("pa1", 1.0), write("pb1", 1.0)]]},
                   "evaluations": {}}}
    claim = {"words": "w", "paraphrased": False, "where": "Table 1", "table": "t", "metric": "rsum", "margin": 0.0,
             "left_reduce": "mean", "right_reduce": "mean", "best": None, "rank": None, "bound": None,
             "bound_reason": "", "printed": {}, "reported_only": [],
             "protocols": ["synthetic_test"]}
    spec = {"paper": "toy", "paper_name": "Toy paper", "dataset": "toy", "dataset_kind": "synthetic",
            "reported_dataset": "flickr", "rows": rows, "training_check": TRAINING_CHECK,
            "bootstrap": {"n_resamples": 500, "confidence": 0.95, "method": "BCa", "seed": 0},
            "claims": [{**claim, "id": "strong_beats_weak", "form": "strong.rsum > weak.rsum", "left": ["strong"],
                        "right": ["weak"]},
                       {**claim, "id": "weak_beats_strong", "form": "weak.rsum > strong.rsum", "left": ["weak"],
                        "right": ["strong"]},
                       {**claim, "id": "pair_vs_both", "form": "pair.rsum > mean(strong, weak).rsum", "left": ["pair"],
                        "right": ["strong", "weak"]}]}
    for key, row in rows.items():
        row["aggregate"] = write_aggregate(root / f"{row['id']}.agg.json", row["seeds"],
                                           row["scores"]["synthetic_test"])
    (root / "spec.json").write_text(json.dumps(spec))
    payload = dataset_payload(harness, "synthetic")   # its synthetic_test relevance: captions of image, 5 each
    (root / "dataset.json").write_text(json.dumps(payload.to_json()))
    return root, sims, ClaimsSpec.from_json(spec, "test"), payload


def test_claims_are_the_seed_mean_differences_of_the_runs_metrics(planted):
    root, sims, spec, payload = planted
    frame = claims_job.claims_frame(spec, payload).set_index("claim")
    rsum = {name: retrieval_metrics(s)["rsum"] for name, s in sims.items()}
    pair = [retrieval_metrics((sims[f"pa{s}"].astype(np.float32).astype(np.float64)
                               + sims[f"pb{s}"].astype(np.float32)) / 2)["rsum"] for s in (0, 1)]
    strong, weak = [rsum["strong0"], rsum["strong1"]], [rsum["weak0"], rsum["weak1"]]
    row = frame.loc["strong_beats_weak"]
    assert row["left_reproduced"] == pytest.approx(np.mean(strong), abs=1e-3)
    assert row["reproduced_difference"] == pytest.approx(np.mean(strong) - np.mean(weak), abs=1e-3)
    assert row["difference_seed_std"] == pytest.approx(np.std(np.subtract(strong, weak)), abs=1e-3)
    assert row["seeds_above_margin"] == sum(np.subtract(strong, weak) > 0) and row["n_seeds"] == 2
    assert row["reported_difference"] == pytest.approx(420 - 300)    # RSUM from the six recalls on one side
    assert row["ci_low"] > 0 and row["verdict"] == "supported (synthetic data)"
    reversed_ = frame.loc["weak_beats_strong"]       # a planted reversal
    assert reversed_["ci_high"] < 0 and reversed_["verdict"] == "contradicted (synthetic data)"
    both = frame.loc["pair_vs_both"]
    assert both["left_reproduced"] == pytest.approx(np.mean(pair), abs=1e-3)
    assert both["right_reproduced"] == pytest.approx((np.mean(strong) + np.mean(weak)) / 2, abs=1e-3)
    assert pd.isna(both["reported_difference"])      # the ensemble has no reported numbers
    assert both["ci_low"] <= both["reproduced_difference"] <= both["ci_high"]


def test_a_rebuild_on_the_same_runs_is_byte_identical(planted):
    root, *_ = planted
    for out in ("a", "b"):
        claims_job.main(["--spec", str(root / "spec.json"), "--dataset-config", str(root / "dataset.json"),
                         "--out-csv", str(root / f"{out}.csv"), "--out-md", str(root / f"{out}.md")])
    assert (root / "a.csv").read_bytes() == (root / "b.csv").read_bytes()
    assert (root / "a.md").read_bytes() == (root / "b.md").read_bytes()
    assert "| strong_beats_weak |" in (root / "a.md").read_text()


def test_the_report_counts_cells_by_verdict_and_says_what_did_not_reproduce(tmp_path):
    verdicts = ["within", "within", "outside", "not comparable (ensemble of 2 vs 1)", "not reported", "reported only"]
    cells = pd.DataFrame({"table": "t", "dataset": "flickr", "row": ["a", "a", "b", "c", "d", "e"],
                          "paper": ["p"] * 5 + ["other"], "protocol": "f30k_1k",
                          "metric": ["i2t_r1", "t2i_r1", "rsum", "rsum", "rsum", "rsum"],
                          "reported": ["50", "40", "500", "480", "", "470"], "reproduced": ["49", "41", "470", "430", "", ""],
                          "difference": ["-1", "1", "-30", "-50", "", ""], "verdict": verdicts})
    cells.to_csv(tmp_path / "t_flickr.csv", index=False)
    rows = [{"id": r, "label": r.upper(), "paper": "p", "seeds": [0, 1], "ensemble_size": 1, "ran": "x", "ledger": [],
             "reported_only": None, "not_reported": "not found" if r == "d" else None} for r in "abcd"]
    (tmp_path / "t.spec.json").write_text(json.dumps(table_spec(rows, titles=["P: Table 1"]).to_json()))
    spec = {"paper": "p", "paper_name": "Paper P", "notes": "", "dataset": "flickr", "dataset_kind": "karpathy",
            "reported_dataset": "flickr", "bootstrap": {"n_resamples": 2000, "confidence": 0.95, "method": "BCa", "seed": 0},
            "tolerance": {"recall": 2.0, "rsum": 6.0}, "training_check": TRAINING_CHECK, "tables": ["t"],
            "has_claims": False, "skipped_tables": [], "all_tables_config": "config/synthetic_all_tables.yaml"}
    text = build_report(ReportSpec.from_json(spec, "test"), [str(tmp_path / "t_flickr.csv")],
                        [str(tmp_path / "t.spec.json")], None)
    assert "| `tables/t_flickr.md` | 2 | 1 | 1 | 1 | 0 |" in text      # the other paper's row is not counted
    assert "states no claim checked on flickr" in text
    assert "Cells outside tolerance (1)" in text and "| t | b | f30k_1k | rsum | 500 | 470 | -30 |" in text
    assert "- Row `c`: 1 cells not comparable (ensemble of 2 vs 1)." in text
    assert "- Row `d` has cells the sources give no number for: not found." in text
    assert "Every claim tested is supported" not in text and "synthetic" not in text
    assert "skip_tables" not in text
    # a table of the paper its dataset's config leaves out is named, with how to build it
    spec.update(skipped_tables=["t3", "t4"], all_tables_config="config/synthetic_all_tables.yaml")
    text = build_report(ReportSpec.from_json(spec, "test"), [str(tmp_path / "t_flickr.csv")],
                        [str(tmp_path / "t.spec.json")], None)
    assert ("Not built on flickr by this configuration (`datasets.flickr.skip_tables`), so neither their cells nor "
            "the claims on them are here: `t3`, `t4`. `--configfile config/synthetic_all_tables.yaml` builds them."
            in text)


def test_the_report_spec_names_the_tables_the_dataset_skips(plan):
    default = Plan(load_harness_config(CONFIG))
    assert default.report_spec("sgraf", "synthetic").skipped_tables == ["sgraf_t3", "sgraf_t4", "sgraf_t5", "sgraf_t7"]
    assert default.report_spec("sgraf", "flickr").skipped_tables == []
    assert plan.report_spec("sgraf", "synthetic").skipped_tables == []   # every table built


def test_the_figure_draws_intervals_that_leave_out_the_estimate_and_undefined_ones(planted, tmp_path):
    import matplotlib.image

    root, _, spec, payload = planted
    frame = claims_job.claims_frame(spec, payload)
    # a BCa interval may leave out the estimate; an undefined one is NaN
    frame.loc[0, ["ci_low", "ci_high"]] = frame.loc[0, "reproduced_difference"] + np.array([1.0, 2.0])
    frame.loc[1, ["ci_low", "ci_high", "verdict"]] = [np.nan, np.nan, "undetermined (synthetic data)"]
    frame.to_csv(tmp_path / "claims.csv", index=False)
    assert plot_claims(str(tmp_path / "claims.csv"), str(tmp_path / "claims.png")) == 3
    assert matplotlib.image.imread(tmp_path / "claims.png")[..., :3].std() > 0.05
    assert verdict(float("nan"), float("nan")) == "undetermined"


# -- claims on rows that did not train, or on a saturated metric ----------------------------------
@pytest.fixture(scope="module")
def judged(tmp_path_factory, harness):
    """Rows on 30 test images, one seed each: ``strong``; ``flat``, a plateau (every score within
    1e-5 of 0.4016, ranked at random); ``mixed``, an ensemble of a strong member and a flat one;
    ``perfect_a`` and ``perfect_b``, every true pair far above (R@10 = 100); ``old``, a trained row
    whose aggregate predates the training check; and the claims comparing them."""
    root = tmp_path_factory.mktemp("judged")
    rng = np.random.default_rng(1)
    matrices = {"strong": planted_scores(rng, 30, 2.0), "flat": 0.4016 + 1e-5 * rng.random((30, 30 * TPI)),
                "mixed_a": planted_scores(rng, 30, 2.0), "mixed_b": 0.4016 + 1e-5 * rng.random((30, 30 * TPI)),
                "perfect_a": planted_scores(rng, 30, 50.0), "perfect_b": planted_scores(rng, 30, 50.0),
                "old": planted_scores(rng, 30, 1.0)}
    for name, sims in matrices.items():
        save_npy(root / f"{name}.npy", sims.astype(np.float32))
    members = {"strong": ["strong"], "flat": ["flat"], "mixed": ["mixed_a", "mixed_b"], "perfect_a": ["perfect_a"],
               "perfect_b": ["perfect_b"], "old": ["old"]}
    rows = {}
    for row_id, names in members.items():
        files = [[str(root / f"{n}.npy") for n in names]]
        rows[f"t/{row_id}"] = {"table": "t", "id": row_id, "label": row_id, "seeds": [0], "ensemble_size": len(names),
                               "view": None, "reported": {}, "scores": {"synthetic_test": files}, "evaluations": {},
                               "aggregate": write_aggregate(root / f"{row_id}.agg.json", [0], files)}
    old = json.loads((root / "old.agg.json").read_text())
    del old["training_checks"]                      # an aggregate written before the training check
    (root / "old.agg.json").write_text(json.dumps(old))
    claim = {"words": "w", "paraphrased": False, "where": "Table 1", "table": "t", "margin": 0.0,
             "left_reduce": "mean", "right_reduce": "mean", "best": None, "rank": None, "bound": None,
             "bound_reason": "", "printed": {}, "reported_only": [],
             "protocols": ["synthetic_test"]}
    claims = [("strong_beats_flat", "strong", "flat", "rsum"), ("mixed_beats_strong", "mixed", "strong", "rsum"),
              ("perfect_r10", "perfect_a", "perfect_b", "i2t_r10"),
              ("perfect_rsum_vs_strong", "perfect_a", "strong", "rsum"),
              ("strong_beats_old", "strong", "old", "rsum")]
    spec = ClaimsSpec.from_json({
        "paper": "toy", "paper_name": "Toy paper", "dataset": "toy", "dataset_kind": "karpathy",
        "reported_dataset": "toy", "rows": rows, "training_check": TRAINING_CHECK,
        "bootstrap": {"n_resamples": 500, "confidence": 0.95, "method": "BCa", "seed": 0},
        "claims": [{**claim, "id": cid, "form": f"{a}.{m} > {b}.{m}", "left": [a], "right": [b], "metric": m}
                   for cid, a, b, m in claims]}, "test")
    payload = dataset_payload(harness, "synthetic")
    return spec, claims_job.claims_frame(spec, payload).set_index("claim"), matrices


def test_a_claim_comparing_a_row_that_did_not_train_is_undetermined_whatever_its_interval(judged):
    spec, frame, matrices = judged
    flat = frame.loc["strong_beats_flat"]
    # the interval alone would support it: strong is far above the flat row's chance-level RSUM
    chance = chance_recalls(30)["rsum"]
    assert retrieval_metrics(matrices["flat"].astype(np.float32))["rsum"] < chance + 0.05 * (600 - chance)
    assert flat["ci_low"] > 0 and flat["verdict"] == "undetermined: flat did not train"
    assert flat["untrained_rows"] == "flat" and "flat did not train: seed 0 synthetic_test: rsum" in flat["training_check"]
    # an ensemble whose averaged matrix ranks well, with a member that did not train
    mixed = frame.loc["mixed_beats_strong"]
    assert mixed["verdict"] == "undetermined: mixed did not train" and "member mixed_b" in mixed["training_check"]
    assert "member mixed_a" not in mixed["training_check"]


def test_a_claim_saturated_on_both_sides_is_undetermined_and_one_side_saturated_is_judged(judged):
    spec, frame, matrices = judged
    r10 = [retrieval_metrics(matrices[n].astype(np.float32))["i2t_r10"] for n in ("perfect_a", "perfect_b")]
    assert r10 == [100.0, 100.0]
    both = frame.loc["perfect_r10"]
    assert bool(both["saturated"]) and both["verdict"] == "undetermined: saturated"
    one = frame.loc["perfect_rsum_vs_strong"]     # RSUM 600 against a trained row below it: an ordinary claim
    assert not bool(one["saturated"]) and one["verdict"] == "supported"


def test_a_row_whose_training_was_not_checked_is_named_not_taken_as_trained(judged, tmp_path):
    spec, frame, _ = judged
    old = frame.loc["strong_beats_old"]
    assert old["verdict"] == "supported" and old["untrained_rows"] == ""
    assert old["training_check"].startswith("old unknown: its aggregate was written before the training check")
    md = claims_job.markdown(frame.reset_index(), spec)
    assert "- `t/old` unknown: its aggregate was written before the training check" in md
    assert "- `t/flat` did not train: seed 0 synthetic_test: rsum" in md and "`t/strong`" not in md.split("not taken")[1]
