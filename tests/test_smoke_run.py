"""The smoke run (top-level config ``smoke``; ``methods.plan.datasets``): ``<dataset>-smoke`` in a
target runs that table's DAG on a real dataset's own files, on the first images of each split, with
a few batches per epoch and a few epochs per training stage, its outputs under names of its own.
Unit tests against hand-built splits and arrays, the plan against the real dataset's rows, and the
DAG on the tiny fake Flickr30K the other end-to-end tests build."""
import csv
import json

import numpy as np
import pytest
import torch
import yaml

from methods.data.datasets import DatasetPayload
from methods.config import load_harness_config
from methods.data.inputs import IMAGE_INPUTS
from methods.errors import HarnessError
from methods.metrics.evaluation import evaluate_split
from methods.io import write_text
from methods.metrics.retrieval import retrieval_metrics
from methods.plan import Plan
from methods.plan.datasets import as_configured
from methods.training.batch_order import epoch_batches, training_epoch_batches
from tests.conftest import REPO, snakemake
from tests.test_e2e_dag import flickr_config, job_counts

SMOKE = {"train_images": 3, "eval_images": 2, "batches_per_epoch": 5, "epochs": 2}


def harness(**datasets) -> dict:
    return load_harness_config(REPO / "config" / "config.yaml", {"datasets": datasets})


def test_a_smoke_run_is_beside_each_real_dataset_whose_files_are_configured_only():
    cfg = Plan(harness(flickr={"karpathy_json": "/data/dataset_flickr30k.json"},
                       coco={"karpathy_json": "/data/dataset_coco.json"})).cfg
    assert sorted(d for d in cfg["datasets"] if d.endswith("-smoke")) == ["coco-smoke", "flickr-smoke"]
    flickr, smoke = cfg["datasets"]["flickr"], cfg["datasets"]["flickr-smoke"]
    assert smoke["smoke"] == {"of": "flickr", "train_images": 1000, "eval_images": 100, "batches_per_epoch": 5,
                              "epochs": 2}
    assert smoke["karpathy_json"] == flickr["karpathy_json"] and smoke["protocols"] == ["f30k_1k"]
    # ECCV Caption / CxC are defined on the 5,000 COCO ids: not on a sub-sample; PMRP on any annotated images
    assert cfg["datasets"]["coco-smoke"]["protocols"] == ["coco_1k_5fold", "coco_5k", "coco_1k_5fold_pmrp"]
    assert {rule: r["runtime"] for rule, r in smoke["resources"].items()} == dict.fromkeys(
        ["generate", "vocab", "features", "regions", "train", "evaluate"], 30)
    assert "smoke" not in flickr and "flickr-smoke" not in harness()["datasets"]


@pytest.mark.parametrize("dataset, says", [
    ("flickr-smoke", "'flickr-smoke' is the smoke run of flickr's own files, but datasets.flickr.karpathy_json is not set"),
    ("mirflickr-smoke", "datasets.mirflickr.source_dir is not set"),
    ("synthetic-smoke", "synthetic is built-in data; a smoke run checks a real dataset's own files")])
def test_a_smoke_target_of_a_dataset_without_files_says_which_key(dataset, says):
    with pytest.raises(HarnessError, match=f"target table1_{dataset}: .*{says}"):
        Plan(harness()).table("table1", dataset)


def test_the_smoke_rows_are_the_real_rows_one_seed_each_with_their_training_capped():
    plan = Plan(harness(flickr={"karpathy_json": "/data/dataset_flickr30k.json"}))
    real, smoke = plan.table("sgraf_t1", "flickr"), plan.table("sgraf_t1", "flickr-smoke")
    assert [r.id for r in smoke.rows] == [r.id for r in real.rows]
    for ours, theirs in zip(smoke.rows, real.rows):
        assert ours.reported == theirs.reported   # the paper's Flickr30K numbers, beside the smoke run's
        if not theirs.members:
            continue
        assert ours.seeds == theirs.seeds[:1] and len(ours.members) == len(theirs.members)
        assert any(d["name"] == "smoke_run" for ledger in ours.ledger for d in ledger["deviations"])
        for mine, source in zip(ours.members, theirs.members):
            cfg, expected = plan.experiment("flickr-smoke", mine).config, plan.experiment("flickr", source).config
            stages = [dict(s, epochs=min(s["epochs"], 2)) for s in expected["training"]["stages"]]
            assert cfg["training"] == {**expected["training"], "stages": stages, "max_batches_per_epoch": 5}
            assert {k: v for k, v in cfg.items() if k != "training"} == {
                k: v for k, v in expected.items() if k != "training"}


def karpathy_file(path, splits: dict[str, int]) -> None:
    images, k = [], 0
    for split, n in splits.items():
        for i in range(n):
            images.append({"filename": f"{split}{i}.jpg", "split": split, "imgid": k, "cocoid": 100 + k,
                           "sentences": [{"raw": f"{split} {i} caption {c}", "sentid": 5 * k + c} for c in range(5)]})
            k += 1
    path.write_text(json.dumps({"images": images}))


def payload(tmp_path, smoke: dict | None) -> dict:
    karpathy_file(tmp_path / "k.json", {"train": 4, "val": 3, "test": 3})
    ds = {"splits": {"train": ["train"], "dev": ["val"], "test": ["test"]}, "texts_per_image": 5,
          "precomp": {"n_regions": 2, "feature_dim": 3}, **({"smoke": {"of": "flickr", **smoke}} if smoke else {})}
    return DatasetPayload.from_json({"name": "flickr-smoke", "dataset": ds, "paths": {"karpathy_json": str(tmp_path / "k.json")}})


def test_a_smoke_run_reads_the_first_images_of_each_split_with_their_captions(tmp_path):
    splits = payload(tmp_path, SMOKE).splits(["train", "dev", "test"])
    assert {n: s.filenames for n, s in splits.items()} == {
        "train": ["train0.jpg", "train1.jpg", "train2.jpg"], "dev": ["val0.jpg", "val1.jpg"],
        "test": ["test0.jpg", "test1.jpg"]}
    assert splits["test"].captions == [f"test {i} caption {c}" for i in range(2) for c in range(5)]
    assert splits["test"].coco_ids == [107, 108] and splits["test"].image_ids == [7, 8]
    assert splits["dev"].caption_keys == [("val", 5 * k + c) for k in (4, 5) for c in range(5)]
    everything = payload(tmp_path, None).split("train")
    assert everything.filenames == [f"train{i}.jpg" for i in range(4)]


@pytest.mark.parametrize("rows_per_image", [1, 5])   # one row per image, or the old files' one per caption
def test_a_smoke_run_reads_the_first_rows_of_the_region_files(tmp_path, rows_per_image):
    ims = np.arange(3 * rows_per_image * 2 * 3, dtype=np.float32).reshape(3 * rows_per_image, 2, 3)
    np.save(tmp_path / "test_ims.npy", ims)
    (tmp_path / "test_caps.txt").write_text("".join(f"caption {k}\n" for k in range(15)))
    data = IMAGE_INPUTS.get("regions").load(payload(tmp_path, SMOKE), "test", tmp_path, {})
    assert len(data) == 2 and data.captions == [f"caption {k}" for k in range(10)]
    np.testing.assert_array_equal(data.features.block(0, 2), ims[::rows_per_image][:2])
    np.testing.assert_array_equal(data.features.take(np.array([1])), ims[rows_per_image:rows_per_image + 1])
    with pytest.raises(IndexError):
        data.features.take(np.array([2]))   # the third image is not the smoke run's


def test_an_epoch_of_a_smoke_run_is_its_first_batches():
    class Items:
        def __len__(self):
            return 50

    training = {"batch_size": 8, "length_buckets": None}
    capped = training_epoch_batches(Items(), {**training, "max_batches_per_epoch": 3}, torch.Generator().manual_seed(4))
    every = epoch_batches(50, 8, torch.Generator().manual_seed(4))
    assert len(every) == 7 and capped == every[:3]
    assert training_epoch_batches(Items(), training, torch.Generator().manual_seed(4)) == every


def test_the_smoke_settings_are_checked_by_name():
    with pytest.raises(HarnessError, match=r"smoke\.epochs: 0 is less than the minimum of 1"):
        load_harness_config(REPO / "config" / "config.yaml", {"smoke": {"epochs": 0}})


def outputs(proc) -> list[str]:
    """Every output file of the jobs a Snakemake run lists."""
    return [path.strip() for line in proc.stdout.splitlines() if line.strip().startswith("output:")
            for path in line.split(":", 1)[1].split(",")]


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.e2e
@pytest.mark.xdist_group("tiny_dag_folder")
def test_the_smoke_run_of_the_tiny_fake_flickr30k_builds_its_table_under_names_of_its_own(tiny_dag):
    flickr = yaml.safe_load((tiny_dag / flickr_config(tiny_dag, "flickr.yaml", "resnet152", True)).read_text())
    write_text(tiny_dag / "smoke.yaml", yaml.safe_dump({
        **flickr, "papers": ["methods/papers/sgraf.yaml", "tests/data/smoke_paper.yaml"],
        "smoke": {"train_images": 30, "eval_images": 20, "batches_per_epoch": 2, "epochs": 2}}))
    config = ["--configfile", "tiny.yaml", "--configfile=smoke.yaml"]
    # a paper's table: only the smoke run's jobs, every output under its own name
    planned = snakemake(tiny_dag, "-n", "tables/sgraf_t1_flickr-smoke.csv", *config)
    # SAF and SGR (the SGRAF ensemble reuses them), SCAN's two models, BFAN's two, IMRAM, VSRN* and the
    # VSRN ensemble's second member (its first is VSRN*'s run): one seed each; PFAN is left out (the
    # tiny regions have no box files)
    assert job_counts(planned)["train_flickr-smoke"] == 9
    assert outputs(planned) and all("flickr-smoke" in path for path in outputs(planned))

    ran = snakemake(tiny_dag, "tables/smoketest_flickr-smoke.csv", *config)
    assert job_counts(ran)["train_flickr-smoke"] == 2   # SAF and SGR: the ensemble's members are the same runs
    assert all("flickr-smoke" in path for path in outputs(ran))
    rows = read_csv(tiny_dag / "tables" / "smoketest_flickr-smoke.csv")
    spec = json.loads((tiny_dag / "results/flickr-smoke/tables/smoketest.spec.json").read_text())
    for row in spec["rows"]:
        assert row["seeds"] == [0]   # the paper file's first seed
        for exp in row["members"]:
            run = tiny_dag / "results/flickr-smoke/runs" / exp / "seed0"
            history = json.loads((run / "train_log.json").read_text())["history"]
            # 30 training images x 5 captions in batches of 16: 10 batches, 2 run; 2 of the stage's 20 epochs
            assert [(h["epoch"], h["batches"]) for h in history] == [(1, 2), (2, 2)]
            sims = np.load(run / "sims_test.npy")
            assert sims.shape == (20, 100)   # the first 20 test images and their captions
            ev = json.loads((run / "eval_test.json").read_text())
            assert ev["results"][0]["n_images"] == 20
        cells = {r["metric"]: r for r in rows if r["row"] == row["id"]}
        if len(row["members"]) == 1:
            recomputed = retrieval_metrics(np.load(tiny_dag / "results/flickr-smoke/runs" / row["members"][0]
                                                   / "seed0" / "sims_test.npy"))
            assert float(cells["rsum"]["reproduced"]) == pytest.approx(recomputed["rsum"], abs=0.006)
    saf = {r["metric"]: r for r in rows if r["row"] == "saf"}
    assert saf["i2t_r1"]["reported"] == "73.7"
    assert saf["i2t_r1"]["verdict"] in ("not comparable (smoke run)", "did not train")
    assert "smoke run" in (tiny_dag / "tables" / "smoketest_flickr-smoke.md").read_text()


def test_a_smoke_runs_messages_name_the_keys_a_user_sets():
    assert as_configured("datasets.flickr-smoke.precomp_dir is not set; datasets.coco-smoke.released.vsrn_1, "
                         "target table1_flickr-smoke") == ("datasets.flickr.precomp_dir is not set; "
                                                           "datasets.coco.released.vsrn_1, target table1_flickr-smoke")


def test_a_smoke_run_evaluates_each_protocol_in_its_folds_on_the_sub_sampled_split():
    scores = torch.randn(10, 50, generator=torch.Generator().manual_seed(0))
    smoke = {"smoke": {"of": "coco"}}
    five_fold, = evaluate_split(scores, ["coco_1k_5fold"], "testall", dataset=smoke)
    folds = [retrieval_metrics(scores[2 * f:2 * f + 2, 10 * f:10 * f + 10].numpy()) for f in range(5)]
    assert five_fold["n_images"] == 10 and five_fold["metrics"]["rsum"] == pytest.approx(
        np.mean([f["rsum"] for f in folds]))
    with pytest.raises(HarnessError, match="protocol coco_1k_5fold expects 5000 images in split 'testall'"):
        evaluate_split(scores, ["coco_1k_5fold"], "testall", dataset={})
    with pytest.raises(HarnessError, match=r"smoke\.eval_images: 7 images do not split into the 5 folds of protocol "
                                           r"coco_1k_5fold \(coco\); give a multiple of 5"):
        Plan(load_harness_config(REPO / "config" / "config.yaml", {
            "datasets": {"coco": {"karpathy_json": "/data/dataset_coco.json"}}, "smoke": {"eval_images": 7}}))
