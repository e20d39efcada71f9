"""Numerics modes: ``native`` (the fastest kernels this host has) or ``portable`` (the same bits on
every x86-64 host with AVX2, for one commit and one set of package versions).

Why a mode: torch picks its CPU kernels per host. ATen's vectorised kernels (Sleef's exp/log,
reductions) follow the CPU's instruction set (AVX2 or AVX-512); MKL's BLAS runs a per-vendor,
per-ISA code path (on AMD MKL ignores ``MKL_CBWR=AVX2`` and dispatches as it likes: only its
``COMPATIBLE`` branch is the same code on Intel and AMD); oneDNN's convolutions JIT-compile per ISA
and pick their blocking from the host's cache sizes; numpy and OpenBLAS dispatch per ISA too.
Results then differ in the last bit between hosts, and training amplifies that into different
tables.

Portable mode fixes each choice *before* torch or numpy is imported, so it lives in the process
environment (``portable_environment``): the Snakemake rules prefix every job of a portable dataset
with it (``shell_prefix``), and a job started without it re-executes itself with it
(``ensure_environment``). After torch is imported, ``apply_torch_settings`` asks for
deterministic algorithms and fixes the thread count, so that reductions split the same way whatever
``--cores`` Snakemake was given.

oneDNN is off in portable mode (``torch.backends.mkldnn.enabled = False``), and the backbones'
convolutions run ``methods.features.portable_conv`` (im2col + numpy's pinned OpenBLAS GEMMs). With
oneDNN pinned to its AVX2 kernels instead, the golden test (tests/test_golden.py) caught it: an AMD
EPYC host and an Intel Xeon host of this project's VM gave other bits from the backbone
pre-training on (2026-11-26; oneDNN's AVX2 convolutions there were brgconv_strided, jit and jit_1x1
kernels, which choose their blocking from the cache sizes the CPU reports: the likely cause, not
confirmed on the AMD host, which was not at hand). A ResNet-18 training step (batch 64 at 64 px,
2 threads, quiet Intel host): 1.3 s portable, 0.8 s with oneDNN.

This module does not import torch or numpy: it must run before them.
"""
from __future__ import annotations

import os
import shlex
import sys
from typing import Mapping

from methods.errors import HarnessError

MODES = ("native", "portable")
ENV_MODE = "ITR_NUMERICS"
ENV_THREADS = "ITR_NUMERICS_THREADS"
# ATen's capability names as ``torch.backends.cpu.get_cpu_capability()`` prints them
PORTABLE_ATEN_CAPABILITY = "AVX2"
# numpy >= 2's names of its AVX-512 feature groups: numpy then runs its AVX2 (x86-64-v3) loops
NUMPY_AVX512_FEATURES = "X86_V4,AVX512_ICL,AVX512_SPR"


def portable_environment(threads: int) -> dict[str, str]:
    """The environment variables of portable mode with ``threads`` compute threads."""
    if threads < 1:
        raise HarnessError(f"portable numerics: threads must be at least 1, got {threads}")
    n = str(threads)
    return {
        ENV_MODE: "portable",
        ENV_THREADS: n,
        "ATEN_CPU_CAPABILITY": PORTABLE_ATEN_CAPABILITY.lower(),  # never AVX-512 kernels, even where the CPU has them
        "MKL_CBWR": "COMPATIBLE,STRICT",   # the one MKL branch that is the same code on Intel and AMD
        "ONEDNN_MAX_CPU_ISA": "AVX2",      # oneDNN's convolutions: AVX2 kernels, never AVX-512 or AMX
        "MKL_DYNAMIC": "FALSE",            # MKL keeps the thread count it is given
        "MKL_NUM_THREADS": n,
        "OMP_NUM_THREADS": n,
        "OPENBLAS_CORETYPE": "Haswell",    # numpy's and scipy's OpenBLAS: AVX2 kernels on every host
        "OPENBLAS_NUM_THREADS": "1",
        "NPY_DISABLE_CPU_FEATURES": NUMPY_AVX512_FEATURES,
        "PYTHONHASHSEED": "0",             # set iteration order, in case any reaches a result
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",  # deterministic cuBLAS (same GPU model only)
    }


def experiment_config(cfg: dict, dataset_cfg: dict | None) -> dict:
    """A resolved method config as a run on a dataset of that numerics mode has it: portable kernels
    give other bits than a host's native ones, so a portable run's config (and hash, and run folder)
    says so; native adds nothing, so earlier runs keep their hashes. ``dataset_cfg`` None: a
    harness config without the dataset (the API given only backbones), native."""
    return {**cfg, "numerics": "portable"} if dataset_cfg and dataset_cfg["numerics"] == "portable" else cfg


def check_mode(mode: str, where: str) -> str:
    if mode not in MODES:
        raise HarnessError(f"{where}: numerics '{mode}' is not one of {', '.join(MODES)}")
    return mode


def shell_prefix(mode: str, threads: int) -> str:
    """What a Snakemake rule writes before ``python -m ...`` (empty for native mode)."""
    if check_mode(mode, "numerics") == "native":
        return ""
    return "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in portable_environment(threads).items()) + " "


def environment_mode(environ: Mapping[str, str] = os.environ) -> str:
    """The mode this process was started in."""
    return "portable" if environ.get(ENV_MODE) == "portable" else "native"


def missing_portable_settings(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The portable variables ``environ`` lacks or sets otherwise (threads: whatever it says)."""
    threads = int(environ.get(ENV_THREADS, "1") or 1)
    return [k for k, v in portable_environment(max(1, threads)).items() if environ.get(k) != v]


def ensure_environment(mode: str, threads: int, *, environ: Mapping[str, str] = os.environ,
                       execve=os.execve) -> None:
    """A job whose dataset asks for ``mode`` but whose process was not started with that mode's
    environment (a command typed by hand) starts again with it: the variables only act before
    torch and numpy are imported. Native mode never re-executes: its kernels are the host's."""
    if mode != "portable" or not missing_portable_settings(environ):
        return
    if environ.get("ITR_NUMERICS_REEXEC") == "1":  # a second start did not take: never loop
        raise HarnessError(f"portable numerics: the environment did not take effect "
                           f"(still missing: {', '.join(missing_portable_settings(environ))})")
    env = {**environ, **portable_environment(threads), "ITR_NUMERICS_REEXEC": "1"}
    print(f"portable numerics: restarting with {shell_prefix('portable', threads).strip()}", flush=True)
    execve(sys.executable, list(sys.orig_argv), env)


def apply_torch_settings(torch, environ: Mapping[str, str] = os.environ) -> dict:
    """After torch's import: in portable mode, deterministic algorithms, the fixed
    thread count, and a check that ATen really runs the pinned kernels (an ``ATEN_CPU_CAPABILITY``
    the host cannot honour falls back silently). Returns what the run records (``describe``)."""
    if environment_mode(environ) == "portable":
        missing = missing_portable_settings(environ)
        if missing:
            raise HarnessError(f"portable numerics: {', '.join(missing)} not set as portable mode needs "
                               f"(set before torch is imported; methods.numerics.portable_environment)")
        capability = torch.backends.cpu.get_cpu_capability()
        if capability != PORTABLE_ATEN_CAPABILITY:
            raise HarnessError(f"portable numerics need a CPU with AVX2 (ATen runs {capability} kernels here); "
                               f"use numerics: native for this dataset on this host")
        deterministic_algorithms(torch)
        torch.backends.cudnn.benchmark = False
        torch.backends.mkldnn.enabled = False   # oneDNN's blocking follows the host's caches (module doc)
        torch.set_num_threads(int(environ[ENV_THREADS]))
    return describe(torch, environ)


def deterministic_algorithms(torch) -> None:
    """``torch.use_deterministic_algorithms(True)``, without the import of ``torch._inductor`` that
    call makes to set inductor's flag too (1.9 s per process, ~90 processes in the tests' DAG): the
    harness never compiles a model. Where inductor is loaded already, the public call sets both."""
    if "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(True)
    else:
        torch._C._set_deterministic_algorithms(True, warn_only=False)   # the public call's own setter


def describe(torch, environ: Mapping[str, str] = os.environ) -> dict:
    """The numerics a run used, for its metadata."""
    mode = environment_mode(environ)
    return {"mode": mode, "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "mkl_cbwr": environ.get("MKL_CBWR"), "onednn": bool(torch.backends.mkldnn.enabled),
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "threads": torch.get_num_threads()}
