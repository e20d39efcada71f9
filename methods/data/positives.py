"""Extended positives: for every caption, ALL images of its split that it truly describes (the
synthetic counterpart of ECCV Caption / CxC for COCO), read from ``positives_<dataset>.json``
beside the Karpathy file, and turned into the boolean (images x captions) matrix of a loaded
harness split, in the order of the evaluated score matrix (images in split order, captions
image-major, ``split.texts_per_image`` per image: caption k belongs to image k // texts_per_image).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from methods.data.karpathy import Split
from methods.errors import HarnessError
from methods.io import read_json

LAYOUT = ('{"dataset": ..., "definition": ..., "splits": {"<Karpathy split>": {"caption_images": '
          '{"<sentid>": [imgid, ...], ...}}, ...}} (every caption of the split, each list holding its own image)')


def load_positives(path: str | Path) -> dict[str, dict[str, list[int]]]:
    """Karpathy split -> {sentid (str): [imgid, ...]} of an extended-positives file."""
    path = Path(path)
    if not path.is_file():
        raise HarnessError(f"extended-positives file not found: {path} (expected {LAYOUT})")
    data = read_json(path, LAYOUT)
    splits = data.get("splits") if isinstance(data, dict) else None
    if not isinstance(splits, dict):
        raise HarnessError(f"{path}: no 'splits' object at the top level; expected {LAYOUT}")
    for name, split in splits.items():
        captions = split.get("caption_images") if isinstance(split, dict) else None
        if not isinstance(captions, dict) or not all(isinstance(v, list) for v in captions.values()):
            raise HarnessError(f"{path}: splits.{name}.caption_images must map each sentid to a list of image ids; "
                               f"expected {LAYOUT}")
    return {name: split["caption_images"] for name, split in splits.items()}


def caption_keys(karpathy_json: str | Path, split: Split) -> list[tuple[str, int, int]]:
    """(Karpathy split, sentid, imgid) of every caption of ``split`` in caption order, as loaded from
    the Karpathy file ``karpathy_json`` (the same images and first texts_per_image sentences)."""
    if split.caption_keys is None:
        raise HarnessError(f"split '{split.name}' was not loaded from a Karpathy file: it has no sentids")
    imgids = [imgid for imgid in split.image_ids for _ in range(split.texts_per_image)]
    keys = []
    for (karpathy_split, sentid), imgid in zip(split.caption_keys, imgids):
        if isinstance(sentid, bool) or not isinstance(sentid, int):
            raise HarnessError(f"{karpathy_json}: a sentence of split '{split.name}' (image {imgid}) has no integer "
                               f"'sentid' ({sentid!r}); extended positives are keyed by sentid")
        keys.append((karpathy_split, sentid, imgid))
    return keys


def positives_matrix(path: str | Path, split: Split, captions: list[tuple[str, int, int]]) -> np.ndarray:
    """(n_images, n_captions) boolean matrix of ``split``: entry [i, k] is True when caption k
    describes image i. ``captions``: (Karpathy split, sentid, own imgid) per caption, in order."""
    by_split = load_positives(path)
    row_of = {imgid: row for row, imgid in enumerate(split.image_ids)}
    if len(captions) != len(split.captions):
        raise HarnessError(f"split '{split.name}': {len(captions)} caption ids for {len(split.captions)} captions")
    matrix = np.zeros((len(split), len(captions)), dtype=bool)
    for col, (karpathy_split, sentid, own) in enumerate(captions):
        if karpathy_split not in by_split:
            raise HarnessError(f"{path}: no split '{karpathy_split}' under 'splits' (it has: "
                               f"{', '.join(sorted(by_split)) or 'none'}); harness split '{split.name}' needs it")
        images = by_split[karpathy_split].get(str(sentid))
        if images is None:
            raise HarnessError(f"{path}: caption sentid {sentid} (image {own}, split '{karpathy_split}') has no "
                               f"entry in splits.{karpathy_split}.caption_images")
        rows = []
        for imgid in images:
            if isinstance(imgid, bool) or not isinstance(imgid, int) or imgid not in row_of:
                raise HarnessError(f"{path}: caption sentid {sentid} lists image {imgid!r}, which is not an image "
                                   f"of harness split '{split.name}'")
            rows.append(row_of[imgid])
        if own not in images:
            raise HarnessError(f"{path}: caption sentid {sentid} does not list its own image {own} "
                               f"(splits.{karpathy_split}.caption_images)")
        matrix[rows, col] = True
    return matrix


def split_positives(path: str | Path, split: Split, karpathy_json: str | Path) -> np.ndarray:
    """The extended-positives matrix of a harness split loaded from ``karpathy_json``."""
    return positives_matrix(path, split, caption_keys(karpathy_json, split))
