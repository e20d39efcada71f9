"""What every ``python -m methods...`` entry point shares: its argument parser (``--dataset-config``
for jobs of one dataset, ``--device``/``--threads`` for compute jobs), the threads Snakemake gave
the job, and one clear line with exit code 2 for a ``HarnessError``.

Torch is not imported here: compute jobs pass their set-up (``methods.runtime.compute_setup``:
threads, exact fp32), so the many report jobs (row aggregates) start without torch's 2-3 s
import, which the 20-minute default job feels."""
from __future__ import annotations

import argparse
from typing import Callable

from methods.errors import run_cli

__all__ = ["run_cli", "run_command"]  # run_cli lives in methods.errors so that methods.io can use it too


def run_command(doc: str, add_arguments: Callable[[argparse.ArgumentParser], None],
                run: Callable[[argparse.Namespace], None], argv: list[str] | None = None, *,
                dataset_config: bool = True,
                compute: Callable[[argparse.Namespace], None] | None = None) -> None:
    """Parse ``argv`` (``doc``'s first line is the description), then ``run(args)``; a compute
    job's ``compute(args)`` (``--device``, ``--threads`` added) runs first."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    if dataset_config:
        parser.add_argument("--dataset-config", required=True, help="results/<dataset>/dataset.json")
    if compute is not None:
        parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
        parser.add_argument("--threads", type=int, default=1, help="the threads Snakemake gave the job")
    add_arguments(parser)
    args = parser.parse_args(argv)

    def _run() -> None:
        if compute is not None:
            compute(args)
        run(args)

    run_cli(_run)
