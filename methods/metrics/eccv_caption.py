"""ECCV Caption and CxC on the COCO 5K test set, computed by the ``eccv_caption`` package (Chun et
al., "ECCV Caption: Correcting False Negatives by Collecting Machine-and-Human-verified
Image-Caption Associations for MS-COCO", ECCV 2022; it ships the ECCV Caption and CrissCrossed
Captions (Parekh et al., EACL 2021) annotations and the metric code).

The package identifies images by COCO image id and captions by COCO caption annotation id, and
takes each query's ranked gallery ids. The harness's ``testall`` rows are the Karpathy test
images in file order (their ``cocoid``s) with their first five captions; the columns are mapped to
the package's ``coco_test_ids.npy`` (25,000 caption ids, five per image in the same image order,
the order VSE++ and PCME evaluate in): ``split_coco_ids`` (``methods.metrics.coco_ids``) checks that
each block of five ids belongs to the row's image and names the first row that does not. Within an image the five
captions are taken in the package's order, which the Karpathy file's sentence order is assumed to
follow (the Karpathy file carries no annotation ids to check it against).

Every query gets its *full* ranking (stable descending sort of its scores: among equal scores
the gallery's order decides), never a top-K, so R-Precision and mAP@R see every positive.
Metrics: ``{i2t,t2i}_{map_r,rp,r1}_eccv`` (ECCV Caption mAP@R, R-Precision, R@1) and
``{i2t,t2i}_r{1,5,10}_cxc`` (CxC recall), in percent, declared in ``methods.metrics.declarations``
and implemented here.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from methods.data.karpathy import Split, SplitIndex
from methods.errors import HarnessError
from methods.metrics.coco_ids import split_coco_id_arrays
from methods.metrics.declarations import CXC_KS, DIRECTIONS, ECCV_CAPTION_METRICS
from methods.metrics.implementations import implement_metric
from methods.metrics.relevance import check_finite

with warnings.catch_warnings():   # the package warns at import when the optional ujson / tqdm are absent
    warnings.simplefilter("ignore")
    import eccv_caption

# the package's name of each ECCV Caption metric (``methods.metrics.declarations.ECCV_KINDS``)
PACKAGE_METRIC_NAMES = {"map_r": "eccv_map_at_r", "rp": "eccv_rprecision", "r1": "eccv_r1"}
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


def split_coco_ids(karpathy_json: str | Path, split: Split | SplitIndex) -> CocoIds:
    """The COCO ids of a harness split loaded from ``karpathy_json`` (its images' ``cocoid``),
    checked against the package's order (``methods.metrics.coco_ids``)."""
    return CocoIds(*split_coco_id_arrays(karpathy_json, split))


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
    targets = [*PACKAGE_METRIC_NAMES.values(), "cxc_recalls"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        computed = eccv_caption.Metrics().compute_all_metrics(i2t, t2i, target_metrics=targets, Ks=list(CXC_KS),
                                                              verbose=False)
    out = {}
    for d in DIRECTIONS:
        for kind, name in PACKAGE_METRIC_NAMES.items():
            out[f"{d}_{kind}_eccv"] = 100.0 * float(computed[name][d])
        for k in CXC_KS:
            out[f"{d}_r{k}_cxc"] = 100.0 * float(computed[f"cxc_r{k}"][d])
    return out


def _metric(name: str):
    return lambda context: context.cached("eccv_caption", lambda: package_metrics(context.scores, context.relevance))[name]


for _name in ECCV_CAPTION_METRICS:
    implement_metric(_name, _metric(_name))
