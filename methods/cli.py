"""Shared entry-point behaviour: a HarnessError prints one clear line and exits 2."""
from __future__ import annotations

import argparse
import sys
from typing import Callable


def run_cli(fn: Callable[[], None]) -> None:
    from methods.errors import HarnessError

    try:
        fn()
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


def entry_parser(doc: str, compute: bool = False) -> argparse.ArgumentParser:
    """Parser of a DAG entry point: ``--dataset-config``, and ``--device``/``--threads`` for compute jobs."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--dataset-config", required=True, help="results/<dataset>/dataset.json")
    if compute:
        parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
        parser.add_argument("--threads", type=int, default=1, help="the threads Snakemake gave the job")
    return parser
