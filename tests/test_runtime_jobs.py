"""The jobs behind a runtime table, read from a DAG (methods/plan/runtime_jobs.py), on a hand-built
DAG of the real plan's rows: each job is for the papers the jobs that need it are for, the
dataset's own jobs name none, a job of another dataset is left to that dataset's table, and a rule
the attribution has never seen is attributed by the same reading."""
import pytest

from methods.plan import Plan
from methods.plan.runtime_jobs import PlannedJob, attributed_papers, jobs_behind, runtime_spec
from tests.conftest import config_with_every_table


@pytest.fixture(scope="module")
def plan():
    return Plan(config_with_every_table())


class Job:
    """A stand-in for a Snakemake job: its rule, wildcards, benchmark and the jobs it reads from."""

    def __init__(self, rule, deps=(), benchmark=True, **wildcards):
        self.rule, self.deps, self.wildcards = rule, list(deps), wildcards
        self.benchmark = f"bench/{rule}/{'_'.join(wildcards.values())}.tsv" if benchmark else None


def describe(job):
    return PlannedJob(job.rule, job.wildcards, job.benchmark)


def dag(plan):
    """generate -> features -> train (one run of a VSE++ row and of a metric-learning row), a run
    both rows share, each row's aggregate, their tables, a paper report; a rule of one run that
    no code here names (rescore); and a job of another dataset (synthtags' source)."""
    vsepp = plan.row("table1", "synthetic", "vsepp_resnet152_ft")
    generate = Job("generate_synthetic", dataset="synthetic")
    other = Job("synthetic_tags_source", [generate], dataset="synthtags")
    features = Job("features_synthetic", [generate], backbone="r18", split="train")
    train_a = Job("train_synthetic", [features], exp=vsepp.members[0], seed="0")
    train_shared = Job("train_synthetic", [features], exp="shared-0000000000", seed="0")
    rescore = Job("rescore_synthetic", [train_a], exp=vsepp.members[0], seed="0")
    row_a = Job("aggregate_row", [rescore, train_shared], dataset="synthetic", table="table1", row=vsepp.id)
    row_b = Job("aggregate_row", [train_shared], dataset="synthetic", table="metric_learning",
                row="vsepp_triplet_sum")
    table = Job("table", [row_a], dataset="synthetic", table="table1")
    report = Job("reproduction_report", [table], dataset="synthetic", paper="metric_learning")
    config_writer = Job("experiment_config", benchmark=False, dataset="synthetic", exp="x-0000000000")
    root = Job("runtime", [table, row_b, report, other, config_writer], dataset="synthetic")
    return root, {j.rule + str(j.wildcards): j for j in (generate, other, features, train_a, train_shared, rescore,
                                                          row_a, row_b, table, report)}


def test_each_job_is_for_the_papers_of_the_jobs_that_need_it(plan):
    root, jobs = dag(plan)
    behind = jobs_behind(root, lambda j: j.deps, describe)
    papers = attributed_papers(plan, behind)
    by_rule = {}
    for key, job in behind.items():
        by_rule.setdefault(job.rule, []).append(papers[key])
    table1_papers = {r.paper for r in plan.table("table1", "synthetic").rows}
    assert by_rule["rescore_synthetic"] == [{"vsepp"}]           # a rule named nowhere in the attribution
    assert sorted(map(sorted, by_rule["train_synthetic"])) == [["metric_learning", "vsepp"], ["vsepp"]]
    assert by_rule["table"] == [table1_papers] and by_rule["reproduction_report"] == [{"metric_learning"}]
    assert by_rule["generate_synthetic"] == [set()] and by_rule["features_synthetic"] == [set()]


def test_the_spec_lists_each_benchmarked_job_of_its_dataset_once_in_rule_order(plan):
    root, jobs = dag(plan)
    order = ["generate_synthetic", "synthetic_tags_source", "features_synthetic", "train_synthetic",
             "rescore_synthetic", "experiment_config", "aggregate_row", "table", "reproduction_report"]
    spec = runtime_spec(plan, "synthetic", jobs_behind(root, lambda j: j.deps, describe), order)
    files = [j.file for j in spec.jobs]
    # every job with a benchmark, once (features is read by two runs), but synthtags' own job
    assert sorted(files) == sorted(j.benchmark for j in jobs.values() if j.rule != "synthetic_tags_source")
    assert [j.rule for j in spec.jobs] == sorted((j.rule for j in spec.jobs), key=order.index)
    assert "synthetic_tags_source" not in spec.rules and spec.rules[0] == "generate_synthetic"
    used = {"metric_learning"} | {r.paper for r in plan.table("table1", "synthetic").rows}
    assert [key for key, _ in spec.papers] == [p for p in plan.papers if p in used]
