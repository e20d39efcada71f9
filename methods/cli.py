"""Shared entry-point behaviour: a HarnessError prints one clear line and exits 2."""
from __future__ import annotations

import sys
from typing import Callable


def run_cli(fn: Callable[[], None]) -> None:
    from methods.errors import HarnessError

    try:
        fn()
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
