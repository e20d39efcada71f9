"""End to end: rows of the authors' released weights (tests/data/released_paper.yaml) on a tiny
fake Flickr30K, imported and evaluated by the DAG with no training job. The checkpoint is the
VSRN fixture written by the authors' code (tests/data/released/vsrn/: 10-d regions), so the fake
Flickr30K's regions are the synthetic ones cut to 10 dimensions and scaled into [-1, 1]; its test
images, repeats of 10 synthetic ones, get noise of their own so that they are told apart."""
import csv
import json
import shutil

import numpy as np
import pytest
import torch
import yaml
from filelock import FileLock

from methods.io import write_json, write_text
from methods.metrics.retrieval import retrieval_metrics
from methods.released.vsrn import read_checkpoint
from tests.records import READER_LIMITS as LIMITS
from tests.conftest import REPO, flickr_layout, snakemake
from tests.test_e2e_dag import job_counts

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("tiny_dag_folder")]
FIXTURES = REPO / "tests" / "data" / "released" / "vsrn"
TARGET = "tables/releasedtest_flickr.csv"


def released_config(tiny_dag, name: str, released: dict) -> str:
    """A config of the released-rows paper file on Flickr30K in the fixture's region width."""
    layout_file = tiny_dag / "released_layout.json"
    with FileLock(str(tiny_dag / "released_layout.lock")):
        if not layout_file.exists():
            src = tiny_dag / "results/synthetic"
            flickr = flickr_layout(src / "data", src / "precomp", tiny_dag / "released_layout")
            rng = np.random.default_rng(0)
            for path in sorted((tiny_dag / "released_layout" / "f30k_precomp").glob("*_ims.npy")):
                ims = np.load(path)[:, :, :10]
                ims = ims / np.abs(ims).max()   # the fixture's random GCN weights overflow on the raw scale
                np.save(path, (ims + rng.normal(0, 0.05, ims.shape)).astype(np.float32))
            write_json(layout_file, {**flickr, "precomp": {**flickr["precomp"], "feature_dim": 10}})
    flickr = json.loads(layout_file.read_text())
    write_text(tiny_dag / name, yaml.safe_dump({"papers": ["tests/data/released_paper.yaml"],
                                                "datasets": {"flickr": {**flickr, "released": released}}}))
    return name


def their_files(folder) -> dict:
    """The fixture as downloaded (in a folder whose name has a space), and a second run: the same
    file with its image fc negated (another model, the same format)."""
    folder.mkdir()
    first = shutil.copy(FIXTURES / "model_fliker_1.pth.tar", folder / "model_fliker_1.pth.tar")
    ckpt = read_checkpoint(first, LIMITS)
    ckpt["model"][0]["fc.weight"] = -ckpt["model"][0]["fc.weight"]
    torch.save(ckpt, folder / "model_fliker_2.pth.tar")
    vocab = shutil.copy(FIXTURES / "precomp_vocab.pkl", folder / "f30k_precomp_vocab.pkl")
    return {"vsrn_1": str(first), "vsrn_2": str(folder / "model_fliker_2.pth.tar"), "vsrn_vocab": str(vocab)}


def test_released_rows_import_and_evaluate_without_training(tiny_dag, tmp_path):
    files = their_files(tmp_path / "their files")   # (a configured file that is missing: tests/test_released_rows.py)
    proc = snakemake(tiny_dag, "-n", "released_flickr", "--configfile", "tiny.yaml", check=False)
    assert proc.returncode != 0 and ("target released_flickr: no row of the authors' released weights is configured "
                                     "on flickr; the paper files' released rows read datasets.flickr.released."
                                     in proc.stdout + proc.stderr)

    cfg = released_config(tiny_dag, "released.yaml", files)
    proc = snakemake(tiny_dag, "-n", "released_flickr", "--configfile", "tiny.yaml", cfg)
    counts = job_counts(proc)
    # one import + evaluation per checkpoint (vsrn_1 serves both rows), the ensemble; no training
    assert counts["evaluate_released_flickr"] == 2 and counts["ensemble"] == 1 and counts["released_rows_table"] == 1
    assert not any(rule.startswith(("train_", "features_", "pretrain", "vocab")) for rule in counts)
    out = proc.stdout + proc.stderr
    assert f"{TARGET}: row 'released_other' (the authors' released weights) is left out: set " \
           "datasets.flickr.released.vsrn_other" in out

    snakemake(tiny_dag, "released_flickr", "--configfile", "tiny.yaml", cfg)   # the released rows of every table
    released_only = (tiny_dag / "tables" / "released" / "releasedtest_flickr.csv").read_text()
    snakemake(tiny_dag, TARGET, "--configfile", "tiny.yaml", cfg)
    # this table has released rows only: the same cells either way
    assert (tiny_dag / TARGET).read_text() == released_only
    with open(tiny_dag / TARGET) as f:
        rows = list(csv.DictReader(f))
    spec = json.loads((tiny_dag / "results/flickr/tables/releasedtest.spec.json").read_text())
    (exp,) = {m for r in spec["rows"] for m in r["members"]}
    imported = tiny_dag / "results/flickr/released" / exp
    one, two = (np.load(imported / key / "sims_test.npy") for key in ("vsrn_1", "vsrn_2"))
    rsum = {r["row"]: r for r in rows if r["metric"] == "rsum"}
    assert set(rsum) == {"released_one", "released_two"}
    assert rsum["released_one"]["ensemble_size"] == "1" and rsum["released_two"]["ensemble_size"] == "2"
    # the table's numbers are those of the imported models' scores (the ensemble: their mean)
    expected = retrieval_metrics(one)["rsum"]
    assert expected > 0 and float(rsum["released_one"]["reproduced"]) == pytest.approx(expected, abs=0.006)
    assert float(rsum["released_two"]["reproduced"]) == pytest.approx(retrieval_metrics((one + two) / 2)["rsum"],
                                                                      abs=0.006)
    ev = json.loads((imported / "vsrn_1" / "eval_test.json").read_text())
    assert ev["best_epoch"]["released"]["code"] == "KunpengLi1994/VSRN" and ev["config"]["model"]["final_bn"] is True
    # no training of ours behind it: its environment is the evaluation's, said as such
    assert ev["provenance"]["training"] is None
    assert rsum["released_one"]["environment"].startswith("authors' weights (trained elsewhere), evaluated with harness ")
    md = (tiny_dag / "tables" / "releasedtest_flickr.md").read_text()
    assert "the authors' released weights (KunpengLi1994/VSRN): vsrn_1 (model_fliker_1.pth.tar)" in md
    assert "Rows left out (their files are not configured for this dataset):\n" \
           "- A released row whose files are not configured here (the authors' released weights): " \
           "set datasets.flickr.released.vsrn_other" in md
