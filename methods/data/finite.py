"""NaN/inf in a user-supplied feature array, found when the DAG is built rather than when a
trained model's score matrix turns NaN: the .npy file is read in ~64 MB chunks through one buffer
(COCO's precomputed train file is ~33 GB; a memory map of the whole file would keep every page it
touched resident in the scanning process, the snakemake process at DAG build), and the verdict
cached (``methods.data.input_cache``)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from methods.data.input_cache import cached_verdict
from methods.errors import HarnessError

CHUNK_BYTES = 64 * 2**20


def non_finite_rows(path: str | Path, chunk_bytes: int = CHUNK_BYTES) -> tuple[int, int, int | None]:
    """(rows along axis 0, rows holding a NaN or inf, index of the first such row or None) of the
    .npy file at ``path``, read ``chunk_bytes`` at a time into one reused buffer."""
    with open(path, "rb") as f:
        major, _ = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(f)
        rows = shape[0] if shape else 1
        row_items = int(np.prod(shape[1:], dtype=np.int64))
        # the file holds slabs of `slab` values: rows (C order), or one value of every row (Fortran order)
        slab = rows if fortran else row_items
        n_slabs = (row_items if fortran else rows) if slab else 0
        per_chunk = max(1, chunk_bytes // max(1, slab * dtype.itemsize))
        buffer = np.empty(min(per_chunk, max(1, n_slabs)) * slab, dtype)
        bad_rows = np.zeros(rows, bool)
        for start in range(0, n_slabs, per_chunk):
            k = min(per_chunk, n_slabs - start)
            chunk = buffer[:k * slab]
            if f.readinto(memoryview(chunk).cast("B")) != chunk.nbytes:
                raise HarnessError(f"{path}: the file ends before the {shape} array its header declares (truncated?)")
            finite = np.isfinite(chunk).reshape(k, slab)
            if fortran:
                bad_rows |= ~finite.all(axis=0)
            else:
                bad_rows[start:start + k] = ~finite.all(axis=1)
    bad = np.flatnonzero(bad_rows)
    return rows, int(bad.size), (int(bad[0]) if bad.size else None)


def _scan(path: Path) -> dict:
    rows, count, first = non_finite_rows(path)
    return {"rows": rows, "non_finite_rows": count, "first": first}


def check_finite_array(path: str | Path, results_dir: str | Path, what: str = "feature rows") -> None:
    """A .npy float array (its header already checked) holds no NaN or inf; ``what``: its rows."""
    verdict = cached_verdict(results_dir, "finite", path, _scan)
    if verdict["non_finite_rows"]:
        raise HarnessError(f"{path}: {verdict['non_finite_rows']} of {verdict['rows']} {what} hold NaN or inf "
                           f"values (first: row {verdict['first']}); expected finite numbers (re-extract the file)")
