"""A training process stopped mid-run (SIGKILL; SIGTERM as SLURM sends it) resumes from its last
checkpoint and ends with exactly the weights and metrics of an uninterrupted run (CPU, same seed),
run directly and as a Snakemake job."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from methods import numerics

pytestmark = pytest.mark.e2e


def train_cmd(work, exp, run_dir):
    r = work / "results/synthetic"
    backbone = json.loads(exp.read_text())["model"].get("backbone")
    features = r / "features" / backbone if backbone else r / "precomp"  # region models: the precomputed regions
    return [sys.executable, "-m", "methods.train", "--dataset-config", str(r / "dataset.json"), "--experiment",
            str(exp), "--seed", "0", "--run-dir", str(run_dir), "--features-dir", str(features),
            "--vocab", str(r / "vocab.json"), "--device", "cpu", "--threads", "1", "--no-progress"]


# the environment Snakemake starts a job of the synthetic dataset in (portable numerics, one thread):
# the process does not restart itself to set it
JOB_ENV = {**os.environ, **numerics.portable_environment(1)}


@pytest.mark.parametrize("model, loss, heads, batch_size, sig, buckets", [
    ("vsepp", "triplet_hardest", None, None, signal.SIGKILL, None),
    ("vsrn", "smooth_ap", None, None, signal.SIGKILL, None),
    ("sgraf", "triplet_hardest", ["sgr", "saf"], None, signal.SIGKILL, None),
    ("sgraf", "triplet_hardest", ["sgr", "saf"], 2, signal.SIGTERM, 5)])
def test_stopped_then_rerun_equals_uninterrupted(tiny_dag, tmp_path, model, loss, heads, batch_size, sig, buckets):
    """A frozen-CNN VSE++ run on caption batches, VSRN with SmoothAP on image batches, and SGRAF
    trained jointly (dropout, BatchNorm over pairs, two heads), killed without warning; and SGRAF
    on length-bucketed batches sent SIGTERM inside an epoch of 100 steps, which must checkpoint
    there and resume there (the same batches in the same order)."""
    cfg = next(c for c in (json.loads(p.read_text()) for p in (tiny_dag / "results/synthetic/runs").glob("*/config.json"))
               if c["model"]["kind"] == model and c["loss"]["kind"] == loss and len(c["training"]["stages"]) == 1
               and c["model"].get("heads") == heads and (batch_size is None or c["training"]["batch_size"] == batch_size))
    stage = cfg["training"]["stages"][0]
    stage["epochs"] = 10 if sig == signal.SIGKILL else 3
    # SIGKILL lands in the second epoch: the resumed process runs the step decays of the learning
    # rate (VSE++ after epoch 4, VSRN after 6) from the restored scheduler
    assert all(e < stage["epochs"] for e in stage["schedule"].get("decay_epochs", []))
    cfg["training"]["length_buckets"] = buckets
    exp = tmp_path / "exp.json"
    exp.write_text(json.dumps(cfg))

    # the uninterrupted run and the one to stop run side by side (one thread each, two cores)
    straight = tmp_path / "straight"
    straight_proc = subprocess.Popen(train_cmd(tiny_dag, exp, straight), cwd=tiny_dag, env=JOB_ENV,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        killed = tmp_path / "killed"
        proc = subprocess.Popen(train_cmd(tiny_dag, exp, killed), cwd=tiny_dag, env=JOB_ENV,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        last = killed / "checkpoints" / "last.pt"
        deadline = time.time() + 120
        while not last.exists() and time.time() < deadline:
            time.sleep(0.02)
        if sig == signal.SIGKILL:
            time.sleep(0.3)  # somewhere inside a later epoch
        proc.send_signal(sig)
        stopped_output, _ = proc.communicate()
        assert not (killed / "model.pt").exists(), "the run finished before it could be stopped"
        if sig == signal.SIGTERM:
            assert proc.returncode == 2
            assert re.search(r"received SIGTERM: checkpoint written at stage 'train' epoch 2 after step \d+ ", stopped_output), \
                stopped_output[-2000:]
            assert torch.load(last, weights_only=True)["step"] > 0
        out = subprocess.run(train_cmd(tiny_dag, exp, killed), cwd=tiny_dag, env=JOB_ENV, check=True, capture_output=True,
                             text=True)
    finally:
        straight_output, _ = straight_proc.communicate()
    assert straight_proc.returncode == 0, straight_output[-3000:]
    assert "resuming from" in out.stdout
    if sig == signal.SIGTERM:
        assert re.search(r"resuming from .*: stage 0 epoch 1 after step \d+", out.stdout), out.stdout[-2000:]

    a = torch.load(straight / "model.pt", weights_only=True)
    b = torch.load(killed / "model.pt", weights_only=True)
    assert a["best"] == b["best"]
    for key, value in a["state_dict"].items():
        assert torch.equal(value, b["state_dict"][key]), key
    log_a = json.loads((straight / "train_log.json").read_text())["history"]
    log_b = json.loads((killed / "train_log.json").read_text())["history"]
    assert [h["val"] for h in log_a] == [h["val"] for h in log_b]
    assert [h["train_loss"] for h in log_a] == [h["train_loss"] for h in log_b]
    assert [h["gradient_counts"] for h in log_a] == [h["gradient_counts"] for h in log_b]


def _training_process(snake: subprocess.Popen, run_dir, run_name: str, timeout: float = 300):
    """The `python -m methods.train` process Snakemake started for run_dir (named by the relative
    ``run_name`` on its command line), once it has written its first epoch checkpoint."""
    import psutil

    last = run_dir / "checkpoints" / "last.pt"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if snake.poll() is not None:
            raise AssertionError(f"snakemake ended before the training job could be stopped:\n{snake.stdout.read()[-3000:]}")
        if last.exists():
            for child in psutil.Process(snake.pid).children(recursive=True):
                try:
                    cmd = child.cmdline()
                except psutil.Error:
                    continue
                if "methods.train" in cmd and run_name in " ".join(cmd):
                    return child
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint at {last} within {timeout} s")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_training_job_stopped_mid_epoch_resumes_under_snakemake(tiny_dag, tmp_path, sig):
    """Stop the training job of a Snakemake target mid-epoch (SIGKILL: no warning; SIGTERM: what
    SLURM sends at a time limit or on preemption), re-run the same target, and get the metrics
    of the uninterrupted run of the session DAG."""
    import shutil

    from tests.conftest import SNAKEMAKE, local_snakemake_env, snakemake

    work = tmp_path / "work"
    shutil.copytree(tiny_dag, work, symlinks=True)  # timestamps kept: everything upstream is up to date
    runs = work / "results/synthetic/runs"
    exp = next(p.parent.name for p in runs.glob("sgraf-*/config.json")
               if json.loads(p.read_text())["training"]["batch_size"] == 2)
    run_dir = runs / exp / "seed0"
    target = f"results/synthetic/runs/{exp}/seed0/eval_test.json"
    reference = json.loads((run_dir / "eval_test.json").read_text())
    shutil.rmtree(run_dir)

    snake = subprocess.Popen([*SNAKEMAKE, target, "--configfile", "tiny.yaml"],
                             cwd=work, env=local_snakemake_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    trainer = _training_process(snake, run_dir, f"runs/{exp}/seed0")
    trainer.send_signal(sig)
    out, _ = snake.communicate(timeout=600)
    assert snake.returncode != 0, out[-3000:]
    assert not (run_dir / "model.pt").exists(), "the run finished before it could be stopped"
    train_log = (work / f"results/logs/train/synthetic/{exp}/seed0.log").read_text()
    if sig == signal.SIGTERM:
        assert re.search(r"error: received SIGTERM: checkpoint written (at stage 'train' epoch \d+ after step \d+"
                         r"|at the end of stage 'train' epoch \d+)", train_log), train_log[-2000:]

    snakemake(work, target, "--configfile", "tiny.yaml")
    resumed_log = (work / f"results/logs/train/synthetic/{exp}/seed0.log").read_text()
    assert "resuming from" in resumed_log
    resumed = json.loads((run_dir / "eval_test.json").read_text())
    assert resumed["results"] == reference["results"]
    assert resumed["best_epoch"] == reference["best_epoch"]
