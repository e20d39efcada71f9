"""The runtime table (methods.report.runtime) on hand-written Snakemake benchmark files, with the
sums worked by hand."""
import csv
import json
import re

import pytest

from methods.config import REPO_ROOT, load_harness_config
from methods.errors import HarnessError
from methods.job_records import RuntimeJobSpec, RuntimeSpec
from methods.plan import Plan
from methods.report import runtime
from tests.conftest import snakemake

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def tsv(tmp_path, name: str, *lines: str) -> str:
    """A benchmark TSV as Snakemake writes it: the header, then one line per measured run."""
    path = tmp_path / "benchmarks" / f"{name}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "".join(line + "\n" for line in lines))
    return str(path)


@pytest.fixture
def spec(tmp_path):
    """Six jobs of two papers. Wall s, CPU s, max RSS MB per job:
    generate      10.5    9.0   300    dataset job: shared
    train a      100.25 180.5  1200    paper pa
    train b       50.0    NA     NA    paper pb, over before the first sample
    train ab      60.0  110.0   900    both papers: shared
    evaluate a     5.0 +  7.0 (two lines, repeat): 12.0, 4.5 + 6.5 = 11.0, max(500, 650) = 650, paper pa
    table ab       0.4    NA     NA    both papers: shared
    """
    jobs = [
        ("generate_synthetic", tsv(tmp_path, "generate", "10.5000\t0:00:10\t300.00\t900.00\t280.00\t290.00\t1.00\t20.00\t85.00\t9.00"), []),
        ("train", tsv(tmp_path, "train_a", "100.2500\t0:01:40\t1200.00\t3000.00\t1100.00\t1150.00\t10.00\t5.00\t180.00\t180.50"), ["pa"]),
        ("train", tsv(tmp_path, "train_b", "50.0000\t0:00:50\tNA\tNA\tNA\tNA\tNA\tNA\tNA\tNA"), ["pb"]),
        ("train", tsv(tmp_path, "train_ab", "60.0000\t0:01:00\t900.00\t2000.00\t850.00\t870.00\t-\t-\t183.00\t110.00"), ["pa", "pb"]),
        ("evaluate", tsv(tmp_path, "evaluate_a", "5.0000\t0:00:05\t500.00\t1000.00\t450.00\t460.00\t1.00\t1.00\t90.00\t4.50",
                         "7.0000\t0:00:07\t650.00\t1100.00\t600.00\t610.00\t1.00\t1.00\t93.00\t6.50"), ["pa"]),
        ("table", tsv(tmp_path, "table_ab", "0.4000\t0:00:00\tNA\tNA\tNA\tNA\tNA\tNA\tNA\tNA"), ["pa", "pb"]),
    ]
    return RuntimeSpec.from_json(
        {"dataset": "toy", "rules": ["generate_synthetic", "vocab", "train", "evaluate", "ensemble", "table"],
         "papers": [["pb", "Paper B (2021)"], ["pa", "Paper A (2020)"]],   # config order, not sorted
         "jobs": [{"rule": r, "file": f, "papers": p} for r, f, p in jobs]}, "runtime.spec.json")


def lines_of(table, grouping):
    return {r["name"]: r for r in table[table["grouping"] == grouping].to_dict(orient="records")}


def test_sums_per_rule_worked_by_hand(spec):
    table = runtime.build(spec)
    rules = lines_of(table, "rule")
    assert list(rules) == ["generate_synthetic", "train", "evaluate", "table"]  # pipeline order, rules with jobs
    train = rules["train"]
    assert (train["jobs"], train["wall_s"], train["max_wall_s"], train["cpu_s"], train["max_rss_mb"],
            train["unsampled_jobs"]) == (3, 210.25, 100.25, 290.5, 1200.0, 1)
    assert train["mean_wall_s"] == pytest.approx(210.25 / 3)
    evaluate = rules["evaluate"]  # two lines of one job: one job, its runs added up
    assert (evaluate["jobs"], evaluate["wall_s"], evaluate["cpu_s"], evaluate["max_rss_mb"]) == (1, 12.0, 11.0, 650.0)
    table_rule = rules["table"]   # no sample at all: CPU s and RSS missing, not 0
    assert table_rule["wall_s"] == 0.4 and pd_isna(table_rule["cpu_s"]) and pd_isna(table_rule["max_rss_mb"])
    total = lines_of(table, "all")["all jobs"]
    assert (total["jobs"], total["wall_s"], total["max_wall_s"], total["cpu_s"], total["max_rss_mb"],
            total["unsampled_jobs"]) == (6, pytest.approx(233.15), 100.25, 310.5, 1200.0, 2)


def pd_isna(value) -> bool:
    return value != value  # NaN


def test_sums_per_paper_count_shared_jobs_once(spec):
    table = runtime.build(spec)
    papers = lines_of(table, "paper")
    assert list(papers) == ["pb", "pa", "shared"]
    pa, pb, shared = papers["pa"], papers["pb"], papers["shared"]
    assert (pa["jobs"], pa["wall_s"], pa["cpu_s"], pa["max_rss_mb"]) == (2, 112.25, 191.5, 1200.0)
    assert pa["title"] == "Paper A (2020)" and pa["jobs_by_rule"] == "train 1, evaluate 1"
    assert (pb["jobs"], pb["wall_s"], pb["unsampled_jobs"]) == (1, 50.0, 1) and pd_isna(pb["cpu_s"])
    assert (shared["jobs"], shared["wall_s"], shared["cpu_s"], shared["max_rss_mb"]) == \
        (3, pytest.approx(70.9), 119.0, 900.0)
    assert shared["jobs_by_rule"] == "generate_synthetic 1, train 1, table 1"
    # every job is on exactly one paper line: the paper lines add up to the total
    assert pa["wall_s"] + pb["wall_s"] + shared["wall_s"] == pytest.approx(lines_of(table, "all")["all jobs"]["wall_s"])


def test_command_writes_csv_and_markdown(tmp_path, spec):
    spec_path = tmp_path / "runtime.spec.json"
    spec_path.write_text(json.dumps(spec.to_json()))
    out_csv, out_md = tmp_path / "runtime_toy.csv", tmp_path / "runtime_toy.md"
    runtime.main(["--spec", str(spec_path), "--out-csv", str(out_csv), "--out-md", str(out_md)])
    with open(out_csv) as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == runtime.COLUMNS
    by_name = {(r["grouping"], r["name"]): r for r in rows}
    train = by_name[("rule", "train")]
    assert (train["jobs"], train["wall_s"], train["mean_wall_s"], train["cpu_s"], train["max_rss_mb"]) == \
        ("3", "210.25", "70.08", "290.5", "1200.0")
    assert by_name[("rule", "table")]["cpu_s"] == "" and by_name[("paper", "pb")]["cpu_s"] == ""
    assert by_name[("all", "all jobs")]["wall_s"] == "233.15"
    md = out_md.read_text()
    assert "Sum of job wall times: 233.2 s (0:03:53)" in md
    assert "exceed the DAG's wall time when jobs run in parallel" in md
    assert "| train | 3 | 210.2 | 70.1 | 100.2 | 290.5 | 1200.0 | 1 |" in md
    assert "| table | 1 | 0.4 | 0.4 | 0.4 | – | – | 1 |" in md
    assert "| Paper A (2020) (`pa`) | 2 | 112.2 | 191.5 | 1200.0 | 0 | train 1, evaluate 1 |" in md
    assert "| shared | 3 | 70.9 | 119.0 | 900.0 | 1 | generate_synthetic 1, train 1, table 1 |" in md
    assert md.count("| all jobs | 6 | 233.2 |") == 2   # under both tables


def test_a_malformed_benchmark_is_a_clear_error(tmp_path, spec):
    bad = tmp_path / "benchmarks" / "bad.tsv"
    bad.write_text("wall\n1.0\n")
    spec.jobs.append(RuntimeJobSpec(rule="train", file=str(bad), papers=["pa"]))
    with pytest.raises(HarnessError, match=r"bad.tsv: expected a header with s, max_rss, cpu_time"):
        runtime.build(spec)
    spec.jobs[-1] = RuntimeJobSpec(rule="train", file=str(tmp_path / "missing.tsv"), papers=["pa"])
    with pytest.raises(HarnessError, match=r"missing.tsv: cannot read it"):
        runtime.build(spec)


def test_a_paper_table_named_runtime_is_refused(tmp_path):
    """tables/runtime_<dataset>.* are the runtime tables: no paper table may take that name."""
    paper = tmp_path / "p.yaml"
    paper.write_text(
        "paper: t\nkey: t\nmethods: {vsrn: config/methods/vsrn.yaml}\n"
        "tables:\n  runtime:\n    title: t\n    datasets: [synthetic]\n"
        "    rows: [{id: r, label: r, method: vsrn, seeds: [0]}]\n")
    cfg = load_harness_config(REPO_ROOT / "config" / "config.yaml", {"papers": [str(paper)]})
    with pytest.raises(HarnessError, match="table name 'runtime' is taken by the runtime tables"):
        Plan(cfg)


CONFIG_WRITERS = {"dataset_config", "experiment_config", "table_spec", "figure_spec", "claims_spec", "report_spec",
                  "summary_spec", "runtime_spec", "all"}


def dry_run_jobs(workdir, *targets) -> list[dict]:
    """The jobs of a dry run: rule, benchmark file (None without one) and inputs."""
    proc = snakemake(workdir, "-n", *targets, "--configfile", "tiny.yaml")
    jobs = []
    for block in re.split(r"\n(?=\[[^\n]*\]\n(?:local)?rule )", proc.stdout + proc.stderr):
        rule = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        if rule:
            bench = re.search(r"^    benchmark: (.+)$", block, re.M)
            inputs = re.search(r"^    input: (.+)$", block, re.M)
            jobs.append({"rule": rule.group(1), "benchmark": bench.group(1).strip() if bench else None,
                         "input": inputs.group(1).split(", ") if inputs else []})
    return jobs


@pytest.mark.e2e
@pytest.mark.xdist_group("tiny_dag_folder")
def test_the_runtime_tables_list_the_benchmark_of_every_job_of_the_default_targets(tiny_dag):
    """The tiny DAG, run: every job but the config writers has a benchmark, and the jobs its two
    runtime tables list (read from the DAG before any job started) are exactly the benchmark files
    of the default targets' other jobs, each once (a dry run of them all, forced)."""
    jobs = dry_run_jobs(tiny_dag, "--forceall")
    assert not [j["rule"] for j in jobs if j["benchmark"] is None and j["rule"] not in CONFIG_WRITERS]
    # one runtime table per dataset whose data the DAG makes (synthetic, and the tags made from it)
    runtime_jobs = [j for j in jobs if j["rule"] == "runtime"]
    assert len(runtime_jobs) == 2
    (all_job,) = [j for j in jobs if j["rule"] == "all"]
    others = [t for t in all_job["input"] if not t.startswith("tables/runtime_")]
    without_runtime = {j["benchmark"] for j in dry_run_jobs(tiny_dag, "--forceall", *others) if j["benchmark"]}
    listed = [job["file"] for dataset in ("synthetic", "synthtags")
              for job in json.loads((tiny_dag / "results" / dataset / "runtime.spec.json").read_text())["jobs"]]
    assert without_runtime and set(listed) == without_runtime and len(listed) == len(set(listed))   # each job once
