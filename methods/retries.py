"""Which failed jobs a Snakemake retry may run again.

Snakemake retries every failed job (``retries:`` in the SLURM profile) without knowing why it
failed. A retry can pass after preemption, a node failure or a time limit (training resumes from
its checkpoint); it cannot pass after a bad config or input, which fails the same way again after
queueing for a GPU and loading the data. So an entry point that stops on such an error (a
``HarnessError`` that is not ``transient``, exit code 2) records its message, and a retry of the
same job in the same Snakemake run finds the record and stops at once, before any compute.

A run's records live in the folder named by ``FAILED_JOBS_ENV``, which
``workflow/rules/common.smk`` sets in the main Snakemake process (jobs inherit it; SLURM jobs
through sbatch's ``--export=ALL``). Each ``snakemake`` call gets a new folder, so a job whose
input was fixed runs again; a command typed by hand (no variable) records nothing.
"""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

FAILED_JOBS_ENV = "ITR_HARNESS_FAILED_JOBS"

NOT_RETRIED = ("not retried: this job failed the same way in an earlier attempt of this snakemake run "
               "(a bad config or input fails every time); fix it and run snakemake again")


def failed_jobs_dir(results_dir: str | Path) -> str:
    """A new folder for the records of one Snakemake run, named by time and the Snakemake process's
    pid (absolute: SLURM jobs start elsewhere)."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    return str(Path(results_dir).resolve() / "logs" / "failed_jobs" / f"{stamp}-{os.getpid()}")


def failure_record(argv: list[str], environ=os.environ) -> Path | None:
    """Where the job run by ``argv`` records a deterministic failure in the current Snakemake run;
    None outside one, and in the Snakemake process itself (an entry point called in-process, whose
    argv is not a job's). A retry runs the same command line, so the command line names the job."""
    root = environ.get(FAILED_JOBS_ENV)
    if not root or Path(root).name.endswith(f"-{os.getpid()}"):
        return None
    return Path(root) / (hashlib.sha256("\0".join(argv).encode()).hexdigest()[:20] + ".txt")


def earlier_failure(record: Path | None) -> str | None:
    """The message an earlier attempt of this job stopped with, if it failed deterministically."""
    if record is None:
        return None
    try:
        return record.read_text(encoding="utf-8").strip() or None
    except OSError:  # no record (the usual case), or an unreadable one: run the job
        return None


def record_failure(record: Path | None, message: str) -> None:
    """Best effort: a record that cannot be written (read-only or full results folder) must not
    hide the error being reported; the retry then simply runs and fails again."""
    if record is None:
        return
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(message + "\n", encoding="utf-8")
    except OSError:
        pass
