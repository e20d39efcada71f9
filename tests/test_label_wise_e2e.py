"""End to end on the tiny DAG: the synthetic tag dataset is imported from the tiny synthetic
dataset, label-wise rows train on it, and their table cells are what an independent computation
gives from the trained model and the imported labels (scikit-learn's ndcg_score and f1_score)."""
import csv
import json

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score, ndcg_score

from methods import api
from methods.data.datasets import load_dataset_payload
from methods.data.inputs import IMAGE_INPUTS
from methods.data.text import Vocabulary

pytestmark = pytest.mark.e2e


def table_cells(path) -> dict[tuple[str, str, str], float]:
    with open(path) as f:
        return {(r["row"], r["protocol"], r["metric"]): float(r["reproduced"]) for r in csv.DictReader(f)
                if r["reproduced"] != ""}


def test_label_wise_cells_are_recomputed_from_the_trained_model(tiny_dag):
    cells = table_cells(tiny_dag / "tables/label_tiny_synthtags.csv")
    spec = json.loads((tiny_dag / "results/synthtags/tables/label_tiny.spec.json").read_text())
    row = next(r for r in spec["rows"] if r["id"] == "ours")
    run = tiny_dag / "results/synthtags/runs" / row["members"][0] / "seed0"
    payload = load_dataset_payload(tiny_dag / "results/synthtags/dataset.json")
    payload.paths = {k: str(tiny_dag / v) if v else v for k, v in payload.paths.items()}
    model, ckpt = api.load_model(run / "model.pt", torch.device("cpu"), payload.backbones)
    vocab = Vocabulary.load(tiny_dag / "results/synthtags/vocab.json")
    assert ckpt["vocab_size"] == len(vocab) + 1        # <mask> of masked prediction: one id past the words
    data = IMAGE_INPUTS.get("regions").load(payload, "test", tiny_dag / "results/synthtags/precomp", ckpt["config"]["model"])
    assert data.texts_per_image == 1 and len(data.captions) == len(data) == 10
    # the imported labels are the generator's shape and colour labels of each test image
    generated = json.loads((tiny_dag / "results/synthetic/data/dataset_synthetic.json").read_text())
    names = generated["label_names"]
    kept = [i for i, n in enumerate(names) if n.split(":")[0] in ("shape", "colour")]
    by_name = {e["filename"]: e for e in generated["images"]}
    filenames = payload.split("test").filenames   # the synthetic images' names
    np.testing.assert_array_equal(data.labels, [[by_name[f]["labels"][i] for i in kept] for f in filenames])

    # the evaluation's batch size: with the code's token mean over padding (mean_over_padding, the
    # source default) a text's embedding depends on the longest text of its batch
    batch = ckpt["config"]["training"]["eval_batch_size"]
    img = api.encode_images(model, data.features, batch_size=batch, device=torch.device("cpu"))
    txt = api.encode_texts(model, data.captions, vocab, batch_size=batch, device=torch.device("cpu"))
    scores = api.score(model, img, txt).numpy().astype(np.float64)
    np.testing.assert_allclose(scores, np.load(run / "sims_test.npy"), rtol=1e-5, atol=1e-6)
    # identical tag sets are one text with its first image's labels, as the label-wise code ranks them
    first = {}
    for k, text in enumerate(data.captions):
        first.setdefault(text, k)
    unique = sorted(first.values())
    gains = data.labels.astype(float) @ data.text_labels()[unique].T.astype(float)
    ranked = scores[:, unique]
    for direction, (s, g) in {"i2t": (ranked, gains), "t2i": (ranked.T, gains.T)}.items():
        want = 100 * np.mean([ndcg_score(gi[None], si[None], k=500) for gi, si in zip(g, s)])
        assert cells[("ours", "labelwise_test", f"{direction}_ndcg500")] == pytest.approx(want, abs=0.006)
    image_scores, text_scores = model.label_predictions(img, txt)
    for side, predicted, truth in (("image", image_scores, data.labels), ("text", text_scores, data.text_labels())):
        # a label is predicted at >= half the item's strongest label score (the model's written choice)
        want = f1_score(truth, predicted >= 0.5, average="micro", zero_division=0)
        assert cells[("ours", "label_prediction", f"{side}_micro_f1")] == pytest.approx(want, abs=6e-5)


def test_label_wise_training_logs_validation_curves_and_figures_are_drawn(tiny_dag):
    spec = json.loads((tiny_dag / "results/synthtags/tables/label_tiny.spec.json").read_text())
    for row in spec["rows"]:
        log = json.loads((tiny_dag / "results/synthtags/runs" / row["members"][0] / "seed0/train_log.json").read_text())
        assert log["best"]["metric"] == "ndcg500_sum"
        for epoch in log["history"]:
            assert {"image_micro_f1", "text_micro_f1", "i2t_ndcg500", "t2i_ndcg500"} <= set(epoch["val"])
            assert epoch["val"]["ndcg500_sum"] == pytest.approx(epoch["val"]["i2t_ndcg500"] + epoch["val"]["t2i_ndcg500"])
    lambda_spec = json.loads((tiny_dag / "results/synthtags/figures/label_tiny_lambda.spec.json").read_text())
    weights = {r["id"]: r["loss_weights"].get("masked_prediction", 0.0) for r in lambda_spec["rows"]}
    assert weights == {"ours": 0.1, "ours_con": 0.1, "lambda_0": 0.0}
    for name in ("label_tiny_curves", "label_tiny_lambda", "label_tiny_texts"):
        assert (tiny_dag / f"figures/{name}_synthtags.png").stat().st_size > 5000
