"""The public API on a trained run of the tiny DAG: it resolves the same config as the plan,
and loading + encoding + scoring through it gives the evaluation job's score matrix."""
import json

import numpy as np
import pytest
import torch

from methods import api
from methods.config import config_hash
from methods.data.batches import feature_tensors
from methods.data.datasets import load_dataset_payload
from methods.data.inputs import IMAGE_INPUTS

pytestmark = pytest.mark.e2e


def runs_of(tiny_dag, method):
    return sorted((tiny_dag / "results/synthetic/runs").glob(f"{method}-*/seed0"))


def test_experiment_config_is_the_plans_config():
    from methods.config import REPO_ROOT, load_harness_config
    from methods.plan import Plan

    plan = Plan(load_harness_config(REPO_ROOT / "config/config.yaml"))
    row = plan.row("sgraf_t1", "synthetic", "saf")
    want = plan.experiment("synthetic", row.members[0]).config
    assert api.experiment_config("sgraf", "synthetic", variants=["saf"]) == want
    assert api.row_configs("sgraf", "sgraf_t1", "saf", "synthetic") == [want]
    assert f"sgraf-{config_hash(api.row_configs('sgraf', 'sgraf_t1', 'saf', 'synthetic')[0])}" == row.members[0]
    ensemble = api.row_configs("sgraf", "sgraf_t1", "sgraf", "synthetic")
    assert [f"sgraf-{config_hash(c)}" for c in ensemble] == plan.row("sgraf_t1", "synthetic", "sgraf").members


@pytest.mark.parametrize("method", ["vsrn", "sgraf"])
def test_load_encode_score_reproduces_the_evaluation(tiny_dag, method):
    run = next(r for r in runs_of(tiny_dag, method) if (r / "sims_test.npy").exists())
    model, info = api.load_model(run / "model.pt")
    payload = load_dataset_payload(tiny_dag / "results/synthetic/dataset.json")
    payload.paths = {k: str(tiny_dag / v) if v else v for k, v in payload.paths.items()}
    data = IMAGE_INPUTS.get(type(model).image_input).load(payload, "test", tiny_dag / "results/synthetic/precomp",
                                                          info["config"]["model"])
    vocab = tiny_dag / "results/synthetic/vocab.json"
    batch = info["config"]["training"]["eval_batch_size"]  # the evaluation job's batches
    txt = api.encode_texts(model, data.captions, vocab, batch_size=batch)
    scores = api.score(model, api.encode_images(model, data.features, batch_size=batch), txt)
    np.testing.assert_allclose(scores.numpy(), np.load(run / "sims_test.npy"), rtol=0, atol=1e-6)
    # any floating dtype of features: a float64 array gives the same scores (cast to float32 inside)
    raw = np.asarray(data.features.array, dtype=np.float64)
    scores64 = api.score(model, api.encode_images(model, raw, batch_size=batch), txt)
    np.testing.assert_array_equal(scores64.numpy(), scores.numpy())
    scores16 = api.score(model, api.encode_images(model, torch.from_numpy(raw).half(), batch_size=batch), txt)
    assert scores16.dtype == torch.float32 and (scores16 - scores).abs().max() < 5e-2


def test_grid_input_loads_every_scale_memory_mapped(tiny_dag):
    payload = load_dataset_payload(tiny_dag / "results/synthetic/dataset.json")
    payload.paths = {k: str(tiny_dag / v) if v else v for k, v in payload.paths.items()}
    grid = IMAGE_INPUTS.get("grid")
    model_cfg = {"backbone": "resnet18_synthetic", "grid_scales": ["conv4", "conv5"]}
    folder = tiny_dag / grid.directory({"results_dir": "results", "datasets": {}}, "synthetic", model_cfg)
    data = grid.load(payload, "test", folder, model_cfg)
    conv5 = np.load(folder / "test_conv5.npy")
    assert isinstance(data.features.arrays["conv5"], np.memmap)
    batch = feature_tensors(data.features.take(np.array([3, 1])))
    assert set(batch) == {"conv4", "conv5"} and batch["conv5"].dtype == torch.float32
    np.testing.assert_array_equal(batch["conv5"].numpy(), conv5[[3, 1]].astype(np.float32))
    shape = data.features.image_shape()["scales"]
    assert shape["conv5"] == list(conv5.shape[1:]) and len(data.captions) == 5 * len(data.features)
    from methods.errors import HarnessError
    with pytest.raises(HarnessError, match="does not cache \\['conv3'\\]"):
        grid.load(payload, "test", folder, {**model_cfg, "grid_scales": ["conv3"]})


def test_model_file_records_the_image_shape(tiny_dag):
    run = runs_of(tiny_dag, "sgraf")[0]
    info = torch.load(run / "model.pt", weights_only=True)
    assert info["image_shape"]["regions"] == 12 and info["image_shape"]["dim"] > 0   # config.yaml synthetic n_regions
    log = json.loads((run / "train_log.json").read_text())
    assert log["config_hash"] == info["config_hash"]


def test_run_dirs_are_the_folders_the_dag_trained(tiny_dag):
    import yaml

    from methods.config import REPO_ROOT, load_harness_config

    harness = load_harness_config(REPO_ROOT / "config/config.yaml",
                                  yaml.safe_load((REPO_ROOT / "tests/data/tiny.yaml").read_text()))
    for table, row, members in [("metric_learning", "vsepp_nt_xent", 1), ("sgraf_t1", "sgraf", 2)]:  # SGR + SAF
        runs = api.run_dirs(table, row, "synthetic", harness)
        assert len(runs) == members * len(harness["datasets"]["synthetic"]["seeds"]) and len(set(runs)) == len(runs)
        for run in runs:
            assert run.is_relative_to(REPO_ROOT / "results/synthetic/runs") and run.name.startswith("seed")
            assert (tiny_dag / run.relative_to(REPO_ROOT) / "model.pt").is_file()
