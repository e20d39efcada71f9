"""ECCV Caption and CxC on COCO 5K through the eccv_caption package (methods.metrics.eccv_caption):
the COCO ids of a Karpathy-style split against the package's own coco_test_ids.npy and
original_caption_to_image.json (a fake Karpathy file in the package's image order, and the errors
when it is not), the twelve metrics of a 5,000 x 25,000 score matrix against a computation written
here from the package's ECCV Caption / CxC json files (mAP@R, R-P, R@1 by
methods.metrics.eccv.per_query on a boolean positives matrix; CxC R@K from torch.topk), full
rankings against np.argsort, and the coco_5k_eccv protocol's declaration."""
import gc
import importlib.util
import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch

import methods.metrics.eccv_caption as eccv_caption_module
from methods.data.datasets import DatasetPayload
from methods.data.karpathy import Split, load_splits
from methods.errors import HarnessError
from methods.metrics.eccv import per_query
from methods.metrics.declarations import ECCV_CAPTION_METRICS, METRICS
from methods.metrics.eccv_caption import CocoIds, full_rankings, package_metrics, split_coco_ids
from methods.metrics.evaluation import evaluate, evaluate_protocol, split_relevances
from methods.metrics.protocols import get_protocol

DATA = Path(importlib.util.find_spec("eccv_caption").origin).parent / "data"
N_IMAGES, N_CAPTIONS = 5000, 25000


def read_ids(name: str) -> dict[int, list[int]]:
    """One of the package's json files: COCO id -> COCO ids (keys are strings in the file)."""
    with open(DATA / f"{name}.json") as f:
        return {int(k): [int(x) for x in v] for k, v in json.load(f).items()}


@lru_cache(maxsize=1)
def package_layout() -> tuple[tuple[int, ...], np.ndarray]:
    """The package's COCO 5K order: image i is the image of caption coco_test_ids[5 i]."""
    caption_ids = np.load(DATA / "coco_test_ids.npy")
    image_of = read_ids("original_caption_to_image")
    return tuple(image_of[int(c)][0] for c in caption_ids[::5]), caption_ids


def karpathy_entries(cocoids) -> list[dict]:
    entries = []
    for i, cocoid in enumerate(cocoids):
        raws = [f"A photo number {j} of COCO image {cocoid}." for j in range(5)]
        entries.append({"split": "test", "filepath": "val2014", "filename": f"COCO_val2014_{cocoid:012d}.jpg",
                        "imgid": i, "cocoid": cocoid,
                        "sentences": [{"raw": r, "tokens": r.lower().rstrip(".").split(), "sentid": 5 * i + j}
                                      for j, r in enumerate(raws)]})
    return entries


def write_karpathy(path: Path, entries: list[dict]) -> Path:
    """``entries`` as the test images of a Karpathy file, followed by two train images."""
    train = karpathy_entries([9, 25])
    for k, e in enumerate(train):
        e.update(split="train", filepath="train2014", imgid=len(entries) + k)
    path.write_text(json.dumps({"images": entries + train, "dataset": "coco"}))
    return path


def split_of(path: Path) -> Split:
    """The test split as the harness loads it from the Karpathy file at ``path``."""
    return load_splits(path, {"testall": ["test"]}, 5)["testall"]


def test_split_coco_ids_follow_the_package_id_file(tmp_path):
    image_ids, caption_ids = package_layout()
    assert len(image_ids) == N_IMAGES and len(set(image_ids)) == N_IMAGES
    entries = karpathy_entries(image_ids)
    path = write_karpathy(tmp_path / "dataset_coco.json", entries)
    split = split_of(path)
    path.unlink()   # the loaded split carries its COCO ids: the 160 MB file is not parsed again
    ids = split_coco_ids(path, split)
    assert isinstance(ids, CocoIds) and ids.kind == "coco_ids"
    assert ids.image_ids.tolist() == list(image_ids)
    assert ids.caption_ids.tolist() == caption_ids.tolist()


def test_evaluation_builds_coco_ids_for_the_eccv_protocol(tmp_path):
    image_ids, caption_ids = package_layout()
    path = write_karpathy(tmp_path / "dataset_coco.json", karpathy_entries(image_ids))
    payload = DatasetPayload.from_json({"name": "coco", "dataset": {"protocols": ["coco_5k", "coco_5k_eccv"], "texts_per_image": 5,
                                           "splits": {"train": ["train"], "testall": ["test"]}},
               "paths": {"karpathy_json": str(path)}})
    relevances = split_relevances(payload, "testall")
    assert sorted(relevances) == ["captions_of_image", "coco_ids"]
    assert relevances["coco_ids"].image_ids.tolist() == list(image_ids)
    assert relevances["coco_ids"].caption_ids.tolist() == caption_ids.tolist()
    assert split_relevances(payload, "train") == {}


def test_an_image_out_of_the_package_order_is_named_by_its_row(tmp_path):
    image_ids, _ = package_layout()
    entries = karpathy_entries(image_ids)
    entries[7]["cocoid"], entries[9]["cocoid"] = entries[9]["cocoid"], entries[7]["cocoid"]
    path = write_karpathy(tmp_path / "dataset_coco.json", entries)
    with pytest.raises(HarnessError, match=rf"row 7 is COCO image {image_ids[9]}, but .* image\(s\) "
                                           rf"\[{image_ids[7]}\] at captions 35-39"):
        split_coco_ids(path, split_of(path))


def test_a_split_that_is_not_coco_5k_is_an_error(tmp_path):
    image_ids, _ = package_layout()
    entries = karpathy_entries(image_ids[:10])
    path = write_karpathy(tmp_path / "dataset_coco.json", entries)
    with pytest.raises(HarnessError, match="10 images, but ECCV Caption / CxC are defined on the COCO 5K test set "
                                           r"\(5000 images"):
        split_coco_ids(path, split_of(path))


@pytest.mark.parametrize("cocoid", [None, "391895"])
def test_an_image_without_an_integer_cocoid_is_named(tmp_path, cocoid):
    image_ids, _ = package_layout()
    entries = karpathy_entries(image_ids)
    if cocoid is None:
        del entries[3]["cocoid"]
    else:
        entries[3]["cocoid"] = cocoid
    path = write_karpathy(tmp_path / "dataset_coco.json", entries)
    with pytest.raises(HarnessError, match="image 3 of split 'testall' has no integer 'cocoid'"):
        split_coco_ids(path, split_of(path))


def test_a_split_not_loaded_from_a_karpathy_file_has_no_coco_ids(tmp_path):
    split = Split("testall", ["a.jpg"], [1], ["w"] * 5, 5)
    with pytest.raises(HarnessError, match="split 'testall' was not loaded from a Karpathy file: it has no COCO ids"):
        split_coco_ids(tmp_path / "dataset_coco.json", split)


def eccv_oracle(scores: np.ndarray, gt: dict[int, list[int]], query_index: dict[int, int],
                gallery_index: dict[int, int]) -> dict[str, float]:
    """ECCV Caption's mAP@R, R-P and R@1 (percent) over the queries of ``gt``, by per_query on a
    boolean positives matrix (``scores``: queries on rows). A listed positive outside the gallery
    (two i2t queries list a caption id that is not among the 25,000) counts in R, as the package
    counts it, but can never be retrieved: it becomes an extra column ranked last."""
    queries = sorted(gt)
    n = scores.shape[1]
    outside = sorted({g for q in queries for g in gt[q] if g not in gallery_index})
    column = {**gallery_index, **{g: n + k for k, g in enumerate(outside)}}
    sub = np.full((len(queries), n + len(outside)), -np.inf, dtype=np.float32)
    sub[:, :n] = scores[[query_index[q] for q in queries]]
    positives = np.zeros(sub.shape, dtype=bool)
    for i, q in enumerate(queries):
        positives[i, [column[g] for g in gt[q]]] = True
    # no positive ties with a negative at or above a query's (R + 1)-th best score: the package's
    # tie rule (gallery order) and per_query's (negatives first) rank the same relevances first
    big_r = positives.sum(axis=1)
    depth = int(big_r.max()) + 1
    top = np.sort(np.partition(sub, sub.shape[1] - depth, axis=1)[:, -depth:], axis=1)
    for i in range(len(queries)):
        near = sub[i] >= top[i, depth - big_r[i] - 1]
        assert np.intersect1d(sub[i, near & positives[i]], sub[i, near & ~positives[i]]).size == 0, queries[i]
    values = per_query(torch.from_numpy(sub), torch.from_numpy(positives))
    return {kind: 100.0 * float(v.mean()) for kind, v in values.items()}


def cxc_oracle(scores: np.ndarray, gt: dict[int, list[int]], query_index: dict[int, int],
               gallery_ids: np.ndarray, ks=(1, 5, 10)) -> dict[int, float]:
    """CxC R@K (percent) over the queries of ``gt``: a query scores 1 when one of its K best
    gallery items (descending score, torch.topk) is one of its CxC positives."""
    queries = sorted(gt)
    best, top = torch.topk(torch.from_numpy(scores), max(ks) + 1, dim=1)
    rows = [query_index[q] for q in queries]
    best, top = best[rows].numpy(), gallery_ids[top[rows].numpy()]
    assert all((best[:, k - 1] > best[:, k]).all() for k in ks)   # no tie across rank K: one top K
    relevant = np.array([[g in positives for g in ranked] for ranked, positives in
                         zip(top[:, :max(ks)].tolist(), (set(gt[q]) for q in queries))])
    return {k: 100.0 * float(relevant[:, :k].any(axis=1).mean()) for k in ks}


def test_metrics_match_an_independent_computation_from_the_annotation_files():
    image_ids, caption_ids = package_layout()
    ids = CocoIds(np.asarray(image_ids, dtype=np.int64), caption_ids.astype(np.int64))
    row = {int(i): r for r, i in enumerate(ids.image_ids)}
    col = {int(c): k for k, c in enumerate(ids.caption_ids)}
    gt = {name: read_ids(name) for name in ("eccv_image_to_caption", "eccv_caption_to_image",
                                            "cxc_image_to_caption", "cxc_caption_to_image")}
    rng = np.random.default_rng(0)
    scores = rng.standard_normal((N_IMAGES, N_CAPTIONS), dtype=np.float32)
    # lift the Karpathy pairs and every annotated pair by random amounts: every metric lands far
    # from 0 and 100, where a wrong id mapping or a misread annotation shows
    pairs = [r * N_CAPTIONS + np.arange(5 * r, 5 * r + 5) for r in range(N_IMAGES)]
    for name, annotation in gt.items():
        for q, gs in annotation.items():
            if name.split("_")[1] == "image":
                pairs.append([row[q] * N_CAPTIONS + col[g] for g in gs if g in col])
            else:
                pairs.append([row[g] * N_CAPTIONS + col[q] for g in gs])
    flat = np.unique(np.concatenate([np.asarray(p, dtype=np.int64) for p in pairs]))
    scores.reshape(-1)[flat] += rng.uniform(0.5, 4.0, size=flat.size).astype(np.float32)

    got = package_metrics(torch.from_numpy(scores), ids)

    want = {}
    for d, s, queries, gallery in (("i2t", scores, row, col), ("t2i", scores.T, col, row)):
        query, item = ("image", "caption") if d == "i2t" else ("caption", "image")
        for kind, value in eccv_oracle(s, gt[f"eccv_{query}_to_{item}"], queries, gallery).items():
            want[f"{d}_{kind}_eccv"] = value
        gallery_ids = ids.caption_ids if d == "i2t" else ids.image_ids
        for k, value in cxc_oracle(s, gt[f"cxc_{query}_to_{item}"], queries, gallery_ids).items():
            want[f"{d}_r{k}_cxc"] = value
    del scores, s
    gc.collect()

    assert sorted(got) == sorted(ECCV_CAPTION_METRICS) == sorted(want)
    assert all(5.0 < v < 95.0 for v in want.values()), want
    for name in ECCV_CAPTION_METRICS:
        assert got[name] == pytest.approx(want[name], abs=1e-9), name


@pytest.mark.parametrize("rank_chunk", [1 << 24, 20, 1])   # one chunk; 2 queries a chunk; 1 a chunk
def test_full_rankings_rank_the_whole_gallery(monkeypatch, rank_chunk):
    monkeypatch.setattr(eccv_caption_module, "RANK_CHUNK", rank_chunk)
    rng = np.random.default_rng(4)
    scores = rng.permutation(36).reshape(4, 9).astype(np.float32)   # no ties
    gallery = rng.choice(900_000, size=9, replace=False)
    queries = np.array([501, 17, 333, 8])
    got = full_rankings(torch.from_numpy(scores), gallery, queries)
    assert list(got) == queries.tolist()
    for i, q in enumerate(queries.tolist()):
        assert got[q].tolist() == gallery[np.argsort(-scores[i])].tolist()


def test_full_rankings_break_ties_by_gallery_order():
    scores = torch.tensor([[1.0, 2.0, 2.0, 1.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    got = full_rankings(scores, np.array([10, 20, 30, 40, 50]), np.array([7, 8]))
    assert got[7].tolist() == [50, 20, 30, 10, 40]
    assert got[8].tolist() == [10, 20, 30, 40, 50]


def test_the_coco_5k_eccv_protocol_is_declared_on_coco_ids():
    protocol = get_protocol("coco_5k_eccv")
    assert (protocol.split, protocol.n_folds, protocol.n_images, protocol.relevance) == ("testall", 1, 5000,
                                                                                         "coco_ids")
    assert protocol.metrics == ECCV_CAPTION_METRICS == (
        "i2t_map_r_eccv", "i2t_rp_eccv", "i2t_r1_eccv", "t2i_map_r_eccv", "t2i_rp_eccv", "t2i_r1_eccv",
        "i2t_r1_cxc", "i2t_r5_cxc", "i2t_r10_cxc", "t2i_r1_cxc", "t2i_r5_cxc", "t2i_r10_cxc")
    for name in ECCV_CAPTION_METRICS:
        m = METRICS.get(name)
        assert (m.relevance, m.direction, m.scale) == ("coco_ids", "higher", "percent")
    ids = CocoIds(np.arange(100, 102), np.arange(200, 210))
    scores = torch.zeros(2, 10)
    with pytest.raises(HarnessError, match="defined on the whole COCO 5K test set, not on folds"):
        ids.fold(scores, 0, 5)
    assert ids.fold(scores, 0, 1)[1] is ids
    with pytest.raises(HarnessError, match=r"shape \(10, 2\); the COCO ids give \(2, 10\)"):
        ids.check(scores.T)
    with pytest.raises(HarnessError, match="NaN or inf"):
        ids.check(torch.full((2, 10), float("nan")))
    with pytest.raises(HarnessError, match="protocol coco_5k_eccv expects 5000 images"):
        evaluate_protocol(scores, protocol, ids)


def test_each_registered_metric_reads_its_own_package_value(monkeypatch):
    calls = []

    def fake(scores, relevance):
        calls.append(relevance)
        return {name: float(k) for k, name in enumerate(ECCV_CAPTION_METRICS)}

    monkeypatch.setattr(eccv_caption_module, "package_metrics", fake)
    ids = CocoIds(np.arange(100, 102), np.arange(200, 210))
    got = evaluate(torch.zeros(2, 10), ids, ECCV_CAPTION_METRICS)
    assert got == {name: float(k) for k, name in enumerate(ECCV_CAPTION_METRICS)}
    assert calls == [ids]   # computed once for all twelve
