"""When the DAG is built: a configured backbone weights file loads into its architecture (the
feature or training job would find out only when it builds the CNN).

The check needs torch and torchvision (about 4 s to import), which the snakemake process does not
import: it runs in a child process (``python -m methods.features.backbone ARCH FILE``), once per
version of the file, and its verdict is cached by the file's size and mtime
(``methods.data.input_cache``; a ResNet-152 file is 230 MB).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from methods.config import REPO_ROOT
from methods.data.input_cache import cached_verdict
from methods.errors import HarnessError
from methods.untrusted.sandbox import ReaderLimits


def weights_verdict(arch: str, path: Path, limits: ReaderLimits) -> dict:
    """``{"problem": why the file would not load into ``arch``, or None}``, from a child process
    (``methods.features.backbone.weights_problem``) that reads the file within ``limits``."""
    child = subprocess.run([sys.executable, "-m", "methods.features.backbone", arch, str(path),
                            str(limits.memory_mb), repr(limits.seconds)],
                           cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    lines = child.stdout.strip().splitlines()
    if child.returncode != 0 or not lines:
        err = child.stderr.strip().splitlines()
        raise HarnessError(f"checking the weights file {path} ({arch}) failed: "
                           f"{err[-1] if err else f'exit code {child.returncode}'}")
    return json.loads(lines[-1])


def check_weights_fit(cfg: dict, backbone: str) -> None:
    """A configured weights file of ``backbones.<backbone>`` loads into its architecture. Weights
    the DAG pre-trains, and 'none', are not checked."""
    bb = cfg["backbones"][backbone]
    if bb["weights"] in (None, "none") or "pretrain" in bb:
        return
    path = Path(bb["weights"]).expanduser()
    limits = ReaderLimits.from_config(cfg["untrusted_files"])
    verdict = cached_verdict(cfg["results_dir"], f"weights:{bb['arch']}", path,
                             lambda p: weights_verdict(bb["arch"], p, limits))
    if verdict["problem"]:
        raise HarnessError(f"backbones.{backbone}.weights: {path} {verdict['problem']}")
