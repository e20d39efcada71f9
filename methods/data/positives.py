"""Extended positives: for every caption, ALL images of its split that it truly describes (the
synthetic counterpart of ECCV Caption / CxC for COCO), read from ``positives_<dataset>.json``
beside the Karpathy file, and turned into the boolean (images x captions) matrix of a loaded
harness split, in the order of the evaluated score matrix (images in split order, captions
image-major, ``split.texts_per_image`` per image: caption k belongs to image k // texts_per_image).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from methods.data.karpathy import Split, load_karpathy
from methods.errors import HarnessError, first_line
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


def split_entries(karpathy_json: str | Path, split: Split, karpathy_splits: list[str]) -> list[dict]:
    """The Karpathy file's entries of a loaded harness split, checked to be its images in its order."""
    chosen = [e for e in load_karpathy(karpathy_json, split.texts_per_image) if e["split"] in karpathy_splits]
    if [int(e.get("imgid", i)) for i, e in enumerate(chosen)] != list(split.image_ids):
        raise HarnessError(f"{karpathy_json}: Karpathy split(s) {karpathy_splits} do not hold the images of the "
                           f"loaded split '{split.name}' in its order")
    return chosen


def caption_keys(karpathy_json: str | Path, split: Split, karpathy_splits: list[str]) -> list[tuple[str, int, int]]:
    """(Karpathy split, sentid, imgid) of every caption of ``split`` in caption order, from the
    Karpathy file the split was loaded from (the same images and first texts_per_image sentences)."""
    chosen = split_entries(karpathy_json, split, karpathy_splits)
    ids = list(split.image_ids)
    try:
        return [(e["split"], int(s["sentid"]), imgid)
                for e, imgid in zip(chosen, ids) for s in e["sentences"][:split.texts_per_image]]
    except (KeyError, TypeError, ValueError) as exc:
        raise HarnessError(f"{karpathy_json}: a sentence of split '{split.name}' has no integer 'sentid' "
                           f"({first_line(exc)}); extended positives are keyed by sentid") from None


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


def split_positives(path: str | Path, split: Split, karpathy_json: str | Path,
                    karpathy_splits: list[str]) -> np.ndarray:
    """The extended-positives matrix of a loaded harness split (``karpathy_splits``: the Karpathy
    splits merged into it, the dataset config's ``splits`` entry)."""
    return positives_matrix(path, split, caption_keys(karpathy_json, split, karpathy_splits))
