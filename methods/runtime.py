"""Device selection, threads, seeds and provenance (git commit, versions)."""
from __future__ import annotations

import contextlib
import os
import platform
import random
import subprocess

import numpy as np
import torch

from methods.config import REPO_ROOT
from methods.errors import HarnessError


def resolve_device(setting: str) -> torch.device:
    if setting == "cuda":
        if not torch.cuda.is_available():
            raise HarnessError("device: cuda was asked for (config 'device: cuda') but no GPU is visible "
                               "(torch.cuda.is_available() is False); use 'auto' or 'cpu'")
        return torch.device("cuda")
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device("cpu")


def exact_fp32() -> None:
    """fp32 means fp32 on CUDA too: no TF32 in convolutions (PyTorch's default allows it) or
    matmuls. The public code of the papers ran in plain fp32 (on GPUs without TF32); AMP, where
    configured, is fp16 autocast on top of this."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


def set_threads(n: int) -> None:
    """Honour the thread count Snakemake gave the job (rules declare ``threads:``)."""
    torch.set_num_threads(max(1, n))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        commit = out.stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance(device: torch.device) -> dict:
    return {
        "git_commit": git_commit(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({platform.processor() or platform.machine()})",
        "python": platform.python_version(),
        "host": platform.node(),
        "threads": torch.get_num_threads(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    }


def autocast(device: torch.device, enabled: bool):
    """fp16 autocast on CUDA when asked for; a no-op context on the CPU."""
    if enabled and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.float16)
    return contextlib.nullcontext()


def to_device(value, device: torch.device):
    """A tensor, a dict of them (a batch, multi-scale grids) or anything else, moved to ``device``."""
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    return value.to(device, non_blocking=True) if torch.is_tensor(value) else value
