"""Precomputed region features in the SCAN/SGRAF/VSRN layout.

``<dir>/{split}_ims.npy``: float32 (N_img, n_regions, dim), one row per image, or one row per
caption (old duplicated files); ``<dir>/{split}_caps.txt``: one caption per line, 5 per image.
Arrays are opened with memory mapping, never read whole (COCO train is ~33 GB).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from methods.data.karpathy import CAPTIONS_PER_IMAGE
from methods.errors import HarnessError

LAYOUT = ("<precomp_dir>/{split}_ims.npy float (N, n_regions, dim) and <precomp_dir>/{split}_caps.txt "
          "with 5 lines per image (image k has caption lines 5k..5k+4)")


def count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def open_precomp(precomp_dir: str | Path, split: str, n_regions: int, feature_dim: int | None) -> tuple[np.ndarray, list[str], int]:
    """Return (memmapped features, captions, image_step) after checking shapes and counts
    (``feature_dim`` None: any).

    ``image_step`` is 5 when features have one row per caption (image of caption k is row k,
    the same image repeated), else 1; the image of caption k is row ``(k // 5) * image_step``.
    """
    precomp_dir = Path(precomp_dir)
    ims_path, caps_path = precomp_dir / f"{split}_ims.npy", precomp_dir / f"{split}_caps.txt"
    for p in (ims_path, caps_path):
        if not p.is_file():
            raise HarnessError(f"precomputed feature file not found: {p} (expected layout: {LAYOUT})")
    try:
        ims = np.load(ims_path, mmap_mode="r")
    except ValueError as exc:
        raise HarnessError(f"{ims_path}: not a readable .npy array ({exc})") from None
    if ims.ndim != 3 or ims.shape[1] != n_regions or feature_dim not in (None, ims.shape[2]):
        raise HarnessError(f"{ims_path}: shape {ims.shape}, expected (N, {n_regions}, {feature_dim or 'C'})")
    if not np.issubdtype(ims.dtype, np.floating):
        raise HarnessError(f"{ims_path}: dtype {ims.dtype}, expected a float array")
    with open(caps_path) as f:
        captions = [line.strip() for line in f]
    n_img, n_cap = ims.shape[0], len(captions)
    if n_cap == CAPTIONS_PER_IMAGE * n_img:
        step = 1
    elif n_cap == n_img and n_img % CAPTIONS_PER_IMAGE == 0:
        step = CAPTIONS_PER_IMAGE
    else:
        raise HarnessError(f"{caps_path}: {n_cap} captions for {n_img} feature rows in {ims_path}; "
                           f"expected {CAPTIONS_PER_IMAGE} x rows (or one row per caption)")
    return ims, captions, step


def check_npy_header(path: Path, expected_shape: tuple, expected_dtype: str | None = None) -> None:
    """Check a .npy file's shape/dtype from its header only (no data read). ``None`` in a shape matches any size."""
    if not path.is_file():
        raise HarnessError(f"feature file not found: {path}")
    arr = np.load(path, mmap_mode="r")
    if arr.ndim != len(expected_shape) or any(e is not None and e != s for e, s in zip(expected_shape, arr.shape)):
        shown = tuple("N" if e is None else e for e in expected_shape)
        raise HarnessError(f"{path}: shape {arr.shape}, expected {shown}")
    if expected_dtype is not None and arr.dtype != np.dtype(expected_dtype):
        raise HarnessError(f"{path}: dtype {arr.dtype}, expected {expected_dtype}")
