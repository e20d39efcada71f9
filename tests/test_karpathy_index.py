"""The DAG build reads a Karpathy file through a compact index cached by path, size and mtime:
COCO's file (130 MB, 123,287 images) takes seconds to parse, so a planned run must not parse it
at every ``snakemake`` call (tests/fullsize_coco.py builds one of the real size)."""
import json
import os

import pytest

from methods.data import checks
from methods.data.checks import karpathy_index
from methods.data.input_cache import INDEX_DIR
from methods.errors import HarnessError

SPLIT_MAP = {"train": ["train", "restval"], "dev": ["val"], "testall": ["test"]}


def write_karpathy(path, splits, caption="a dog on a mat.", cocoid_base=100):
    """A Karpathy file whose images cycle through ``splits``, COCO style (filepath + filename)."""
    images = [{"filepath": "val2014" if s in ("val", "test") else "train2014", "filename": f"im{i}.jpg",
               "split": s, "imgid": i, "cocoid": cocoid_base + i,
               "sentences": [{"raw": f"{caption} {i} {k}", "sentid": 5 * i + k} for k in range(5)]}
              for i, s in enumerate(splits)]
    path.write_text(json.dumps({"images": images}))
    return images


def test_index_holds_each_splits_files_and_coco_ids_in_the_files_order(tmp_path):
    images = write_karpathy(tmp_path / "k.json", ["test", "train", "val", "restval", "train", "test"])
    index, _ = karpathy_index(tmp_path / "results", tmp_path / "k.json", SPLIT_MAP, 5)
    for name, karpathy_splits in SPLIT_MAP.items():   # read straight from the entries
        chosen = [e for e in images if e["split"] in karpathy_splits]
        assert index[name].filenames == [f"{e['filepath']}/{e['filename']}" for e in chosen]
        assert index[name].coco_ids == [e["cocoid"] for e in chosen]
        assert len(index[name]) == len(chosen) and index[name].texts_per_image == 5
    assert [e["filename"] for e in images if e["split"] in ("train", "restval")] == ["im1.jpg", "im3.jpg", "im4.jpg"]


def test_each_version_of_the_file_is_parsed_once(tmp_path, monkeypatch):
    parses = []
    load_splits = checks.load_splits
    monkeypatch.setattr(checks, "load_splits", lambda *a, **k: parses.append(a[0]) or load_splits(*a, **k))
    path, results = tmp_path / "k.json", tmp_path / "results"
    write_karpathy(path, ["train", "val", "test"])
    first, keep = karpathy_index(results, path, SPLIT_MAP, 5)
    assert not results.exists()   # kept only once the caller's checks have passed
    keep()
    assert karpathy_index(results, path, SPLIT_MAP, 5)[0] == first and len(parses) == 1
    assert len(list((results / INDEX_DIR).iterdir())) == 1
    write_karpathy(path, ["train", "val", "test"], cocoid_base=900)   # same size: the mtime tells them apart
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert karpathy_index(results, path, SPLIT_MAP, 5)[0]["testall"].coco_ids == [902] and len(parses) == 2
    other_map = {"train": ["train"], "dev": ["val"], "testall": ["test"]}   # another split map: its own index
    assert karpathy_index(results, path, other_map, 5)[0]["train"].filenames == ["train2014/im0.jpg"]
    assert len(parses) == 3


def test_a_refused_file_is_refused_every_time_and_not_indexed(tmp_path):
    path, results = tmp_path / "k.json", tmp_path / "results"
    write_karpathy(path, ["train", "val", "test"])
    data = json.loads(path.read_text())
    data["images"][1]["sentences"][2]["raw"] = "  "
    path.write_text(json.dumps(data))
    for _ in range(2):
        with pytest.raises(HarnessError, match=r"images\[1\] \(im1.jpg\): sentences\[2\] is blank"):
            karpathy_index(results, path, SPLIT_MAP, 5)
    assert not (results / INDEX_DIR).exists()
    with pytest.raises(HarnessError, match=r"Karpathy split file not found: \S+nowhere.json"):
        karpathy_index(results, tmp_path / "nowhere.json", SPLIT_MAP, 5)


def test_a_damaged_index_is_built_again(tmp_path):
    path, results = tmp_path / "k.json", tmp_path / "results"
    write_karpathy(path, ["train", "val", "test"])
    expected, keep = karpathy_index(results, path, SPLIT_MAP, 5)
    keep()
    (index_file,) = (results / INDEX_DIR).iterdir()
    index_file.write_text('{"stamp": ')   # damaged (writes are atomic, but a disk or a user may not be)
    again, keep = karpathy_index(results, path, SPLIT_MAP, 5)
    keep()
    assert again == expected
    assert json.loads(index_file.read_text())["index"]["train"]["filenames"] == ["train2014/im0.jpg"]
