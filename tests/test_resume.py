"""A training process killed with SIGKILL mid-run resumes from its last checkpoint and ends with
exactly the weights and metrics of an uninterrupted run (CPU, same seed)."""
import json
import signal
import subprocess
import sys
import time

import pytest
import torch

pytestmark = pytest.mark.e2e


def train_cmd(work, exp, run_dir):
    r = work / "results/synthetic"
    backbone = json.loads(exp.read_text())["model"].get("backbone")
    features = r / "features" / backbone if backbone else r / "precomp"  # region models: the precomputed regions
    return [sys.executable, "-m", "methods.train", "--dataset-config", str(r / "dataset.json"), "--experiment",
            str(exp), "--seed", "0", "--run-dir", str(run_dir), "--features-dir", str(features),
            "--vocab", str(r / "vocab.json"), "--device", "cpu", "--threads", "1", "--no-progress"]


@pytest.mark.parametrize("model, loss, heads", [("vsepp", "triplet_hardest", None), ("vsrn", "smooth_ap", None),
                                               ("sgraf", "triplet_sum", ["sgr", "saf"])])
def test_sigkill_then_rerun_equals_uninterrupted(tiny_dag, tmp_path, model, loss, heads):
    """A frozen-CNN VSE++ run on caption batches, VSRN with SmoothAP on image batches, and SGRAF
    trained jointly (dropout, BatchNorm over pairs, two heads)."""
    cfg = next(c for c in (json.loads(p.read_text()) for p in (tiny_dag / "results/synthetic/runs").glob("*/config.json"))
               if c["model"]["kind"] == model and c["loss"]["kind"] == loss and len(c["training"]["stages"]) == 1
               and c["model"].get("heads") == heads)
    cfg["training"]["stages"][0]["epochs"] = 30
    exp = tmp_path / "exp.json"
    exp.write_text(json.dumps(cfg))

    straight = tmp_path / "straight"
    subprocess.run(train_cmd(tiny_dag, exp, straight), cwd=tiny_dag, check=True, capture_output=True)

    killed = tmp_path / "killed"
    proc = subprocess.Popen(train_cmd(tiny_dag, exp, killed), cwd=tiny_dag, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    last = killed / "checkpoints" / "last.pt"
    deadline = time.time() + 120
    while not last.exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # somewhere inside a later epoch
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "model.pt").exists(), "the run finished before it could be killed"
    out = subprocess.run(train_cmd(tiny_dag, exp, killed), cwd=tiny_dag, check=True, capture_output=True, text=True)
    assert "resuming from" in out.stdout

    a = torch.load(straight / "model.pt", weights_only=True)
    b = torch.load(killed / "model.pt", weights_only=True)
    assert a["best"] == b["best"]
    for key, value in a["state_dict"].items():
        assert torch.equal(value, b["state_dict"][key]), key
    log_a = json.loads((straight / "train_log.json").read_text())["history"]
    log_b = json.loads((killed / "train_log.json").read_text())["history"]
    assert [h["val"] for h in log_a] == [h["val"] for h in log_b]
