"""Run-time failures of a training job: one clear message naming the file or setting, exit code
2, and nothing half-written left behind."""
import json
import re

import pytest
import torch

from methods.train import main as train_main

pytestmark = pytest.mark.e2e


def vsepp_frozen_args(tiny_dag, tmp_path, device="cpu"):
    cfg = next(c for c in (json.loads(p.read_text()) for p in (tiny_dag / "results/synthetic/runs").glob("vsepp-*/config.json"))
               if len(c["training"]["stages"]) == 1)
    exp = tmp_path / "exp.json"
    exp.write_text(json.dumps(cfg))
    run_dir = tmp_path / "run"
    r = tiny_dag / "results/synthetic"
    args = ["--dataset-config", str(r / "dataset.json"), "--experiment", str(exp), "--seed", "0",
            "--run-dir", str(run_dir), "--features-dir", str(r / "features" / cfg["model"]["backbone"]),
            "--vocab", str(r / "vocab.json"), "--device", device, "--threads", "1", "--no-progress"]
    return args, run_dir


def run_expecting_error(args, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        train_main(args)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def written_files(run_dir):
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()) if run_dir.exists() else []


def test_nan_loss_stops_with_stage_epoch_and_step(tiny_dag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tiny_dag)
    monkeypatch.setattr("methods.losses.ranking.build_loss",
                        lambda loss_cfg, epoch: (lambda scores, positives: scores.sum() * float("nan")))
    args, run_dir = vsepp_frozen_args(tiny_dag, tmp_path)
    err = run_expecting_error(args, capsys)
    assert re.search(r"error: loss is nan at stage '\w+' epoch 1 step 1; stopping \(last good checkpoint: \S+last.pt\)", err), err
    assert written_files(run_dir) == []


def test_corrupt_checkpoint_of_a_rerun_is_named(tiny_dag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tiny_dag)
    args, run_dir = vsepp_frozen_args(tiny_dag, tmp_path)
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints/last.pt").write_bytes(b"\x80\x02half a checkpoint")
    err = run_expecting_error(args, capsys)
    assert re.search(r"error: checkpoint \S+run/checkpoints/last.pt is corrupt or unreadable .*delete it", err), err
    assert written_files(run_dir) == ["checkpoints/last.pt"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible here")
def test_gpu_asked_for_but_absent(tiny_dag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tiny_dag)
    args, run_dir = vsepp_frozen_args(tiny_dag, tmp_path, device="cuda")
    err = run_expecting_error(args, capsys)
    assert "error: device: cuda was asked for (config 'device: cuda') but no GPU is visible" in err
    assert written_files(run_dir) == []
