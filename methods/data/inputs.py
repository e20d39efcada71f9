"""Load what a model reads of one split, by the model's image input (``methods.models.IMAGE_INPUT``):

- ``pooled``: captions and file names from the Karpathy split, cached pooled CNN features from
  ``<features_dir>/<split>_pooled.npy`` (a DAG output);
- ``regions``: captions and region features from a precomputed BUTD directory
  (``<features_dir>/<split>_ims.npy`` + ``_caps.txt``), whose captions are the ones aligned
  with its feature rows.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from methods.data.precomp import check_npy_header, open_precomp
from methods.training.data import CachedImageFeatures, SplitData


def region_shape(dataset_cfg: dict) -> tuple[int, int | None]:
    """(regions per image, feature dim) expected of precomputed region files; the synthetic
    regions take the channel count of the grid layer they pool (checked against the model input)."""
    if "precomp" in dataset_cfg:
        return dataset_cfg["precomp"]["n_regions"], dataset_cfg["precomp"]["feature_dim"]
    return dataset_cfg["features"]["region"]["n_regions"], None


def load_split_data(payload: dict, split: str, source: str, features_dir: str | Path) -> SplitData:
    from methods.workflow import payload_splits

    features_dir = Path(features_dir)
    if source == "regions":
        n_regions, dim = region_shape(payload["dataset"])
        ims, captions, step = open_precomp(features_dir, split, n_regions, dim)
        return SplitData(split, captions, CachedImageFeatures(ims, step), None)
    karpathy = payload_splits(payload, [split])[split]
    path = features_dir / f"{split}_pooled.npy"
    check_npy_header(path, (len(karpathy), None))
    return SplitData(split, karpathy.captions, CachedImageFeatures(np.load(path, mmap_mode="r")),
                     karpathy.filenames)
