"""Precomputed region features in the SCAN/SGRAF/VSRN layout.

``<dir>/{split}_ims.npy``: float32 (N_img, n_regions, dim), one row per image, or one row per
caption (old duplicated files); ``<dir>/{split}_caps.txt``: one caption per line, the dataset's
``texts_per_image`` per image (5 for the caption datasets, 1 for tag datasets).
Arrays are opened with memory mapping, never read whole (COCO train is ~33 GB).
"""
from __future__ import annotations

import hashlib
from itertools import combinations
from pathlib import Path

import numpy as np

from methods.data.karpathy import Split, SplitIndex
from methods.errors import HarnessError
from methods.io import load_npy, read_lines

LAYOUT = ("<precomp_dir>/{split}_ims.npy float (N, n_regions, dim) and <precomp_dir>/{split}_caps.txt "
          "with texts_per_image lines per image (5: image k has caption lines 5k..5k+4)")


def count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def open_precomp(precomp_dir: str | Path, split: str, n_regions: int, feature_dim: int | None,
                 texts_per_image: int) -> tuple[np.ndarray, list[str], int]:
    """Return (memmapped features, captions, image_step) after checking shapes and counts
    (``feature_dim`` None: any).

    With t = ``texts_per_image``, ``image_step`` is t when features have one row per caption (image
    of caption k is row k, the same image repeated), else 1; the image of caption k is row
    ``(k // t) * image_step``. With t = 1, one row per caption is one row per image: step 1.
    """
    precomp_dir = Path(precomp_dir)
    ims_path, caps_path = precomp_dir / f"{split}_ims.npy", precomp_dir / f"{split}_caps.txt"
    for p in (ims_path, caps_path):
        if not p.is_file():
            raise HarnessError(f"precomputed feature file not found: {p} (expected layout: {LAYOUT})")
    ims = load_npy(ims_path)
    if ims.ndim != 3 or ims.shape[1] != n_regions or feature_dim not in (None, ims.shape[2]):
        raise HarnessError(f"{ims_path}: shape {ims.shape}, expected (N, {n_regions}, {feature_dim or 'C'})")
    if not np.issubdtype(ims.dtype, np.floating):
        raise HarnessError(f"{ims_path}: dtype {ims.dtype}, expected a float array")
    captions = [line.strip() for line in read_lines(caps_path)]
    n_img, n_cap = ims.shape[0], len(captions)
    t = texts_per_image
    if n_cap == t * n_img:
        step = 1
    elif n_cap == n_img and n_img % t == 0:   # t > 1 here
        step = t
    else:
        blank = [i + 1 for i, c in enumerate(captions) if not c]
        hint = (f" (line {blank[0]} is blank{'' if len(blank) == 1 else f', and {len(blank) - 1} more'}: "
                f"one caption per line, no blank lines)" if blank else "")
        raise HarnessError(f"{caps_path}: {n_cap} captions for {n_img} feature rows in {ims_path}; "
                           f"expected {t} x rows (texts_per_image; or one row per caption){hint}")
    return ims, captions, step


FINGERPRINT_BYTES = 1 << 20  # hashed at each end of a file


def file_fingerprint(path: Path) -> tuple[int, str]:
    """Size and a hash of the first and last MiB of a file: two feature files with the same
    fingerprint are copies of one file, told without reading a 33 GB COCO file whole."""
    size = path.stat().st_size
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(FINGERPRINT_BYTES))
        if size > FINGERPRINT_BYTES:
            f.seek(max(FINGERPRINT_BYTES, size - FINGERPRINT_BYTES))
            digest.update(f.read())
    return size, digest.hexdigest()


def check_precomp_splits(precomp_dir: str | Path, opened: dict[str, tuple[np.ndarray, list[str], int]],
                         splits: dict[str, Split | SplitIndex], split_map: dict[str, list[str]], where: str) -> None:
    """The precomputed files of each harness split hold that split's images: no two splits drawn
    from different Karpathy splits share a file (a dev file copied from train would select the
    model on training images), and each has one row per image of its Karpathy split(s).
    ``opened``: ``open_precomp``'s result per split; ``split_map``: harness split -> Karpathy splits."""
    precomp_dir = Path(precomp_dir)
    for a, b in combinations(split_map, 2):
        if set(split_map[a]) & set(split_map[b]):
            continue  # drawn from the same Karpathy images: the same file is expected
        for suffix in ("_ims.npy", "_caps.txt"):
            path_a, path_b = precomp_dir / f"{a}{suffix}", precomp_dir / f"{b}{suffix}"
            if path_a.resolve() == path_b.resolve() or file_fingerprint(path_a) == file_fingerprint(path_b):
                raise HarnessError(f"{where}: {path_b} is the same file as {path_a} (same path, or same size and "
                                   f"bytes at both ends), but split '{b}' is Karpathy {split_map[b]} and '{a}' is "
                                   f"{split_map[a]}: each split needs the features of its own images")
    for split, (ims, _, step) in opened.items():
        n_images, expected = ims.shape[0] // step, len(splits[split])
        if n_images != expected:
            rows = f"{ims.shape[0]} rows, one per caption" if step > 1 else f"{ims.shape[0]} rows"
            raise HarnessError(f"{where}: {precomp_dir / f'{split}_ims.npy'} holds {n_images} images ({rows}), but "
                               f"split '{split}' (Karpathy {split_map[split]}) has {expected} images; expected "
                               f"the features of exactly its images, in the Karpathy file's order")


def check_npy_header(path: Path, expected_shape: tuple, expected_dtype: str | None = None) -> None:
    """Check a .npy file's shape/dtype from its header only (no data read). ``None`` in a shape matches any size."""
    if not path.is_file():
        raise HarnessError(f"feature file not found: {path}")
    arr = load_npy(path)
    if arr.ndim != len(expected_shape) or any(e is not None and e != s for e, s in zip(expected_shape, arr.shape)):
        shown = tuple("N" if e is None else e for e in expected_shape)
        raise HarnessError(f"{path}: shape {arr.shape}, expected {shown}")
    if expected_dtype is not None and arr.dtype != np.dtype(expected_dtype):
        raise HarnessError(f"{path}: dtype {arr.dtype}, expected {expected_dtype}")
