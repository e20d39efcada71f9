"""Verdicts of slow DAG-build-time input checks (a 33 GB feature file scanned for NaN, a state
dict loaded and compared with its architecture), cached in ``<results_dir>/.input_checks.json``
by (resolved path, size, mtime_ns): each version of a file is checked once, not at every
``snakemake`` call; a replaced or edited file is checked again. Larger results derived from one
file (the compact index of a 130 MB Karpathy JSON) get a file of their own in
``<results_dir>/.input_checks/``, under the same rule."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

from methods.errors import HarnessError
from methods.io import write_json

CACHE_NAME = ".input_checks.json"
INDEX_DIR = ".input_checks"
INDEX_FORMAT = 1   # raise when what an index holds, or the checks behind it, change: older ones are built again


def cache_file(results_dir: str | Path) -> Path:
    return Path(results_dir) / CACHE_NAME


def _read(path: Path) -> dict:
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # none yet, or damaged: the cache only saves time, so start afresh
    return cache if isinstance(cache, dict) else {}


def cached_verdict(results_dir: str | Path, kind: str, path: str | Path, check: Callable[[Path], dict]) -> dict:
    """``check(path)``'s verdict (a JSON-serialisable dict), from the cache while the file's size and
    mtime are those it was checked at. ``kind`` names the check (one file may get several)."""
    path = Path(path).resolve()
    stat = path.stat()
    key, stamp = f"{kind}:{path}", [stat.st_size, stat.st_mtime_ns]
    where = cache_file(results_dir)
    entry = _read(where).get(key)
    if isinstance(entry, dict) and entry.get("stamp") == stamp and isinstance(entry.get("verdict"), dict):
        return entry["verdict"]
    verdict = check(path)
    cache = _read(where)  # re-read: another snakemake call may have added verdicts meanwhile
    cache[key] = {"stamp": stamp, "verdict": verdict}
    try:
        write_json(where, cache)
    except (OSError, HarnessError):
        pass  # a read-only results folder (a collaborator's dry run): check again next time
    return verdict


def cached_index(results_dir: str | Path, kind: str, path: str | Path, params: dict,
                 build: Callable[[Path], dict]) -> tuple[dict, Callable[[], None]]:
    """``build(path)``'s result (a JSON-serialisable dict derived from the file and ``params``), from
    its own cache file while the file's size and mtime and ``params`` are those it was built with;
    and ``keep()``, which stores a newly built result. Call it once every check of the inputs has
    passed: a DAG build that stops on a bad input leaves nothing in the results folder. A result
    that ``build`` refuses (it raises, e.g. naming a missing file) is never stored."""
    path = Path(path)
    if not path.is_file():
        return build(path), lambda: None
    path = path.resolve()
    stat = path.stat()
    # inode and ctime too: a copy that keeps size and mtime (cp -p, rsync -t) is another file
    stamp = {"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "inode": stat.st_ino,
             "ctime_ns": stat.st_ctime_ns, "format": INDEX_FORMAT, "params": params}
    name = hashlib.sha256(json.dumps([kind, str(path), params], sort_keys=True).encode()).hexdigest()[:16]
    where = Path(results_dir) / INDEX_DIR / f"{kind}-{name}.json"
    entry = _read(where)
    if entry.get("stamp") == stamp and isinstance(entry.get("index"), dict):
        return entry["index"], lambda: None
    index = build(path)

    def keep() -> None:
        try:
            write_json(where, {"stamp": stamp, "index": index})
        except (OSError, HarnessError):
            pass  # a read-only results folder: built again next time

    return index, keep
