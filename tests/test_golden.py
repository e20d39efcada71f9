"""The built-in data in portable numerics give the same bits on every host of a CPU vendor: the tiny
DAG's images, backbone, features, regions, and every run's weights and score matrix equal the
digests committed for the host's vendor (tests/golden.py says how to write them anew after a change
meant to move numbers); and the harness's own commands, run under another host's kernel choices,
change their results in native mode and keep them in portable mode."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from methods import numerics
from tests.golden import digests, tensor_digest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
# The digests per CPU vendor: an Intel Xeon and an AMD EPYC host of this VM type compute other bits
# in portable mode from the backbone pre-training on (found 2026-11-28: the same commit, 99d7ab8 and
# its successors, gives one backbone on each; the cause is not found yet; docs/numerics.md). Each
# file holds what every host of its vendor has computed so far.
GOLDEN = {"GenuineIntel": REPO / "tests" / "data" / "golden_portable.json",
          "AuthenticAMD": REPO / "tests" / "data" / "golden_portable_amd.json"}


def cpu_vendor() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("vendor_id"):
            return line.split(":", 1)[1].strip()
    return "unknown"


# Results whose digests one vendor's host has written and the other's not yet: VSE0's synthetic
# run since its config gained model.image_l2norm: false (its source's --no_imgnorm; the stale
# digests of its former config were dropped from both files). An Intel host writes its own with
# python -m tests.golden, then the entries leave this list.
WRITTEN_ON_ONE_VENDOR = {"synthetic/runs/vsepp-5a5b24d507/seed0/model.pt": "AuthenticAMD",
                         "synthetic/runs/vsepp-5a5b24d507/seed0/sims_test.npy": "AuthenticAMD"}


def test_every_vendors_digests_cover_the_same_results_and_agree_before_the_backbone():
    golden = {vendor: json.loads(path.read_text()) for vendor, path in GOLDEN.items()}
    intel, amd = golden["GenuineIntel"], golden["AuthenticAMD"]
    assert set(intel) ^ set(amd) == set(WRITTEN_ON_ONE_VENDOR)
    assert all(key in golden[vendor] for key, vendor in WRITTEN_ON_ONE_VENDOR.items())
    assert intel["synthetic/data/images"] == amd["synthetic/data/images"]   # generated without torch


def test_the_tiny_dag_computes_the_committed_digests(tiny_dag, tmp_path):
    vendor = cpu_vendor()
    if vendor not in GOLDEN:
        pytest.fail(f"no digests are committed for CPU vendor {vendor!r} (tests/data: {sorted(GOLDEN)}); write them "
                    f"with python -m tests.golden from a tiny DAG of a commit whose results are known")
    golden = GOLDEN[vendor]
    got, want = digests(tiny_dag), json.loads(golden.read_text())
    # every committed digest must be there and equal; runs other e2e tests add later are not judged
    changed = sorted(k for k in want if got.get(k) != want[k])
    if changed:
        written = tmp_path / golden.name
        written.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        pytest.fail(f"{len(changed)} of {len(want)} digests differ from {golden.name} ({vendor}; first: "
                    f"{changed[:4]}). If this commit is meant to change results, copy {written} to {golden} and "
                    f"write the other vendors' files on their hosts; if not, something now computes other bits on "
                    f"this host (library versions, kernels, seeds)")


# another x86-64 host's own kernel choices: ATen without AVX2, oneDNN's SSE4.1 convolutions
OTHER_HOST = {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"}
PORTABLE_KEYS = set(numerics.portable_environment(1)) | {"ITR_NUMERICS_REEXEC"}


def _run(cmd: list[str], cwd: Path, host: dict, prefixed: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k not in PORTABLE_KEYS and k not in OTHER_HOST}
    env.update(host)
    if prefixed:  # as the Snakemake rule starts a job of a portable dataset
        env.update(numerics.portable_environment(1))
    subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, text=True)


@pytest.mark.parametrize("portable", [False, True], ids=["native", "portable"])
def test_host_kernel_choices_move_native_results_only(tiny_dag, tmp_path, portable):
    """The backbone pre-training (convolutions) and a VSE++ training + evaluation (GRU, GEMM, ATen
    kernels) on the tiny dataset, on this host's dispatch and on another host's."""
    r = tiny_dag / "results" / "synthetic"
    payload = json.loads((r / "dataset.json").read_text())
    payload["dataset"]["numerics"] = "portable" if portable else "native"
    cfg_path = tmp_path / "dataset.json"
    cfg_path.write_text(json.dumps(payload))
    exp = next(c for c in (json.loads(p.read_text()) for p in sorted(r.glob("runs/vsepp-*/config.json")))
               if len(c["training"]["stages"]) == 1)
    exp.pop("numerics", None)
    if portable:
        exp["numerics"] = "portable"
    exp["training"]["stages"][0]["epochs"] = 2
    exp_path = tmp_path / "exp.json"
    exp_path.write_text(json.dumps(exp))
    results = {}
    for host_name, host in (("here", {}), ("other", OTHER_HOST)):
        # portable: here as the rule starts it; on the other host as a command typed by hand, which
        # restarts itself in the portable environment
        prefixed = portable and host_name == "here"
        out = tmp_path / host_name
        _run([sys.executable, "-m", "methods.features.pretrain", "--dataset-config", str(cfg_path), "--backbone",
              "resnet18_synthetic", "--out", str(out / "backbone.pt"), "--device", "cpu", "--threads", "1"],
             tiny_dag, host, prefixed)
        _run([sys.executable, "-m", "methods.train", "--dataset-config", str(cfg_path), "--experiment", str(exp_path),
              "--seed", "0", "--run-dir", str(out / "run"), "--features-dir", str(r / "features" / exp["model"]["backbone"]),
              "--vocab", str(r / "vocab.json"), "--device", "cpu", "--threads", "1", "--no-progress", "--evaluate", "test"],
             tiny_dag, host, prefixed)
        model = torch.load(out / "run" / "model.pt", weights_only=True)
        results[host_name] = (tensor_digest(torch.load(out / "backbone.pt", weights_only=True)),
                              tensor_digest(model["state_dict"]),
                              tensor_digest({"sims": torch.from_numpy(np.load(out / "run" / "sims_test.npy"))}))
        log = json.loads((out / "run" / "train_log.json").read_text())
        assert log["provenance"]["numerics"]["mode"] == ("portable" if portable else "native")
    if portable:
        assert results["here"] == results["other"]
    else:  # each of the three moves: convolutions, the trained weights, the scores
        assert all(a != b for a, b in zip(results["here"], results["other"])), results
