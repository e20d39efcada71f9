"""False-negative-aware metrics (ECCV Caption's R-Precision, mAP@R and R@1 against extended
positives) and the extended-positives file: against a per-query loop written from the
definitions (Musgrave et al., ECCV 2020; Chun et al., ECCV 2022), a hand-worked example, the
closed form with only the Karpathy pairs positive, the tie rule, folds, and the loader's errors."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from methods.data.datasets import DatasetPayload, dataset_paths
from methods.data.karpathy import load_splits
from methods.data.positives import split_positives
from methods.errors import HarnessError
from methods.metrics.declarations import ECCV_METRICS, METRICS
from methods.metrics.eccv import per_query
from methods.metrics.evaluation import evaluate, evaluate_protocol, evaluate_split, split_relevances
from methods.metrics.protocols import Protocol, get_protocol
from methods.metrics.relevance import ExtendedPositives
from methods.metrics.retrieval import retrieval_metrics


def brute_force_eccv(scores: np.ndarray, positives: np.ndarray) -> dict[str, float]:
    """One query at a time, from the definitions: rank the gallery by descending score with every
    negative before a tied positive; R = the query's positives; R-P = positives in the top R / R;
    mAP@R = (1/R) * sum over i <= R of precision@i where rank i holds a positive; R@1 = top is one."""
    out = {}
    for direction, s, p in (("i2t", scores, positives), ("t2i", scores.T, positives.T)):
        values = {"r1": [], "rp": [], "map_r": []}
        for q in range(s.shape[0]):
            order = sorted(range(s.shape[1]), key=lambda g: (-s[q, g], bool(p[q, g])))
            rel = [bool(p[q, g]) for g in order]
            big_r = sum(rel)
            values["r1"].append(1.0 if rel[0] else 0.0)
            values["rp"].append(sum(rel[:big_r]) / big_r)
            values["map_r"].append(sum(sum(rel[:i]) / i for i in range(1, big_r + 1) if rel[i - 1]) / big_r)
        for kind, v in values.items():
            out[f"{direction}_{kind}_ext"] = 100.0 * sum(v) / len(v)
    return out


def random_positives(rng, n: int, c: int = 5, density: float = 0.15) -> np.ndarray:
    """Karpathy pairs plus random extra positives."""
    positives = rng.random((n, c * n)) < density
    positives[np.arange(c * n) // c, np.arange(c * n)] = True
    return positives


def test_registered_with_extended_positives_relevance():
    assert ECCV_METRICS == ("i2t_map_r_ext", "i2t_rp_ext", "i2t_r1_ext", "t2i_map_r_ext", "t2i_rp_ext", "t2i_r1_ext")
    for name in ECCV_METRICS:
        m = METRICS.get(name)
        assert (m.relevance, m.direction, m.tolerance, m.scale, m.in_table) == (
            "extended_positives", "higher", "ranking", "percent", True)
    assert METRICS.get("i2t_rp_ext").label == "i→t R-P (ext.)"
    assert METRICS.get("t2i_map_r_ext").label == "t→i mAP@R (ext.)"
    assert METRICS.get("i2t_r1_ext").label == "i→t R@1 (ext.)"
    proto = get_protocol("synthetic_eccv")
    assert (proto.split, proto.n_folds, proto.relevance, proto.metrics) == ("test", 1, "extended_positives",
                                                                             ECCV_METRICS)


@pytest.mark.parametrize("seed", range(6))
def test_matches_brute_force_with_ties(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 12))
    positives = random_positives(rng, n, density=float(rng.uniform(0.0, 0.4)))
    # few distinct values: many ties, between positives and negatives too
    scores = rng.integers(0, 4, size=(n, 5 * n)).astype(np.float32)
    got = evaluate(torch.from_numpy(scores), ExtendedPositives(positives), ECCV_METRICS)
    want = brute_force_eccv(scores, positives)
    for name in ECCV_METRICS:
        assert got[name] == pytest.approx(want[name], abs=1e-9), name


@pytest.mark.parametrize("chunk", [1, 3, 7, 1000])
def test_chunking_does_not_change_per_query_values(chunk):
    rng = np.random.default_rng(11)
    positives = random_positives(rng, 9)
    scores = torch.from_numpy(rng.integers(0, 3, size=(9, 45)).astype(np.float64))
    for s, p in ((scores, positives), (scores.T, positives.T)):
        want = brute_force_eccv(s.numpy(), p)  # per direction, queries as rows: the i2t entries
        got = per_query(s, torch.from_numpy(p), chunk=chunk)
        for kind in ("r1", "rp", "map_r"):
            assert 100 * float(got[kind].mean()) == pytest.approx(want[f"i2t_{kind}_ext"], abs=1e-9)


def test_hand_worked_example():
    # one caption per image (caption k belongs to image k); rows images, columns captions
    positives = np.array([[1, 0, 1, 0],
                          [1, 1, 0, 0],
                          [0, 0, 1, 0],
                          [0, 0, 1, 1]], dtype=bool)
    scores = torch.tensor([[0.9, 0.8, 0.1, 0.3],
                           [0.5, 0.2, 0.6, 0.4],
                           [0.5, 0.7, 0.7, 0.0],
                           [0.4, 0.6, 0.2, 0.9]])
    got = evaluate(scores, ExtendedPositives(positives, captions_per_image=1), ECCV_METRICS)
    # i2t, ranked relevance (negatives first among ties) / R / R@1, R-P, mAP@R:
    #   image 0: c0 .9+, c1 .8-, c3 .3-, c2 .1+  -> [1,0,0,1] R=2: 1, 1/2, (1/2)(1)         = 1/2
    #   image 1: c2 .6-, c0 .5+, c3 .4-, c1 .2+  -> [0,1,0,1] R=2: 0, 1/2, (1/2)(1/2)       = 1/4
    #   image 2: c1 .7- tied with c2 .7+ (negative first) -> [0,1,..] R=1: 0, 0, 0
    #   image 3: c3 .9+, c1 .6-, c0 .4-, c2 .2+  -> [1,0,0,1] R=2: 1, 1/2, 1/2
    # means: R@1 2/4 = 50 %, R-P 1.5/4 = 37.5 %, mAP@R 1.25/4 = 31.25 %
    assert got["i2t_r1_ext"] == pytest.approx(50.0)
    assert got["i2t_rp_ext"] == pytest.approx(37.5)
    assert got["i2t_map_r_ext"] == pytest.approx(31.25)
    # t2i (columns as queries):
    #   caption 0: i0 .9+, then i1 .5+ tied with i2 .5- (negative first): i2, i1, i3 .4-
    #              -> [1,0,1,0] R=2: 1, 1/2, (1/2)(1)                 = 1/2
    #   caption 1: i0 .8- first, R=1: 0, 0, 0
    #   caption 2: i2 .7+, i1 .6-, i3 .2+, i0 .1+ -> [1,0,1,1] R=3: 1, 2/3, (1/3)(1 + 2/3) = 5/9
    #   caption 3: i3 .9+ first, R=1: 1, 1, 1
    # means: R@1 3/4 = 75 %, R-P (1/2 + 2/3 + 1)/4 = 13/24, mAP@R (1/2 + 5/9 + 1)/4 = 37/72
    assert got["t2i_r1_ext"] == pytest.approx(75.0)
    assert got["t2i_rp_ext"] == pytest.approx(100 * 13 / 24)
    assert got["t2i_map_r_ext"] == pytest.approx(100 * 37 / 72)


@pytest.mark.parametrize("seed", range(4))
def test_karpathy_pairs_only_reduce_to_recall_at_one(seed):
    """With only the Karpathy pairs positive a caption has R = 1, so t2i R-P = mAP@R = R@1, the
    R@1 of methods.metrics.retrieval; i2t R@1 (top caption is one of the image's) is its i2t R@1."""
    rng = np.random.default_rng(50 + seed)
    n = 12
    scores = rng.integers(0, 5, size=(n, 5 * n)).astype(np.float32)  # ties included
    karpathy = np.zeros((n, 5 * n), dtype=bool)
    karpathy[np.arange(5 * n) // 5, np.arange(5 * n)] = True
    got = evaluate(torch.from_numpy(scores), ExtendedPositives(karpathy), ECCV_METRICS)
    recall = retrieval_metrics(scores)
    assert got["t2i_rp_ext"] == pytest.approx(recall["t2i_r1"])
    assert got["t2i_map_r_ext"] == pytest.approx(recall["t2i_r1"])
    assert got["t2i_r1_ext"] == pytest.approx(recall["t2i_r1"])
    assert got["i2t_r1_ext"] == pytest.approx(recall["i2t_r1"])


def test_constant_scores_give_the_worst_value_and_perfect_scores_the_best():
    rng = np.random.default_rng(3)
    positives = random_positives(rng, 10, density=0.1)
    worst = evaluate(torch.zeros(10, 50), ExtendedPositives(positives), ECCV_METRICS)
    assert all(v == 0.0 for v in worst.values()), worst
    best = evaluate(torch.from_numpy(positives.astype(np.float32)), ExtendedPositives(positives), ECCV_METRICS)
    assert all(v == pytest.approx(100.0) for v in best.values()), best


def test_relevance_checks_shape_values_and_karpathy_pairs():
    positives = np.ones((2, 10), dtype=bool)
    with pytest.raises(HarnessError, match=r"extended positives are \(3, 15\)"):
        ExtendedPositives(np.ones((3, 15), dtype=bool)).check(torch.zeros(2, 10))
    with pytest.raises(HarnessError, match=r"expected \(N, 5N\)"):
        ExtendedPositives(np.ones((2, 8), dtype=bool)).check(torch.zeros(2, 8))
    with pytest.raises(HarnessError, match="NaN or inf"):
        ExtendedPositives(positives).check(torch.full((2, 10), float("nan")))
    missing = positives.copy()
    missing[1, 7] = False
    with pytest.raises(HarnessError, match="caption 7 of image 1"):
        ExtendedPositives(missing).check(torch.zeros(2, 10))
    with pytest.raises(HarnessError, match="boolean"):
        ExtendedPositives(np.ones((2, 10)))
    with pytest.raises(HarnessError, match="needs extended_positives relevance"):
        evaluate_protocol(np.zeros((2, 10), np.float32), get_protocol("synthetic_eccv"))


def test_folds_are_consecutive_blocks_of_images_and_their_captions():
    rng = np.random.default_rng(21)
    n = 12
    positives = random_positives(rng, n, density=0.2)
    scores = rng.integers(0, 4, size=(n, 5 * n)).astype(np.float32)
    proto = Protocol("eccv_3fold", "test", 3, None, "", relevance="extended_positives", metrics=ECCV_METRICS)
    res = evaluate_protocol(scores, proto, ExtendedPositives(positives))
    blocks = [brute_force_eccv(scores[f * 4:(f + 1) * 4, f * 20:(f + 1) * 20],
                               positives[f * 4:(f + 1) * 4, f * 20:(f + 1) * 20]) for f in range(3)]
    for name in ECCV_METRICS:
        assert res["metrics"][name] == pytest.approx(np.mean([b[name] for b in blocks]))
        assert [f[name] for f in res["folds"]] == pytest.approx([b[name] for b in blocks])


# -- the extended-positives file -------------------------------------------------------------

IMAGES = {"train": [10, 11], "restval": [12], "val": [13], "test": [20, 21, 22]}


def sentids(imgid: int) -> list[int]:
    return [10 * imgid + k for k in range(5)]


def write_karpathy(tmp_path: Path) -> Path:
    images = [{"imgid": i, "filename": f"{i}.png", "split": split,
               "sentences": [{"raw": f"caption {s}", "sentid": s} for s in sentids(i)]}
              for split, ids in IMAGES.items() for i in ids]
    path = tmp_path / "dataset_toy.json"
    path.write_text(json.dumps({"images": images}))
    return path


def positives_file(tmp_path: Path, edit=None) -> Path:
    """Every caption positive for its own image only, except: caption 201 (image 20) also
    describes image 22, caption 210 (image 21) also image 20, caption 120 (restval image 12) also
    train image 10."""
    splits = {split: {"caption_images": {str(s): [i] for i in ids for s in sentids(i)}}
              for split, ids in IMAGES.items()}
    splits["test"]["caption_images"].update({"201": [20, 22], "210": [20, 21]})
    splits["restval"]["caption_images"]["120"] = [10, 12]
    data = {"dataset": "toy", "definition": "test", "splits": splits}
    if edit:
        edit(data)
    path = tmp_path / "positives_toy.json"
    path.write_text(json.dumps(data))
    return path


def load(tmp_path: Path, name: str = "test", karpathy_splits=("test",), edit=None) -> np.ndarray:
    karpathy = write_karpathy(tmp_path)
    split = load_splits(karpathy, {name: list(karpathy_splits)}, 5)[name]
    karpathy.unlink()   # the loaded split carries its sentence ids: the file is not parsed again
    return split_positives(positives_file(tmp_path, edit), split, karpathy)


def test_loader_builds_the_matrix_in_score_matrix_order(tmp_path):
    got = load(tmp_path)
    want = np.zeros((3, 15), dtype=bool)
    want[np.arange(15) // 5, np.arange(15)] = True   # caption k of image k // 5
    want[2, 1] = True    # caption 201 = column 1 (image 20's second), image 22 = row 2
    want[0, 5] = True    # caption 210 = column 5 (image 21's first), image 20 = row 0
    np.testing.assert_array_equal(got, want)
    # a harness split merging two Karpathy splits: train (10, 11) then restval (12)
    merged = load(tmp_path, "train", ("train", "restval"))
    want = np.zeros((3, 15), dtype=bool)
    want[np.arange(15) // 5, np.arange(15)] = True
    want[0, 10] = True   # caption 120 (restval image 12, column 10) also describes train image 10
    np.testing.assert_array_equal(merged, want)


def _drop(split: str, sentid: str):
    return lambda data: data["splits"][split]["caption_images"].pop(sentid)


def _set(split: str, sentid: str, images: list):
    return lambda data: data["splits"][split]["caption_images"].__setitem__(sentid, images)


@pytest.mark.parametrize("edit, message", [
    (lambda data: data["splits"].pop("test"), "no split 'test' under 'splits'"),
    (_drop("test", "203"), "caption sentid 203 .* has no entry in splits.test.caption_images"),
    (_set("test", "201", [20, 13]), "caption sentid 201 lists image 13, which is not an image of harness split"),
    (_set("test", "201", [20, 99]), "caption sentid 201 lists image 99"),
    (_set("test", "204", [21]), "caption sentid 204 does not list its own image 20"),
    (lambda data: data.pop("splits"), "no 'splits' object at the top level"),
])
def test_loader_errors_are_one_line_naming_the_file(tmp_path, edit, message):
    with pytest.raises(HarnessError, match=message) as info:
        load(tmp_path, edit=edit)
    text = str(info.value)
    assert "\n" not in text and str(tmp_path / "positives_toy.json") in text


def test_loader_errors_on_unreadable_and_missing_files(tmp_path):
    karpathy = write_karpathy(tmp_path)
    split = load_splits(karpathy, {"test": ["test"]}, 5)["test"]
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(HarnessError, match=f"{bad}:1:2: not valid JSON") as info:
        split_positives(bad, split, karpathy)
    assert "\n" not in str(info.value)
    with pytest.raises(HarnessError, match="extended-positives file not found: .*missing.json"):
        split_positives(tmp_path / "missing.json", split, karpathy)


@pytest.mark.parametrize("sentid", [None, "203"])
def test_a_sentence_without_an_integer_sentid_is_named(tmp_path, sentid):
    karpathy = write_karpathy(tmp_path)
    data = json.loads(karpathy.read_text())
    sentence = next(e for e in data["images"] if e["imgid"] == 20)["sentences"][3]
    if sentid is None:
        del sentence["sentid"]
    else:
        sentence["sentid"] = sentid
    karpathy.write_text(json.dumps(data))
    split = load_splits(karpathy, {"test": ["test"]}, 5)["test"]
    with pytest.raises(HarnessError, match=rf"^{karpathy}: a sentence of split 'test' \(image 20\) has no integer "
                                           rf"'sentid' \({sentid!r}\); extended positives are keyed by sentid$"):
        split_positives(positives_file(tmp_path), split, karpathy)


# -- wiring: dataset paths and the relevance evaluation builds ----------------------------------

def test_dataset_paths_name_the_positives_file_of_synthetic_datasets_only():
    cfg = {"results_dir": "res", "datasets": {"synth": {"kind": "synthetic"},
                                              "flickr": {"kind": "karpathy", "karpathy_json": "/d/f.json"}}}
    assert dataset_paths(cfg, "synth")["positives"] == Path("res/synth/data/positives_synth.json")
    assert dataset_paths(cfg, "flickr")["positives"] is None


def payload(tmp_path: Path, positives: Path | None) -> dict:
    return DatasetPayload.from_json({"name": "toy", "dataset": {"protocols": ["synthetic_test", "synthetic_eccv"], "texts_per_image": 5,
                                       "splits": {"train": ["train", "restval"], "dev": ["val"], "test": ["test"]}},
            "paths": {"karpathy_json": str(write_karpathy(tmp_path)), "positives": positives and str(positives)}})


def test_evaluation_builds_the_relevance_each_protocol_needs(tmp_path):
    pl = payload(tmp_path, positives_file(tmp_path))
    relevances = split_relevances(pl, "test")
    assert sorted(relevances) == ["captions_of_image", "extended_positives"]
    assert relevances["extended_positives"].positives[2, 1] and relevances["extended_positives"].positives[0, 5]
    rng = np.random.default_rng(5)
    scores = rng.normal(size=(3, 15)).astype(np.float32)
    results = evaluate_split(scores, pl.dataset["protocols"], "test", relevances)
    assert [r["protocol"] for r in results] == ["synthetic_test", "synthetic_eccv"]
    assert results[0]["metrics"] == pytest.approx(retrieval_metrics(scores))
    assert results[1]["metrics"] == pytest.approx(brute_force_eccv(scores, relevances["extended_positives"].positives))
    # the dev split has no extended protocol: nothing is read for it
    assert sorted(split_relevances(pl, "dev")) == []


def test_a_protocol_needing_extended_positives_on_a_dataset_without_them_is_an_error(tmp_path):
    with pytest.raises(HarnessError, match="dataset toy: protocol synthetic_eccv needs extended positives"):
        split_relevances(payload(tmp_path, None), "test")
