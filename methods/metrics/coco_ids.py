"""The COCO ids ECCV Caption and CxC score by: the ``eccv_caption`` package's ``coco_test_ids.npy``
(25,000 caption annotation ids, five per COCO 5K test image, the order VSE++ and PCME evaluate
in), checked against the image order of a harness split (``methods.metrics.eccv_caption`` has
the details and the metrics).

The package's files are found without importing the package: building the Snakemake DAG checks a
split against them and needs none of the package's metric code (nor its import-time warnings).
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

from methods.data.karpathy import CAPTIONS_PER_IMAGE, Split, SplitIndex, integer_coco_ids
from methods.errors import HarnessError

_PACKAGE = importlib.util.find_spec("eccv_caption")
if _PACKAGE is None:
    raise ModuleNotFoundError("No module named 'eccv_caption'", name="eccv_caption")
PACKAGE_DATA = Path(_PACKAGE.origin).parent / "data"


def package_caption_ids() -> np.ndarray:
    return np.load(PACKAGE_DATA / "coco_test_ids.npy")


def package_caption_images() -> dict[int, int]:
    """COCO caption id -> its COCO image id (the package's original COCO ground truth)."""
    with open(PACKAGE_DATA / "original_caption_to_image.json") as f:
        return {int(k): int(v[0]) for k, v in json.load(f).items()}


def coco_id_arrays(image_ids: list[int], where: str) -> tuple[np.ndarray, np.ndarray]:
    """The COCO ids of images ``image_ids`` (in row order) and the package's caption ids for
    them, checked: each row's five ids are captions of that row's image."""
    caption_ids = package_caption_ids()
    if len(caption_ids) != CAPTIONS_PER_IMAGE * len(image_ids):
        raise HarnessError(f"{where}: {len(image_ids)} images, but ECCV Caption / CxC are defined on the COCO 5K "
                           f"test set ({len(caption_ids) // CAPTIONS_PER_IMAGE} images, eccv_caption's "
                           f"coco_test_ids.npy)")
    image_of = package_caption_images()
    blocks = caption_ids.reshape(-1, CAPTIONS_PER_IMAGE)
    for row, (image, block) in enumerate(zip(image_ids, blocks)):
        owners = {image_of.get(int(c)) for c in block}
        if owners != {int(image)}:
            raise HarnessError(f"{where}: row {row} is COCO image {image}, but eccv_caption's coco_test_ids.npy has "
                               f"captions of image(s) {sorted(o for o in owners if o is not None) or 'unknown'} "
                               f"at captions {row * CAPTIONS_PER_IMAGE}-{row * CAPTIONS_PER_IMAGE + 4}: the split's "
                               f"image order differs from the COCO 5K test order ECCV Caption uses")
    return np.asarray(image_ids, dtype=np.int64), caption_ids.astype(np.int64)


def split_coco_id_arrays(karpathy_json: str | Path, split: Split | SplitIndex) -> tuple[np.ndarray, np.ndarray]:
    """``coco_id_arrays`` of a harness split loaded from ``karpathy_json``: its images' ``cocoid``."""
    if split.texts_per_image != CAPTIONS_PER_IMAGE:
        raise HarnessError(f"{karpathy_json} split '{split.name}': {split.texts_per_image} texts per image, but ECCV "
                           f"Caption / CxC are defined on {CAPTIONS_PER_IMAGE} captions per COCO image")
    image_ids = integer_coco_ids(split, str(karpathy_json), "ECCV Caption / CxC identify images by COCO id")
    return coco_id_arrays(image_ids, f"{karpathy_json} split '{split.name}'")
