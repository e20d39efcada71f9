"""What every ``python -m methods...`` entry point shares: its argument parser (``--dataset-config``
for jobs of one dataset, ``--device``/``--threads`` for compute jobs), the threads Snakemake gave
the job, and one clear line with exit code 2 for a ``HarnessError``.

Torch is not imported here: compute jobs pass their set-up (``methods.runtime.compute_setup``:
threads, exact fp32), so the many report jobs (row aggregates) start without torch's 2-3 s
import, which the 20-minute default job feels."""
from __future__ import annotations

import argparse
import sys
from typing import Callable

from methods import numerics
from methods.errors import run_cli
from methods.io import read_json

__all__ = ["run_cli", "run_command"]  # run_cli lives in methods.errors so that methods.io can use it too


def run_command(doc: str, add_arguments: Callable[[argparse.ArgumentParser], None],
                run: Callable[[argparse.Namespace], None], argv: list[str] | None = None, *,
                dataset_config: bool = True,
                compute: Callable[[argparse.Namespace], None] | None = None) -> None:
    """Parse ``argv`` (``doc``'s first line is the description), then ``run(args)``; a compute
    job's ``compute(args)`` (``--device``, ``--threads`` added) runs first. A command of a dataset
    in portable numerics (``datasets.<name>.numerics``) runs in that mode's environment (started
    again with it if it was not; a call with ``argv`` from Python code runs in its caller's
    numerics) and, where it imported torch, with the mode's torch settings."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    if dataset_config:
        parser.add_argument("--dataset-config", required=True, help="results/<dataset>/dataset.json")
    if compute is not None:
        parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
        parser.add_argument("--threads", type=int, default=1, help="the threads Snakemake gave the job")
    add_arguments(parser)
    args = parser.parse_args(argv)

    def _run() -> None:
        if dataset_config and argv is None:  # a command (python -m ...), not a call from Python code
            mode = dataset_numerics(args.dataset_config)
            numerics.ensure_environment(mode, getattr(args, "threads", 1))
        if "torch" in sys.modules:  # report jobs never import it: their start stays short
            numerics.apply_torch_settings(sys.modules["torch"])
        if compute is not None:
            compute(args)
        run(args)

    run_cli(_run)


def dataset_numerics(path: str) -> str:
    """The numerics mode of the dataset whose config a job reads (native for a dataset config
    written before the mode existed)."""
    payload = read_json(path)
    dataset = payload.get("dataset") if isinstance(payload, dict) else None
    mode = dataset.get("numerics", "native") if isinstance(dataset, dict) else "native"
    return numerics.check_mode(mode, f"{path}: dataset.numerics")
