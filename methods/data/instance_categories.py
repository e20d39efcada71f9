"""The object categories annotated in each image of a COCO split, from the COCO instance annotations
(``instances_train2014.json`` / ``instances_val2014.json`` in the folder ``datasets.<name>.instance_annotations``):
what plausible-match R-Precision (PCME's PMRP) compares images by.

Each image of a harness split is looked up by its Karpathy ``cocoid`` in the file of its folder
(the Karpathy ``filepath``: train2014 or val2014). Its row is multi-hot over COCO's category ids
1-90, column id - 1, as naver-ai/pcme's ``evaluate_pmrp_coco.py`` codes it (80 of the 90 ids are
used; the ten others stay zero and change no distance); an image with no instance annotation has
a row of zeros. The file is read with the standard JSON reader (no pycocotools), whole: the
validation file takes ~1.5 GB of Python objects for the few seconds of the job, which writes
``instance_categories.npz`` (one uint8 array per split) so that evaluations read kilobytes.

``python -m methods.data.instance_categories --dataset-config results/<dataset>/dataset.json --splits testall --out F.npz``
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from methods.cli import run_command
from methods.data.datasets import load_dataset_payload
from methods.data.karpathy import Split, SplitIndex, integer_coco_ids
from methods.errors import HarnessError
from methods.io import atomic_path, read_json

N_CATEGORY_IDS = 90        # COCO's category ids run 1..90 (80 used)
FOLDERS = ("train2014", "val2014")
MAX_FILE_BYTES = 1 << 30   # instances_train2014.json is 332 MB: a larger file is not a COCO annotation file


def annotation_file(folder: Path, image_folder: str) -> Path:
    return folder / f"instances_{image_folder}.json"


def image_folder(filename: str, where: str) -> str:
    """The COCO image folder (train2014 / val2014) of a split's image file name."""
    first = filename.split("/", 1)[0]
    if "/" not in filename or first not in FOLDERS:
        raise HarnessError(f"{where}: image {filename} is in no COCO folder ({' / '.join(FOLDERS)}: the Karpathy "
                           f"'filepath'), so no instance annotation file covers it")
    return first


def needed_files(folder: Path, split: Split | SplitIndex, where: str) -> list[Path]:
    """The instance annotation files the images of ``split`` are in, in ``FOLDERS`` order."""
    used = {image_folder(f, where) for f in split.filenames}
    return [annotation_file(folder, f) for f in FOLDERS if f in used]


def check_instance_annotations(folder: str | None, key: str, splits: dict[str, Split | SplitIndex]) -> None:
    """At DAG build: ``key`` is set, and the files the splits' images need are there, non-empty, no
    larger than a COCO annotation file, and start as JSON objects (parsing them takes seconds: the job does)."""
    if not folder:
        raise HarnessError(f"{key}: not set; plausible-match protocols need the COCO instance annotations "
                           f"(a folder with instances_val2014.json, and instances_train2014.json for train2014 "
                           f"images), or remove the protocols from the dataset's protocols")
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise HarnessError(f"{key}: folder not found: {root}")
    for name, split in splits.items():
        for path in needed_files(root, split, f"{key} (split '{name}')"):
            if not path.is_file():
                raise HarnessError(f"{key}: {path} not found (the instance annotations of split '{name}')")
            size = path.stat().st_size
            if size == 0 or size > MAX_FILE_BYTES:
                raise HarnessError(f"{key}: {path} has {size} bytes; a COCO instance annotation file has "
                                   f"between 1 and {MAX_FILE_BYTES} (instances_val2014.json: 158 MB)")
            with open(path, "rb") as f:
                head = f.read(64).lstrip()
            if not head.startswith(b"{"):
                raise HarnessError(f"{key}: {path} is not a JSON object (a COCO annotation file starts with '{{')")


def file_categories(path: Path, image_ids: set[int]) -> tuple[dict[int, np.ndarray], set[int]]:
    """Of the images ``image_ids``: their category rows (those with an annotation) and the ids the
    file lists among its images."""
    if path.stat().st_size > MAX_FILE_BYTES:
        raise HarnessError(f"{path}: larger than {MAX_FILE_BYTES} bytes, not a COCO instance annotation file")
    data = read_json(path, "COCO instance annotations ({'images': [...], 'annotations': [...]})")
    if not isinstance(data, dict) or not isinstance(data.get("images"), list) or not isinstance(
            data.get("annotations"), list):
        raise HarnessError(f"{path}: not COCO instance annotations (a JSON object with 'images' and 'annotations' lists)")
    listed = set()
    for i, image in enumerate(data["images"]):
        ident = image.get("id") if isinstance(image, dict) else None
        if isinstance(ident, bool) or not isinstance(ident, int):
            raise HarnessError(f"{path}: images[{i}] has no integer 'id'")
        if ident in image_ids:
            listed.add(ident)
    rows: dict[int, np.ndarray] = {}
    for i, ann in enumerate(data["annotations"]):
        image, category = (ann.get("image_id"), ann.get("category_id")) if isinstance(ann, dict) else (None, None)
        if any(isinstance(v, bool) or not isinstance(v, int) for v in (image, category)):
            raise HarnessError(f"{path}: annotations[{i}] has no integer 'image_id' and 'category_id'")
        if not 1 <= category <= N_CATEGORY_IDS:
            raise HarnessError(f"{path}: annotations[{i}] has category_id {category}; COCO's run 1-{N_CATEGORY_IDS}")
        if image in image_ids:
            rows.setdefault(image, np.zeros(N_CATEGORY_IDS, dtype=np.uint8))[category - 1] = 1
    return rows, listed


def split_categories(folder: str | Path, split: Split, where: str) -> np.ndarray:
    """(N, 90) uint8: the categories annotated in each image of ``split``, in its order."""
    coco_ids = integer_coco_ids(split, where, "the instance annotations name images by COCO id")
    root = Path(folder).expanduser()
    folders = [image_folder(f, where) for f in split.filenames]
    out = np.zeros((len(split), N_CATEGORY_IDS), dtype=np.uint8)
    for name in FOLDERS:
        members = [i for i, f in enumerate(folders) if f == name]
        if not members:
            continue
        path = annotation_file(root, name)
        rows, listed = file_categories(path, {coco_ids[i] for i in members})
        missing = next((i for i in members if coco_ids[i] not in listed), None)
        if missing is not None:
            raise HarnessError(f"{path}: lists no image {coco_ids[missing]} ({split.filenames[missing]}, image "
                               f"{missing} of split '{split.name}'): not the annotations of these images")
        for i in members:
            if coco_ids[i] in rows:
                out[i] = rows[coco_ids[i]]
    return out


def read_categories(path: str | Path, split: str, n_images: int | None = None) -> np.ndarray:
    """Split ``split``'s category rows from the job's ``instance_categories.npz``: its first
    ``n_images`` (a smoke run evaluates the first images of its split); None: every row."""
    try:
        with np.load(path, allow_pickle=False) as f:
            if split not in f.files:
                raise HarnessError(f"{path}: no categories of split '{split}' (it has {', '.join(f.files) or 'none'})")
            rows = f[split]
    except (OSError, ValueError) as exc:
        raise HarnessError(f"{path}: cannot read the instance categories ({exc})") from None
    n_images = len(rows) if n_images is None else n_images
    if rows.ndim != 2 or rows.shape[1] != N_CATEGORY_IDS or len(rows) < n_images:
        raise HarnessError(f"{path}: split '{split}' has categories of shape {rows.shape}; expected at least "
                           f"({n_images}, {N_CATEGORY_IDS})")
    return rows[:n_images]


def write_categories(args) -> None:
    payload = load_dataset_payload(args.dataset_config)
    folder = payload.paths.get("instance_annotations")
    key = f"datasets.{payload.name}.instance_annotations"
    if not folder:
        raise HarnessError(f"{key}: not set")
    arrays = {s: split_categories(folder, payload.split(s), key) for s in args.splits}
    with atomic_path(args.out, suffix=".npz") as tmp:
        np.savez(tmp, **arrays)
    for name, rows in arrays.items():
        print(f"instance categories of split '{name}': {len(rows)} images, {int((rows.sum(axis=1) == 0).sum())} "
              f"without an instance annotation, {int(rows.any(axis=0).sum())} categories seen")


def main(argv: list[str] | None = None) -> None:
    def arguments(p):
        p.add_argument("--splits", nargs="+", required=True, help="the harness splits plausible-match protocols test")
        p.add_argument("--out", required=True)
    run_command(__doc__, arguments, write_categories, argv)


if __name__ == "__main__":
    main()
