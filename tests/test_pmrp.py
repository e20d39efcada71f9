"""Plausible-match R-Precision (PCME, CVPR 2021, Section 4) against a brute force written from its
definition and naver-ai/pcme's evaluate_pmrp_coco.py conventions (per query, in Python loops:
the whole split ranked, its last item cut off when the protocol drops it, then the fold's
annotated items kept, R-Precision at thresholds 0-2 of the category Hamming distance), and the
COCO instance categories it reads."""
import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from methods.config import REPO_ROOT as REPO, load_harness_config
from methods.data.datasets import dataset_payload, load_dataset_payload
from methods.data.instance_categories import (check_instance_annotations, main, read_categories, split_categories)
from methods.data.karpathy import Split
from methods.errors import HarnessError
from methods.metrics.evaluation import evaluate_protocol, split_relevances
from methods.metrics.plausible_match import per_query
from methods.metrics.protocols import get_protocol
from methods.metrics.query_units import protocol_units
from methods.metrics.relevance import PlausibleMatches

C = 5


def brute_force(scores: np.ndarray, categories: np.ndarray, n_folds: int, drop_last: bool) -> dict[str, float]:
    """Fold-mean PMRP (%) both ways, one query at a time."""
    n = len(categories)
    annotated = [bool(categories[i].any()) for i in range(n)]

    table = [[sum(int(a != b) for a, b in zip(categories[i], categories[j])) for j in range(n)] for i in range(n)]

    def distance(i, j):
        return table[i][j]

    def ranking(row):   # gallery indices, best first (random floats: no ties)
        order = sorted(range(len(row)), key=lambda g: -row[g])
        return order[:-1] if drop_last else order

    size = n // n_folds
    out = {"i2t_pmrp": [], "t2i_pmrp": []}
    for fold in range(n_folds):
        images = range(fold * size, (fold + 1) * size)
        for direction in ("i2t", "t2i"):
            values = []
            queries = images if direction == "i2t" else range(fold * size * C, (fold + 1) * size * C)
            for q in queries:
                q_image = q if direction == "i2t" else q // C
                if not annotated[q_image]:
                    continue
                row = scores[q] if direction == "i2t" else scores[:, q]
                kept = [g for g in ranking(list(row))
                        if (g // C if direction == "i2t" else g) in images and annotated[g // C if direction == "i2t" else g]]
                per_t = []
                for t in (0, 1, 2):
                    matched = [distance(q_image, g // C if direction == "i2t" else g) <= t for g in kept]
                    r = sum(matched)
                    if r:   # none: the query's own match was the item dropped (the source divides by zero)
                        per_t.append(sum(matched[:r]) / r)
                if per_t:
                    values.append(np.mean(per_t))
            out[f"{direction}_pmrp"].append(100.0 * np.mean(values))
    return {k: float(np.mean(v)) for k, v in out.items()}


def planted(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Categories with many near matches (few categories, a few per image), some images unannotated."""
    rng = np.random.default_rng(seed)
    categories = (rng.random((n, 90)) < 0.02).astype(np.uint8)
    categories[:, :6] = rng.random((n, 6)) < 0.4
    categories[rng.choice(n, 3, replace=False)] = 0
    return rng.standard_normal((n, C * n)), categories


def protocol(name: str):
    return replace(get_protocol(name), n_images=None)


@pytest.mark.parametrize("name,drop", [("coco_1k_5fold_pmrp", True), ("coco_1k_5fold_pmrp_whole", False),
                                       ("coco_5k_pmrp", True)])
@pytest.mark.parametrize("seed", [0, 1])
def test_pmrp_equals_a_brute_force_from_the_definition(name, drop, seed):
    scores, categories = planted(40, seed)
    p = protocol(name)
    got = evaluate_protocol(torch.from_numpy(scores), p, PlausibleMatches(categories, C, last=p.last_ranked))
    expected = brute_force(scores, categories, p.n_folds, drop)
    for metric, value in expected.items():
        assert abs(got["metrics"][metric] - value) <= 1e-12, (metric, got["metrics"][metric], value)


def test_dropping_the_last_item_of_the_whole_split_changes_the_folds():
    # the drop is of the 5K ranking's last item, found before a fold is cut: the brute force with
    # the drop differs from the one without, and the protocols follow each
    scores, categories = planted(40, 3)
    kept = evaluate_protocol(torch.from_numpy(scores), protocol("coco_1k_5fold_pmrp_whole"),
                             PlausibleMatches(categories, C))["metrics"]
    dropped = evaluate_protocol(torch.from_numpy(scores), protocol("coco_1k_5fold_pmrp"),
                                PlausibleMatches(categories, C, last="dropped"))["metrics"]
    assert kept != dropped
    assert dropped["t2i_pmrp"] == pytest.approx(brute_force(scores, categories, 5, True)["t2i_pmrp"], abs=1e-12)


def test_ties_count_against_the_model():
    # one image query, 15 captions: 10 at category distance 0 (its own image's and a twin's), 5 at
    # distance 5. With every score equal the 5 non-matches are ranked first, so the top R = 10
    # hold 5 matches: 0.5 at every threshold; scores that put the matches first give 1
    distances = torch.tensor([[0] * 10 + [5] * 5], dtype=torch.int16)
    args = (distances, torch.tensor([True]), torch.ones(15, dtype=torch.bool), torch.tensor([-1]), (0, 1, 2))
    assert per_query(torch.zeros(1, 15), *args).tolist() == [0.5]
    assert per_query(torch.tensor([[1.0] * 10 + [0.0] * 5]), *args).tolist() == [1.0]


def test_unannotated_items_are_neither_queries_nor_ranked():
    scores, categories = planted(10, 4)
    values = protocol_units(torch.from_numpy(scores), protocol("coco_5k_pmrp"), PlausibleMatches(categories, C),
                            ["i2t_pmrp", "t2i_pmrp"])
    unannotated = ~categories.any(axis=1)
    assert (values.counts[0][unannotated] == 0).all() and (values.counts[0][~unannotated] == 1).all()
    assert (values.counts[1][unannotated] == 0).all() and (values.counts[1][~unannotated] == C).all()
    # a top-scored unannotated caption takes no rank: raising its scores changes nothing
    raised = scores.copy()
    raised[:, np.flatnonzero(np.repeat(unannotated, C))] += 100.0
    relevance = PlausibleMatches(categories, C)
    p = replace(protocol("coco_5k_pmrp"), last_ranked="kept")
    assert (evaluate_protocol(torch.from_numpy(raised), p, relevance)["metrics"]
            == evaluate_protocol(torch.from_numpy(scores), p, relevance)["metrics"])


@pytest.mark.parametrize("chunk", [1, 7])
def test_chunks_of_queries_give_the_same_values(chunk):
    scores, categories = planted(12, 5)
    d = torch.from_numpy((categories[:, None, :] != categories[None, np.arange(60) // C, :]).sum(-1).astype(np.int16))
    annotated = torch.from_numpy(categories.any(axis=1))
    args = (torch.from_numpy(scores), d, annotated, annotated[np.arange(60) // C], torch.full((12,), -1), (0, 1, 2))
    np.testing.assert_array_equal(per_query(*args, chunk=chunk), per_query(*args))


def test_the_protocols_are_declared_on_plausible_matches():
    for name in ("coco_1k_5fold_pmrp", "coco_1k_5fold_pmrp_whole", "coco_5k_pmrp"):
        p = get_protocol(name)
        assert p.relevance == "plausible_matches" and p.metrics == ("i2t_pmrp", "t2i_pmrp") and p.split == "testall"
    assert get_protocol("coco_1k_5fold_pmrp").last_ranked == "dropped"
    assert get_protocol("coco_1k_5fold_pmrp").relevance_key != get_protocol("coco_1k_5fold_pmrp_whole").relevance_key


# -- the COCO instance categories ------------------------------------------------------------------

def instances(path, images, annotations):
    path.write_text(json.dumps({"images": [{"id": i} for i in images],
                                "annotations": [{"image_id": i, "category_id": c, "segmentation": [[0.0, 1.0]]}
                                                for i, c in annotations]}))


def split_of(files_ids) -> Split:
    filenames = [f"{folder}/COCO_{folder}_{i:012d}.jpg" for folder, i in files_ids]
    return Split("testall", filenames, list(range(len(filenames))), ["a caption"] * len(filenames), 1,
                 coco_ids=[i for _, i in files_ids])


def test_categories_follow_the_split_order_and_the_file_of_each_folder(tmp_path):
    instances(tmp_path / "instances_val2014.json", [7, 3, 9], [(3, 1), (3, 90), (3, 1), (9, 18)])
    instances(tmp_path / "instances_train2014.json", [5], [(5, 2)])
    rows = split_categories(tmp_path, split_of([("val2014", 9), ("train2014", 5), ("val2014", 7), ("val2014", 3)]), "k")
    assert rows.shape == (4, 90) and rows.dtype == np.uint8
    assert [np.flatnonzero(r).tolist() for r in rows] == [[17], [1], [], [0, 89]]


def test_an_image_the_file_does_not_list_is_named(tmp_path):
    instances(tmp_path / "instances_val2014.json", [7], [(7, 1)])
    with pytest.raises(HarnessError, match=r"lists no image 8 \(val2014/COCO_val2014_000000000008.jpg, image 1"):
        split_categories(tmp_path, split_of([("val2014", 7), ("val2014", 8)]), "k")


def test_a_category_outside_cocos_ids_is_named(tmp_path):
    instances(tmp_path / "instances_val2014.json", [7], [(7, 91)])
    with pytest.raises(HarnessError, match=r"annotations\[0\] has category_id 91"):
        split_categories(tmp_path, split_of([("val2014", 7)]), "k")


def test_the_dag_check_names_the_key_and_the_missing_file(tmp_path):
    split = {"testall": split_of([("val2014", 7)])}
    with pytest.raises(HarnessError, match=r"^datasets.coco.instance_annotations: not set"):
        check_instance_annotations(None, "datasets.coco.instance_annotations", split)
    with pytest.raises(HarnessError, match=r"instances_val2014.json not found"):
        check_instance_annotations(str(tmp_path), "datasets.coco.instance_annotations", split)
    (tmp_path / "instances_val2014.json").write_text("[]")
    with pytest.raises(HarnessError, match="is not a JSON object"):
        check_instance_annotations(str(tmp_path), "datasets.coco.instance_annotations", split)


def test_the_job_file_gives_a_smoke_run_its_first_images(tmp_path):
    np.savez(tmp_path / "c.npz", testall=np.eye(4, 90, dtype=np.uint8))
    assert read_categories(tmp_path / "c.npz", "testall", 2).tolist() == np.eye(2, 90, dtype=np.uint8).tolist()
    with pytest.raises(HarnessError, match="no categories of split 'dev'"):
        read_categories(tmp_path / "c.npz", "dev", 2)


def test_the_categories_job_writes_what_evaluation_reads(tmp_path):
    """The rule's command on a small COCO-like Karpathy file, then the relevance a training job's
    test evaluation builds from its output (``split_relevances``), scored like the brute force."""
    ids = [101, 102, 103, 104, 105, 106, 107, 108, 109, 110]
    entries = [{"split": "test", "filepath": "val2014", "filename": f"COCO_val2014_{i:012d}.jpg", "imgid": k,
                "cocoid": i, "sentences": [{"raw": f"image {i} caption {j}.", "tokens": ["image"], "sentid": 5 * k + j}
                                           for j in range(5)]} for k, i in enumerate(ids)]
    entries.append({**entries[0], "split": "train", "filepath": "train2014", "cocoid": 7, "imgid": 10,
                    "filename": "COCO_train2014_000000000007.jpg"})
    entries.append({**entries[1], "split": "val", "cocoid": 8, "imgid": 11, "filename": "COCO_val2014_000000000008.jpg"})
    (tmp_path / "dataset_coco.json").write_text(json.dumps({"images": entries, "dataset": "coco"}))
    (tmp_path / "ann").mkdir()
    rng = np.random.default_rng(0)
    annotations = [(i, int(c)) for i in ids[1:] for c in rng.choice([1, 2, 3, 5, 90], size=2)]
    instances(tmp_path / "ann" / "instances_val2014.json", ids, annotations)   # image 101: none
    cfg = load_harness_config(REPO / "config" / "config.yaml", {"results_dir": str(tmp_path / "results"), "datasets": {
        "coco": {"karpathy_json": str(tmp_path / "dataset_coco.json"), "images_dir": str(tmp_path),
                 "instance_annotations": str(tmp_path / "ann"), "protocols": ["coco_1k_5fold", "coco_1k_5fold_pmrp"]}}})
    payload = dataset_payload(cfg, "coco")
    (tmp_path / "dataset.json").write_text(json.dumps(payload.to_json(), default=str))
    out = payload.paths["instance_categories"]
    main(["--dataset-config", str(tmp_path / "dataset.json"), "--splits", "testall", "--out", str(out)])
    relevance = split_relevances(load_dataset_payload(tmp_path / "dataset.json"), "testall")[
        get_protocol("coco_1k_5fold_pmrp").relevance_key]
    assert relevance.last == "dropped" and not relevance.categories[0].any()
    assert [set(np.flatnonzero(r) + 1) for r in relevance.categories[1:]] == [
        {c for i, c in annotations if i == image} for image in ids[1:]]
    scores = rng.standard_normal((10, 50))
    got = evaluate_protocol(torch.from_numpy(scores), protocol("coco_1k_5fold_pmrp"), relevance)["metrics"]
    assert got == pytest.approx(brute_force(scores, relevance.categories, 5, True), abs=1e-12)
