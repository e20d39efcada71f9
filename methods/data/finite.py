"""NaN/inf in a user-supplied feature array, found when the DAG is built rather than when a
trained model's score matrix turns NaN: the array is memory-mapped and scanned in ~64 MB chunks
(COCO's precomputed train file is ~33 GB), and the verdict cached (``methods.data.input_cache``)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from methods.data.input_cache import cached_verdict
from methods.errors import HarnessError

CHUNK_BYTES = 64 * 2**20


def non_finite_rows(array: np.ndarray, chunk_bytes: int = CHUNK_BYTES) -> tuple[int, int | None]:
    """(number of rows along axis 0 holding a NaN or inf, index of the first such row or None),
    reading ``chunk_bytes`` at a time."""
    row_bytes = max(1, int(np.prod(array.shape[1:], dtype=np.int64)) * array.dtype.itemsize)
    step = max(1, chunk_bytes // row_bytes)
    count, first = 0, None
    for start in range(0, array.shape[0], step):
        chunk = np.asarray(array[start:start + step])
        bad = np.flatnonzero(~np.isfinite(chunk).reshape(chunk.shape[0], -1).all(axis=1))
        if bad.size and first is None:
            first = start + int(bad[0])
        count += int(bad.size)
    return count, first


def _scan(path: Path) -> dict:
    array = np.load(path, mmap_mode="r")
    count, first = non_finite_rows(array)
    return {"rows": int(array.shape[0]), "non_finite_rows": count, "first": first}


def check_finite_array(path: str | Path, results_dir: str | Path, what: str = "feature rows") -> None:
    """A .npy float array (its header already checked) holds no NaN or inf; ``what``: its rows."""
    verdict = cached_verdict(results_dir, "finite", path, _scan)
    if verdict["non_finite_rows"]:
        raise HarnessError(f"{path}: {verdict['non_finite_rows']} of {verdict['rows']} {what} hold NaN or inf "
                           f"values (first: row {verdict['first']}); expected finite numbers (re-extract the file)")
