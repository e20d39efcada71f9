"""Device selection, threads, seeds and provenance (git commit, versions)."""
from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import random
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable

import numpy as np
import torch

from methods import numerics
from methods.config import REPO_ROOT
from methods.errors import HarnessError


# Machine-local (a results folder on NFS may be shared by several machines, and flock over NFS is
# unreliable) and shared by every run of this user on this machine.
GPU_CLAIMS_DIR = Path(tempfile.gettempdir()) / f"itr-harness-gpus-{os.getuid()}"


@dataclass
class GpuClaim:
    """GPU ``index`` is this process's while ``lock_file`` stays open (the flock goes with the file,
    so a killed job releases its GPU too)."""
    index: int
    lock_file: IO

    def release(self) -> None:
        self.lock_file.close()


def try_claim_gpu(lock_dir: Path, count: int) -> GpuClaim | None:
    """The lowest GPU index in [0, count) that no live process holds, claimed with an exclusive,
    non-blocking flock on ``lock_dir/gpu<index>.lock``; None if all ``count`` are held."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        lock_file = open(lock_dir / f"gpu{index}.lock", "a")
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.close()
            continue
        return GpuClaim(index, lock_file)
    return None


def claim_gpu(lock_dir: Path, count: int, *, poll_seconds: float = 10.0,
              sleep: Callable[[float], None] = time.sleep, say: Callable[[str], None] = print) -> GpuClaim:
    """A GPU of this process's own; when all ``count`` are claimed, wait for one. Waiting cannot
    deadlock and never shares a GPU: every claim belongs to a running job, which releases it when
    it ends. (All are claimed when another run of this user holds some, or when the profile's
    `resources: gpu` exceeds the GPUs there are.)"""
    waiting = False
    while (claim := try_claim_gpu(lock_dir, count)) is None:
        if not waiting:
            say(f"all {count} GPUs are claimed by other jobs (locks in {lock_dir}); waiting for one to be released")
            waiting = True
        sleep(poll_seconds)
    return claim


_GPU_CLAIM: GpuClaim | None = None  # held for the life of the job's process


def claim_local_gpu(environ=os.environ) -> int | None:
    """On a machine with several GPUs, give this job one of its own: Snakemake's `gpu` resource
    (local profile) only counts GPUs, and without CUDA_VISIBLE_DEVICES every job would use cuda:0.
    Sets CUDA_VISIBLE_DEVICES to the claimed index, which CUDA reads when it initialises: so this
    runs before anything touches CUDA (torch.cuda.device_count asks NVML, not CUDA). Left alone:
    a job whose CUDA_VISIBLE_DEVICES is set (by SLURM, or by the user) and any SLURM job (SLURM
    gives a job its GPUs or none). Returns the claimed index, or None."""
    global _GPU_CLAIM
    if _GPU_CLAIM is not None:
        return _GPU_CLAIM.index
    if "CUDA_VISIBLE_DEVICES" in environ or "SLURM_JOB_ID" in environ or torch.cuda.is_initialized():
        return None
    count = torch.cuda.device_count()
    if count < 2:
        return None
    _GPU_CLAIM = claim_gpu(GPU_CLAIMS_DIR, count)
    environ["CUDA_VISIBLE_DEVICES"] = str(_GPU_CLAIM.index)
    print(f"GPU {_GPU_CLAIM.index} of {count} claimed for this job (CUDA_VISIBLE_DEVICES={_GPU_CLAIM.index})")
    return _GPU_CLAIM.index


def resolve_device(setting: str) -> torch.device:
    if numerics.environment_mode() == "portable":
        # portable numerics are CPU kernels: GPU results differ between GPU models and from the CPU's
        if setting == "cuda":
            raise HarnessError("device: cuda was asked for, but this dataset runs portable numerics, which run on "
                               "the CPU (datasets.<name>.numerics: native to use the GPU)")
        return torch.device("cpu")
    if setting in ("cuda", "auto"):
        claim_local_gpu()
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
    """Honour the thread count Snakemake gave the job (rules declare ``threads:``); in portable
    numerics the mode's fixed count stays (results must not depend on ``--cores``)."""
    if numerics.environment_mode() == "native":
        torch.set_num_threads(max(1, n))


def compute_setup(args) -> None:
    """What a compute job does before its work: the threads Snakemake gave it, exact fp32."""
    set_threads(args.threads)
    exact_fp32()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def seed_worker(worker_id: int) -> None:
    """A DataLoader worker's numpy and Python RNGs from the torch seed the loader gave it (torch
    seeds only its own RNG per worker), so anything drawn in a worker repeats with the run's seed."""
    seed = torch.initial_seed() % (2**32)
    random.seed(seed)
    np.random.seed(seed)


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
        "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None,   # None: not used on a CPU
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({platform.processor() or platform.machine()})",
        "python": platform.python_version(),
        "host": platform.node(),
        "threads": torch.get_num_threads(),
        "numerics": numerics.describe(torch),
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
