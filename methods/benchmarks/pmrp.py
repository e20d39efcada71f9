"""Benchmark (not a test): plausible-match R-Precision on COCO 1K (five folds of the 5K test set),
this harness's against naver-ai/pcme's own code, side by side on the same fake COCO in one run,
with their values compared (they must agree within 1e-12).

    git clone https://github.com/naver-ai/pcme /path/to/pcme
    python -m methods.benchmarks.pmrp --source /path/to/pcme                 # both, 5,000 images
    python -m methods.benchmarks.pmrp --source /path/to/pcme --images 1000 --only source
    python -m methods.benchmarks.pmrp --only harness --images 5000
    python -m methods.benchmarks.pmrp --dataset-config results/coco/dataset.json   # a configured dataset's categories

The fake COCO: ``--images`` test images (a multiple of 5) with five captions each, random unit
embeddings (``--dim``, float64) scored by their dot product, and an ``instances_val2014.json``
whose images carry COCO-like object annotations (1-90 ids, ~2.9 categories and ~7 instances an
image, 1 % without any, a polygon per instance), written to a temporary folder.

Timed, each from the embeddings and the annotation file to the two fold-mean PMRP values:

- ``harness``: the score matrix, the categories read from the file
  (``methods.data.instance_categories``), protocol ``coco_1k_5fold_pmrp``;
- ``source``: PCME's ``COCOEvaluator.retrieve`` (engine/eval_coco.py, ``eval_method: matmul``,
  topk -1 as extract_rankings_coco.py calls it) with each query's ranked items as
  ``COCORetrievalEngine.retrieve_from_features`` lists them, then evaluate_pmrp_coco.py's
  ``prepare_data`` and ``evaluate_plausible_metrics`` per fold as its ``main`` runs them. Left
  out, which makes theirs faster: the dump written and read between the two scripts, and the
  images ``prepare_data`` opens to find each fold's image ids (a stand-in dataset gives them).
  Their modules are loaded from ``--source`` with their unused imports (``fire``, ``ujson`` as the
  standard ``json``, ``datasets.coco``) stood in for.

With ``--dataset-config``: the categories of a configured dataset's ``testall`` split from its
``instance_categories.npz`` (the DAG's job), scored against random scores under
``coco_1k_5fold_pmrp`` and ``coco_5k_pmrp``; prints seconds and peak resident memory.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import sys
import tempfile
import time
import types
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from methods.data.datasets import load_dataset_payload
from methods.data.instance_categories import N_CATEGORY_IDS, read_categories, split_categories
from methods.data.karpathy import Split
from methods.metrics.evaluation import evaluate_protocol
from methods.metrics.protocols import get_protocol
from methods.metrics.relevance import PlausibleMatches

C = 5


COCO_CATEGORY_IDS = np.setdiff1d(np.arange(1, 91), [12, 26, 29, 30, 45, 66, 68, 69, 71, 83])   # the 80 used


def fake_instances(image_ids, rng: np.random.Generator, folder: str = "val2014") -> dict:
    """COCO-like instance annotations of ``image_ids``: ~2.9 categories an image (unevenly
    frequent), ~2.5 instances of each, a polygon of 8-40 points per instance, 1 % of the images
    without any (the real val2014 file: 40,504 images, 291,875 instances, 158 MB)."""
    frequency = rng.dirichlet(np.full(80, 0.3))
    annotations = []
    for image in image_ids:
        if rng.random() < 0.01:
            continue
        for category in COCO_CATEGORY_IDS[rng.choice(80, size=max(1, rng.poisson(2.9)), p=frequency)]:
            for _ in range(1 + rng.poisson(1.5)):
                polygon = np.round(rng.random(2 * rng.integers(8, 40)) * 640, 2).tolist()
                annotations.append({"id": len(annotations) + 1, "image_id": int(image), "category_id": int(category),
                                    "segmentation": [polygon], "area": 1.0, "bbox": [0, 0, 1, 1], "iscrowd": 0})
    return {"images": [{"id": int(i), "file_name": f"COCO_{folder}_{int(i):012d}.jpg"} for i in image_ids],
            "annotations": annotations, "categories": [{"id": int(c)} for c in COCO_CATEGORY_IDS]}


def fake_coco(n_images: int, dim: int, folder: Path, seed: int = 0) -> dict:
    """Embeddings, ids and an instance annotation file of a fake COCO test set under ``folder``."""
    rng = np.random.default_rng(seed)
    image_ids = np.arange(1, n_images + 1) * 7     # COCO ids: not row numbers
    caption_ids = np.arange(1, C * n_images + 1) * 3
    path = folder / "annotations" / "annotations" / "instances_val2014.json"   # where PCME's code looks
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(fake_instances(image_ids, rng)))
    images = torch.nn.functional.normalize(torch.from_numpy(rng.standard_normal((n_images, dim))), dim=1)
    captions = torch.nn.functional.normalize(torch.from_numpy(rng.standard_normal((C * n_images, dim))), dim=1)
    captions = torch.nn.functional.normalize(captions + 0.8 * images.repeat_interleave(C, dim=0), dim=1)
    return {"root": folder, "annotations": path, "image_ids": image_ids, "caption_ids": caption_ids,
            "images": images, "captions": captions}


def harness_pmrp(coco: dict) -> dict[str, float]:
    scores = coco["images"] @ coco["captions"].T
    split = Split("testall", [f"val2014/COCO_val2014_{i:012d}.jpg" for i in coco["image_ids"]],
                  list(range(len(coco["image_ids"]))), [""] * len(coco["caption_ids"]), C,
                  coco_ids=[int(i) for i in coco["image_ids"]])
    categories = split_categories(coco["annotations"].parent, split, "fake COCO")
    protocol = replace(get_protocol("coco_1k_5fold_pmrp"), n_images=None)   # --images need not be 5,000
    return evaluate_protocol(scores, protocol, PlausibleMatches(categories, C, last=protocol.last_ranked))["metrics"]


def load_source(source: Path) -> tuple[types.ModuleType, types.ModuleType]:
    """PCME's engine/eval_coco.py and evaluate_pmrp_coco.py, their unused imports stood in for."""
    sys.path.insert(0, str(source))
    stand_ins = {"fire": types.ModuleType("fire"), "ujson": json, "datasets": types.ModuleType("datasets"),
                 "datasets.coco": types.ModuleType("datasets.coco")}
    stand_ins["datasets.coco"].CocoCaptionsCap = None
    sys.modules.update(stand_ins)

    def load(name: str, path: Path) -> types.ModuleType:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return load("pcme_eval_coco", source / "engine/eval_coco.py"), load("pcme_pmrp", source / "evaluate_pmrp_coco.py")


class FoldIds:
    """What ``prepare_data`` reads of its dataset: per caption (in the test order), its image id."""

    def __init__(self, caption_images: np.ndarray):
        self.caption_images = caption_images
        self.all_image_ids = set(int(i) for i in caption_images)

    def __len__(self) -> int:
        return len(self.caption_images)

    def __getitem__(self, index: int):
        return None, None, None, int(self.caption_images[index])


def source_pmrp(coco: dict, eval_coco: types.ModuleType, pmrp: types.ModuleType) -> dict[str, float]:
    image_ids, caption_ids = coco["image_ids"], coco["caption_ids"]
    caption_image = dict(zip(caption_ids.tolist(), np.repeat(image_ids, C).tolist()))
    evaluator = eval_coco.COCOEvaluator(eval_method="matmul", eval_device="cpu")
    evaluator.n_embeddings = 1
    images, captions = coco["images"][:, None, :], coco["captions"][:, None, :]
    # pycocotools' loadAnns / loadImgs hand out the one dict of each annotation and image
    anns = {i: {"id": i, "image_id": caption_image[i]} for i in caption_ids.tolist()}
    imgs = {i: {"id": i} for i in image_ids.tolist()}
    data = {}
    # retrieve_from_features: each query's ranked gallery items as coco.loadAnns / loadImgs give them
    for modal, q, g, q_ids, g_ids, gallery, queries in (("i2t", images, captions, image_ids, caption_ids, anns, imgs),
                                                        ("t2i", captions, images, caption_ids, image_ids, imgs, anns)):
        items, _, _ = evaluator.retrieve(q, g, q_ids, g_ids, topk=-1, batch_size=1024)
        data[modal] = {int(k): {"retrieved": [gallery[int(i)] for i in v], "query": queries[int(k)]}
                       for k, v in items.items()}
        del items
    ds = FoldIds(np.repeat(image_ids, C))
    i2t, t2i = [], []
    for fold in range(5):   # evaluate_pmrp_coco.main with n_fold
        _, _, val_image_ids, pdists, iid_to_idx = pmrp.prepare_data(str(coco["root"]), None, fold, ds=ds)
        i2t.append(pmrp.mean_score(pmrp.evaluate_plausible_metrics(data["i2t"], "image", pdists, iid_to_idx,
                                                                   set(val_image_ids))[0]))
        t2i.append(pmrp.mean_score(pmrp.evaluate_plausible_metrics(data["t2i"], "text", pdists, iid_to_idx,
                                                                   set(val_image_ids))[0]))
    return {"i2t_pmrp": float(np.mean(i2t)), "t2i_pmrp": float(np.mean(t2i))}


def timed(fn, *args) -> tuple[dict, float]:
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def configured(args) -> None:
    # every row of the job's file: the split's size without parsing its Karpathy file
    categories = read_categories(load_dataset_payload(args.dataset_config).paths["instance_categories"], "testall")
    n = len(categories)
    scores = torch.randn(n, C * n, generator=torch.Generator().manual_seed(0))
    for name in ("coco_1k_5fold_pmrp", "coco_5k_pmrp"):
        protocol = get_protocol(name)
        result, seconds = timed(evaluate_protocol, scores, protocol,
                                PlausibleMatches(categories, C, last=protocol.last_ranked))
        print(f"{name}: {seconds:.2f} s, {result['metrics']}")
    print(f"peak resident memory {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB "
          f"({n} images, {categories.shape[1]} category ids)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, help="a checkout of naver-ai/pcme")
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--only", choices=["harness", "source"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dataset-config", help="instead: a configured dataset's categories (results/<name>/dataset.json)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.dataset_config:
        return configured(args)
    if args.images % 5:
        parser.error("--images: a multiple of 5 (five folds)")
    if args.only != "harness" and args.source is None:
        parser.error("--source: a checkout of naver-ai/pcme (or --only harness)")
    with tempfile.TemporaryDirectory() as tmp:
        coco = fake_coco(args.images, args.dim, Path(tmp))
        results = {}
        if args.only in (None, "harness"):
            results["harness"] = timed(harness_pmrp, coco)
        if args.only in (None, "source"):
            results["source"] = timed(source_pmrp, coco, *load_source(args.source))
    for name, (values, seconds) in results.items():
        print(f"{name:>8}: {seconds:8.2f} s  i2t PMRP {values['i2t_pmrp']:.12f}  t2i PMRP {values['t2i_pmrp']:.12f}")
    if len(results) == 2:
        (ours, t_ours), (theirs, t_theirs) = results["harness"], results["source"]
        gap = max(abs(ours[k] - theirs[k]) for k in ours)
        print(f"speed-up {t_theirs / t_ours:.1f}x; largest difference {gap:.2e} ({'equal' if gap <= 1e-12 else 'DIFFERENT'} "
              f"within 1e-12); {args.images} images, {N_CATEGORY_IDS} category ids")


if __name__ == "__main__":
    main()
