"""A synthetic multi-label tag dataset in the label-wise source layout (``methods.data.multilabel``),
made from the built-in synthetic dataset's outputs, so that label-wise tables build with no data.

Per split ``s`` (the generating dataset's harness split: its val split is ``dev``), written to
the source folder:

- ``{s}_preim.npy``: a symlink to the synthetic RoIAlign regions ``<precomp>/{s}_ims.npy`` (no
  second feature extraction); ``{s}_box.npy`` its boxes, ``{s}_hw.npy`` (N, 2) image width, height;
- ``{s}_cls.npy`` (N, R, K) one-hot "detector" scores, K = the shapes + background: a
  ground-truth box row (the first rows, ``methods.features.regions``) has its object's shape, a
  random proposal the shape of the object it overlaps most if that IoU >= 0.5, else background;
- ``{s}_tag.mat`` ``feat`` (N, T) binary: the scene's words (each object's shape, colour, size and
  cell, the background colour and pattern), each dropped with probability ``tag_drop`` (seeded
  per image: real tags are incomplete); ``tags.txt`` the tag list;
- ``{s}_label.mat`` ``feat`` (N, C): the generator's multi-hot labels of the groups
  ``label_groups`` (e.g. shape, colour); ``label_names.txt`` their names.

``python -m methods.data.synthetic_tags --dataset-config results/<name>/dataset.json
--from-json dataset_synthetic.json --from-precomp results/synthetic/precomp --image-size 64 --out DIR``
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.io

from methods.cli import run_command
from methods.data.datasets import DatasetPayload, load_dataset_payload
from methods.data.multilabel import link, source_split
from methods.data.synthetic import BACKGROUNDS, CELL_WORDS, COLOURS, PATTERNS, SHAPES, SIZES
from methods.errors import HarnessError
from methods.io import atomic_path, load_npy, read_json, read_lines, save_npy, write_text

CELL_TAGS = {cell: "".join(words.split()[2:]) for cell, words in CELL_WORDS.items()}  # "at the top left" -> topleft
TAGS = list(SHAPES) + list(COLOURS) + list(SIZES) + [CELL_TAGS[c] for c in sorted(CELL_TAGS)] + list(BACKGROUNDS) + PATTERNS
CLASSES = list(SHAPES) + ["background"]
IOU_THRESHOLD = 0.5


def scene_tags(entry: dict) -> set[str]:
    """Every word of a generated image's scene (before any drop)."""
    words = {entry["background"], entry["pattern"]}
    for obj in entry["box_labels"]:
        words |= {obj["shape"], obj["colour"], obj["size"], CELL_TAGS[tuple(obj["cell"])]}
    return words


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of ``a`` (n, 4) with every box of ``b`` (m, 4), x0 y0 x1 y1."""
    x0 = np.maximum(a[:, None, 0], b[None, :, 0])
    y0 = np.maximum(a[:, None, 1], b[None, :, 1])
    x1 = np.minimum(a[:, None, 2], b[None, :, 2])
    y1 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
    area = lambda z: (z[:, 2] - z[:, 0]) * (z[:, 3] - z[:, 1])  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


def region_classes(boxes: np.ndarray, object_boxes: np.ndarray, object_classes: list[int], background: int) -> np.ndarray:
    """Class of each region row: rows < number of objects are the objects' own boxes (in order);
    a later row (random proposal) takes the class of the object of highest IoU if >= 0.5, else
    ``background``."""
    classes = np.full(len(boxes), background, dtype=np.int64)
    n_obj = min(len(object_boxes), len(boxes))
    classes[:n_obj] = object_classes[:n_obj]
    if len(object_boxes) and len(boxes) > n_obj:
        overlap = iou(boxes[n_obj:], np.asarray(object_boxes, dtype=np.float64))
        best = overlap.argmax(axis=1)
        hit = overlap[np.arange(len(best)), best] >= IOU_THRESHOLD
        classes[n_obj:][hit] = np.asarray(object_classes)[best[hit]]
    return classes


def save_mat(path: Path, array: np.ndarray) -> None:
    with atomic_path(path, suffix=".mat") as tmp:
        scipy.io.savemat(str(tmp), {"feat": array})


def write_source(payload: DatasetPayload, from_json: Path, from_precomp: Path, image_size: int, out: Path, results_dir: Path) -> None:
    ds, gen = payload.dataset, payload.dataset["generated_from"]
    data = read_json(from_json)
    by_id = {e["imgid"]: e for e in data["images"]}
    label_names = data["label_names"]
    kept = [i for i, name in enumerate(label_names) if name.split(":")[0] in gen["label_groups"]]
    tag_index = {t: i for i, t in enumerate(TAGS)}
    out.mkdir(parents=True, exist_ok=True)
    for split in ds["splits"]:
        s = source_split(ds, split)
        ids = [int(line) for line in read_lines(from_precomp / f"{s}_ids.txt")]
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise HarnessError(f"{from_precomp / f'{s}_ids.txt'}: image id {missing[0]} is not in {from_json}")
        entries = [by_id[i] for i in ids]
        boxes = np.asarray(load_npy(from_precomp / f"{s}_boxes.npy"), dtype=np.float32)
        n, n_regions = boxes.shape[:2]
        if n != len(entries):
            raise HarnessError(f"{from_precomp / f'{s}_boxes.npy'}: {n} rows for {len(entries)} ids")
        cls = np.zeros((n, n_regions, len(CLASSES)), dtype=np.float32)
        tags = np.zeros((n, len(TAGS)), dtype=np.float32)
        for row, e in enumerate(entries):
            shapes = [CLASSES.index(o["shape"]) for o in e["box_labels"]]
            classes = region_classes(boxes[row], np.asarray(e["boxes"], dtype=np.float32).reshape(-1, 4),
                                     shapes, len(CLASSES) - 1)
            cls[row, np.arange(n_regions), classes] = 1.0
            drop = np.random.default_rng([gen["seed"], e["imgid"]]).random(len(TAGS)) < gen["tag_drop"]
            for t in scene_tags(e):
                tags[row, tag_index[t]] = 0.0 if drop[tag_index[t]] else 1.0
        labels = np.asarray([[e["labels"][i] for i in kept] for e in entries], dtype=np.int32).reshape(n, len(kept))
        link(from_precomp / f"{s}_ims.npy", out / f"{s}_preim.npy", results_dir)
        save_npy(out / f"{s}_box.npy", boxes)
        save_npy(out / f"{s}_hw.npy", np.full((n, 2), image_size, dtype=np.int64))
        save_npy(out / f"{s}_cls.npy", cls)
        save_mat(out / f"{s}_tag.mat", tags)
        save_mat(out / f"{s}_label.mat", labels)
        write_text(out / f"{s}_image_path.txt", "".join(e["filename"] + "\n" for e in entries))
        print(f"{s}: {n} images, {tags.sum(1).mean():.2f} tags per image (of {len(TAGS)}), {len(kept)} labels, "
              f"{(cls.argmax(-1) < len(CLASSES) - 1).mean():.3f} of regions on an object")
    write_text(out / ds["tag_list"], "".join(t + "\n" for t in TAGS))
    write_text(out / "label_names.txt", "".join(label_names[i] + "\n" for i in kept))


def _run(args) -> None:
    payload = load_dataset_payload(args.dataset_config)
    write_source(payload, Path(args.from_json), Path(args.from_precomp), args.image_size, Path(args.out),
                 Path(args.results_dir))


def _arguments(parser) -> None:
    parser.add_argument("--from-json", required=True, help="the generating dataset's dataset_<name>.json")
    parser.add_argument("--from-precomp", required=True, help="its precomp folder ({split}_ims/_boxes/_ids)")
    parser.add_argument("--image-size", type=int, required=True, help="its generator's image side")
    parser.add_argument("--out", required=True, help="the source folder to write")
    parser.add_argument("--results-dir", default="results", help="links inside it are relative")


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, _run, argv)


if __name__ == "__main__":
    main()
