"""ECCV Caption and CxC on the COCO 5K test set, computed by the ``eccv_caption`` package (Chun et
al., "ECCV Caption: Correcting False Negatives by Collecting Machine-and-Human-verified
Image-Caption Associations for MS-COCO", ECCV 2022; it ships the ECCV Caption and CrissCrossed
Captions (Parekh et al., EACL 2021) annotations and the metric code).

The package identifies images by COCO image id and captions by COCO caption annotation id, and
takes each query's ranked gallery ids. The harness's ``testall`` rows are the Karpathy test
images in file order (their ``cocoid``s) with their first five captions; the columns are mapped to
the package's ``coco_test_ids.npy`` (25,000 caption ids, five per image in the same image order,
the order VSE++ and PCME evaluate in): ``coco_ids_of_split`` checks that each block of five ids
belongs to the row's image and names the first row that does not. Within an image the five
captions are taken in the package's order, which the Karpathy file's sentence order is assumed to
follow (the Karpathy file carries no annotation ids to check it against).

Every query gets its *full* ranking (stable descending sort of its scores: among equal scores
the gallery's order decides), never a top-K, so R-Precision and mAP@R see every positive.
Metrics: ``{i2t,t2i}_{map_r,rp,r1}_eccv`` (ECCV Caption mAP@R, R-Precision, R@1) and
``{i2t,t2i}_r{1,5,10}_cxc`` (CxC recall), in percent.
"""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from methods.data.karpathy import CAPTIONS_PER_IMAGE, Split, SplitIndex
from methods.errors import HarnessError
from methods.metrics.registry import register_metric
from methods.metrics.relevance import check_finite
from methods.metrics.retrieval import ARROW, DIRECTIONS

with warnings.catch_warnings():   # the package warns at import when the optional ujson / tqdm are absent
    warnings.simplefilter("ignore")
    import eccv_caption

PACKAGE_DATA = Path(eccv_caption.__file__).parent / "data"
ECCV_KINDS = {"map_r": ("eccv_map_at_r", "mAP@R"), "rp": ("eccv_rprecision", "R-P"), "r1": ("eccv_r1", "R@1")}
CXC_KS = (1, 5, 10)
ECCV_CAPTION_METRICS = tuple([f"{d}_{k}_eccv" for d in DIRECTIONS for k in ECCV_KINDS]
                             + [f"{d}_r{k}_cxc" for d in DIRECTIONS for k in CXC_KS])
RANK_CHUNK = 1 << 24   # scores argsorted at once


@dataclass(frozen=True, eq=False)
class CocoIds:
    """Row i of the score matrix is COCO image ``image_ids[i]``, column k caption annotation
    ``caption_ids[k]``."""
    image_ids: np.ndarray
    caption_ids: np.ndarray
    kind = "coco_ids"

    def check(self, scores: torch.Tensor) -> None:
        expected = (len(self.image_ids), len(self.caption_ids))
        if tuple(scores.shape) != expected:
            raise HarnessError(f"score matrix has shape {tuple(scores.shape)}; the COCO ids give {expected} "
                               f"(images x captions)")
        check_finite(scores)

    def n_images(self, scores: torch.Tensor) -> int:
        return scores.shape[0]

    def fold(self, scores: torch.Tensor, fold: int, n_folds: int) -> tuple[torch.Tensor, "CocoIds"]:
        if n_folds != 1:
            raise HarnessError("ECCV Caption / CxC are defined on the whole COCO 5K test set, not on folds")
        return scores, self


def package_caption_ids() -> np.ndarray:
    return np.load(PACKAGE_DATA / "coco_test_ids.npy")


def package_caption_images() -> dict[int, int]:
    """COCO caption id -> its COCO image id (the package's original COCO ground truth)."""
    with open(PACKAGE_DATA / "original_caption_to_image.json") as f:
        return {int(k): int(v[0]) for k, v in json.load(f).items()}


def coco_ids(image_ids: list[int], where: str) -> CocoIds:
    """The package's caption ids for images ``image_ids`` (COCO ids, in row order), checked: each
    row's five ids are captions of that row's image."""
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
    return CocoIds(np.asarray(image_ids, dtype=np.int64), caption_ids.astype(np.int64))


def split_coco_ids(karpathy_json: str | Path, split: Split | SplitIndex) -> CocoIds:
    """The COCO ids of a harness split loaded from ``karpathy_json``: its images' ``cocoid``."""
    if split.texts_per_image != CAPTIONS_PER_IMAGE:
        raise HarnessError(f"{karpathy_json} split '{split.name}': {split.texts_per_image} texts per image, but ECCV "
                           f"Caption / CxC are defined on {CAPTIONS_PER_IMAGE} captions per COCO image")
    if split.coco_ids is None:
        raise HarnessError(f"split '{split.name}' was not loaded from a Karpathy file: it has no COCO ids")
    missing = next((i for i, c in enumerate(split.coco_ids) if isinstance(c, bool) or not isinstance(c, int)), None)
    if missing is not None:
        raise HarnessError(f"{karpathy_json}: image {missing} of split '{split.name}' has no integer 'cocoid' "
                           f"(ECCV Caption / CxC identify images by COCO id)")
    return coco_ids(split.coco_ids, f"{karpathy_json} split '{split.name}'")


def full_rankings(scores: torch.Tensor, gallery_ids: np.ndarray, query_ids: np.ndarray) -> dict[int, np.ndarray]:
    """query id -> every gallery id, best first (stable descending sort of the query's row)."""
    out = {}
    chunk = max(1, RANK_CHUNK // max(1, scores.shape[1]))
    ids = torch.from_numpy(gallery_ids.astype(np.int64))
    for start in range(0, scores.shape[0], chunk):
        order = torch.sort(scores[start:start + chunk], dim=1, descending=True, stable=True).indices
        ranked = ids[order].numpy().astype(np.int32)   # COCO ids fit; halves the memory of 25,000 rankings
        for q, row in zip(query_ids[start:start + chunk], ranked):
            out[int(q)] = row
    return out


def package_metrics(scores: torch.Tensor, ids: CocoIds) -> dict[str, float]:
    """Every ECCV Caption / CxC metric of one COCO 5K score matrix, in percent, from the package."""
    scores = scores.float().cpu()
    i2t = full_rankings(scores, ids.caption_ids, ids.image_ids)
    t2i = full_rankings(scores.T.contiguous(), ids.image_ids, ids.caption_ids)
    targets = [name for name, _ in ECCV_KINDS.values()] + ["cxc_recalls"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        computed = eccv_caption.Metrics().compute_all_metrics(i2t, t2i, target_metrics=targets, Ks=list(CXC_KS),
                                                              verbose=False)
    out = {}
    for d in DIRECTIONS:
        for kind, (name, _) in ECCV_KINDS.items():
            out[f"{d}_{kind}_eccv"] = 100.0 * float(computed[name][d])
        for k in CXC_KS:
            out[f"{d}_r{k}_cxc"] = 100.0 * float(computed[f"cxc_r{k}"][d])
    return out


def _metric(name: str):
    return lambda context: context.cached("eccv_caption", lambda: package_metrics(context.scores, context.relevance))[name]


for _d in DIRECTIONS:
    for _kind, (_, _label) in ECCV_KINDS.items():
        register_metric(f"{_d}_{_kind}_eccv", _metric(f"{_d}_{_kind}_eccv"), relevance="coco_ids", direction="higher",
                        label=f"{ARROW[_d]} ECCV {_label}", tolerance="ranking", scale="percent")
    for _k in CXC_KS:
        register_metric(f"{_d}_r{_k}_cxc", _metric(f"{_d}_r{_k}_cxc"), relevance="coco_ids", direction="higher",
                        label=f"{ARROW[_d]} CxC R@{_k}", tolerance="recall", scale="percent")
