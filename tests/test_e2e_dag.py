"""End to end: generation -> features -> training -> evaluation -> table, on a tiny synthetic dataset."""
import csv
import json
import re

import numpy as np
import pytest
import torch
import yaml

from filelock import FileLock

from methods.config import load_harness_config
from methods.io import write_json, write_text
from methods.metrics.retrieval import chance_recalls, retrieval_metrics
from methods.plan import Plan
from tests.conftest import REPO, fitting_weights, flickr_layout, snakemake

# one pytest-xdist worker runs these tests one after the other: they write configs and layouts into
# the session DAG's folder and run Snakemake there
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("tiny_dag_folder")]


def job_counts(proc) -> dict[str, int]:
    """Jobs per rule from the summary table a dry run prints."""
    counts = {}
    for line in (proc.stdout + proc.stderr).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    return counts


def job_resources(proc) -> dict[str, set[tuple]]:
    """Per rule, the (mem_mb, runtime, gpu) each of its jobs asks for, from a dry run's job listing."""
    out: dict[str, set[tuple]] = {}
    rule = None
    for line in (proc.stdout + proc.stderr).splitlines():
        if line.startswith(("rule ", "localrule ")):
            rule = line.split()[1].rstrip(":")
        elif line.strip().startswith("resources:") and rule:
            res = dict(item.split("=", 1) for item in line.split(":", 1)[1].replace(" ", "").split(","))
            out.setdefault(rule, set()).add((res.get("mem_mb"), res.get("runtime"), res.get("gpu")))
    return out


def flickr_config(tiny_dag, name: str, backbone: str, with_precomp: bool, with_glove: bool = True) -> str:
    """A config file giving Flickr30K paths (the synthetic files in Flickr30K's layout, its test
    split grown to protocol f30k_1k's 1,000 images) and a weights file that fits ``backbone``;
    returns its name."""
    src = tiny_dag / "results/synthetic"
    layout = tiny_dag / "flickr_layout.json"  # one layout for every config of the session
    with FileLock(str(tiny_dag / "flickr_layout.lock")):   # tests on two workers share the session DAG's folder
        if not layout.exists():
            write_json(layout, flickr_layout(src / "data", src / "precomp", tiny_dag / "flickr_layout"))
        weights = fitting_weights(tiny_dag / f"{backbone}.pth", backbone)
    flickr = json.loads(layout.read_text())
    if not with_precomp:
        flickr = {k: v for k, v in flickr.items() if k not in ("precomp_dir", "precomp")}
    if not with_glove:
        flickr = {k: v for k, v in flickr.items() if k != "glove"}
    write_text(tiny_dag / name, yaml.safe_dump({"backbones": {backbone: {"arch": backbone, "weights": str(weights)}},
                                                "datasets": {"flickr": flickr}}))
    return name


def read_table(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_table_values_come_from_the_run(tiny_dag):
    rows = read_table(tiny_dag / "tables" / "table1_synthetic.csv")
    assert {r["row"] for r in rows} == {"vsepp_resnet152_ft", "vsepp_resnet152_frozen", "vse0_resnet152_ft",
                                        "sgraf_sgr", "sgraf_saf", "sgraf_sgraf", "scan_ensemble",
                                        "mvsa_ti_avg", "mvsa_ti_lse", "mvsa_it_avg", "mvsa_it_lse"}
    assert (tiny_dag / "tables" / "table1_synthetic.md").exists()
    assert (tiny_dag / "figures" / "reproduced_vs_reported_synthetic.png").stat().st_size > 1000
    spec = json.loads((tiny_dag / "results/synthetic/tables/table1.spec.json").read_text())
    for row in (r for r in spec["rows"] if r["ensemble_size"] == 1):  # ensembles: test_sgraf_tables_...
        run = tiny_dag / "results/synthetic/runs" / row["members"][0] / "seed0"
        ev = json.loads((run / "eval_test.json").read_text())
        # the evaluation's metrics recompute from its saved score matrix ...
        recomputed = retrieval_metrics(np.load(run / "sims_test.npy"))
        assert ev["results"][0]["metrics"]["rsum"] == pytest.approx(recomputed["rsum"])
        # ... and the table holds exactly those numbers
        cells = {r["metric"]: r for r in rows if r["row"] == row["id"]}
        for metric in ("i2t_r1", "t2i_r10", "rsum", "i2t_medr"):
            assert float(cells[metric]["reproduced"]) == pytest.approx(recomputed[metric], abs=0.006)
        assert cells["rsum"]["seeds"] == "0" and cells["rsum"]["ensemble_size"] == "1"
        assert ev["config_hash"] in cells["rsum"]["run_configs"]
        # the training check: RSUM against its closed-form chance on the 10 test images, judged in the
        # table with the config's thresholds over every protocol's check (tiny runs may well not train)
        check = ev["results"][0]["training_check"]
        assert check["value"] == pytest.approx(recomputed["rsum"]) and check["chance"] == pytest.approx(
            chance_recalls(10)["rsum"])
        limits = spec["training_check"]
        trained = all(r["training_check"]["gain_share"] >= limits["min_gain_share"]
                      and r["training_check"]["score_spread"] >= limits["min_score_spread"]
                      for r in ev["results"] if "training_check" in r)
        assert cells["rsum"]["trained"] == ("yes" if trained else "no")
        assert ev["provenance"]["git_commit"] and ev["provenance"]["device"] and ev["wall_seconds"]["total"] > 0
    # reported Flickr30K numbers are shown but never judged on synthetic data
    # (or, for a row that did not train, never judged at all)
    ft = {r["metric"]: r for r in rows if r["row"] == "vsepp_resnet152_ft"}
    assert ft["i2t_r1"]["reported"] == "52.9" and ft["i2t_r1"]["verdict"] == (
        "did not train" if ft["i2t_r1"]["trained"] == "no" else "not comparable (synthetic data)")
    vse0 = {r["metric"]: r for r in rows if r["row"] == "vse0_resnet152_ft"}
    assert vse0["i2t_r1"]["verdict"] == ("did not train" if vse0["i2t_r1"]["trained"] == "no" else "not reported")


def test_frozen_row_has_no_finetune_stage_and_ft_row_does(tiny_dag):
    spec = json.loads((tiny_dag / "results/synthetic/tables/table1.spec.json").read_text())
    stages = {}
    for row in (r for r in spec["rows"] if r["members"][0].startswith("vsepp-")):
        log = json.loads((tiny_dag / "results/synthetic/runs" / row["members"][0] / "seed0/train_log.json").read_text())
        stages[row["id"]] = sorted({h["stage"] for h in log["history"]})
    assert stages == {"vsepp_resnet152_ft": ["finetune", "frozen"], "vse0_resnet152_ft": ["finetune", "frozen"],
                      "vsepp_resnet152_frozen": ["frozen"]}


def test_rerun_is_a_no_op_and_dry_run_of_unconfigured_flickr_fails_clearly(tiny_dag):
    proc = snakemake(tiny_dag, "--configfile", "tiny.yaml", "-n")
    assert "Nothing to be done" in proc.stdout + proc.stderr
    # no rule's input function fails while Snakemake picks rules for the default targets (a table
    # pattern matching tables/summary_<dataset> printed an InputFunctionException on every run)
    assert "Exception" not in proc.stdout + proc.stderr and "Error" not in proc.stdout + proc.stderr
    proc = snakemake(tiny_dag, "--configfile", "tiny.yaml", "-n", "tables/table1_flickr.csv", check=False)
    assert proc.returncode != 0
    assert "dataset 'flickr' is not configured" in proc.stdout + proc.stderr
    assert "datasets.flickr.karpathy_json" in proc.stdout + proc.stderr


def test_dry_run_of_configured_flickr_plans_the_paper_runs(tiny_dag):
    """Flickr30K paths configured (here: the synthetic files in the Karpathy layout): the plan
    holds one feature job per split, 3 VSE++ rows x 3 seeds, and SGR + SAF x 3 seeds read from
    the precomputed regions, whose ensemble is the SGRAF row."""
    images_only = flickr_config(tiny_dag, "flickr_images_only.yaml", "resnet152", with_precomp=False)
    proc = snakemake(tiny_dag, "--configfile", "tiny.yaml", images_only, "-n", "tables/table1_flickr.csv", check=False)
    assert proc.returncode != 0 and "datasets.flickr.precomp_dir is not set" in proc.stdout + proc.stderr
    flickr = flickr_config(tiny_dag, "flickr.yaml", "resnet152", with_precomp=True)
    proc = snakemake(tiny_dag, "--configfile", "tiny.yaml", flickr, "-n", "tables/table1_flickr.csv")
    counts = job_counts(proc)
    # VSE++ 3 rows, SGR + SAF, SCAN t-i AVG + i-t LSE, MVSA's 4 settings: 3 seeds each
    assert counts["train_flickr"] == 33 and counts["features_flickr"] == 3
    assert "evaluate" not in counts   # each training job evaluates its model on the test split
    assert counts["ensemble"] == 6 and counts["table"] == 1 and "generate_synthetic" not in counts
    # a dry run of a real dataset's table says what it would cost on a GPU, or that it is not measured
    out = proc.stdout + proc.stderr
    assert "GPU time of tables/table1_flickr.csv (estimate): 33 training jobs" in out
    assert "GPU-hours for" in out or "not measured on any GPU, so not estimated: mvsa (12), scan (6)" in out
    # a real dataset's jobs ask for the rules' resources (config resources), a synthetic one's for
    # its own short, small slot (datasets.synthetic.resources, from its measured peaks)
    asked = job_resources(proc)
    assert asked["train_flickr"] == {("32000", "1440", "1")} and asked["features_flickr"] == {("16000", "240", "1")}
    assert asked["ensemble"] == {("16000", "60", "0")}
    proc = snakemake(tiny_dag, "-n", "-F", "tables/table1_synthetic.csv")   # the default config's resources
    asked = job_resources(proc)
    # the built-in data run portable numerics, on the CPU: no GPU asked for
    assert asked["train_synthetic"] == {("3000", "15", "0")} and asked["pretrain_backbone"] == {("3000", "15", "0")}
    assert asked["vocab"] == {("2000", "5", "0")} and asked["features_synthetic"] == {("2000", "10", "0")}


def test_dry_run_of_the_mvsa_supplement_tables_on_configured_flickr(tiny_dag):
    """Without Flickr30K's images the plan fails naming the keys to set. MVSA initialises its words
    with GloVe: without a GloVe file the plan fails naming the key;
    with one it holds Table 1's 8 trainings x 3 seeds (two stages each, planned from the images) and
    the three feature jobs that cache conv4 and conv5."""
    proc = snakemake(tiny_dag, "--configfile", "tiny.yaml", "-n", "tables/mvsa_t1_flickr.csv", check=False)
    assert proc.returncode != 0 and "dataset 'flickr' is not configured" in proc.stdout + proc.stderr
    no_glove = flickr_config(tiny_dag, "flickr_no_glove.yaml", "resnet152", with_precomp=True, with_glove=False)
    proc = snakemake(tiny_dag, "--configfile", "tiny.yaml", no_glove, "-n", "tables/mvsa_t1_flickr.csv", check=False)
    assert proc.returncode != 0 and "datasets.flickr.glove" in proc.stdout + proc.stderr
    flickr = flickr_config(tiny_dag, "flickr.yaml", "resnet152", with_precomp=True)
    proc = snakemake(tiny_dag, "--configfile", "tiny.yaml", flickr, "-n", "tables/mvsa_t1_flickr.csv")
    counts = job_counts(proc)
    assert counts["train_flickr"] == 24 and counts["features_flickr"] == 3
    assert "ensemble" not in counts and "generate_synthetic" not in counts


def test_mvsa_supplement_tables_figures_and_the_scan_ensemble(tiny_dag):
    t1 = read_table(tiny_dag / "tables" / "mvsa_t1_synthetic.csv")
    t2 = read_table(tiny_dag / "tables" / "mvsa_t2_synthetic.csv")
    assert len({r["row"] for r in t1}) == len({r["row"] for r in t2}) == 8
    ran = {r["row"]: r["ran"] for r in t1 + t2}
    assert "conv4 + conv5 (max-pooled to the coarsest)" in ran["ti_avg_max"] and "t-i AVG (λ1 9)" in ran["ti_avg_max"]
    assert "conv4 + conv5 (avg-pooled to the coarsest)" in ran["ti_avg_avg"]
    assert " conv5, CNN frozen, 1 ASA" in ran["it_lse_7"] and "i-t LSE (λ1 4, λ2 5)" in ran["it_lse_7"]
    assert " conv4, CNN frozen" in ran["ti_lse_14"] and "t-i LSE (λ1 9, λ2 6)" in ran["ti_lse_14"]
    # reported: the supplement's cells as printed, beside the reproduced values
    cell = next(r for r in t1 if r["row"] == "it_lse_14" and r["metric"] == "t2i_r1")
    assert float(cell["reported"]) == 16.0 and "supplementary Table 1" in cell["reported_source"]
    import matplotlib.image

    for figure in ("mvsa_text_retrieval", "mvsa_image_retrieval", "mvsa_asa_attention"):
        image = matplotlib.image.imread(tiny_dag / "figures" / f"{figure}_synthetic.png")
        assert image.shape[0] > 300 and image.shape[1] > 600 and image[..., :3].std() > 0.05   # drawn, not blank
    table1 = read_table(tiny_dag / "tables" / "table1_synthetic.csv")
    scan = {r["metric"]: r for r in table1 if r["row"] == "scan_ensemble"}
    assert scan["rsum"]["ensemble_size"] == "2" and scan["rsum"]["reported_ensemble_size"] == "2"
    assert "2-model ensemble" in scan["rsum"]["label"]
    mvsa = {r["metric"]: r for r in table1 if r["row"] == "mvsa_ti_avg"}
    assert mvsa["rsum"]["reported"] == "" and mvsa["rsum"]["reported_source"].startswith("NOT FOUND")
    # the table1 MVSA row reuses the supplement Table 2 run of the same setting
    assert mvsa["rsum"]["reproduced"] == next(r["reproduced"] for r in t2 if r["row"] == "ti_avg_max" and r["metric"] == "rsum")


def test_ensemble_row_averages_member_similarities(tiny_dag):
    rows = read_table(tiny_dag / "tables" / "ensembletest_synthetic.csv")
    pair = {r["metric"]: r for r in rows if r["row"] == "pair"}
    single = {r["metric"]: r for r in rows if r["row"] == "single"}
    assert pair["rsum"]["ensemble_size"] == "2" and single["rsum"]["ensemble_size"] == "1"
    spec = json.loads((tiny_dag / "results/synthetic/tables/ensembletest.spec.json").read_text())
    exp = next(r for r in spec["rows"] if r["id"] == "pair")["members"][0]
    runs = tiny_dag / "results/synthetic/runs" / exp
    # members: the same config twice, so seeds 0 and 1000 (s + 1000 per earlier repeat)
    sims = (np.load(runs / "seed0/sims_test.npy") + np.load(runs / "seed1000/sims_test.npy")) / 2
    assert float(pair["rsum"]["reproduced"]) == pytest.approx(retrieval_metrics(sims)["rsum"], abs=0.006)


def test_metric_learning_table_figures_and_gradient_counts(tiny_dag):
    rows = read_table(tiny_dag / "tables" / "metric_learning_synthetic.csv")
    rsum = {r["row"]: r for r in rows if r["metric"] == "rsum"}
    assert set(rsum) == {f"{m}_{lo}" for m in ("vsepp", "vsrn")
                         for lo in ("triplet_sum", "triplet_hardest", "nt_xent", "smooth_ap")}
    for name in ("metric_learning", "metric_learning_gradients"):
        assert (tiny_dag / "figures" / f"{name}_synthetic.png").stat().st_size > 5000
    spec = json.loads((tiny_dag / "results/synthetic/figures/metric_learning_gradients.spec.json").read_text())
    for row in spec["rows"]:
        run = tiny_dag / row["runs"][0]
        log = json.loads((run / "train_log.json").read_text())
        assert log["config"]["loss"]["kind"] == row["loss"] and log["config"]["model"]["kind"] == row["model"]
        assert log["config"]["training"]["batching"] == ("images" if row["loss"] == "smooth_ap" else "captions")
        for epoch in log["history"]:
            for direction, c in epoch["gradient_counts"].items():
                assert 0 <= c["contributing_mean"] <= c["nonzero_mean"] <= c["negatives_mean"]
                if row["loss"] == "nt_xent":  # a softmax gives every negative some gradient
                    assert c["nonzero_mean"] == c["negatives_mean"]
        # the table holds this run's evaluation
        ev = json.loads((run / "eval_test.json").read_text())
        assert float(rsum[row["id"]]["reproduced"]) == pytest.approx(ev["results"][0]["metrics"]["rsum"], abs=0.006)
    # image queries of a caption batch have ~1 positive: the hardest negative is at most one per positive
    hardest = next(r for r in spec["rows"] if r["id"] == "vsrn_triplet_hardest")
    log = json.loads((tiny_dag / hardest["runs"][0] / "train_log.json").read_text())
    assert all(e["gradient_counts"]["t2i"]["nonzero_mean"] <= 1.0 for e in log["history"])


def test_dry_run_of_the_study_on_configured_flickr(tiny_dag):
    """2 models x 4 losses x 5 seeds; VSRN reads the precomputed regions, VSE++ ResNet-50 features."""
    no_regions = flickr_config(tiny_dag, "flickr_noregions.yaml", "resnet50", with_precomp=False)
    proc = snakemake(tiny_dag, "--configfile", "tiny.yaml", no_regions, "-n",
                     "tables/metric_learning_flickr.csv", check=False)
    assert proc.returncode != 0 and "datasets.flickr.precomp_dir is not set" in proc.stdout + proc.stderr
    study = flickr_config(tiny_dag, "flickr_study.yaml", "resnet50", with_precomp=True)
    proc = snakemake(tiny_dag, "--configfile", "tiny.yaml", study, "-n",
                     "tables/metric_learning_flickr.csv", "figures/metric_learning_gradients_flickr.png")
    counts = job_counts(proc)
    assert counts["train_flickr"] == 40 and counts["aggregate_row"] == 8
    assert counts["features_flickr"] == 3 and "region_features" not in counts and counts["paper_figure"] == 1


def test_dry_run_of_sgraf_table5_on_configured_coco(tiny_dag):
    """SAF, SGR and joint rows x 3 seeds on COCO; the split row averages the SGR and SAF runs."""
    src = tiny_dag / "results/synthetic"
    # COCO's protocols are defined on 5,000 test images: the synthetic test split, grown
    coco = flickr_layout(src / "data", src / "precomp", tiny_dag / "coco_layout", 5000, test_split="testall")
    coco["splits"] = {"train": ["train"], "dev": ["val"], "testall": ["test"]}
    write_text(tiny_dag / "coco_sgraf.yaml", yaml.safe_dump({"datasets": {"coco": coco}}))
    proc = snakemake(tiny_dag, "--configfile", "tiny.yaml", "coco_sgraf.yaml", "-n", "tables/sgraf_t5_coco.csv")
    counts = job_counts(proc)
    # 3 models (SGR, SAF, joint) x 3 seeds, evaluated on testall (COCO 1K 5-fold and 5K from one matrix)
    assert counts["train_coco"] == 9 and counts["ensemble"] == 3
    assert counts["aggregate_row"] == 4 and counts["table"] == 1
    assert "sgraf" in proc.stdout and "testall" in proc.stdout
    assert counts["instance_categories"] == 1   # PMRP's categories, read once for every evaluation
    # without the instance annotations, the default COCO protocols (PMRP) fail at DAG build, naming the key
    del coco["instance_annotations"]
    write_text(tiny_dag / "coco_sgraf_no_instances.yaml", yaml.safe_dump({"datasets": {"coco": coco}}))
    proc = snakemake(tiny_dag, "--configfile", "tiny.yaml", "coco_sgraf_no_instances.yaml", "-n",
                     "tables/sgraf_t5_coco.csv", check=False)
    assert proc.returncode != 0 and "datasets.coco.instance_annotations: not set" in proc.stdout + proc.stderr


def test_sgraf_tables_figure_and_ensemble_of_sgr_and_saf(tiny_dag):
    for table in ("sgraf_t1", "sgraf_t2", "sgraf_t3", "sgraf_t4", "sgraf_t5", "sgraf_t7"):
        rows = read_table(tiny_dag / "tables" / f"{table}_synthetic.csv")
        # the compared systems the harness does not run (SGRAF Tables 1-2) show their printed numbers only
        assert rows and all(r["verdict"] == "did not train" if r["trained"] == "no" else
                            r["verdict"] == "reported only" if r["trained"] == "" else
                            r["verdict"] in ("not reported", "not comparable (synthetic data)") for r in rows)
    assert (tiny_dag / "figures" / "sgraf_saf_weights_synthetic.png").stat().st_size > 5000
    spec = json.loads((tiny_dag / "results/synthetic/tables/sgraf_t1.spec.json").read_text())
    members = {r["id"]: r["members"] for r in spec["rows"]}
    assert members["sgraf"] == members["sgr"] + members["saf"]
    runs = tiny_dag / "results/synthetic/runs"
    # the ensemble of seed 0 averages the SGR and SAF models of seed 0 (the rows' own runs)
    sims = (np.load(runs / members["sgr"][0] / "seed0/sims_test.npy")
            + np.load(runs / members["saf"][0] / "seed0/sims_test.npy")) / 2
    rows = read_table(tiny_dag / "tables" / "sgraf_t1_synthetic.csv")
    rsum = {r["row"]: r for r in rows if r["metric"] == "rsum"}
    assert rsum["sgraf"]["ensemble_size"] == "2"
    assert float(rsum["sgraf"]["reproduced"]) == pytest.approx(retrieval_metrics(sims)["rsum"], abs=0.006)
    ev = json.loads((runs / members["saf"][0] / "seed0/eval_test.json").read_text())
    assert ev["config"]["model"]["heads"] == ["saf"] and ev["config"]["model"]["kind"] == "sgraf"


def test_dry_run_of_the_sgraf_report_on_configured_flickr_plans_its_runs(tiny_dag):
    """reports/sgraf_flickr.md needs every SGRAF table on Flickr30K (table1 merges the other papers'
    rows) and the claims, which read the compared rows' score matrices: the plan trains every run
    of those tables, once."""
    flickr = flickr_config(tiny_dag, "flickr.yaml", "resnet152", with_precomp=True)
    proc = snakemake(tiny_dag, "--configfile", "tiny.yaml", flickr, "-n", "reports/sgraf_flickr.md")
    counts = job_counts(proc)
    repo = Plan(load_harness_config(REPO / "config" / "config.yaml"))
    tables = ["sgraf_t1", "sgraf_t3", "sgraf_t4", "sgraf_t5", "sgraf_t7", "table1"]
    # PFAN reads each region's box: the tiny Flickr30K's regions have no box files, so its row is left out
    runs = {run for t in tables for row in repo.table(t, "flickr").rows if row.runs_models and row.id != "pfan"
            for run in repo.row_runs(row, "flickr")}
    assert counts["train_flickr"] == len(runs) and counts["table"] == len(tables)
    assert "/pfan-" not in proc.stdout and "each region's box" in proc.stdout + proc.stderr
    assert counts["claims"] == 1 and counts["reproduction_report"] == 1 and "claims_figure" not in counts


def test_claims_and_reproduction_reports_of_every_paper(tiny_dag):
    papers = {"vsepp": "synthetic", "metric_learning": "synthetic", "sgraf": "synthetic", "scan": "synthetic",
              "mvsa": "synthetic", "set_test": "synthetic", "label_tiny": "synthtags"}
    for paper, dataset in papers.items():
        claims = read_table(tiny_dag / "tables" / f"claims_{paper}_{dataset}.csv")
        assert claims and all(c["verdict"].endswith("(synthetic data)") for c in claims), paper
        assert (tiny_dag / "figures" / f"claims_{paper}_{dataset}.png").stat().st_size > 0
        report = (tiny_dag / "reports" / f"{paper}_{dataset}.md").read_text()
        for section in ("## 1. Scope of reproducibility", "## 2. What was run", "## 3. Results",
                        "## 4. What could not be reproduced, and why"):
            assert section in report, (paper, section)
        assert all(f"| {c['claim']} |" in report for c in claims)
    for paper in ("deviations", "ensemble_test", "resume_test"):   # no claims: a report of the tables alone
        assert "states no claim" in (tiny_dag / "reports" / f"{paper}_synthetic.md").read_text()
        assert not (tiny_dag / "tables" / f"claims_{paper}_synthetic.csv").exists()
    # the compared values are the rows' table values; the margin decides the verdict
    table = {(r["row"], r["metric"]): float(r["reproduced"]) for r in read_table(tiny_dag / "tables/settest_synthetic.csv")
             if r["protocol"] == "synthetic_test"}
    claims = {c["claim"]: c for c in read_table(tiny_dag / "tables/claims_set_test_synthetic.csv")}
    view = claims["whole_set_beats_one_element"]
    assert float(view["left_reproduced"]) == pytest.approx(table[("slots", "rsum")], abs=0.006)
    assert float(view["right_reproduced"]) == pytest.approx(table[("slots_element_1", "rsum")], abs=0.006)
    margin = claims["ensemble_beats_the_others"]
    assert float(margin["right_reproduced"]) == pytest.approx(
        (table[("pie", "i2t_r5")] + table[("slots_grid", "i2t_r5")]) / 2, abs=0.006)
    low, high = float(margin["ci_low"]), float(margin["ci_high"])
    if margin["untrained_rows"]:   # tiny runs may not train: then no verdict from the interval
        assert margin["verdict"] == f"undetermined: {margin['untrained_rows'].replace('; ', ', ')} did not train (synthetic data)"
    elif margin["saturated"] == "True":
        assert margin["verdict"] == "undetermined: saturated (synthetic data)"
    else:
        assert margin["verdict"].split()[0] == ("supported" if low > 1.5 else "contradicted" if high < 1.5 else "inconclusive")
    label = read_table(tiny_dag / "tables/claims_label_tiny_synthtags.csv")[0]   # "ours_con < ours": ours on the left
    ndcg = {r["row"]: float(r["reproduced"]) for r in read_table(tiny_dag / "tables/label_tiny_synthtags.csv")
            if r["metric"] == "t2i_ndcg500"}
    assert label["left_rows"] == "ours" and float(label["left_reproduced"]) == pytest.approx(ndcg["ours"], abs=0.006)
    # the report counts this paper's cells of each table by verdict
    report = (tiny_dag / "reports" / "set_test_synthetic.md").read_text()
    cells = read_table(tiny_dag / "tables/settestk_synthetic.csv")
    kinds = [sum(c["verdict"].startswith(k) for c in cells) for k in ("within", "outside", "not comparable",
                                                                        "not reported", "reported only", "did not train")]
    assert "| `tables/settestk_synthetic.md` | " + " | ".join(map(str, kinds)) + " |" in report


def test_report_holds_the_tables_and_figures_and_runs_carry_provenance(tiny_dag):
    proc = snakemake(tiny_dag, "--configfile", "tiny.yaml", "--report", "report.html")
    html = (tiny_dag / "report.html").read_text(errors="replace")
    for name in ("table1_synthetic.html", "sgraf_t1_synthetic.html", "metric_learning_synthetic.png",
                 "sgraf_saf_weights_synthetic.png", "reproduced_vs_reported_synthetic.png", "summary_synthetic.html",
                 "claims_sgraf_synthetic.png", "reports/sgraf_synthetic.html"):
        assert name in html, f"{name} missing from the report ({proc.stderr[-500:]})"
    for path in (tiny_dag / "results/synthetic/runs").glob("*/seed*/eval_test.json"):
        run = json.loads(path.read_text())
        assert {"config_hash", "seed", "provenance", "wall_seconds"} <= set(run), path
        assert {"git_commit", "torch", "cuda", "cudnn", "device"} <= set(run["provenance"]), path
        assert run["wall_seconds"]["total"] > 0
        # the training job's environment and precision, as its train_log.json says
        log = json.loads((path.parent / "train_log.json").read_text())
        assert run["provenance"]["training"] == {**log["provenance"], "precision": log["precision"]}, path
    # each table row says where its models trained, and each report gathers them
    rows = read_table(tiny_dag / "tables" / "table1_synthetic.csv")
    assert all(r["environment"].startswith("trained with harness ") and ", cpu (" in r["environment"]
               and "numerics " in r["environment"] for r in rows)
    assert "## Environment" in (tiny_dag / "tables" / "table1_synthetic.md").read_text()
    assert "### Environment" in (tiny_dag / "reports" / "sgraf_synthetic.md").read_text()


def test_deviations_table_pairs_each_switch_with_the_source_row(tiny_dag):
    rows = read_table(tiny_dag / "tables" / "deviations_synthetic.csv")
    by_row = {}
    for r in rows:
        by_row.setdefault(r["row"], {})[r["metric"]] = r
    assert set(by_row) == {"source", "region_l2norm_feature", "batch_positives_same_image", "amp",
                           "set_embeddings_source", "set_embeddings_masked_padding"}
    sources = {"source": "source", "region_l2norm_feature": "source", "batch_positives_same_image": "source",
               "amp": "source", "set_embeddings_masked_padding": "set_embeddings_source"}
    for row_id, cells in by_row.items():
        rsum = cells["rsum"]
        if row_id.endswith("source"):   # (the set model's source trains with AMP, off on the CPU preset)
            assert rsum["compared_to"] == "" and ("training.amp" not in rsum["non_source_switches"]) == (row_id == "source")
            continue
        assert rsum["compared_to"] == sources[row_id]
        # one seed: the paired difference is the difference of the two runs
        source_rsum = float(by_row[sources[row_id]]["rsum"]["reproduced"])
        assert float(rsum["paired_difference"]) == pytest.approx(float(rsum["reproduced"]) - source_rsum, abs=0.011)
    assert "model.set_module.padding=masked (source: leak)" in by_row["set_embeddings_masked_padding"]["rsum"][
        "non_source_switches"]
    # on a CPU, AMP is off: the amp row is the source row's training, bit for bit
    assert float(by_row["amp"]["rsum"]["paired_difference"]) == 0.0
    assert "training.amp=True (source: False)" in by_row["amp"]["rsum"]["non_source_switches"]
    md = (tiny_dag / "tables" / "deviations_synthetic.md").read_text()
    assert "## What each row runs against its source code" in md and "stand_in_data" in md
    log = json.loads(next((tiny_dag / "results/synthetic/runs").glob("*/seed0/train_log.json")).read_text())
    assert log["precision"] == "fp32"


def test_runtime_table_lists_every_benchmarked_job(tiny_dag):
    rows = read_table(tiny_dag / "tables" / "runtime_synthetic.csv")
    tag_rows = read_table(tiny_dag / "tables" / "runtime_synthtags.csv")
    by_rule = {r["name"]: r for r in rows if r["grouping"] == "rule"}
    assert int(by_rule["train_synthetic"]["jobs"]) > 0 and float(by_rule["train_synthetic"]["wall_s"]) > 0
    assert "| train_synthetic |" in (tiny_dag / "tables" / "runtime_synthetic.md").read_text()
    assert {"synthetic_tags_source", "import_multilabel", "multilabel_precomp", "train_synthtags"} <= \
        {r["name"] for r in tag_rows if r["grouping"] == "rule"}
    # every job of the default DAG wrote a benchmark, and the two tables count each once (runtime's own apart)
    root = tiny_dag / "results" / "benchmarks"
    written = [p for p in root.rglob("*.tsv") if p.relative_to(root).parts[0] != "runtime"]
    totals = [next(r for r in t if r["grouping"] == "all") for t in (rows, tag_rows)]
    assert sum(int(total["jobs"]) for total in totals) == len(written)
    papers = [r for t in (rows, tag_rows) for r in t if r["grouping"] == "paper"]
    assert sum(int(r["jobs"]) for r in papers) == len(written)
    assert {"vsepp", "sgraf", "metric_learning", "shared"} <= {r["name"] for r in papers}


def test_synthetic_rows_say_what_ran_beside_the_paper_setting(tiny_dag):
    rows = {r["row"]: r for r in read_table(tiny_dag / "tables" / "table1_synthetic.csv")}
    assert rows["vsepp_resnet152_ft"]["label"].startswith("VSE++ (ResNet-152")
    assert rows["vsepp_resnet152_ft"]["ran"].startswith("ResNet-18 (synthetic pre-trained), CNN fine-tuned")
    assert re.match(r"\d+×\d+ RoIAlign regions of ResNet-18 \(synthetic pre-trained\) conv4", rows["sgraf_sgr"]["ran"])
    md = (tiny_dag / "tables" / "table1_synthetic.md").read_text()
    (note,) = [line for line in md.splitlines() if line.endswith(f"] ran: {rows['vsepp_resnet152_ft']['ran']}")]
    number = note.split("]")[0].removeprefix("- [")
    assert f"| {rows['vsepp_resnet152_ft']['label']} [{number}] |" in md


def test_set_embedding_statistics_views_ensembles_and_figures(tiny_dag):
    rows = read_table(tiny_dag / "tables" / "settest_synthetic.csv")
    cells = {(r["row"], r["protocol"], r["metric"]): r for r in rows}
    # the statistics of each single model's sets sit beside its metrics; a view and an ensemble have none
    for row in ("slots", "pie"):
        value = float(cells[(row, "set_statistics", "log_circular_variance")]["reproduced"])
        assert -20 < value < 0
    assert ("slots_element_1", "set_statistics", "log_circular_variance") not in cells
    assert ("slots_ensemble", "set_statistics", "log_circular_variance") not in cells
    spec = json.loads((tiny_dag / "results/synthetic/tables/settest.spec.json").read_text())
    members = {r["id"]: r["members"] for r in spec["rows"]}
    runs = tiny_dag / "results/synthetic/runs"
    # the CNN-grid row fine-tunes its CNN after the frozen stage; trained on masked captions, its
    # model has one token id past the vocabulary (<mask>), and its evaluation loaded it
    assert "conv5 grid, CNN fine-tuned" in {r["row"]: r for r in rows}["slots_grid"]["ran"]
    grid_run = runs / members["slots_grid"][0] / "seed0"
    log = json.loads((grid_run / "train_log.json").read_text())
    assert [h["stage"] for h in log["history"]] == ["frozen", "frozen", "finetune"] and log["best"]["finetuned"]
    vocab = json.loads((tiny_dag / "results/synthetic/vocab.json").read_text())
    assert torch.load(grid_run / "model.pt", weights_only=False)["vocab_size"] == len(vocab["idx2word"]) + 1
    # the view re-scores the slots row's own trained model with image element 1 only
    assert members["slots_element_1"] == members["slots"]
    view = json.loads((runs / members["slots"][0] / "seed0/eval_test@i0_tall.json").read_text())
    full = json.loads((runs / members["slots"][0] / "seed0/eval_test.json").read_text())
    assert view["view"] == "i0_tall" and view["config_hash"] == full["config_hash"]
    rsum = {r: float(cells[(r, "synthetic_test", "rsum")]["reproduced"]) for r in ("slots", "slots_element_1")}
    assert rsum["slots_element_1"] != rsum["slots"]
    # its own score matrix (read by the claims) scores as its table row
    view_sims = np.load(runs / members["slots"][0] / "seed0/sims_test@i0_tall.npy")
    assert rsum["slots_element_1"] == pytest.approx(retrieval_metrics(view_sims)["rsum"], abs=0.006)
    # the two-seed ensemble averages seeds 0 and 1000 of the same config
    sims = (np.load(runs / members["slots"][0] / "seed0/sims_test.npy")
            + np.load(runs / members["slots"][0] / "seed1000/sims_test.npy")) / 2
    assert float(cells[("slots_ensemble", "synthetic_test", "rsum")]["reproduced"]) == pytest.approx(
        retrieval_metrics(sims)["rsum"], abs=0.006)
    import matplotlib.image

    for figure in ("settest_settings", "settest_elements"):
        image = matplotlib.image.imread(tiny_dag / "figures" / f"{figure}_synthetic.png")
        assert image.shape[1] >= 600 and image[..., :3].std() > 0.05   # drawn, not blank


def test_dry_run_of_set_embeddings_table1_on_configured_coco(tiny_dag):
    """Our rows (regions and CNN grid, 3 seeds each, and the two-seed ensemble's second members)
    beside the VSE++, SCAN, SGRAF, VSE-infinity, PVSE, PCME and VSRN† baselines; the COCO ids of the 5K test images are checked when the DAG is built."""
    src = tiny_dag / "results/synthetic"
    coco = flickr_layout(src / "data", src / "precomp", tiny_dag / "coco_set_layout", 5000, test_split="testall")
    coco["splits"] = {"train": ["train"], "dev": ["val"], "testall": ["test"]}
    weights = fitting_weights(tiny_dag / "resnet152.pth", "resnet152")
    papers = yaml.safe_load((tiny_dag / "tiny.yaml").read_text())["papers"] + ["methods/papers/set_embeddings.yaml"]
    config = {"datasets": {"coco": coco}, "papers": papers,
              "backbones": {"resnet152": {"arch": "resnet152", "weights": str(weights)}}}
    write_text(tiny_dag / "coco_set.yaml", yaml.safe_dump(config))
    proc = snakemake(tiny_dag, "--configfile", "tiny.yaml", "coco_set.yaml", "-n", "tables/set_embeddings_t1_coco.csv")
    counts = job_counts(proc)
    # ... VSE-infinity's, PVSE's, PCME's and IMRAM's rows (3 seeds each), VSRN†'s and NAAF†'s two
    # members (3 seeds); the released rows have no keys set here, so they are left out
    assert counts["train_coco"] == 3 + 3 + 6 + 6 + 3 + 3 + 3 + 3 + 3 + 6 + 3 + 6 and counts["ensemble"] == 15
    assert counts["aggregate_row"] == 12
    assert "set datasets.coco.released.pcme_coco" in proc.stdout + proc.stderr
    # PCME's two released COCO models (the fixture written by naver-ai/pcme's code) import and evaluate, nothing trains
    fixtures = REPO / "tests" / "data" / "released" / "pcme"
    released = {**config, "datasets": {"coco": {**coco, "released": {
        "pcme_coco": str(fixtures / "pcme_coco.pth"), "pcme_cutmix_coco": str(fixtures / "pcme_coco.pth"),
        "pcme_vocab": str(fixtures / "coco_vocab.pkl")}}}}
    write_text(tiny_dag / "coco_set_released.yaml", yaml.safe_dump(released))
    with_released = job_counts(snakemake(tiny_dag, "--configfile", "tiny.yaml", "coco_set_released.yaml", "-n",
                                         "tables/set_embeddings_t1_coco.csv"))
    assert with_released["evaluate_released_coco"] == 2 and with_released["train_coco"] == counts["train_coco"]
    # an image out of the COCO 5K order is named by its row before any job
    karpathy = json.loads(open(coco["karpathy_json"]).read())
    test = [e for e in karpathy["images"] if e["split"] == "test"]
    test[3]["cocoid"], test[4]["cocoid"] = test[4]["cocoid"], test[3]["cocoid"]
    swapped = tiny_dag / "coco_set_layout" / "swapped.json"
    swapped.write_text(json.dumps(karpathy))
    config["datasets"]["coco"]["karpathy_json"] = str(swapped)
    write_text(tiny_dag / "coco_set_swapped.yaml", yaml.safe_dump(config))
    proc = snakemake(tiny_dag, "--configfile", "tiny.yaml", "coco_set_swapped.yaml", "-n",
                     "tables/set_embeddings_t1_coco.csv", check=False)
    assert proc.returncode != 0 and "row 3 is COCO image" in proc.stdout + proc.stderr


def test_dry_run_of_the_resnext_bert_block_plans_its_rows_once_both_keys_are_set(tiny_dag):
    """With a BERT folder and the WSL weights configured, set-embedding Table 1's ResNeXt-101 + BERT
    block is trained: VSE-infinity and ours, 3 seeds each and their ensembles' second members,
    on the captions tokenised once with that BERT; unset, the same target plans none of them."""
    src = tiny_dag / "results/synthetic"
    coco = flickr_layout(src / "data", src / "precomp", tiny_dag / "coco_bert_layout", 5000, test_split="testall")
    coco["splits"] = {"train": ["train"], "dev": ["val"], "testall": ["test"]}
    papers = yaml.safe_load((tiny_dag / "tiny.yaml").read_text())["papers"] + ["methods/papers/set_embeddings.yaml"]
    config = {"datasets": {"coco": coco}, "papers": papers, "backbones": {
        "resnet152": {"arch": "resnet152", "weights": str(fitting_weights(tiny_dag / "resnet152.pth", "resnet152"))}}}
    write_text(tiny_dag / "coco_unset.yaml", yaml.safe_dump(config))
    unset = job_counts(snakemake(tiny_dag, "--configfile", "tiny.yaml", "coco_unset.yaml", "-n",
                                 "tables/set_embeddings_t1_coco.csv"))
    wsl = fitting_weights(tiny_dag / "ig_resnext101_32x8.pth", "resnext101_32x8d")
    config["backbones"]["resnext101_wsl"] = {"arch": "resnext101_32x8d", "weights": str(wsl), "optional": True}
    # the DAG's tiny BERT read as a user's folder (config.json, vocab.txt, model.safetensors)
    config["text_encoders"] = {"bert_base_uncased": {"kind": "bert", "path": str(src / "text_encoders/bert_synthetic")}}
    write_text(tiny_dag / "coco_bert.yaml", yaml.safe_dump(config))
    counts = job_counts(snakemake(tiny_dag, "--configfile", "tiny.yaml", "coco_bert.yaml", "-n",
                                  "tables/set_embeddings_t1_coco.csv"))
    assert counts["train_coco"] - unset["train_coco"] == 2 * (3 + 3)   # VSE-infinity and ours: seeds, second members
    assert counts["ensemble"] - unset["ensemble"] == 2 * 3 and counts["aggregate_row"] - unset["aggregate_row"] == 4
    assert counts["wordpiece_captions"] == 1 and "wordpiece_captions" not in unset


def test_every_figure_of_the_tiny_dag_passes_the_layout_check(tiny_dag):
    """No figure job found text outside its canvas, text over text or a legend over data
    (methods.report.figure_layout prints each problem as a `layout:` line in the job's log)."""
    logs = tiny_dag / "results" / "logs"
    figure_logs = [*(logs / "figure").glob("*.log"), *(logs / "claims_figure").glob("*.log")]
    assert len(figure_logs) >= 10
    problems = [line for p in figure_logs for line in p.read_text(errors="replace").splitlines()
                if line.startswith("layout:")]
    assert problems == []


def test_the_bert_row_trains_on_the_tiny_bert_the_dag_pretrained(tiny_dag):
    from safetensors.torch import load_file
    spec = json.loads((tiny_dag / "results/synthetic/tables/berttest.spec.json").read_text())
    rows = {r["id"]: r for r in spec["rows"]}
    assert "BERT bert_synthetic -> 128 (lr x0.1)" in rows["bert"]["ran"]
    folder = tiny_dag / "results/synthetic/text_encoders/bert_synthetic"
    pieces = (folder / "vocab.txt").read_text().splitlines()
    captions = json.loads((tiny_dag / "results/synthetic/text/bert_synthetic.json").read_text())
    karpathy = json.loads((tiny_dag / "results/synthetic/data/dataset_synthetic.json").read_text())
    every = {s["raw"] for img in karpathy["images"] for s in img["sentences"]}
    assert captions["kind"] == "wordpiece" and set(captions["tokenized_captions"]) == every   # every split's
    run = tiny_dag / "results/synthetic/runs" / rows["bert"]["members"][0] / "seed0"
    state = torch.load(run / "model.pt", weights_only=True)["state_dict"]
    pretrained = load_file(str(folder / "model.safetensors"))
    trained = state["text.bert.embeddings.word_embeddings.weight"]
    start = pretrained["bert.embeddings.word_embeddings.weight"]
    assert trained.shape == start.shape == (len(pieces), 32)
    assert not torch.equal(trained, start)   # fine-tuned from the folder's weights, at a tenth of the rate
    assert (trained - start).abs().max() < 0.1
    ev = json.loads((run / "eval_test.json").read_text())
    recomputed = retrieval_metrics(np.load(run / "sims_test.npy"))
    assert ev["results"][0]["metrics"]["rsum"] == pytest.approx(recomputed["rsum"])
    # the grid row: the synthetic CNN frozen in its first epoch, fine-tuned in its second (the loss
    # ramped), its BatchNorm statistics kept; evaluated on the squashed images through that CNN
    assert "ResNet-18 (synthetic pre-trained) last-map grid at 64×64 px, CNN fine-tuned (lr x0.01)" in rows["bert_grid"]["ran"]
    grid_run = tiny_dag / "results/synthetic/runs" / rows["bert_grid"]["members"][0] / "seed0"
    log = json.loads((grid_run / "train_log.json").read_text())
    assert [h["epoch"] for h in log["history"]] == [1, 2] and log["best"]["finetuned"]
    cnn = torch.load(tiny_dag / "results/synthetic/backbones/resnet18_synthetic.pt", weights_only=True)
    grid_state = torch.load(grid_run / "model.pt", weights_only=True)["state_dict"]
    names = {"conv1.weight": "backbone.stem.0.weight", "bn1.running_mean": "backbone.stem.1.running_mean",
             "layer4.1.conv2.weight": "backbone.layer4.1.conv2.weight"}
    if log["best"]["epoch"] == 2:
        assert not torch.equal(grid_state[names["conv1.weight"]], cnn["conv1.weight"])
        assert not torch.equal(grid_state[names["layer4.1.conv2.weight"]], cnn["layer4.1.conv2.weight"])
    else:   # the frozen epoch was kept: the CNN is the pre-trained one
        assert torch.equal(grid_state[names["layer4.1.conv2.weight"]], cnn["layer4.1.conv2.weight"])
    assert torch.equal(grid_state[names["bn1.running_mean"]], cnn["bn1.running_mean"])
    grid_ev = json.loads((grid_run / "eval_test.json").read_text())
    assert grid_ev["results"][0]["metrics"]["rsum"] == pytest.approx(retrieval_metrics(np.load(grid_run / "sims_test.npy"))["rsum"])
    # the set-embedding row (selection: the last epoch): its CNN frozen in epoch 1 and trained in
    # epochs 2-3 at x0.01 with its BatchNorm statistics fixed, its BERT fine-tuned at the full rate
    assert ("ResNet-18 (synthetic pre-trained) conv5 grid at 64×64 px, CNN fine-tuned (lr x0.01, frozen in epoch 1)"
            in rows["set_bert_grid"]["ran"]) and "text global max_tokens" in rows["set_bert_grid"]["ran"]
    set_run = tiny_dag / "results/synthetic/runs" / rows["set_bert_grid"]["members"][0] / "seed0"
    set_log = json.loads((set_run / "train_log.json").read_text())
    assert [h["epoch"] for h in set_log["history"]] == [1, 2, 3] and set_log["best"]["epoch"] == 3
    set_state = torch.load(set_run / "model.pt", weights_only=True)["state_dict"]
    assert not torch.equal(set_state[names["layer4.1.conv2.weight"]], cnn["layer4.1.conv2.weight"])
    assert torch.equal(set_state[names["bn1.running_mean"]], cnn["bn1.running_mean"])
    assert not torch.equal(set_state["text.bert.embeddings.word_embeddings.weight"], start)
    set_ev = json.loads((set_run / "eval_test.json").read_text())
    assert set_ev["results"][0]["metrics"]["rsum"] == pytest.approx(retrieval_metrics(np.load(set_run / "sims_test.npy"))["rsum"])
