"""Results for a lab: on a machine with several GPUs each local job gets a GPU of its own; the
SLURM profile sends jobs without a GPU to the CPU partition (or runs them on the submit host);
and a retry re-runs only a failure a retry can pass, never a bad config or input."""
import logging
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
from snakemake_executor_plugin_slurm.partitions import get_best_partition, read_partition_file

from methods import runtime
from methods.errors import HarnessError, run_cli
from methods.retries import FAILED_JOBS_ENV, failed_jobs_dir, failure_record
from methods.training.loop import Preempted
from tests.conftest import REPO, copy_workflow, snakemake

# --- one GPU per local job -------------------------------------------------------------------


def test_two_claims_get_different_gpus_and_a_released_one_is_reused(tmp_path):
    first = runtime.try_claim_gpu(tmp_path, 2)
    second = runtime.try_claim_gpu(tmp_path, 2)
    assert (first.index, second.index) == (0, 1)
    assert runtime.try_claim_gpu(tmp_path, 2) is None  # all claimed
    first.release()
    again = runtime.try_claim_gpu(tmp_path, 2)
    assert again.index == 0
    again.release()
    second.release()


def test_when_every_gpu_is_claimed_a_job_waits_for_one_to_be_released(tmp_path):
    held = [runtime.try_claim_gpu(tmp_path, 2) for _ in range(2)]
    said, waits = [], []

    def sleep(seconds):  # the other job ends while this one waits
        waits.append(seconds)
        held[1].release()

    claim = runtime.claim_gpu(tmp_path, 2, poll_seconds=7.0, sleep=sleep, say=said.append)
    assert claim.index == 1 and waits == [7.0]
    assert said == [f"all 2 GPUs are claimed by other jobs (locks in {tmp_path}); waiting for one to be released"]
    claim.release()
    held[0].release()


HOLDER = """
import fcntl, sys
lock = open(sys.argv[1] + "/gpu0.lock", "a")
fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("holding", flush=True)
sys.stdin.read()  # hold GPU 0 until killed
"""


def test_a_claim_of_another_process_is_respected_and_freed_when_it_is_killed(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        mine = runtime.try_claim_gpu(tmp_path, 2)
        assert mine.index == 1
        mine.release()
    finally:
        holder.kill()
        holder.wait()
    after = runtime.try_claim_gpu(tmp_path, 2)
    assert after.index == 0  # a killed job's lock goes with its process
    after.release()


@pytest.fixture
def four_gpus(tmp_path, monkeypatch):
    """A machine with four GPUs, as torch (NVML) would count them, and a fresh claims folder."""
    monkeypatch.setattr(runtime.torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(runtime.torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(runtime, "GPU_CLAIMS_DIR", tmp_path / "claims")
    monkeypatch.setattr(runtime, "_GPU_CLAIM", None)
    yield tmp_path / "claims"
    if runtime._GPU_CLAIM is not None:
        runtime._GPU_CLAIM.release()


def test_a_local_job_on_a_multi_gpu_machine_sets_cuda_visible_devices_to_a_free_gpu(four_gpus):
    others = [runtime.try_claim_gpu(four_gpus, 4) for _ in range(2)]  # two jobs already running
    env = {}
    assert runtime.claim_local_gpu(env) == 2
    assert env == {"CUDA_VISIBLE_DEVICES": "2"}
    for claim in others:
        claim.release()


@pytest.mark.parametrize("env", [{"CUDA_VISIBLE_DEVICES": "3"}, {"SLURM_JOB_ID": "123"}])
def test_gpus_given_by_slurm_or_the_user_are_left_alone(four_gpus, env):
    before = dict(env)
    assert runtime.claim_local_gpu(env) is None
    assert env == before
    assert not four_gpus.exists()


def test_a_cpu_job_claims_no_gpu(four_gpus, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert runtime.resolve_device("cpu").type == "cpu"
    assert runtime._GPU_CLAIM is None and not four_gpus.exists()


# --- retries: only what a retry can pass ------------------------------------------------------


def run_entry_point(fn, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        run_cli(fn)
    assert exit_info.value.code == 2
    return capsys.readouterr().err.strip()


def test_a_retry_of_a_bad_input_stops_at_once_with_the_same_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(FAILED_JOBS_ENV, str(tmp_path / "run1"))
    calls = []

    def job():
        calls.append(1)
        raise HarnessError("results/synthetic/dataset.json: missing key 'splits'")

    assert run_entry_point(job, capsys) == "error: results/synthetic/dataset.json: missing key 'splits'"
    assert run_entry_point(job, capsys) == (
        "error: results/synthetic/dataset.json: missing key 'splits' (not retried: this job failed the same way "
        "in an earlier attempt of this snakemake run (a bad config or input fails every time); fix it and run "
        "snakemake again)")
    assert calls == [1]  # the retry computed nothing
    monkeypatch.setenv(FAILED_JOBS_ENV, str(tmp_path / "run2"))  # a new `snakemake` call tries again
    run_entry_point(job, capsys)
    assert calls == [1, 1]


def test_a_preempted_job_is_retried(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(FAILED_JOBS_ENV, str(tmp_path / "run"))
    calls = []

    def job():
        calls.append(1)
        if len(calls) == 1:
            raise Preempted("received SIGUSR1: checkpoint written at stage 'train' epoch 2; re-run to resume")

    assert run_entry_point(job, capsys).startswith("error: received SIGUSR1: checkpoint written")
    run_cli(job)  # the retry resumes
    assert calls == [1, 1]
    assert not (tmp_path / "run").exists()


def test_a_command_typed_by_hand_records_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(FAILED_JOBS_ENV, raising=False)
    assert failure_record(["python", "-m", "methods.train"]) is None
    calls = []

    def job():
        calls.append(1)
        raise HarnessError("bad input")

    run_entry_point(job, capsys)
    run_entry_point(job, capsys)
    assert calls == [1, 1]


def test_the_record_names_the_job_by_its_command_line(tmp_path):
    env = {FAILED_JOBS_ENV: str(tmp_path / "20260101T000000-1")}
    train_seed0 = failure_record(["train.py", "--seed", "0"], env)
    assert train_seed0 == failure_record(["train.py", "--seed", "0"], env)
    assert train_seed0 != failure_record(["train.py", "--seed", "1"], env)
    assert train_seed0.parent == tmp_path / "20260101T000000-1"


def test_the_snakemake_process_itself_records_nothing(tmp_path):
    """An entry point called inside the process that parsed the Snakefile (the API) is no job."""
    assert failure_record(["ipykernel"], {FAILED_JOBS_ENV: failed_jobs_dir(tmp_path)}) is None


INTERRUPTED_ONCE = """
import sys
from pathlib import Path
from methods.errors import run_cli
from methods.training.loop import Preempted

def job():
    calls = Path(sys.argv[1])
    calls.write_text(calls.read_text() + "x" if calls.exists() else "x")
    if len(calls.read_text()) == 1:
        raise Preempted("received SIGTERM: checkpoint written; re-run the same target to resume")
    Path(sys.argv[2]).write_text("done")

run_cli(job)
"""


@pytest.mark.e2e
def test_snakemake_retries_a_preempted_job_but_not_a_bad_input(tmp_path):
    work = copy_workflow(tmp_path)
    (work / "interrupted_once.py").write_text(INTERRUPTED_ONCE)
    (work / "bad_eval.json").write_text("{not json")
    (work / "Snakefile.retries").write_text(textwrap.dedent("""\
        configfile: "config/config.yaml"
        include: "workflow/rules/common.smk"

        rule all:
            input: "row.json", "resumed.txt"

        rule bad_input:
            input: "bad_eval.json"
            output: "row.json"
            log: "bad_input.log"
            shell: "python -m methods.report.aggregate --out {output} {input} > {log} 2>&1"

        rule preempted:
            output: "resumed.txt"
            log: "preempted.log"
            shell: "python interrupted_once.py calls.txt {output} > {log} 2>&1"
        """))
    proc = snakemake(work, "-s", "Snakefile.retries", "--retries", "1", "--keep-going", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert len(re.findall(r"Trying to restart job", out)) == 2, out[-3000:]
    # the bad input: its retry printed the first attempt's line and computed nothing
    assert re.fullmatch(r"error: bad_eval\.json\S* .*\(not retried: this job failed the same way in an earlier "
                        r"attempt of this snakemake run .*\)\n", (work / "bad_input.log").read_text())
    assert not (work / "row.json").exists()
    # the preempted job: run twice, the retry finished it
    assert (work / "calls.txt").read_text() == "xx"
    assert (work / "resumed.txt").read_text() == "done"


# --- SLURM: jobs without a GPU never wait for the GPU partition ---------------------------------

# Every rule of the tiny DAG and where the SLURM profile must run it: `gpu` on the GPU partition of
# the profile's partitions.yaml, `cpu` on its CPU partition, `local` on the submit host. The
# built-in data run portable numerics, on the CPU: their training, features and evaluations ask
# for no GPU.
EXPECTED_PLACEMENT = {
    "generate_synthetic": "cpu", "vocab": "cpu", "region_features": "cpu", "ensemble": "cpu",
    "synthetic_tags_source": "cpu", "import_multilabel": "cpu", "multilabel_precomp": "cpu",
    "multilabel_region_classes": "cpu", "train_synthtags": "cpu",
    "pretrain_backbone": "cpu", "pretrain_text_encoder": "cpu", "wordpiece_captions": "cpu",
    "features_synthetic": "cpu", "train_synthetic": "cpu", "evaluate_views_*": "cpu",
    "dataset_config": "local", "experiment_config": "local", "aggregate_row": "local", "table_spec": "local",
    "table": "local", "figure_spec": "local", "paper_figure": "local", "figure_reproduced_vs_reported": "local",
    "runtime": "local", "claims": "cpu", "claims_spec": "local", "claims_figure": "local",
    "report_spec": "local", "reproduction_report": "local", "paper_page": "local", "summary_spec": "local",
    "summary": "local",
}
# local rules the default job plans no job of: the tables of the authors' released weights (none on
# the built-in data); their import-and-evaluate rules (evaluate_released_<dataset>) run where training does
RELEASED_LOCAL = {"released_rows_table_spec", "released_rows_table"}
PROFILE = REPO / "workflow" / "profiles" / "slurm"


def planned_jobs(dry_run_output: str) -> list[tuple[str, dict]]:
    """(rule, resources) of every job a dry run lists but the target rule `all` (which runs nothing)."""
    jobs = []
    for block in re.split(r"\n(?=rule \w+:\n)", dry_run_output):
        head = re.match(r"rule (\w+):\n", block)
        if head and head.group(1) != "all":
            found = re.search(r"^\s+resources: (.*)$", block, re.M)
            jobs.append((head.group(1), dict(kv.split("=", 1) for kv in found.group(1).split(", "))))
    return jobs


class PlannedJob:
    """What the SLURM plugin's partition selection reads of a job: its name, resources and threads."""

    class Resources(dict):
        __getattr__ = dict.get

    def __init__(self, rule: str, resources: dict):
        self.name, self.threads = rule, 1
        self.resources = self.Resources({k: int(v) if v.isdigit() else v.strip("'") for k, v in resources.items()})


@pytest.mark.e2e
def test_slurm_profile_sends_jobs_without_a_gpu_to_the_cpu_partition(tmp_path):
    """The profile names no partition for a job: the plugin picks one from partitions.yaml, by what
    the job asks for (its own selection code, on each planned job's resources)."""
    work = copy_workflow(tmp_path)
    shutil.copy(REPO / "tests" / "data" / "tiny.yaml", work / "tiny.yaml")
    # a dry run shows each job's resources but runs every rule locally: the local rules are read
    # from the parsed workflow
    (work / "Snakefile.placement").write_text(
        'include: "Snakefile"\nprint("local rules:", ",".join(sorted(workflow._localrules)))\n')
    proc = snakemake(work, "-s", "Snakefile.placement", "-n", "--workflow-profile", "workflow/profiles/slurm",
                     "--configfile=tiny.yaml", "all")
    out = proc.stdout + proc.stderr
    local_rules = set(re.search(r"^local rules: (.*)$", out, re.M).group(1).split(","))
    assert local_rules == {rule for rule, place in EXPECTED_PLACEMENT.items() if place == "local"} | RELEASED_LOCAL
    jobs = planned_jobs(out)
    # one view-evaluation rule per experiment with evaluation views (its name holds the experiment)
    jobs = [("evaluate_views_*" if rule.startswith("evaluate_views_") else rule, r) for rule, r in jobs]
    assert {rule for rule, _ in jobs} == set(EXPECTED_PLACEMENT)
    assert all("slurm_partition" not in resources for _, resources in jobs)   # no rule, no profile default names one
    partitions = read_partition_file(PROFILE / "partitions.yaml")
    assert {p.name for p in partitions} == {"gpu", "cpu"}
    logger = logging.getLogger("slurm-placement")
    for rule, resources in jobs:
        if EXPECTED_PLACEMENT[rule] != "local":
            job = PlannedJob(rule, resources)
            assert get_best_partition(partitions, job, logger) == EXPECTED_PLACEMENT[rule], (rule, resources)
            assert (job.resources.get("gpu", 0) > 0) == (EXPECTED_PLACEMENT[rule] == "gpu"), (rule, resources)
    # a job of real data asks for a GPU: only the GPU partition fits it
    assert get_best_partition(partitions, PlannedJob("train_flickr", {"gpu": "1", "runtime": "1440",
                                                                      "mem_mb": "32000"}), logger) == "gpu"
