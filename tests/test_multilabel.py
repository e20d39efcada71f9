"""Multi-label datasets (kind multilabel): a tiny source folder in the label-wise code's layout
(Yang et al., IJCAI 2021) imported into the harness layout, its DAG-build checks, and the
synthetic tag dataset's source (tags, labels, region classes by IoU)."""
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse
import yaml

from methods.config import REPO_ROOT, load_harness_config
from methods.data import multilabel, synthetic_tags
from methods.data.datasets import DatasetPayload, dataset_paths, dataset_payload
from methods.data.synthetic import generate
from methods.data.tokenizers import Tokenizer
from methods.errors import HarnessError
from methods.features.regions import proposal_boxes
from tests.conftest import copy_workflow, snakemake

TAGS = ["Sky 845", "blue 761", "b&w 10", "tree 5"]   # first field, lower-cased; nltk reads b&w as three tokens
SIZES = {"train": 3, "dev": 2, "test": 2}
R, D, K = 2, 4, 3


def tags_source(root: Path) -> dict:
    """A tiny MIRFlickr-like source folder; returns the arrays written, by split."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "common_tags.txt").write_text("".join(t + "\r\n" for t in TAGS), encoding="utf-8")
    rng = np.random.default_rng(0)
    written = {}
    for s, n in SIZES.items():
        tag = (rng.random((n, len(TAGS))) < 0.5).astype(np.float32)
        tag[0] = 0  # an image with no tag
        if n > 1:
            tag[1] = [1, 0, 1, 1]
        label = (rng.random((n, 3)) < 0.5).astype(np.int32)
        cls = rng.random((n, R, K)).astype(np.float32)
        np.save(root / f"{s}_preim.npy", rng.random((n, R, D)).astype(np.float32))
        np.save(root / f"{s}_cls.npy", cls)
        np.save(root / f"{s}_box.npy", np.zeros((n, R, 4), np.float32))
        scipy.io.savemat(root / f"{s}_tag.mat", {"feat": tag})
        scipy.io.savemat(root / f"{s}_label.mat", {"feat": label})
        written[s] = {"tag": tag, "label": label, "cls": cls}
    return written


def harness_cfg(tmp_path: Path, source: Path | None, **overrides) -> dict:
    ds = {"kind": "multilabel", "source_dir": str(source) if source else None, "text": "tags",
          "tag_list": "common_tags.txt", "label_columns": [0, 2], "texts_per_image": 1,
          "protocols": ["synthetic_test"], "splits": {"train": ["train"], "dev": ["dev"], "test": ["test"]},
          "split_sizes": dict(SIZES), "precomp": {"n_regions": R, "feature_dim": D},
          "features": {"resize": 64, "crop": 64, "grid_layers": [], "dtype": "float32", "batch_size": 10},
          "vocab_threshold": 1, "val_max_images": 10, "tokenizer": "nltk_line"}
    ds.update(overrides)
    synthetic = {"kind": "synthetic", "splits": {"train": ["train"], "dev": ["val"], "test": ["test"]}}
    return {"results_dir": str(tmp_path / "results"), "datasets": {"mir": ds, "synthetic": synthetic}}


def payload(cfg: dict) -> DatasetPayload:
    return DatasetPayload.from_json(json.loads(json.dumps(dataset_payload(cfg | {"backbones": {}}, "mir").to_json())))


def one_line(fn, *args) -> str:
    with pytest.raises(HarnessError) as info:
        fn(*args)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_import_tags_dataset(tmp_path):
    written = tags_source(tmp_path / "src")
    cfg = harness_cfg(tmp_path, tmp_path / "src")
    assert multilabel.check_source(cfg, "mir") == SIZES
    paths = dataset_paths(cfg, "mir")
    assert paths["karpathy_json"] == tmp_path / "results/mir/data/dataset_mir.json"
    assert paths["images_dir"] is None and paths["source_dir"] == tmp_path / "src"
    pl = payload(cfg)
    multilabel.import_json(pl, paths["karpathy_json"])
    data = json.loads(paths["karpathy_json"].read_text())
    words = ["sky", "blue", "tag2", "tree"]   # tag-list order; b&w -> tag<line index>
    for s, n in SIZES.items():
        entries = [e for e in data["images"] if e["split"] == s]
        assert len(entries) == n
        for row, e in enumerate(entries):
            expected = " ".join(w for w, on in zip(words, written[s]["tag"][row]) if on)
            assert e["sentences"] == [{"raw": expected}]
            assert e["labels"] == [int(written[s]["label"][row, 0]), int(written[s]["label"][row, 2])]
        assert entries[0]["sentences"] == [{"raw": ""}] and entries[1]["sentences"] == [{"raw": "sky tag2 tree"}]
    out = paths["precomp_dir"]
    multilabel.import_split(pl, "dev", out, tmp_path / "results")
    link = out / "dev_ims.npy"
    assert link.is_symlink() and link.resolve() == (tmp_path / "src/dev_preim.npy").resolve()
    assert os.path.isabs(os.readlink(link))   # the source lies outside results/: an absolute link
    np.testing.assert_array_equal(np.load(link), np.load(tmp_path / "src/dev_preim.npy"))
    assert (out / "dev_caps.txt").read_text().split("\n")[:2] == ["", "sky tag2 tree"]
    multilabel.region_classes(tmp_path / "src/train_cls.npy", out / "train_region_classes.npy")
    classes = np.load(out / "train_region_classes.npy")
    assert classes.dtype == np.int64
    cls = written["train"]["cls"]
    for i in range(SIZES["train"]):
        for r in range(R):
            assert classes[i, r] == max(range(K), key=lambda k: cls[i, r, k])


def test_sparse_tag_and_label_matrices_import_as_the_dense_ones(tmp_path):
    """MATLAB sparse .mat matrices (as MATLAB saves a sparse 0/1 matrix) give the same import."""
    written = tags_source(tmp_path / "dense")
    tags_source(tmp_path / "sparse")
    for s in SIZES:
        scipy.io.savemat(tmp_path / "sparse" / f"{s}_tag.mat", {"feat": scipy.sparse.csc_matrix(written[s]["tag"])})
        scipy.io.savemat(tmp_path / "sparse" / f"{s}_label.mat", {"feat": scipy.sparse.csc_matrix(written[s]["label"].astype(np.float64))})
    imported = []
    for kind in ("dense", "sparse"):
        cfg = harness_cfg(tmp_path / kind, tmp_path / kind)
        assert multilabel.check_source(cfg, "mir") == SIZES
        path = tmp_path / kind / "dataset.json"
        multilabel.import_json(payload(cfg), path)
        imported.append(json.loads(path.read_text())["images"])
    assert imported[0] == imported[1]
    assert any(e["labels"] != [0, 0] for e in imported[1]) and any(e["sentences"][0]["raw"] for e in imported[1])


def test_region_classes_in_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(multilabel, "CLS_CHUNK", 2)
    scores = np.random.default_rng(1).random((5, 3, 4)).astype(np.float32)
    np.save(tmp_path / "c.npy", scores)
    multilabel.region_classes(tmp_path / "c.npy", tmp_path / "out.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), scores.argmax(-1))


@pytest.mark.parametrize("break_it, named", [
    (lambda src: (src / "dev_tag.mat").unlink(), "dev_tag.mat"),
    (lambda src: scipy.io.savemat(src / "train_label.mat", {"feat": np.ones((4, 3), np.int32)}), "train_label.mat"),
    (lambda src: (src / "common_tags.txt").write_text("a\nb\nc\n"), "common_tags.txt"),
    (lambda src: np.save(src / "test_cls.npy", np.zeros((3, R, K), np.float32)), "test_cls.npy"),
    (lambda src: scipy.io.savemat(src / "train_tag.mat", {"other": np.ones((3, 4))}), "train_tag.mat"),
])
def test_broken_source_is_one_line_before_arrays_are_read(tmp_path, monkeypatch, break_it, named):
    tags_source(tmp_path / "src")
    break_it(tmp_path / "src")
    monkeypatch.setattr(scipy.io, "loadmat", lambda *a, **k: pytest.fail("an array was read"))
    assert named in one_line(multilabel.check_source, harness_cfg(tmp_path, tmp_path / "src"), "mir")


def test_config_errors_name_the_key(tmp_path):
    tags_source(tmp_path / "src")
    assert "datasets.mir.split_sizes.train" in one_line(
        multilabel.check_source, harness_cfg(tmp_path, tmp_path / "src", split_sizes={**SIZES, "train": 4}), "mir")
    assert "datasets.mir.label_columns" in one_line(
        multilabel.check_source, harness_cfg(tmp_path, tmp_path / "src", label_columns=[3]), "mir")
    assert "datasets.mir.source_dir" in one_line(multilabel.check_source, harness_cfg(tmp_path, None), "mir")


def test_non_binary_labels_and_tags(tmp_path):
    tags_source(tmp_path / "src")
    scipy.io.savemat(tmp_path / "src/dev_label.mat", {"feat": np.full((2, 3), 2, np.int32)})
    message = one_line(multilabel.import_json, payload(harness_cfg(tmp_path, tmp_path / "src")), tmp_path / "o.json")
    assert "dev_label.mat" in message and "binary" in message
    tags_source(tmp_path / "src")
    scipy.io.savemat(tmp_path / "src/test_tag.mat", {"feat": np.full((2, 4), 0.5, np.float32)})
    assert "test_tag.mat" in one_line(multilabel.import_json, payload(harness_cfg(tmp_path, tmp_path / "src")),
                                      tmp_path / "o.json")


def test_captions_variant(tmp_path):
    """coco_precomp-like: 5 captions per image, labels per image (train) or per caption (dev)."""
    src = tmp_path / "coco"
    src.mkdir()
    labels = {"train": np.array([[1, 0], [0, 1]]), "dev": np.array([[1, 1], [0, 0]])}
    for s, n in (("train", 2), ("dev", 2)):
        np.save(src / f"{s}_ims.npy", np.zeros((n, R, D), np.float32))
        (src / f"{s}_caps.txt").write_text("".join(f"{s} image {i // 5} caption {i % 5}\n" for i in range(5 * n)))
        np.save(src / f"{s}_label.npy", labels[s] if s == "train" else np.repeat(labels[s], 5, axis=0))
    cfg = harness_cfg(tmp_path, src, text="captions", texts_per_image=5, label_columns=None,
                      splits={"train": ["train"], "dev": ["dev"]}, split_sizes={"train": 2, "dev": 2})
    del cfg["datasets"]["mir"]["tag_list"]
    multilabel.import_json(payload(cfg), tmp_path / "c.json")
    images = json.loads((tmp_path / "c.json").read_text())["images"]
    assert [e["labels"] for e in images] == [[1, 0], [0, 1], [1, 1], [0, 0]]
    assert images[3]["sentences"][4] == {"raw": "dev image 1 caption 4"}
    bad = np.repeat(labels["dev"], 5, axis=0)
    bad[7] = [1, 0]
    np.save(src / "dev_label.npy", bad)
    message = one_line(multilabel.import_json, payload(cfg), tmp_path / "c.json")
    assert "dev_label.npy" in message and "image 1" in message


def test_proposal_classes_by_iou():
    objects = np.array([[0, 0, 10, 10], [20, 20, 30, 30]], np.float32)
    boxes = np.array([[0, 0, 10, 10], [20, 20, 30, 30],
                      [0, 0, 10, 12],      # IoU 100/120 = 0.83 with object 0
                      [0, 0, 20, 10],      # IoU 100/200 = 0.5 with object 0: counts
                      [0, 0, 21, 10],      # IoU 100/210 < 0.5: background
                      [22, 22, 30, 30],    # IoU 64/100 with object 1
                      [40, 40, 50, 50]], np.float32)
    classes = synthetic_tags.region_classes(boxes, objects, [4, 1], background=6)
    assert classes.tolist() == [4, 1, 4, 4, 6, 1, 6]


def test_synthetic_tags_source(tmp_path):
    gen = tmp_path / "synthetic/data"
    generate(gen, seed=3, image_size=64, max_objects=3, splits={"train": 4, "val": 2, "test": 2},
             min_objects=2, family_size=2, tokenizer=Tokenizer("nltk_line"))
    data = json.loads((gen / "dataset_synthetic.json").read_text())
    precomp = tmp_path / "synthetic/precomp"
    precomp.mkdir()
    for harness, karpathy in (("train", "train"), ("dev", "val"), ("test", "test")):
        entries = [e for e in data["images"] if e["split"] == karpathy]
        (precomp / f"{harness}_ids.txt").write_text("".join(f"{e['imgid']}\n" for e in entries))
        boxes = np.stack([proposal_boxes(e["boxes"], 64, 6, np.random.default_rng(e["imgid"])) for e in entries])
        np.save(precomp / f"{harness}_boxes.npy", boxes)
        np.save(precomp / f"{harness}_ims.npy", np.zeros((len(entries), 6, 8), np.float32))
    cfg = harness_cfg(tmp_path, None, tag_list="tags.txt", label_columns=None,
                      generated_from={"dataset": "synthetic", "seed": 0, "tag_drop": 0.3, "label_groups": ["shape"]})
    pl = payload(cfg)
    out = tmp_path / "results/mir/source"
    synthetic_tags.write_source(pl, gen / "dataset_synthetic.json", precomp, 64, out, tmp_path)
    tags = multilabel.read_tag_list(out / "tags.txt")
    shapes = ["circle", "square", "triangle", "cross", "ring", "bar"]
    assert (out / "label_names.txt").read_text().split("\n")[:6] == [f"shape:{s}" for s in shapes]
    dropped = kept = 0
    for harness, karpathy in (("train", "train"), ("dev", "val"), ("test", "test")):
        entries = [e for e in data["images"] if e["split"] == karpathy]
        assert os.readlink(out / f"{harness}_preim.npy") == f"../../../synthetic/precomp/{harness}_ims.npy"
        tag = scipy.io.loadmat(out / f"{harness}_tag.mat")["feat"]
        label = scipy.io.loadmat(out / f"{harness}_label.mat")["feat"]
        cls = np.load(out / f"{harness}_cls.npy")
        assert label.shape == (len(entries), 6) and set(np.unique(label)) <= {0, 1}
        for row, e in enumerate(entries):
            words = {e["background"], e["pattern"]}
            for o in e["box_labels"]:
                cell = {(0, 0): "topleft", (1, 1): "centre", (2, 2): "bottomright", (0, 1): "top", (1, 0): "left",
                        (1, 2): "right", (2, 1): "bottom", (0, 2): "topright", (2, 0): "bottomleft"}[tuple(o["cell"])]
                words |= {o["shape"], o["colour"], o["size"], cell}
            present = {tags[t] for t in np.flatnonzero(tag[row])}
            assert present <= words
            kept, dropped = kept + len(present), dropped + len(words - present)
            assert label[row].tolist() == [int(any(o["shape"] == s for o in e["box_labels"])) for s in shapes]
            for r, o in enumerate(e["box_labels"]):   # ground-truth rows: the object's shape
                assert cls[row, r].argmax() == shapes.index(o["shape"]) and cls[row, r].sum() == 1
    assert dropped > 0 and kept > dropped   # tag_drop 0.3: some dropped, most kept
    # the import reads it back
    cfg["datasets"]["mir"].update(precomp={"n_regions": 6, "feature_dim": 8}, split_sizes={"train": 4, "dev": 2, "test": 2})
    multilabel.check_source_dir(cfg["datasets"]["mir"], out, "datasets.mir")


def override_config(tmp_path: Path, datasets: dict) -> Path:
    path = tmp_path / "override.yaml"
    path.write_text(yaml.safe_dump({"datasets": datasets}))
    return path


def test_dag_build_names_the_unset_source_dir(tmp_path):
    work = copy_workflow(tmp_path)
    datasets = {}   # config.yaml's multilabel datasets as they are
    override = override_config(tmp_path, datasets)
    proc = snakemake(work, "-n", "results/mirflickr/vocab.json", "--configfile", "config/config.yaml", str(override),
                     check=False)
    assert proc.returncode != 0
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "datasets.mirflickr.source_dir" in lines[0]
    # a small source folder configured: the import plans
    tags_source(tmp_path / "src")
    datasets["mirflickr"] = {"source_dir": str(tmp_path / "src"),
                              "split_sizes": dict(SIZES), "precomp": {"n_regions": R, "feature_dim": D},
                              "label_columns": [0, 1]}
    override = override_config(tmp_path, datasets)
    proc = snakemake(work, "-n", "results/mirflickr/vocab.json", "results/mirflickr/precomp/train_region_classes.npy",
                     "results/mirflickr/precomp/test_ims.npy", "--configfile", "config/config.yaml", str(override))
    for rule in ("import_multilabel", "multilabel_precomp", "multilabel_region_classes", "vocab"):
        assert rule in proc.stdout
    # the configured split size disagrees with the files: one line naming the key
    datasets["mirflickr"]["split_sizes"] = {**SIZES, "dev": 5}
    override = override_config(tmp_path, datasets)
    proc = snakemake(work, "-n", "results/mirflickr/vocab.json", "--configfile", "config/config.yaml", str(override),
                     check=False)
    assert proc.returncode != 0 and "error: datasets.mirflickr.split_sizes.dev" in proc.stdout + proc.stderr


def test_config_multilabel_entries_validate():
    cfg = load_harness_config(REPO_ROOT / "config/config.yaml")
    for name in ("synthtags", "mirflickr", "nuswide", "cocolabelwise"):
        assert cfg["datasets"][name]["kind"] == "multilabel"
    assert cfg["datasets"]["synthtags"]["split_sizes"] == {
        {"val": "dev"}.get(k, k): v for k, v in cfg["datasets"]["synthetic"]["generator"]["splits"].items()}


@pytest.mark.e2e
def test_dry_run_of_the_papers_mirflickr_tables_plans_its_runs(tmp_path):
    """With a source of MIRFlickr's 24 labels configured, the label-wise tables plan the paper's
    runs (Table 1's four trained rows and the six lambdas, three seeds each)."""
    work = copy_workflow(tmp_path)
    tags_source(tmp_path / "src")
    rng = np.random.default_rng(1)
    for s, n in SIZES.items():
        scipy.io.savemat(tmp_path / "src" / f"{s}_label.mat", {"feat": (rng.random((n, 24)) < 0.3).astype(np.int32)})
    override = override_config(tmp_path, {"mirflickr": {"source_dir": str(tmp_path / "src"), "split_sizes": dict(SIZES),
                                                        "precomp": {"n_regions": R, "feature_dim": D}}})
    proc = snakemake(work, "-n", "tables/label_wise_t1_mirflickr.csv", "tables/label_wise_lambda_mirflickr.csv",
                     "--configfile", "config/config.yaml", str(override))
    trained = re.findall(r"^rule train_mirflickr:\n(?:    .*\n)*?    wildcards: exp=(\S+), seed=(\d+)", proc.stdout + proc.stderr, re.M)
    # independent, dscmr, ours_con, ours; lambda 0 ... 10, lambda 0.1 being ours: 9 configs x 3 seeds
    assert len(set(trained)) == 27 and {seed for _, seed in trained} == {"0", "1", "2"}
    # a model predicting another label count than the source's: one line naming the key
    scipy.io.savemat(tmp_path / "src" / "train_label.mat", {"feat": np.zeros((SIZES["train"], 5), np.int32)})
    for s in ("dev", "test"):
        scipy.io.savemat(tmp_path / "src" / f"{s}_label.mat", {"feat": np.zeros((SIZES[s], 5), np.int32)})
    proc = snakemake(work, "-n", "tables/label_wise_t1_mirflickr.csv", "--configfile", "config/config.yaml",
                     str(override), check=False)
    assert proc.returncode != 0 and "model.n_classes is 24, but dataset mirflickr has 5 labels" in proc.stdout + proc.stderr
