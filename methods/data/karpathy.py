"""Karpathy split JSON (``dataset_flickr30k.json``, ``dataset_coco.json``, ``dataset_synthetic.json``)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from methods.errors import HarnessError, shorten
from methods.io import read_json

CAPTIONS_PER_IMAGE = 5  # the caption datasets (Flickr30K, COCO); protocols defined on 5 (ECCV Caption / CxC) need it
LAYOUT = ("a JSON object with 'images': [{'filename', 'split' (train|restval|val|test), "
          "'sentences': [{'raw': ...}, ...] (texts_per_image per image, e.g. 5 captions), "
          "optional 'labels': [0/1, ...] (multi-hot)}, ...] (Karpathy split file)")


@dataclass
class Split:
    """One harness split: images in order, and ``texts_per_image`` texts (captions) per image
    (text k -> image k // texts_per_image); ``labels``: each image's multi-hot labels, or None."""

    name: str
    filenames: list[str]
    image_ids: list[int]
    captions: list[str]
    texts_per_image: int
    labels: list[list[int]] | None = None
    # as the Karpathy file gives them (checked where they are used): each image's 'cocoid', and each
    # caption's (Karpathy split of its image, 'sentid'); None for a split not loaded from a file.
    # Kept so that no reader parses the file again (COCO's is 160 MB, ~1 GB of Python objects)
    coco_ids: list | None = None
    caption_keys: list[tuple[str, object]] | None = None

    def __post_init__(self) -> None:
        if len(self.captions) != self.texts_per_image * len(self.filenames):
            raise HarnessError(
                f"split {self.name}: {len(self.captions)} captions for {len(self.filenames)} images; "
                f"expected exactly {self.texts_per_image} per image, in image order")

    def __len__(self) -> int:
        return len(self.filenames)

    def head(self, n: int) -> Split:
        """The split's first ``n`` images (all of them when it has fewer) with their texts."""
        if n >= len(self):
            return self
        t = self.texts_per_image
        return Split(self.name, self.filenames[:n], self.image_ids[:n], self.captions[:n * t], t,
                     None if self.labels is None else self.labels[:n],
                     None if self.coco_ids is None else self.coco_ids[:n],
                     None if self.caption_keys is None else self.caption_keys[:n * t])


@dataclass(frozen=True)
class SplitIndex:
    """What a DAG build reads of one harness split (its image files in order, and their COCO ids),
    small enough to cache: COCO's Karpathy file takes seconds to parse, its index milliseconds."""

    name: str
    filenames: list[str]
    coco_ids: list | None
    texts_per_image: int

    def __len__(self) -> int:
        return len(self.filenames)

    def to_json(self) -> dict:
        return {"filenames": self.filenames, "coco_ids": self.coco_ids}

    @classmethod
    def from_json(cls, name: str, data: dict, texts_per_image: int) -> "SplitIndex":
        return cls(name, data["filenames"], data["coco_ids"], texts_per_image)

    @classmethod
    def of(cls, split: Split) -> "SplitIndex":
        return cls(split.name, split.filenames, split.coco_ids, split.texts_per_image)



def integer_coco_ids(split: Split | SplitIndex, where: str, why: str) -> list[int]:
    """The split's images' Karpathy ``cocoid``s, each an integer, else one error naming the first
    image without one (``where``: the file it came from; ``why``: what needs them)."""
    if split.coco_ids is None:
        raise HarnessError(f"split '{split.name}' was not loaded from a Karpathy file: it has no COCO ids")
    missing = next((i for i, c in enumerate(split.coco_ids) if isinstance(c, bool) or not isinstance(c, int)), None)
    if missing is not None:
        raise HarnessError(f"{where}: image {missing} of split '{split.name}' has no integer 'cocoid' ({why})")
    return split.coco_ids


def load_karpathy(path: str | Path, texts_per_image: int) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise HarnessError(f"Karpathy split file not found: {path} (expected {LAYOUT})")
    data = read_json(path, LAYOUT)
    images = data.get("images") if isinstance(data, dict) else None
    if not isinstance(images, list):
        raise HarnessError(f"{path}: no 'images' list at the top level; expected {LAYOUT}")
    for index, entry in enumerate(images):
        problem = image_entry_problem(entry, texts_per_image)
        if problem:
            named = isinstance(entry, dict) and isinstance(entry.get("filename"), str)
            name = f" ({entry['filename']})" if named else ""
            raise HarnessError(f"{path}: images[{index}]{name}: {problem}; expected {LAYOUT}")
    return images


def image_entry_problem(entry, texts_per_image: int) -> str | None:
    """What is wrong with one entry of a Karpathy file's 'images' list (None: nothing the harness
    reads); only its first ``texts_per_image`` sentences are read."""
    if not isinstance(entry, dict):
        return f"is a {type(entry).__name__}, not an object"
    for key in ("filename", "split"):
        if not isinstance(entry.get(key), str):
            if key not in entry:
                return f"no '{key}' string"
            return f"'{key}' is {shorten(repr(entry[key]), 60)}, not a string"
    if "filepath" in entry and not isinstance(entry["filepath"], str):
        return f"'filepath' is {shorten(repr(entry['filepath']), 60)}, not a string"
    if "imgid" in entry and (isinstance(entry["imgid"], bool) or not isinstance(entry["imgid"], int)):
        return f"'imgid' is {shorten(repr(entry['imgid']), 60)}, not an integer"
    sentences = entry.get("sentences")
    if not isinstance(sentences, list):
        return "no 'sentences' list" if "sentences" not in entry else "'sentences' is not a list"
    for k, sentence in enumerate(sentences[:texts_per_image]):  # the harness reads the first texts_per_image
        if not isinstance(sentence, dict) or not isinstance(sentence.get("raw"), str):
            return f"sentences[{k}] has no 'raw' caption string"
    return None


def check_captions_hold_words(path: str | Path, images: list[dict], texts_per_image: int) -> None:
    """A user's Karpathy file: every caption the harness reads holds a word (a blank one would train
    and score as a caption of no words). Not for the JSON the DAG writes from tag files, where an
    image without tags has an empty text, as in the public code."""
    for index, entry in enumerate(images):
        for k, sentence in enumerate(entry["sentences"][:texts_per_image]):
            if not sentence["raw"].strip():
                raise HarnessError(f"{path}: images[{index}] ({entry['filename']}): sentences[{k}] is "
                                   f"{'empty' if not sentence['raw'] else 'blank'}; every caption must hold words "
                                   f"(fix or remove the sentence)")


def build_split(images: list[dict], name: str, karpathy_splits: list[str], where: str, texts_per_image: int) -> Split:
    chosen = [e for e in images if e["split"] in karpathy_splits]
    if not chosen:
        raise HarnessError(f"{where}: no images in Karpathy split(s) {karpathy_splits} for harness split '{name}'")
    captions: list[str] = []
    for e in chosen:
        sents = e["sentences"]
        if len(sents) < texts_per_image:
            raise HarnessError(f"{where}: image {e['filename']} has {len(sents)} captions; "
                               f"at least {texts_per_image} are needed (datasets.<name>.texts_per_image)")
        # COCO has a few images with 6-7 captions: the standard protocol keeps the first five.
        captions.extend(s["raw"].strip() for s in sents[:texts_per_image])
    labelled = sum("labels" in e for e in chosen)
    if 0 < labelled < len(chosen):
        raise HarnessError(f"{where}: {labelled} of the {len(chosen)} images of split '{name}' have 'labels'; "
                           f"expected all or none")
    labels = [e["labels"] for e in chosen] if labelled else None
    # COCO's Karpathy file keeps train2014/val2014 in 'filepath'; Flickr30K has one folder.
    filenames = [f"{e['filepath']}/{e['filename']}" if e.get("filepath") else e["filename"] for e in chosen]
    return Split(name, filenames, [int(e.get("imgid", i)) for i, e in enumerate(chosen)], captions, texts_per_image,
                 labels, coco_ids=[e.get("cocoid") for e in chosen],
                 caption_keys=[(e["split"], s.get("sentid")) for e in chosen for s in e["sentences"][:texts_per_image]])


def load_splits(path: str | Path, split_map: dict[str, list[str]], texts_per_image: int,
                blank_captions: bool = True) -> dict[str, Split]:
    """The harness splits of a Karpathy file; ``texts_per_image``: the dataset config's count;
    ``blank_captions`` False: refuse a caption without words (``check_captions_hold_words``)."""
    images = load_karpathy(path, texts_per_image)
    if not blank_captions:
        check_captions_hold_words(path, images, texts_per_image)
    return {name: build_split(images, name, ks, str(path), texts_per_image) for name, ks in split_map.items()}
