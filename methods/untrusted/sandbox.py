"""A child process within bounds, for reading files from the internet.

``run_bounded`` starts ``python -m methods.untrusted.sandbox MEMORY_MB SECONDS MODULE ARGS...``: this
module's ``main`` limits its own process before it imports or reads anything else (no core file;
CPU time; address space: what the interpreter has mapped so far plus ``MEMORY_MB``; files it
writes at most ``MEMORY_MB``), then runs ``MODULE`` as ``python -m`` would. The parent waits at
most ``SECONDS`` of wall-clock time, then kills it. A memory bomb, a hang, or a crash of a reader
(CPython hashing a deeply nested tuple segfaults) ends the child, never the harness: the parent
gets the child's exit, its peak resident memory and CPU time (``wait4``), and one sentence for a
stop (``BoundExceeded``).

The limits are config values (``untrusted_files`` in config/config.yaml, ``ReaderLimits``). The
address-space limit is Linux's ``RLIMIT_AS``, measured from ``/proc/self/status``; where neither
exists (macOS) only the CPU and wall-clock limits hold.
"""
from __future__ import annotations

import math
import os
import resource
import runpy
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

MB = 1 << 20
EXIT_MEMORY = 97     # the child ran out of its address space (a MemoryError reached the top)
EXIT_REPORTED = 3    # the reader refused the file or found it unreadable, and wrote why


@dataclass(frozen=True)
class ReaderLimits:
    """Bounds of one read of an untrusted file: memory the reader may allocate beyond the
    interpreter's own (MB) and its CPU and wall-clock time (seconds)."""

    memory_mb: int
    seconds: float

    @classmethod
    def from_config(cls, block: dict) -> "ReaderLimits":
        """From config ``untrusted_files`` (schema-checked)."""
        return cls(memory_mb=int(block["memory_mb"]), seconds=float(block["seconds"]))


@dataclass(frozen=True)
class Usage:
    """What a child used: its peak resident memory, CPU time and wall-clock time."""

    peak_rss_bytes: int
    cpu_seconds: float
    wall_seconds: float


class BoundExceeded(Exception):
    """The child was stopped by a bound, or crashed; ``what`` says which in a sentence."""

    def __init__(self, what: str, usage: Usage):
        super().__init__(what)
        self.what, self.usage = what, usage


def _memory_text(mb: int) -> str:
    return f"{mb / 1024:g} GB" if mb >= 1024 else f"{mb} MB"


def _mapped_bytes() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def limit_this_process(memory_mb: int, seconds: float) -> None:
    """The bounds, set on the calling process (they cannot be raised again: hard limits)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    cpu = max(1, math.ceil(seconds))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (memory_mb * MB, memory_mb * MB))
    mapped = _mapped_bytes()
    if mapped is not None:
        limit = mapped + memory_mb * MB
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _stderr_tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 2000))
            lines = [line.strip() for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def _child_env() -> dict[str, str]:
    """The parent's environment, its import path (so the child runs this checkout's code), and one
    compute thread (no thread pool reserves memory in the child)."""
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2",
            "PYTHONDONTWRITEBYTECODE": "1"}


def run_bounded(module: str, args: list[str], limits: ReaderLimits, workdir: Path) -> tuple[int, Usage]:
    """Run ``python -m module args`` in ``workdir`` within ``limits``; returns its exit status and
    usage, or raises ``BoundExceeded`` when a bound stopped it or it crashed (a signal)."""
    workdir = Path(workdir)
    stderr_path = workdir / "stderr.txt"
    cmd = [sys.executable, "-m", "methods.untrusted.sandbox", str(limits.memory_mb), repr(limits.seconds),
           module, *args]
    start = time.monotonic()
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen(cmd, cwd=workdir, env=_child_env(), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=stderr)
    timed_out, pause = False, 0.001
    try:
        while True:
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > limits.seconds:
                proc.kill()
                pid, status, rusage = os.wait4(proc.pid, 0)
                timed_out = True
                break
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
    except BaseException:   # a stop of the parent (SIGTERM, Ctrl-C) stops the child too
        if proc.returncode is None:
            proc.kill()
            proc.wait()
        raise
    proc.returncode = os.waitstatus_to_exitcode(status)
    usage = Usage(peak_rss_bytes=rusage.ru_maxrss * 1024, cpu_seconds=rusage.ru_utime + rusage.ru_stime,
                  wall_seconds=time.monotonic() - start)
    code = proc.returncode
    if timed_out or code == -signal.SIGXCPU:
        raise BoundExceeded(f"it took more than {limits.seconds:g} s (untrusted_files.seconds)", usage)
    if code == EXIT_MEMORY:
        raise BoundExceeded(f"it used more than {_memory_text(limits.memory_mb)} of memory "
                            f"(untrusted_files.memory_mb)", usage)
    if code == -signal.SIGXFSZ:
        raise BoundExceeded(f"it wrote more than {_memory_text(limits.memory_mb)} (untrusted_files.memory_mb)",
                            usage)
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else "unknown"
        raise BoundExceeded(f"it crashed the reader (signal {-code}, {name})", usage)
    if code not in (0, EXIT_REPORTED):
        tail = _stderr_tail(stderr_path)
        raise BoundExceeded(f"the reader failed (exit status {code}{': ' + tail if tail else ''})", usage)
    return code, usage


def main(argv: list[str] | None = None) -> None:
    """``python -m methods.untrusted.sandbox MEMORY_MB SECONDS MODULE ARGS...``: bound this process,
    then run ``MODULE`` with ``ARGS`` as ``python -m MODULE ARGS`` would."""
    argv = sys.argv[1:] if argv is None else argv
    memory_mb, seconds, module, args = int(argv[0]), float(argv[1]), argv[2], argv[3:]
    limit_this_process(memory_mb, seconds)
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except MemoryError:
        os._exit(EXIT_MEMORY)


if __name__ == "__main__":
    main()
