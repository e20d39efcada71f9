"""The project's SLURM profile against a real (one-node) SLURM: slurmctld + slurmd started by
tests/slurm/start-local-slurm.sh on this machine. A small synthetic target goes through
``--executor slurm`` and must give exactly the numbers of the local run of the session DAG.
Skips, saying why, where SLURM cannot be started (not root, no apt, no daemons)."""
import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

START_SCRIPT = REPO / "tests" / "slurm" / "start-local-slurm.sh"
TARGET = "tables/resumetest_synthetic.csv"


@pytest.fixture(scope="module")
def local_slurm():
    if os.geteuid() != 0:
        pytest.skip("SLURM test: start-local-slurm.sh must run as root (it installs and starts munge, slurmctld, slurmd)")
    if shutil.which("bash") is None:
        pytest.skip("SLURM test: no bash")
    env = {**os.environ, "SLURM_LOCAL_FAKE_GPUS": "1"}  # the profile asks for --gpus=1 on training jobs
    try:
        proc = subprocess.run(["bash", str(START_SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        pytest.skip("SLURM test: start-local-slurm.sh did not finish within 600 s")
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    if proc.returncode != 0 or not any(line.startswith("SLURM READY") for line in lines):
        pytest.skip("SLURM test: SLURM could not be started here: " + " | ".join(lines[-3:]))
    return next(line for line in lines if line.startswith("SLURM READY"))


def read_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return [{k: r[k] for k in ("row", "protocol", "metric", "reproduced", "seeds", "ensemble_size")}
                for r in csv.DictReader(f)]


def test_slurm_profile_runs_a_target_on_a_real_cluster_with_local_results(local_slurm, tiny_dag, tmp_path):
    """The target's training job, its row and its table again, through sbatch, on a copy of the
    session DAG (everything upstream is up to date there: the data jobs are the DAG test's)."""
    work = tmp_path / "work"
    shutil.copytree(tiny_dag, work, symlinks=True)  # timestamps kept
    shutil.copy(REPO / "tests" / "data" / "slurm.yaml", work / "slurm.yaml")
    runs = sorted(p.parent for p in (work / "results/synthetic/runs").glob("sgraf-*/config.json")
                  if json.loads(p.read_text())["training"]["batch_size"] == 2)   # the target's one row
    assert len(runs) == 1, runs
    shutil.rmtree(runs[0])
    shutil.rmtree(work / "results/synthetic/rows/resumetest")   # the row's aggregate of the run's seeds
    for table in work.glob(TARGET.replace(".csv", ".*")):
        table.unlink()
    partitions = work / "partitions.yaml"
    partitions.write_text("partitions:\n  debug: {max_gpu: 1}\n")
    cmd = [sys.executable, "-m", "snakemake", "--workflow-profile", "workflow/profiles/slurm",
           "--configfile", "tiny.yaml", "slurm.yaml",
           # slurm.yaml's resources change the jobs' thread settings (their params), not their inputs:
           # only what is missing or out of date runs again
           "--rerun-triggers", "mtime",
           # the partitions of this cluster, as a site sets them (the profile's partitions.yaml; one
           # partition here, with the fake GPU): the plugin picks each job's; small default resources
           "--slurm-partition-config", str(partitions), "--default-resources", "mem_mb=1000", "runtime=10",
           "--slurm-init-seconds-before-status-checks", "5", "--seconds-between-status-checks", "3",
           "--latency-wait", "10", "--jobs", "2", TARGET]
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:  # the plugin keeps the SLURM logs of failed jobs only
        logs = sorted((work / ".snakemake" / "slurm_logs").rglob("*.log"))
        tails = "\n".join(f"--- {p}\n{p.read_text()[-1500:]}" for p in logs[-3:])
        raise AssertionError(f"snakemake --executor slurm failed ({local_slurm}):\n{proc.stderr[-5000:]}\n{tails}")
    # the jobs really went through sbatch, the training job among them, with the profile's signal request
    submitted = re.findall(r"has been submitted with SLURM jobid (\d+) \(log: \S*/slurm_logs/rule_(\w+)/", proc.stderr)
    assert "train_synthetic" in {rule for _, rule in submitted}, proc.stderr[-3000:]
    assert re.search(r"slurm_extra='?--signal=USR1@300", proc.stderr)   # the training rules' request
    assert "Auto-selected partition 'debug' for job train_synthetic" in proc.stderr   # from partitions.yaml

    assert read_rows(work / TARGET) == read_rows(tiny_dag / TARGET)
    slurm_eval = runs[0] / "seed0" / "eval_test.json"
    local_eval = tiny_dag / slurm_eval.relative_to(work)
    a, b = json.loads(slurm_eval.read_text()), json.loads(local_eval.read_text())
    assert a["results"] == b["results"]
    assert a["provenance"]["slurm_job_id"] and not b["provenance"]["slurm_job_id"]
