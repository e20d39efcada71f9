"""Each region's box, an image input beside the precomputed region features, read only by the
models whose declaration asks for it (``ModelKind.reads_region_boxes``: PFAN, whose regions input
is ``methods.data.inputs.REGIONS_WITH_BOXES``).

``<precomp_dir>/{split}_boxes.npy``: float (N, R, 4), row for row and region for region the
boxes of ``{split}_ims.npy`` (the same N rows, the same R regions): x0, y0, x1, y1 as fractions of
the image's width and height, 0 <= x0 <= x1 <= 1 and 0 <= y0 <= y1 <= 1. BUTD's boxes are in
pixels: divide by the image's width (x) and height (y) when writing the file.

The synthetic dataset's region job writes its boxes in pixels of its square images
(``methods.features.regions``; the tag dataset reads them so); they are read here as fractions of
``generator.image_size``. The DAG build checks a real dataset's files (``check_region_boxes``); a
row whose model reads boxes on a dataset without them is left out of its table
(``missing_box_files``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from methods.data.datasets import dataset_paths
from methods.data.input_cache import cached_verdict
from methods.errors import HarnessError
from methods.io import load_npy

LAYOUT = ("<precomp_dir>/{split}_boxes.npy float (N, R, 4), the boxes of {split}_ims.npy's regions: x0, y0, x1, y1 "
          "as fractions of the image width and height (0 <= x0 <= x1 <= 1, 0 <= y0 <= y1 <= 1)")
ROUNDING = 1e-6   # a box written from pixels may exceed [0, 1] by rounding


def box_file(directory: str | Path, split: str) -> Path:
    return Path(directory) / f"{split}_boxes.npy"


def missing_box_files(cfg: dict, dataset: str) -> list[Path]:
    """The box files of a configured real dataset's splits that its ``precomp_dir`` lacks (none for
    a synthetic dataset, whose region job writes them, or where ``precomp_dir`` is unset: the
    regions' own check names that key)."""
    ds = cfg["datasets"][dataset]
    if ds["kind"] == "synthetic":
        return []
    directory = dataset_paths(cfg, dataset).get("precomp_dir")
    if directory is None:
        return []
    return [box_file(directory, split) for split in ds["splits"] if not box_file(directory, split).is_file()]


def box_scale(dataset_cfg: dict) -> float:
    """What a dataset's box files are divided by: the synthetic images' side (pixels), else 1."""
    return float(dataset_cfg["generator"]["image_size"]) if dataset_cfg.get("kind") == "synthetic" else 1.0


def box_problems(boxes: np.ndarray) -> dict:
    """Rows holding a non-finite or out-of-convention box: their count and the first (a JSON verdict)."""
    b = np.asarray(boxes, dtype=np.float64)
    finite = np.isfinite(b).all(axis=-1)
    with np.errstate(invalid="ignore"):
        ordered = (b[..., 0] <= b[..., 2]) & (b[..., 1] <= b[..., 3])
        inside = ((b >= -ROUNDING) & (b <= 1 + ROUNDING)).all(axis=-1)
    bad_finite = ~finite.reshape(len(b), -1).all(axis=1)
    bad_box = ~(ordered & inside | ~finite).reshape(len(b), -1).all(axis=1)
    first = lambda rows: int(np.flatnonzero(rows)[0]) if rows.any() else None   # noqa: E731
    return {"rows": len(b), "non_finite": int(bad_finite.sum()), "first_non_finite": first(bad_finite),
            "outside": int(bad_box.sum()), "first_outside": first(bad_box)}


def check_region_boxes(path: Path, n_rows: int, n_regions: int, scale: float = 1.0,
                       results_dir: str | Path | None = None) -> np.ndarray:
    """The memory-mapped (N, R, 4) boxes at ``path``, checked against the region features' rows and
    regions and the convention (``LAYOUT``); ``scale``: what the file's values are divided by.
    ``results_dir``: where the verdict of the value scan is cached (the DAG build's checks)."""
    if not path.is_file():
        raise HarnessError(f"region box file not found: {path} (expected {LAYOUT}; the model reads each region's box)")
    boxes = load_npy(path)
    if boxes.shape != (n_rows, n_regions, 4) or not np.issubdtype(boxes.dtype, np.floating):
        raise HarnessError(f"{path}: shape {boxes.shape} dtype {boxes.dtype}, expected a float array "
                           f"({n_rows}, {n_regions}, 4) matching the region features ({LAYOUT})")
    scan = lambda p: box_problems(np.asarray(load_npy(p)) / scale)   # noqa: E731
    verdict = scan(path) if results_dir is None else cached_verdict(results_dir, f"boxes/{scale:g}", path, scan)
    if verdict["non_finite"]:
        raise HarnessError(f"{path}: {verdict['non_finite']} of {verdict['rows']} rows hold NaN or inf boxes "
                           f"(first: row {verdict['first_non_finite']}); expected finite numbers")
    if verdict["outside"]:
        unit = f" (read as pixels of {scale:g})" if scale != 1 else ""
        raise HarnessError(f"{path}: {verdict['outside']} of {verdict['rows']} rows hold boxes{unit} outside the "
                           f"convention (first: row {verdict['first_outside']}); expected {LAYOUT}")
    return boxes
