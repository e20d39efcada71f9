"""Atomic file writes: every output appears whole or not at all (temp file + rename)."""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` only if the block succeeds.

    ``suffix`` keeps an extension some writers insist on (numpy appends ``.npy``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + suffix, dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    with open(path) as f:
        return json.load(f)


def save_npy(path: str | os.PathLike, array: np.ndarray) -> None:
    with atomic_path(path, suffix=".npy") as tmp:
        np.save(tmp, array)


@contextlib.contextmanager
def open_npy_for_writing(path: str | os.PathLike, shape: tuple[int, ...], dtype: str) -> Iterator[np.memmap]:
    """A memory-mapped ``.npy`` filled incrementally (arrays larger than RAM), renamed into place when done."""
    with atomic_path(path, suffix=".npy") as tmp:
        array = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape)
        yield array
        array.flush()
        del array


def torch_save(path: str | os.PathLike, obj: Any) -> None:
    import torch

    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def main(argv: list[str] | None = None) -> None:
    """``python -m methods.io --out F --json '{...}'``: write a config the Snakefile resolved, atomically."""
    import argparse

    parser = argparse.ArgumentParser(description="write a JSON document atomically")
    parser.add_argument("--out", required=True)
    parser.add_argument("--json", required=True)
    args = parser.parse_args(argv)
    write_json(args.out, json.loads(args.json))


if __name__ == "__main__":
    main()
