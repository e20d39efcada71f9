"""Karpathy split JSON (``dataset_flickr30k.json``, ``dataset_coco.json``, ``dataset_synthetic.json``)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from methods.errors import HarnessError
from methods.io import read_json

CAPTIONS_PER_IMAGE = 5
LAYOUT = ("a JSON object with 'images': [{'filename', 'split' (train|restval|val|test), "
          "'sentences': [{'raw': ...}, ...] (5 per image)}, ...] (Karpathy split file)")


@dataclass
class Split:
    """One harness split: images in order, and 5 captions per image (caption k -> image k // 5)."""

    name: str
    filenames: list[str]
    image_ids: list[int]
    captions: list[str]
    labels: list[list[int]] | None = None

    def __post_init__(self) -> None:
        if len(self.captions) != CAPTIONS_PER_IMAGE * len(self.filenames):
            raise HarnessError(
                f"split {self.name}: {len(self.captions)} captions for {len(self.filenames)} images; "
                f"expected exactly {CAPTIONS_PER_IMAGE} per image, in image order")

    def __len__(self) -> int:
        return len(self.filenames)


def load_karpathy(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise HarnessError(f"Karpathy split file not found: {path} (expected {LAYOUT})")
    try:
        data = read_json(path)
        images = data["images"]
        for entry in images:
            entry["filename"], entry["split"], entry["sentences"]  # noqa: B018 - presence check
    except (ValueError, KeyError, TypeError) as exc:
        raise HarnessError(f"{path}: malformed Karpathy split file ({exc!r}); expected {LAYOUT}") from None
    return images


def build_split(images: list[dict], name: str, karpathy_splits: list[str], where: str) -> Split:
    chosen = [e for e in images if e["split"] in karpathy_splits]
    if not chosen:
        raise HarnessError(f"{where}: no images in Karpathy split(s) {karpathy_splits} for harness split '{name}'")
    captions: list[str] = []
    for e in chosen:
        sents = e["sentences"]
        if len(sents) < CAPTIONS_PER_IMAGE:
            raise HarnessError(f"{where}: image {e['filename']} has {len(sents)} captions; "
                               f"at least {CAPTIONS_PER_IMAGE} are needed")
        # COCO has a few images with 6-7 captions: the standard protocol keeps the first five.
        captions.extend(s["raw"].strip() for s in sents[:CAPTIONS_PER_IMAGE])
    labels = [e["labels"] for e in chosen] if all("labels" in e for e in chosen) else None
    # COCO's Karpathy file keeps train2014/val2014 in 'filepath'; Flickr30K has one folder.
    filenames = [f"{e['filepath']}/{e['filename']}" if e.get("filepath") else e["filename"] for e in chosen]
    return Split(name, filenames,
                 [int(e.get("imgid", i)) for i, e in enumerate(chosen)], captions, labels)


def load_splits(path: str | Path, split_map: dict[str, list[str]]) -> dict[str, Split]:
    images = load_karpathy(path)
    return {name: build_split(images, name, ks, str(path)) for name, ks in split_map.items()}
