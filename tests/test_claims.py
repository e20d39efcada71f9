"""Claims: their machine form, the plan's checks of each paper file's claims, and the claims job on
planted score matrices (values against the metrics of each run, a planted reversal contradicted,
a rebuild byte-identical)."""
import copy
import json

import numpy as np
import pandas as pd
import pytest
import yaml

from methods.config import REPO_ROOT, load_harness_config
from methods.errors import HarnessError
from methods.data.datasets import dataset_payload
from methods.io import save_npy
from methods.metrics.retrieval import retrieval_metrics
from methods.plan import Plan
from methods.report import claims as claims_job
from methods.report.bootstrap import verdict
from methods.report.claim_form import parse_comparison
from methods.report.claims_figure import plot_claims
from methods.report.reproduction import build_report

CONFIG = REPO_ROOT / "config" / "config.yaml"
TPI = 5


@pytest.fixture(scope="module")
def harness():
    return load_harness_config(CONFIG)


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
    assert label["consistency_lowers_retrieval"].protocols == ["labelwise_coco_1k_5fold", "labelwise_coco_5k"]
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
    ({"compare": "scan_ensemble.rsum > vsepp.rsum"}, ({"id": "vsepp", "label": "reported", "reported_only": "x",
                                                       "reported": {}},), "row 'vsepp' is reported only"),
    ({"compare": "scan_ensemble.i2t_medr < vsepp_resnet152_ft.i2t_medr"}, (), "not a mean over test queries"),
    ({"compare": "scan_ensemble.t2i_ndcg500 > vsepp_resnet152_ft.t2i_ndcg500"}, (), "no protocol of datasets.flickr"),
    ({"compare": "scan_ensemble.rsum > vsepp_resnet152_ft.rsum", "table": "sgraf_t1"}, (), "not a table of this paper"),
    ({"compare": "scan_ensemble.rsum >> vsepp_resnet152_ft.rsum"}, (), "claims.the_claim.compare"),
])
def test_a_claim_the_plan_cannot_check_is_one_line_naming_it(harness, tmp_path, claim, rows, message):
    with pytest.raises(HarnessError, match=message) as err:
        Plan(with_claim(harness, tmp_path, claim, rows))
    assert "claims.the_claim" in str(err.value) and "\n" not in str(err.value)


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
    spec = plan.claims_spec("sgraf", "coco")
    ensemble = spec["rows"]["sgraf_t1/sgraf"]
    assert ensemble["ensemble_size"] == 2 and ensemble["seeds"] == [0, 1, 2]
    files = ensemble["scores"]["coco_5k"]
    assert len(files) == 3 and all(len(members) == 2 and all(f.endswith("/sims_testall.npy") for f in members)
                                   for members in files)
    sets = plan.claims_spec("set_embeddings", "flickr")["rows"]["set_embeddings_t5/image_only_1"]
    assert all(f.endswith("/sims_test@i0_tall.npy") for per_seed in sets["scores"]["f30k_1k"] for f in per_seed)
    assert spec["bootstrap"] == {"n_resamples": 2000, "confidence": 0.95, "method": "BCa", "seed": 0}


# -- the claims job on planted score matrices --------------------------------------------------
def planted_scores(rng, n: int, strength: float) -> np.ndarray:
    return rng.normal(size=(n, n * TPI)) + strength * np.repeat(np.eye(n), TPI, axis=1)


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
                     "scores": {"synthetic_test": [[write("strong0", 2.0)], [write("strong1", 2.0)]]}},
        "t/weak": {"table": "t", "id": "weak", "label": "weak", "seeds": [0, 1], "ensemble_size": 1, "view": None,
                   "reported": {"synthetic_test": {"source": "paper, Table 1, row 'weak'", "ensemble_size": 1,
                                                   "metrics": {"rsum": 300.0}}},
                   "scores": {"synthetic_test": [[write("weak0", 0.4)], [write("weak1", 0.4)]]}},
        "t/pair": {"table": "t", "id": "pair", "label": "pair", "seeds": [0, 1], "ensemble_size": 2, "view": None,
                   "reported": {}, "scores": {"synthetic_test": [[write("pa0", 1.0), write("pb0", 1.0)],
                                                                 [write("pa1", 1.0), write("pb1", 1.0)]]}}}
    claim = {"words": "w", "paraphrased": False, "where": "Table 1", "table": "t", "metric": "rsum", "margin": 0.0,
             "protocols": ["synthetic_test"]}
    spec = {"paper": "toy", "paper_name": "Toy paper", "dataset": "toy", "dataset_kind": "synthetic",
            "reported_dataset": "flickr", "rows": rows,
            "bootstrap": {"n_resamples": 500, "confidence": 0.95, "method": "BCa", "seed": 0},
            "claims": [{**claim, "id": "strong_beats_weak", "form": "strong.rsum > weak.rsum", "left": ["strong"],
                        "right": ["weak"]},
                       {**claim, "id": "weak_beats_strong", "form": "weak.rsum > strong.rsum", "left": ["weak"],
                        "right": ["strong"]},
                       {**claim, "id": "pair_vs_both", "form": "pair.rsum > mean(strong, weak).rsum", "left": ["pair"],
                        "right": ["strong", "weak"]}]}
    (root / "spec.json").write_text(json.dumps(spec))
    payload = dataset_payload(harness, "synthetic")   # its synthetic_test relevance: captions of image, 5 each
    (root / "dataset.json").write_text(json.dumps(payload))
    return root, sims, spec, payload


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
    (tmp_path / "t.spec.json").write_text(json.dumps({"table": "t", "titles": ["P: Table 1"], "rows": rows}))
    spec = {"paper": "p", "paper_name": "Paper P", "notes": "", "dataset": "flickr", "dataset_kind": "karpathy",
            "reported_dataset": "flickr", "bootstrap": {"n_resamples": 2000, "confidence": 0.95, "method": "BCa", "seed": 0},
            "tolerance": {"recall": 2.0, "rsum": 6.0}}
    text = build_report(spec, [str(tmp_path / "t_flickr.csv")], [str(tmp_path / "t.spec.json")], None)
    assert "| `tables/t_flickr.md` | 2 | 1 | 1 | 1 | 0 |" in text      # the other paper's row is not counted
    assert "states no claim checked on flickr" in text
    assert "Cells outside tolerance (1)" in text and "| t | b | f30k_1k | rsum | 500 | 470 | -30 |" in text
    assert "- Row `c`: 1 cells not comparable (ensemble of 2 vs 1)." in text
    assert "- Row `d` has cells the sources give no number for: not found." in text
    assert "Every claim tested is supported" not in text and "synthetic" not in text


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
