"""What every ``python -m methods...`` entry point shares: its argument parser (``--dataset-config``
for jobs of one dataset, ``--device``/``--threads`` for compute jobs), the threads Snakemake gave
the job, and one clear line with exit code 2 for a ``HarnessError``."""
from __future__ import annotations

import argparse
from typing import Callable

from methods.errors import run_cli
from methods.runtime import exact_fp32, set_threads

__all__ = ["run_cli", "run_command"]  # run_cli lives in methods.errors so that methods.io can use it too


def run_command(doc: str, add_arguments: Callable[[argparse.ArgumentParser], None],
                run: Callable[[argparse.Namespace], None], argv: list[str] | None = None, *,
                dataset_config: bool = True, compute: bool = False) -> None:
    """Parse ``argv`` (``doc``'s first line is the description), then ``run(args)``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    if dataset_config:
        parser.add_argument("--dataset-config", required=True, help="results/<dataset>/dataset.json")
    if compute:
        parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
        parser.add_argument("--threads", type=int, default=1, help="the threads Snakemake gave the job")
    add_arguments(parser)
    args = parser.parse_args(argv)

    def _run() -> None:
        if compute:
            set_threads(args.threads)
            exact_fp32()
        run(args)

    run_cli(_run)
