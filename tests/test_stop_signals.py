"""A job stopped by SIGTERM (a SLURM time limit) or SIGINT (Ctrl-C) removes the temporary files of
the outputs it was writing and says so in one line: the entry points' shared runner
(``methods.errors.run_cli``) on a planted job, then the features job and a training job's
evaluation held mid-write."""
import json
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

# How a held job signals that its outputs are open: this line on stdout, then it sleeps.
READY = "ready to be stopped"


def stop_when_ready(script: str, cwd, sig: signal.Signals) -> subprocess.CompletedProcess:
    """Run ``script`` with ``python -c``, send ``sig`` once it prints READY, and wait for it."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.strip() == READY:
            break
    else:
        proc.wait(timeout=60)
        raise AssertionError(f"the job ended before it could be stopped:\n{''.join(lines)[-2000:]}\n{proc.stderr.read()[-3000:]}")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(lines) + out, err)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith("features ")]


def hidden_temporaries(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(".*.tmp*"))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_command_removes_its_unfinished_outputs_and_names_them(tmp_path, sig):
    script = f"""
        import time
        from methods.errors import run_cli
        from methods.io import atomic_path, open_npy_for_writing

        def job():
            with open_npy_for_writing({str(tmp_path / 'big.npy')!r}, (256, 1024), "float32") as array, \\
                    atomic_path({str(tmp_path / 'table.csv')!r}) as tmp:
                tmp.write_text("half a table")
                print({READY!r}, flush=True)
                time.sleep(60)

        run_cli(job)
    """
    proc = stop_when_ready(script, REPO, sig)
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        f"error: received {sig.name} while running -c: stopped; removed the unfinished {tmp_path / 'table.csv'}, "
        f"{tmp_path / 'big.npy'} (a re-run starts it again)"]
    assert list(tmp_path.iterdir()) == []


def test_a_command_stopped_before_it_writes_says_nothing_was_written(tmp_path):
    script = f"""
        import time
        from methods.errors import run_cli

        def job():
            print({READY!r}, flush=True)
            time.sleep(60)

        run_cli(job)
    """
    proc = stop_when_ready(script, tmp_path, signal.SIGTERM)
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == ["error: received SIGTERM while running -c: stopped, nothing written"]


@pytest.mark.e2e
def test_features_job_stopped_mid_split_leaves_no_reserved_file(tiny_dag, tmp_path):
    """The features job reserves its output arrays' disk space before it reads an image: stopped
    while reading (images held by a slow reader), it removes them and names each."""
    out = tmp_path / "features"
    script = f"""
        import time
        from methods.features import images
        read = images.ImageFiles.__getitem__
        calls = []

        def held(self, i):
            calls.append(i)
            if len(calls) == 2:  # the first read after the probe image: the outputs are open
                print({READY!r}, flush=True)
                time.sleep(60)
            return read(self, i)

        images.ImageFiles.__getitem__ = held
        from methods.features.extract import main
        main(["--dataset-config", "results/synthetic/dataset.json", "--backbone", "resnet18_synthetic",
              "--split", "test", "--out-dir", {str(out)!r}, "--device", "cpu", "--threads", "1"])
    """
    proc = stop_when_ready(script, tiny_dag, signal.SIGTERM)
    assert proc.returncode == 2
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: received SIGTERM while running -c: stopped; removed "), lines
    layers = json.loads((tiny_dag / "results/synthetic/dataset.json").read_text())["dataset"]["features"]["grid_layers"]
    for name in ["pooled", *layers]:
        assert str(out / f"test_{name}.npy") in lines[0]
    assert hidden_temporaries(out) == [] and list(out.iterdir()) == []


@pytest.mark.e2e
def test_training_job_stopped_while_writing_its_scores_leaves_no_partial_file(tiny_dag, tmp_path):
    """Stopped during its evaluation (after training, outside the training loop's checkpointing),
    a training job removes the score matrix it was writing; the trained model stays, and the
    evaluation's outputs are not there."""
    cfg = next(c for c in (json.loads(p.read_text()) for p in (tiny_dag / "results/synthetic/runs").glob("vsepp-*/config.json"))
               if len(c["training"]["stages"]) == 1)
    cfg["training"]["stages"][0]["epochs"] = 1
    exp = tmp_path / "exp.json"
    exp.write_text(json.dumps(cfg))
    run_dir = tmp_path / "run"
    r = tiny_dag / "results/synthetic"
    script = f"""
        import time
        import numpy as np
        save = np.save

        def held(file, array, *args, **kwargs):
            print({READY!r}, flush=True)
            time.sleep(60)
            return save(file, array, *args, **kwargs)

        np.save = held
        from methods.train import main
        main(["--dataset-config", {str(r / 'dataset.json')!r}, "--experiment", {str(exp)!r}, "--seed", "0",
              "--run-dir", {str(run_dir)!r}, "--features-dir", {str(r / 'features' / cfg['model']['backbone'])!r},
              "--vocab", {str(r / 'vocab.json')!r}, "--device", "cpu", "--threads", "1", "--no-progress",
              "--evaluate", "test"])
    """
    proc = stop_when_ready(script, tiny_dag, signal.SIGTERM)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert lines == [f"error: received SIGTERM while running -c: stopped; removed the unfinished "
                     f"{run_dir / 'sims_test.npy'} (a re-run starts it again)"], proc.stderr[-2000:]
    assert (run_dir / "model.pt").exists() and hidden_temporaries(run_dir) == []
    assert not (run_dir / "sims_test.npy").exists() and not (run_dir / "eval_test.json").exists()
