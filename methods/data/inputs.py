"""Image inputs as named kinds (``IMAGE_INPUTS``): what a model reads for an image, which files
the DAG must provide for it, and how one split of it is loaded (memory-mapped, never read whole).

- ``pooled``: cached pooled CNN features ``<features_dir>/<split>_pooled.npy`` (N, C) of the
  model's backbone (a DAG output); captions and file names from the Karpathy split (fine-tuning
  stages run the CNN on the image files instead).
- ``regions``: precomputed region features in the BUTD layout, ``<precomp_dir>/<split>_ims.npy``
  (N, R, C) + ``_caps.txt``, whose captions are the ones aligned with the feature rows; with
  ``model.region_classes: true``, also the detector class of each region of the *train* split,
  ``<precomp_dir>/train_region_classes.npy`` int (N, R) (masked region-class prediction, a training
  loss, is its only reader; the other splits need no such file); for a model whose declaration
  reads boxes (PFAN), each region's box too, ``<precomp_dir>/<split>_boxes.npy`` (N, R, 4)
  (``methods.data.region_boxes``), and the features of a batch are then a dict ``regions`` (B, R, C),
  ``boxes`` (B, R, 4).
- ``grid``: cached multi-scale ResNet maps ``<features_dir>/<split>_<scale>.npy`` (N, H, W, C),
  one file per scale the model names in ``model.grid_scales`` (conv3 / conv4 / conv5).

A kind also gives the shape a model is built with (``image_shape``): ``{"dim": C}``,
``{"dim": C, "regions": R}`` or ``{"scales": {scale: [H, W, C]}}``.

Every kind also carries the split's ``texts_per_image`` and the images' multi-hot ``labels`` of the
Karpathy file (None when it has none; ``regions`` reads them only for a model with a label head,
``model.n_classes``).

A split's features are read as numpy arrays (``take``: a batch, ``block``: a run of images);
``methods.data.batches.feature_tensors`` makes them the tensors a model reads. The DAG build
reads this module's kinds, and it does not import torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from methods.data.datasets import DatasetPayload, dataset_paths, smoke_limit
from methods.data.karpathy import Split
from methods.data.precomp import LAYOUT as PRECOMP_LAYOUT
from methods.data.precomp import check_npy_header, open_precomp
from methods.data.region_boxes import box_file, box_scale, check_region_boxes
from methods.io import load_npy
from methods.errors import HarnessError
from methods.paths import ResultsLayout
from methods.registry import Registry


def read_dtype(array: np.ndarray) -> type:
    """The dtype a block of features is read in for scoring: float64 stays float64 (a float64 model
    given float64 features through the API must not see them rounded to float32); float16 caches
    and every other float dtype are read as float32. The scoring casts a block to the model's
    dtype; training batches (``take``) are float32, as the models train."""
    return np.float64 if array.dtype == np.float64 else np.float32


class CachedImageFeatures:
    """A memory-mapped feature array read by image index: row ``index * step`` (``step`` is 5 for
    old precomputed files holding one row per caption). Pooled (N, C) or regions (N, R, C)."""

    def __init__(self, array: np.ndarray, step: int = 1):
        self.array, self.step = array, step

    def __len__(self) -> int:
        return self.array.shape[0] // self.step

    @property
    def dim(self) -> int:
        return int(self.array.shape[-1])

    @property
    def regions(self) -> int | None:
        """Regions per image of (N, R, C) region features; None for pooled (N, C) features."""
        return int(self.array.shape[1]) if self.array.ndim == 3 else None

    def image_shape(self) -> dict:
        return {"dim": self.dim} if self.regions is None else {"dim": self.dim, "regions": self.regions}

    def take(self, indices: np.ndarray) -> np.ndarray:
        return np.asarray(self.array[np.asarray(indices) * self.step], dtype=np.float32)

    def block(self, start: int, end: int) -> np.ndarray:
        # a copy: a slice of a read-only memmap would be a view torch cannot own
        return np.array(self.array[start * self.step:end * self.step:self.step], dtype=read_dtype(self.array))


class CachedRegionBoxes(CachedImageFeatures):
    """Region features with each region's box (N, R, 4), read together: a batch is a dict
    ``regions`` (B, R, C), ``boxes`` (B, R, 4) (as fractions of the image, ``scale`` dividing the file's values)."""

    def __init__(self, array: np.ndarray, boxes: np.ndarray, step: int = 1, scale: float = 1.0):
        super().__init__(array, step)
        self.boxes, self.scale = boxes, scale

    def take(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        rows = np.asarray(indices) * self.step
        return {"regions": np.asarray(self.array[rows], dtype=np.float32),
                "boxes": np.asarray(self.boxes[rows], dtype=np.float32) / np.float32(self.scale)}

    def block(self, start: int, end: int) -> dict[str, np.ndarray]:
        rows = slice(start * self.step, end * self.step, self.step)
        return {"regions": np.array(self.array[rows], dtype=read_dtype(self.array)),
                "boxes": np.array(self.boxes[rows], dtype=read_dtype(self.boxes)) / self.scale}


class CachedGridFeatures:
    """Several memory-mapped (N, H, W, C) maps of the same images, one per scale; a batch is a
    dict scale -> float32 array."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        sizes = {a.shape[0] for a in arrays.values()}
        if len(sizes) != 1:
            raise HarnessError(f"grid maps of one split have different image counts: "
                               f"{ {k: a.shape[0] for k, a in arrays.items()} }")
        self.arrays = arrays

    def __len__(self) -> int:
        return next(iter(self.arrays.values())).shape[0]

    def image_shape(self) -> dict:
        return {"scales": {k: [int(d) for d in a.shape[1:]] for k, a in self.arrays.items()}}

    def take(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        idx = np.asarray(indices)
        return {k: np.asarray(a[idx], dtype=np.float32) for k, a in self.arrays.items()}

    def block(self, start: int, end: int) -> dict[str, np.ndarray]:
        return {k: np.array(a[start:end], dtype=read_dtype(a)) for k, a in self.arrays.items()}


@dataclass
class SplitData:
    """What training and evaluation read of one split: captions (``texts_per_image`` per image, in
    image order: text k is of image k // texts_per_image), cached image features, image file names
    (for fine-tuning; None for precomputed regions), the images' multi-hot ``labels`` (N, C) uint8
    (None: the dataset has none) and the detector class of each region, ``region_classes`` (N, R)
    (only for the regions input of the train split, when the model asks for them)."""

    name: str
    captions: list[str]
    features: CachedImageFeatures | CachedGridFeatures | None
    filenames: list[str] | None
    texts_per_image: int
    labels: np.ndarray | None = None
    region_classes: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.texts_per_image < 1 or len(self.captions) % self.texts_per_image:
            raise HarnessError(f"split {self.name}: {len(self.captions)} texts are not {self.texts_per_image} "
                               f"per image (texts_per_image)")
        if self.labels is not None:
            labels = self.labels
            if labels.ndim != 2 or labels.shape[0] != len(self) or labels.dtype != np.uint8:
                raise HarnessError(f"split {self.name}: labels of shape {labels.shape} and dtype {labels.dtype}; "
                                   f"expected uint8 ({len(self)}, C), one row per image")
            if labels.size and labels.max() > 1:
                raise HarnessError(f"split {self.name}: labels hold the value {int(labels.max())}; expected 0/1")

    def __len__(self) -> int:
        return len(self.captions) // self.texts_per_image

    def text_labels(self) -> np.ndarray | None:
        """Each text's labels: its image's (``labels`` repeated texts_per_image times), or None."""
        return None if self.labels is None else np.repeat(self.labels, self.texts_per_image, axis=0)


def label_matrix(split: Split) -> np.ndarray | None:
    """A Karpathy split's ``labels`` lists as a uint8 (N, C) multi-hot matrix, checked (None: no labels)."""
    if split.labels is None:
        return None
    widths = {len(row) if isinstance(row, list) else None for row in split.labels}
    if None in widths or len(widths) > 1:
        raise HarnessError(f"split {split.name}: image labels must be lists of one length (multi-hot), found "
                           f"lengths {sorted(str(w) for w in widths)}")
    labels = np.asarray(split.labels) if split.labels else np.zeros((0, 0))
    if labels.size and not np.isin(labels, (0, 1)).all():
        raise HarnessError(f"split {split.name}: image labels hold values other than 0 and 1 "
                           f"(e.g. {labels[~np.isin(labels, (0, 1))][0]!r}); expected multi-hot lists")
    return labels.astype(np.uint8).reshape(len(split), -1)


class ImageInput:
    """One kind of image input. ``model_cfg`` is the experiment's ``model`` block."""

    name: str
    finetunable = True   # whether a training stage can train the CNN: false for features computed elsewhere
    reads_boxes = False  # whether it reads each region's box too (``RegionBoxInput``)

    def directory(self, cfg: dict, dataset: str, model_cfg: dict) -> str:
        """Where the kind's files of this dataset live (harness config ``cfg``)."""
        raise NotImplementedError

    def files(self, directory: str, split: str, model_cfg: dict) -> list[str]:
        """The files of one split: the DAG's inputs for jobs that read it."""
        raise NotImplementedError

    def check(self, cfg: dict, dataset: str, model_cfg: dict) -> None:
        """DAG-build-time check that the dataset can provide this input for this model."""

    def load(self, payload: DatasetPayload, split: str, directory: str | Path, model_cfg: dict) -> SplitData:
        raise NotImplementedError

    def without_cache(self, payload: DatasetPayload, split: str) -> SplitData:
        """A split's captions and image files without cached features: what a run whose every stage
        fine-tunes the CNN reads (its model sees images only; ``methods.features.architectures.cached_shape``)."""
        karpathy = payload.split(split)
        return SplitData(split, karpathy.captions, None, karpathy.filenames, karpathy.texts_per_image,
                         label_matrix(karpathy))


IMAGE_INPUTS: Registry[ImageInput] = Registry("image input")


class PooledInput(ImageInput):
    name = "pooled"

    def directory(self, cfg: dict, dataset: str, model_cfg: dict) -> str:
        return ResultsLayout(cfg["results_dir"]).features_dir(dataset, model_cfg["backbone"])

    def files(self, directory: str, split: str, model_cfg: dict) -> list[str]:
        return [f"{directory}/{split}_pooled.npy"]

    def load(self, payload: DatasetPayload, split: str, directory: str | Path, model_cfg: dict) -> SplitData:
        karpathy = payload.split(split)
        path = Path(directory) / f"{split}_pooled.npy"
        check_npy_header(path, (len(karpathy), None))
        return SplitData(split, karpathy.captions, CachedImageFeatures(np.load(path, mmap_mode="r")),
                         karpathy.filenames, karpathy.texts_per_image, label_matrix(karpathy))


def region_shape(dataset_cfg: dict) -> tuple[int, int | None]:
    """(regions per image, feature dim) expected of precomputed region files; the synthetic
    regions take the channel count of the grid layer they pool (checked against the model input)."""
    if "precomp" in dataset_cfg:
        return dataset_cfg["precomp"]["n_regions"], dataset_cfg["precomp"]["feature_dim"]
    return dataset_cfg["features"]["region"]["n_regions"], None


class RegionInput(ImageInput):
    name = "regions"
    finetunable = False   # a detector's region features, precomputed: no CNN here to train

    def directory(self, cfg: dict, dataset: str, model_cfg: dict) -> str:
        return str(dataset_paths(cfg, dataset)["precomp_dir"])

    def files(self, directory: str, split: str, model_cfg: dict) -> list[str]:
        return [f"{directory}/{split}_ims.npy", f"{directory}/{split}_caps.txt"] + (
            [f"{directory}/{split}_region_classes.npy"] if reads_region_classes(model_cfg, split) else []) + (
            [str(box_file(directory, split))] if self.reads_boxes else [])

    def check(self, cfg: dict, dataset: str, model_cfg: dict) -> None:
        ds = cfg["datasets"][dataset]
        if ds["kind"] == "synthetic":
            if "region" not in ds["features"]:
                raise HarnessError(f"datasets.{dataset}.features.region is not set: region models need the "
                                   f"synthetic RoIAlign regions configured there")
            return
        if dataset_paths(cfg, dataset)["precomp_dir"] is None:
            raise HarnessError(f"datasets.{dataset}.precomp_dir is not set: region models (SCAN, SGRAF, VSRN, set embeddings) read "
                               f"precomputed BUTD features, expected layout {PRECOMP_LAYOUT}, one set per split "
                               f"({', '.join(ds['splits'])})")
        # its files are checked (shapes, caption counts) with the rest of the dataset, in check_dataset_inputs;
        # the boxes only for the models that read them (a row without them is left out of its table at plan time)
        if self.reads_boxes:
            n_regions, _ = region_shape(ds)
            precomp_dir = dataset_paths(cfg, dataset)["precomp_dir"]
            for split in ds["splits"]:
                rows = load_npy(Path(precomp_dir) / f"{split}_ims.npy").shape[0]   # (its shape: check_dataset_inputs)
                check_region_boxes(box_file(precomp_dir, split), rows, n_regions, results_dir=cfg["results_dir"])

    def load(self, payload: DatasetPayload, split: str, directory: str | Path, model_cfg: dict) -> SplitData:
        n_regions, dim = region_shape(payload.dataset)
        texts_per_image = payload.dataset["texts_per_image"]
        ims, captions, step = open_precomp(directory, split, n_regions, dim, texts_per_image)
        all_images = n_images = ims.shape[0] // step
        limit = smoke_limit(payload.dataset, split)
        if limit is not None:   # a smoke run: the first images (rows in the Karpathy file's order) and their texts
            n_images = min(limit, all_images)
            ims, captions = ims[:n_images * step], captions[:n_images * texts_per_image]
        features = CachedImageFeatures(ims, step)
        if self.reads_boxes:
            boxes = check_region_boxes(box_file(directory, split), all_images * step, n_regions,
                                       box_scale(payload.dataset))
            features = CachedRegionBoxes(ims, boxes[:ims.shape[0]], step, box_scale(payload.dataset))
        # the labels come from the Karpathy file (the captions here are the precomputed ones); only a
        # model with a label head (model.n_classes) reads them, and COCO's file takes seconds to parse
        labels = (label_matrix(payload.split(split)) if model_cfg.get("n_classes") is not None
                  else None)
        classes = None
        if reads_region_classes(model_cfg, split):
            classes = open_region_classes(Path(directory) / f"{split}_region_classes.npy", all_images,
                                          n_regions)[:n_images]
        return SplitData(split, captions, features, None, texts_per_image, labels, classes)


class RegionBoxInput(RegionInput):
    """The regions input of a model whose declaration reads each region's box (PFAN): the same
    files and the split's ``{split}_boxes.npy``; batches of ``CachedRegionBoxes``. Not a kind of its
    own (``image_input: regions``): ``methods.model_kinds.image_input_of`` gives it to such models."""

    reads_boxes = True


REGIONS_WITH_BOXES = RegionBoxInput()

REGION_CLASSES_SPLIT = "train"  # masked region-class prediction is a training loss: only train reads them


def reads_region_classes(model_cfg: dict, split: str) -> bool:
    """Whether the regions input reads ``<split>_region_classes.npy`` (model ``region_classes: true``)."""
    return bool(model_cfg.get("region_classes")) and split == REGION_CLASSES_SPLIT


def open_region_classes(path: Path, n_images: int, n_regions: int) -> np.ndarray:
    """The memory-mapped (N, R) integer detector class of each region, checked against the features."""
    if not path.is_file():
        raise HarnessError(f"region class file not found: {path} (expected int (N, {n_regions}), the detector's "
                           f"class of each region; model.region_classes is true)")
    classes = load_npy(path)
    if classes.shape != (n_images, n_regions) or not np.issubdtype(classes.dtype, np.integer):
        raise HarnessError(f"{path}: shape {classes.shape} dtype {classes.dtype}, expected an integer array "
                           f"({n_images}, {n_regions}) matching the region features")
    return classes


def check_grid_scales(dataset_cfg: dict, dataset: str, model_cfg: dict) -> None:
    """The model's scales must be among the maps the dataset's feature rule caches."""
    cached = dataset_cfg["features"]["grid_layers"]
    missing = [s for s in model_cfg["grid_scales"] if s not in cached]
    if missing:
        raise HarnessError(f"datasets.{dataset}.features.grid_layers {cached} does not cache {missing}, "
                           f"which the model reads (model.grid_scales)")


class GridInput(ImageInput):
    name = "grid"

    def directory(self, cfg: dict, dataset: str, model_cfg: dict) -> str:
        return ResultsLayout(cfg["results_dir"]).features_dir(dataset, model_cfg["backbone"])

    def files(self, directory: str, split: str, model_cfg: dict) -> list[str]:
        return [f"{directory}/{split}_{scale}.npy" for scale in model_cfg["grid_scales"]]

    def check(self, cfg: dict, dataset: str, model_cfg: dict) -> None:
        check_grid_scales(cfg["datasets"][dataset], dataset, model_cfg)

    def load(self, payload: DatasetPayload, split: str, directory: str | Path, model_cfg: dict) -> SplitData:
        karpathy = payload.split(split)
        check_grid_scales(payload.dataset, payload.name, model_cfg)
        arrays = {}
        for scale in model_cfg["grid_scales"]:
            path = Path(directory) / f"{split}_{scale}.npy"
            check_npy_header(path, (len(karpathy), None, None, None))
            arrays[scale] = np.load(path, mmap_mode="r")
        return SplitData(split, karpathy.captions, CachedGridFeatures(arrays), karpathy.filenames,
                         karpathy.texts_per_image, label_matrix(karpathy))


for _kind in (PooledInput(), RegionInput(), GridInput()):
    IMAGE_INPUTS.register(_kind.name, _kind)
