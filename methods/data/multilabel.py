"""Multi-label datasets (dataset kind ``multilabel``) read from the layout of the label-wise public
code (Yang et al., IJCAI 2021; njustkmg/IJCAI21 utils/data_m.py) and imported into the harness
layout that the ``regions`` image input reads.

Source directory (``datasets.<name>.source_dir``), per source split ``s`` (train / dev / test, or
coco_precomp's train / dev / test / testall), one row per image in every file:

- ``text: tags`` (MIRFlickr-25K, NUS-WIDE): ``{s}_preim.npy`` float (N, R, D) region features,
  ``{s}_tag.mat`` ``feat`` binary (N, T) tag vectors (tag t = the first whitespace field of line t
  of ``tag_list``, lower-cased: common_tags.txt / TagList1k.txt), ``{s}_label.mat`` ``feat``
  multi-hot (N, C); optional ``{s}_cls.npy`` (N, R, K) detector class scores, ``{s}_box.npy``
  (N, R, 4). An image's text is its set tags in tag-list order, space-joined (data_m.py builds
  the same token list); an image with no tag gets the empty text (encoded <start> <end>).
- ``text: captions`` (COCO, coco_precomp): ``{s}_ims.npy`` (N, R, D), ``{s}_caps.txt``
  (texts_per_image lines per image), ``{s}_label.npy`` (or ``label_files[s]``) with one row per
  image or one per caption (a caption's row equals its image's: checked), optional ``{s}_cls.npy``.
- both: optional ``label_names.txt`` (a name per label column: the figures show them) and
  ``{s}_image_path.txt`` (a path per image, as the code's folders hold: the base name is looked up in
  ``datasets.<name>.images_dir`` by the retrieval-example figures).

Harness layout written under ``results/<name>/``: ``data/dataset_<name>.json`` (Karpathy layout,
``labels`` per image after ``label_columns``), ``precomp/{split}_ims.npy`` (a symlink to the
source features, never a copy: COCO train is 33 GB), ``precomp/{split}_caps.txt`` and, for a
split with a ``_cls.npy``, ``precomp/{split}_region_classes.npy`` (int64 argmax per region).

``python -m methods.data.multilabel --dataset-config results/<name>/dataset.json
(--json OUT | --split S --out-dir DIR | --split S --region-classes OUT)``
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse

from methods.cli import run_command
from methods.data.datasets import DatasetPayload, dataset_paths, load_dataset_payload
from methods.data.synthetic import LABELS as SYNTHETIC_LABELS
from methods.data.synthetic import SHAPES
from methods.data.tokenizers import Tokenizer
from methods.errors import HarnessError, first_line
from methods.io import atomic_path, load_npy, open_npy_for_writing, read_lines, write_json, write_text

LAYOUT = ("<source_dir>/{split}_preim.npy (N, R, D), {split}_tag.mat and {split}_label.mat with a 'feat' "
          "matrix of N rows, optional {split}_cls.npy (N, R, K), and the tag list (Yang et al., IJCAI 2021 "
          "code layout)")
CAPTIONS_LAYOUT = ("<source_dir>/{split}_ims.npy (N, R, D), {split}_caps.txt (texts_per_image lines per image), "
                   "{split}_label.npy (N or N x texts_per_image rows), optional {split}_cls.npy (coco_precomp)")
CLS_CHUNK = 512  # images per chunk of the region-class argmax (COCO train _cls.npy is tens of GB)


# ---------------------------------------------------------------------------------------------
# Source file names

def source_split(ds: dict, split: str) -> str:
    """The source file prefix of harness split ``split`` (one source split per harness split)."""
    return ds["splits"][split][0]


def feature_file(ds: dict, source_dir: Path, s: str) -> Path:
    return source_dir / (f"{s}_preim.npy" if ds["text"] == "tags" else f"{s}_ims.npy")


def label_file(ds: dict, source_dir: Path, s: str) -> Path:
    if ds["text"] == "tags":
        return source_dir / f"{s}_label.mat"
    return source_dir / ds.get("label_files", {}).get(s, f"{s}_label.npy")


def text_file(ds: dict, source_dir: Path, s: str) -> Path:
    return source_dir / (f"{s}_tag.mat" if ds["text"] == "tags" else f"{s}_caps.txt")


def source_files(ds: dict, source_dir: Path, split: str) -> list[Path]:
    """The source files one harness split's import reads (features, texts, labels; the tag list)."""
    s = source_split(ds, split)
    files = [feature_file(ds, source_dir, s), text_file(ds, source_dir, s), label_file(ds, source_dir, s)]
    return files + ([source_dir / ds["tag_list"]] if ds["text"] == "tags" else [])


# ---------------------------------------------------------------------------------------------
# Checks that read headers only (when the DAG is built, and again by the import job)

def mat_shape(path: Path, key: str = "feat") -> tuple[int, ...]:
    """Shape of matrix ``key`` of a MATLAB file, from its header (scipy.io.whosmat reads no data)."""
    if not path.is_file():
        raise HarnessError(f"file not found: {path}")
    try:
        found = {name: shape for name, shape, _ in scipy.io.whosmat(str(path))}
    except NotImplementedError:
        raise HarnessError(f"{path}: a MATLAB v7.3 (HDF5) file, which scipy cannot read; save it with "
                           f"save(..., '-v7')") from None
    except Exception as exc:  # scipy raises ValueError/TypeError/MatReadError on a damaged file
        raise HarnessError(f"{path}: not a readable MATLAB .mat file ({first_line(exc)})") from None
    if key not in found:
        raise HarnessError(f"{path}: no '{key}' matrix (has: {', '.join(sorted(found)) or 'none'})")
    return tuple(int(d) for d in found[key])


def load_mat(path: Path, key: str = "feat") -> np.ndarray:
    """Matrix ``key`` of a MATLAB file as a dense array; MATLAB sparse matrices (a legitimate way
    to store 0/1 tag and label matrices) are made dense."""
    try:
        value = scipy.io.loadmat(str(path), variable_names=[key])[key]
    except Exception as exc:
        raise HarnessError(f"{path}: not a readable MATLAB .mat file ({first_line(exc)})") from None
    return value.toarray() if scipy.sparse.issparse(value) else np.asarray(value)


def read_tag_list(path: Path) -> list[str]:
    """Tag t = the first whitespace field of line t, lower-cased (data_m.py's class2str)."""
    if not path.is_file():
        raise HarnessError(f"tag list not found: {path} (one tag per line, its first whitespace field)")
    tags = []
    for number, line in enumerate(read_lines(path), 1):
        fields = line.split()
        if not fields:
            raise HarnessError(f"{path}: line {number} is empty; expected one tag per line")
        tags.append(fields[0].lower())
    seen: dict[str, int] = {}
    for number, tag in enumerate(tags, 1):
        if tag in seen:
            raise HarnessError(f"{path}: line {number} repeats tag '{tag}' of line {seen[tag]}")
        seen[tag] = number
    return tags


def tag_words(tags: list[str], tokenizer: Tokenizer) -> list[str]:
    """The word each tag is written as in a text: the tag itself where the dataset's tokenizer reads
    it as one token, else ``tag<line index>`` (e.g. 'geo:tool=gmif' in MIRFlickr's list), so that
    every tag stays one word, as in the public code."""
    words = [t if tokenizer(t) == [t] else f"tag{i}" for i, t in enumerate(tags)]
    if len(set(words)) != len(words):
        clash = next(w for w in words if words.count(w) > 1)
        raise HarnessError(f"tag list: the tag word '{clash}' stands for two tags; rename the tag '{clash}'")
    return words


def check_source(cfg: dict, name: str) -> dict[str, int]:
    """Everything that can be checked without reading the arrays: the files exist, their headers
    (npy, .mat) agree on the image count of each split, which is the configured
    ``split_sizes``; tag columns = tag-list lines; label columns in range. Returns harness split ->
    images (empty for a source the DAG generates: its job checks it)."""
    ds = cfg["datasets"][name]
    where = f"datasets.{name}"
    if "generated_from" in ds:
        check_generator(cfg, name)
        return {}
    source_dir = dataset_paths(cfg, name)["source_dir"]
    if source_dir is None:
        raise HarnessError(f"dataset '{name}' is not configured: set {where}.source_dir (expected "
                           f"{LAYOUT if ds['text'] == 'tags' else CAPTIONS_LAYOUT}) in config/config.yaml "
                           f"or with --configfile")
    if not source_dir.is_dir():
        raise HarnessError(f"{where}.source_dir: folder not found: {source_dir}")
    return check_source_dir(ds, source_dir, where)


def check_source_dir(ds: dict, source_dir: Path, where: str) -> dict[str, int]:
    n_tags = len(read_tag_list(source_dir / ds["tag_list"])) if ds["text"] == "tags" else None
    sizes, label_widths = {}, {}
    for split in ds["splits"]:
        s = source_split(ds, split)
        if s not in ds["split_sizes"]:
            raise HarnessError(f"{where}.split_sizes: no size for source split '{s}' (harness split '{split}')")
        feats_path = feature_file(ds, source_dir, s)
        feats = load_npy(feats_path)
        pre = ds["precomp"]
        if feats.ndim != 3 or feats.shape[1:] != (pre["n_regions"], pre["feature_dim"]):
            raise HarnessError(f"{feats_path}: shape {feats.shape}, expected (N, {pre['n_regions']}, "
                               f"{pre['feature_dim']}) ({where}.precomp)")
        if not np.issubdtype(feats.dtype, np.floating):
            raise HarnessError(f"{feats_path}: dtype {feats.dtype}, expected a float array")
        n = feats.shape[0]
        if n != ds["split_sizes"][s]:
            raise HarnessError(f"{where}.split_sizes.{s}: {ds['split_sizes'][s]} images configured, but "
                               f"{feats_path} holds {n}")
        texts = text_file(ds, source_dir, s)
        if ds["text"] == "tags":
            shape = mat_shape(texts)
            if len(shape) != 2 or shape[0] != n:
                raise HarnessError(f"{texts}: 'feat' is {shape}, expected ({n}, tags): one row per image of {feats_path}")
            if shape[1] != n_tags:
                raise HarnessError(f"{texts}: {shape[1]} tag columns, but the tag list {source_dir / ds['tag_list']} "
                                   f"({where}.tag_list) has {n_tags} lines")
        else:
            if not texts.is_file():
                raise HarnessError(f"file not found: {texts} (expected {CAPTIONS_LAYOUT})")
            n_caps = len(read_lines(texts))
            if n_caps != ds["texts_per_image"] * n:
                raise HarnessError(f"{texts}: {n_caps} captions for the {n} images of {feats_path}; expected "
                                   f"{ds['texts_per_image']} per image ({where}.texts_per_image)")
        labels = label_file(ds, source_dir, s)
        shape = mat_shape(labels) if ds["text"] == "tags" else load_npy(labels).shape
        rows_ok = (n,) if ds["text"] == "tags" else (n, ds["texts_per_image"] * n)
        if len(shape) != 2 or shape[0] not in rows_ok:
            raise HarnessError(f"{labels}: labels of shape {shape}, expected ({' or '.join(map(str, rows_ok))}, "
                               f"classes): one row per image{'' if ds['text'] == 'tags' else ' or per caption'}")
        label_widths[labels] = shape[1]
        columns = ds.get("label_columns") or []
        if columns and max(columns) >= shape[1]:
            raise HarnessError(f"{where}.label_columns: column {max(columns)} is out of range: {labels} has "
                               f"{shape[1]} label columns")
        for optional, tail in ((f"{s}_cls.npy", None), (f"{s}_box.npy", 4)):
            path = source_dir / optional
            if path.is_file():
                arr = load_npy(path)
                if arr.ndim != 3 or arr.shape[:2] != (n, pre["n_regions"]) or tail not in (None, arr.shape[2]):
                    raise HarnessError(f"{path}: shape {arr.shape}, expected ({n}, {pre['n_regions']}, "
                                       f"{tail or 'classes'}): one row per image of {feats_path}")
        sizes[split] = n
    if len(set(label_widths.values())) > 1:
        raise HarnessError(f"{where}: the label files have different column counts: "
                           + ", ".join(f"{p.name} {w}" for p, w in label_widths.items()))
    return sizes


def label_count(cfg: dict, name: str) -> int | None:
    """The number of labels a multilabel dataset's items carry (after ``label_columns``), from the
    generator's label names or the train split's label file header; None when the source is not
    configured (``check_source`` says so)."""
    ds = cfg["datasets"][name]
    if "generated_from" in ds:
        return sum(label.split(":")[0] in ds["generated_from"]["label_groups"] for label in SYNTHETIC_LABELS)
    if ds.get("label_columns"):
        return len(ds["label_columns"])
    source_dir = dataset_paths(cfg, name)["source_dir"]
    path = None if source_dir is None else label_file(ds, source_dir, source_split(ds, "train"))
    if path is None or not path.is_file():
        return None
    return (mat_shape(path) if ds["text"] == "tags" else load_npy(path).shape)[1]


def check_model_labels(cfg: dict, name: str, model_cfg: dict, where: str) -> None:
    """A model with a label head (``model.n_classes``) predicts as many labels as the dataset has
    (checked when the DAG is built; training would fail at its first batch)."""
    if cfg["datasets"][name]["kind"] != "multilabel" or model_cfg.get("n_classes") is None:
        return
    count = label_count(cfg, name)
    if count is not None and count != model_cfg["n_classes"]:
        raise HarnessError(f"{where}: model.n_classes is {model_cfg['n_classes']}, but dataset {name} has {count} "
                           f"labels (set the method file's preset for {name}, or datasets.{name}.label_columns)")
    classes = region_class_count(cfg, name) if model_cfg.get("region_classes") else None
    if classes is not None and classes > model_cfg["n_region_classes"]:
        raise HarnessError(f"{where}: model.n_region_classes is {model_cfg['n_region_classes']}, but the detector "
                           f"scores of dataset {name} have {classes} classes")


def region_class_count(cfg: dict, name: str) -> int | None:
    """Detector classes of a multilabel dataset's regions (the last axis of train ``_cls.npy``,
    from its header); None when not configured or absent."""
    ds = cfg["datasets"][name]
    source_dir = dataset_paths(cfg, name)["source_dir"]
    if "generated_from" in ds:
        return len(SHAPES) + 1   # the synthetic tags' region classes: the shapes and background
    path = None if source_dir is None else source_dir / f"{source_split(ds, 'train')}_cls.npy"
    return None if path is None or not path.is_file() else load_npy(path).shape[-1]


def check_generator(cfg: dict, name: str) -> None:
    """A generated source (``generated_from``) names a configured synthetic dataset with region
    features whose harness splits include this dataset's source splits."""
    ds = cfg["datasets"][name]
    src = ds["generated_from"]["dataset"]
    key = f"datasets.{name}.generated_from.dataset"
    if src not in cfg["datasets"] or cfg["datasets"][src]["kind"] != "synthetic":
        raise HarnessError(f"{key}: '{src}' is not a configured synthetic dataset")
    if "region" not in cfg["datasets"][src]["features"]:
        raise HarnessError(f"{key}: datasets.{src}.features.region is not set: the tag dataset reuses its regions")
    for split in ds["splits"]:
        s = source_split(ds, split)
        if s not in cfg["datasets"][src]["splits"]:
            raise HarnessError(f"datasets.{name}.splits.{split}: '{s}' is not a split of {src} "
                               f"({', '.join(cfg['datasets'][src]['splits'])})")
        if ds["split_sizes"].get(s) != cfg["datasets"][src]["generator"]["splits"][source_split(cfg["datasets"][src], s)]:
            raise HarnessError(f"datasets.{name}.split_sizes.{s}: must equal the {src} generator's size of that "
                               f"split ({cfg['datasets'][src]['generator']['splits']})")


# ---------------------------------------------------------------------------------------------
# Reading the arrays (the import job)

def binary(array: np.ndarray, path: Path, what: str) -> np.ndarray:
    ok = (array == 0) | (array == 1)
    if not ok.all():
        bad = np.unique(array[~ok])[:3]
        raise HarnessError(f"{path}: {what} must be binary (0/1), found {', '.join(map(str, bad))}")
    return array.astype(np.uint8)


def split_labels(ds: dict, source_dir: Path, split: str, n: int) -> np.ndarray:
    """(N, C) uint8 labels of a harness split, after ``label_columns``."""
    s = source_split(ds, split)
    path = label_file(ds, source_dir, s)
    raw = load_mat(path) if ds["text"] == "tags" else np.asarray(load_npy(path))
    labels = binary(raw, path, "labels")
    if labels.shape[0] == ds["texts_per_image"] * n and ds["texts_per_image"] > 1:
        groups = labels.reshape(n, ds["texts_per_image"], -1)
        differ = np.flatnonzero((groups != groups[:, :1]).any(axis=(1, 2)))
        if differ.size:
            raise HarnessError(f"{path}: the caption rows of image {differ[0]} (rows "
                               f"{differ[0] * ds['texts_per_image']}..{(differ[0] + 1) * ds['texts_per_image'] - 1}) "
                               f"differ; a caption's labels are its image's")
        labels = groups[:, 0]
    if labels.shape[0] != n:
        raise HarnessError(f"{path}: {labels.shape[0]} label rows for {n} images")
    columns = ds.get("label_columns")
    return labels[:, columns] if columns else labels


def split_texts(ds: dict, source_dir: Path, split: str, n: int, tokenizer: Tokenizer) -> list[str]:
    """The texts of a harness split, ``texts_per_image`` per image in image order."""
    s = source_split(ds, split)
    path = text_file(ds, source_dir, s)
    if ds["text"] == "captions":
        return [line.strip() for line in read_lines(path)]
    words = np.asarray(tag_words(read_tag_list(source_dir / ds["tag_list"]), tokenizer), dtype=object)
    tags = binary(load_mat(path), path, "tag vectors")
    if tags.shape != (n, len(words)):
        raise HarnessError(f"{path}: 'feat' is {tags.shape}, expected ({n}, {len(words)})")
    return [" ".join(words[np.flatnonzero(row)]) for row in tags]


def split_size(ds: dict, source_dir: Path, split: str) -> int:
    return int(load_npy(feature_file(ds, source_dir, source_split(ds, split))).shape[0])


def image_filenames(source_dir: Path, split: str, n: int) -> list[str]:
    """Each image's file name: the base name of its line of ``{split}_image_path.txt`` (the code's
    layout lists the paths on its authors' machine: the harness looks the name up in the dataset's
    ``images_dir``), or ``{split}_{row}`` when the source has no such file (no image to show)."""
    path = source_dir / f"{split}_image_path.txt"
    fallback = [f"{split}_{row:06d}" for row in range(n)]
    if not path.is_file():
        return fallback
    names = [Path(line.strip()).name for line in read_lines(path)]
    if len(names) != n:   # only the example figures read the names: not worth stopping the import for
        print(f"warning: {path}: {len(names)} image paths for {n} images; the images are named "
              f"{split}_<row> and the retrieval-example figures cannot show them")
        return fallback
    return names


def import_json(payload: DatasetPayload, out: Path) -> None:
    """``data/dataset_<name>.json``: every split's images with their texts and labels."""
    ds, name = payload.dataset, payload.name
    source_dir = Path(payload.paths["source_dir"])
    check_source_dir(ds, source_dir, f"datasets.{name}")
    tokenizer = payload.tokenizer()
    images, imgid = [], 0
    for split in ds["splits"]:
        s, n = source_split(ds, split), split_size(ds, source_dir, split)
        texts, labels = split_texts(ds, source_dir, split, n, tokenizer), split_labels(ds, source_dir, split, n)
        k = ds["texts_per_image"]
        filenames = image_filenames(source_dir, s, n)
        for row in range(n):
            images.append({"imgid": imgid, "filename": filenames[row], "split": s,
                           "sentences": [{"raw": t} for t in texts[row * k:(row + 1) * k]],
                           "labels": labels[row].tolist()})
            imgid += 1
        empty = sum(not t for t in texts)
        print(f"{split} (source {s}): {n} images, {labels.shape[1]} labels, {empty} empty texts")
    names_file = source_dir / "label_names.txt"
    label_names = read_lines(names_file) if names_file.is_file() else None
    if label_names is not None and ds.get("label_columns"):
        label_names = [label_names[c] for c in ds["label_columns"]]
    write_json(out, {"dataset": name, "source_dir": str(source_dir), "label_names": label_names, "images": images})


def link(target: Path, link_path: Path, results_dir: Path) -> None:
    """Atomically make ``link_path`` a symlink to ``target``: relative when both lie under the
    results folder (it can move as a whole), else to the target's absolute real path."""
    target = Path(os.path.abspath(target))
    if not target.exists():
        raise HarnessError(f"file not found: {target}")
    results = Path(os.path.abspath(results_dir))
    inside = target.is_relative_to(results) and Path(os.path.abspath(link_path)).is_relative_to(results)
    pointer = os.path.relpath(target, Path(os.path.abspath(link_path)).parent) if inside else str(target.resolve())
    with atomic_path(link_path) as tmp:
        tmp.unlink()
        os.symlink(pointer, tmp)


def import_split(payload: DatasetPayload, split: str, out_dir: Path, results_dir: Path) -> None:
    """``precomp/{split}_ims.npy`` (symlink) and ``{split}_caps.txt``."""
    ds, name = payload.dataset, payload.name
    source_dir = Path(payload.paths["source_dir"])
    check_source_dir(ds, source_dir, f"datasets.{name}")
    n = split_size(ds, source_dir, split)
    texts = split_texts(ds, source_dir, split, n, payload.tokenizer())
    link(feature_file(ds, source_dir, source_split(ds, split)), out_dir / f"{split}_ims.npy", results_dir)
    write_text(out_dir / f"{split}_caps.txt", "".join(t + "\n" for t in texts))
    print(f"{split}: {n} images, {len(texts)} texts; features linked from {source_dir}")


def region_classes(cls_path: Path, out: Path) -> None:
    """int64 (N, R) argmax over the last axis of the (N, R, K) class scores, read in chunks."""
    scores = load_npy(cls_path)
    if scores.ndim != 3:
        raise HarnessError(f"{cls_path}: shape {scores.shape}, expected (N, regions, classes)")
    with open_npy_for_writing(out, scores.shape[:2], "int64") as classes:
        for start in range(0, scores.shape[0], CLS_CHUNK):
            classes[start:start + CLS_CHUNK] = np.argmax(scores[start:start + CLS_CHUNK], axis=-1)
    print(f"{out}: region classes of {scores.shape[0]} images x {scores.shape[1]} regions ({scores.shape[2]} classes)")


def _run(args) -> None:
    payload = load_dataset_payload(args.dataset_config)
    if args.json:
        import_json(payload, Path(args.json))
    elif args.region_classes:
        source_dir = Path(payload.paths["source_dir"])
        region_classes(source_dir / f"{source_split(payload.dataset, args.split)}_cls.npy", Path(args.region_classes))
    else:
        import_split(payload, args.split, Path(args.out_dir), Path(args.results_dir))


def _arguments(parser) -> None:
    parser.add_argument("--json", help="write data/dataset_<name>.json here")
    parser.add_argument("--split", help="harness split (with --out-dir or --region-classes)")
    parser.add_argument("--out-dir", help="precomp folder: {split}_ims.npy (symlink) and {split}_caps.txt")
    parser.add_argument("--region-classes", help="write {split}_region_classes.npy here")
    parser.add_argument("--results-dir", default="results", help="links inside it are relative")


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, _run, argv)


if __name__ == "__main__":
    main()
