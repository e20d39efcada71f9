"""DSCMR (Zhen et al., CVPR 2019; methods/models/dscmr.py, methods/losses/dscmr.py) against the
float64 references of tests/oracles/dscmr.py, written from penghu-cs/DSCMR's model.py and
train_model.py: forward outputs, the loss and its gradients, one Adam step; the label-prediction
rule on a hand-worked case; the method file on every dataset; the label-wise Table 1 plan."""
import math

import numpy as np
import pytest
import torch

from methods import api
from methods.config import REPO_ROOT
from methods.errors import HarnessError
from methods.losses.weighted_sum import Loss
from methods.metrics.label_prediction import micro_f1
from methods.models.dscmr import bag_of_words
from tests.oracles import dscmr as oracle
from tests.oracles._float64 import REGION_DIM, VOCAB

METHOD = REPO_ROOT / "config" / "methods" / "dscmr.yaml"
ALPHA, BETA = 1e-3, 0.1
LOSS = {"terms": [{"kind": "dscmr_label_regression"}, {"kind": "dscmr_label_likelihood", "weight": ALPHA},
                  {"kind": "dscmr_invariance", "weight": BETA}]}
N, REGIONS = 4, 5


def batch(dtype=torch.float64, seed=0) -> dict:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([7, 3, 5, 4])
    tokens = torch.randint(3, VOCAB, (N, 7), generator=g)
    tokens[:, 0] = 1                                            # <start>
    tokens[torch.arange(N), lengths - 1] = 2                    # <end>
    tokens[torch.arange(7)[None, :] >= lengths[:, None]] = 0    # <pad>
    tokens[1, 1] = tokens[0, 2]                                 # a word repeated across texts
    labels = torch.tensor([[1, 0, 1, 0, 0], [0, 1, 0, 0, 1], [1, 1, 0, 1, 0], [0, 0, 0, 0, 1]], dtype=torch.float32)
    return {"features": torch.randn(N, REGIONS, REGION_DIM, generator=g, dtype=dtype), "tokens": tokens,
            "lengths": lengths, "positives": torch.eye(N, dtype=torch.bool),
            "image_labels": labels, "text_labels": labels}


def references(model, b):
    imgs = [oracle.reference_image(model, r) for r in b["features"]]
    txts = [oracle.reference_text(model, t, int(n)) for t, n in zip(b["tokens"], b["lengths"])]
    return ([torch.stack(v) for v in zip(*imgs)], [torch.stack(v) for v in zip(*txts)])


def harness_loss(model, b):
    out = model.training_outputs(model.encode_images(b), model.encode_texts(b))
    return Loss(LOSS)(out, b, 0), out


# -- forward ----------------------------------------------------------------------------------

def test_bag_of_words_leaves_out_pad_start_and_end():
    tokens = torch.tensor([[1, 5, 7, 5, 2, 0], [1, 3, 2, 0, 0, 0]])
    bow = bag_of_words(tokens, 9, torch.float64)
    assert bow.tolist() == [[0, 0, 0, 0, 0, 1, 0, 1, 0], [0, 0, 0, 1, 0, 0, 0, 0, 0]]


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_training_outputs_equal_the_per_item_reference(dtype, tol):
    model = oracle.build().train()
    b = batch()
    (f1, p1), (f2, p2) = references(model, b)        # float64 reference
    model = model.to(dtype)
    _, out = harness_loss(model, dict(b, features=b["features"].to(dtype)))
    for got, want in ((out["image_features"], f1), (out["text_features"], f2),
                      (out["image_predictions"], p1), (out["text_predictions"], p2)):
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
    scores = out["scores"][0].double()
    torch.testing.assert_close(scores, oracle.cosine_matrix([oracle.plain_l2(v) for v in f1],
                                                             [oracle.plain_l2(v) for v in f2]), rtol=tol, atol=tol)


def test_the_label_classifier_and_common_layer_are_shared_by_both_modalities():
    model = oracle.build()
    names = {n for n, _ in model.named_parameters()}
    assert names == {f"{m}.{p}" for m in ("img_net", "text_net", "common", "classifier") for p in ("weight", "bias")}


# -- loss and gradients -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_loss_and_gradients_equal_calc_loss(dtype, tol):
    ref_model = oracle.build().train()
    b = batch()
    (f1, p1), (f2, p2) = references(ref_model, b)
    y = b["image_labels"].double()
    want = oracle.reference_loss(f1, f2, p1, p2, y, y, ALPHA, BETA)
    want_grads = torch.autograd.grad(want, list(ref_model.parameters()))
    model = oracle.build().to(dtype).train()
    got, _ = harness_loss(model, dict(b, features=b["features"].to(dtype)))
    got_grads = torch.autograd.grad(got, list(model.parameters()))
    assert got.item() == pytest.approx(want.item(), rel=tol, abs=tol)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g.double(), w, rtol=tol, atol=tol)


def test_each_term_is_its_part_of_calc_loss():
    model = oracle.build().train()
    b = batch()
    out = model.training_outputs(model.encode_images(b), model.encode_texts(b))
    f1, f2, p1, p2 = (out[k].detach() for k in ("image_features", "text_features", "image_predictions",
                                                 "text_predictions"))
    y = b["image_labels"].double()
    term1 = oracle.reference_loss(f1, f2, p1, p2, y, y, 0.0, 0.0)
    term2 = (oracle.reference_loss(f1, f2, p1, p2, y, y, 1.0, 0.0) - term1)
    term3 = (oracle.reference_loss(f1, f2, p1, p2, y, y, 0.0, 1.0) - term1)
    for kind, want in (("dscmr_label_regression", term1), ("dscmr_label_likelihood", term2),
                       ("dscmr_invariance", term3)):
        assert Loss({"kind": kind})(out, b, 0).item() == pytest.approx(want.item(), rel=1e-10), kind
    with pytest.raises(HarnessError, match="dscmr_label_regression needs the batch's 'image_labels'"):
        Loss({"kind": "dscmr_label_regression"})(out, {k: v for k, v in b.items() if k != "image_labels"}, 0)


def test_the_label_likelihood_counts_shared_labels_and_clamps_the_norms():
    """θ = cos / 2 with |a| |b| clamped at 1e-6: a zero feature gives θ = 0, log 2 per pair; S the
    labels' dot product (2 for two shared labels)."""
    a = torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    y = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    out = {"image_features": a, "text_features": a, "image_predictions": torch.zeros(2, 2, dtype=torch.float64),
           "text_predictions": torch.zeros(2, 2, dtype=torch.float64)}
    pairs = [math.log(1 + math.exp(0.5)) - 2 * 0.5, math.log(2), math.log(2), math.log(2)]
    want = 3 * sum(pairs) / 4
    got = Loss({"kind": "dscmr_label_likelihood"})(out, {"image_labels": y, "text_labels": y}, 0)
    assert got.item() == pytest.approx(want, rel=1e-12)


# -- one training step ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_one_adam_step_equals_the_reference_update(dtype, tol):
    """The harness's step (TrainingStep, make_optimizer('adam'), apply_gradients; no clipping) against
    calc_loss's gradients and Adam's first update written out: p - lr m̂ / (sqrt(v̂) + eps) with
    m̂ = g, v̂ = g² after bias correction (torch's defaults betas (0.9, 0.999), eps 1e-8). In fp32 an
    element whose gradient is below 1e-4 is left out: its first step lr g / (|g| + 1e-8) turns on
    rounding of g itself."""
    from methods.training.loop import make_optimizer
    from methods.training.step import TrainingStep, apply_gradients

    lr = 1e-3
    b = batch(dtype=dtype)
    ref = oracle.build().train()
    (f1, p1), (f2, p2) = references(ref, dict(b, features=b["features"].double()))
    y = b["image_labels"].double()
    grads = torch.autograd.grad(oracle.reference_loss(f1, f2, p1, p2, y, y, ALPHA, BETA), list(ref.parameters()))
    want = [p.detach() - lr * g / (g.abs() + 1e-8) for p, g in zip(ref.parameters(), grads)]

    model = oracle.build(dtype=dtype).train()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = make_optimizer("adam", model.parameter_groups(), lr, 0.0)
    loss, _ = TrainingStep(model, Loss(LOSS), torch.device("cpu"), amp=False)(b, 0)
    apply_gradients(loss, optimizer, torch.amp.GradScaler("cpu", enabled=False), model.clipped_parameters(), None)
    moved = 0
    for got, w, g, p0 in zip(model.parameters(), want, grads, before):
        kept = g.abs() > (0 if dtype == torch.float64 else 1e-4)
        torch.testing.assert_close(got.detach().double()[kept], w[kept], rtol=tol, atol=tol)
        moved += int((got.detach() != p0).sum())
    assert moved > 100   # the step changed the parameters


# -- label prediction -------------------------------------------------------------------------

def test_label_rule_on_a_hand_worked_case():
    """linearLayer2 outputs of two items, labels [1 1 0 1] and [0 0 1 0]:
    threshold: item 0 [0.7, 0.49, -0.2, 1.3] -> scores [0.7, 0.49, 0, 1] -> predicts {0, 3} (TP 2, FN 1);
    item 1 [0.3, 0.2, 0.1, 0.4] -> nothing (FN 1): micro-F1 = 2 TP / (2 TP + FP + FN) = 4 / 6.
    relative_to_largest: item 0 /1.3 -> [0.538, 0.377, 0, 1] -> {0, 3}; item 1 /0.4 -> [0.75, 0.5, 0.25, 1]
    -> {0, 1, 3} (FP 3, FN 1): 4 / (4 + 3 + 2) = 4 / 9."""
    predictions = torch.tensor([[0.7, 0.49, -0.2, 1.3], [0.3, 0.2, 0.1, 0.4]], dtype=torch.float64)
    labels = np.array([[1, 1, 0, 1], [0, 0, 1, 0]])
    model = oracle.build()
    threshold = model.label_scores(predictions).numpy()
    np.testing.assert_allclose(threshold, [[0.7, 0.49, 0.0, 1.0], [0.3, 0.2, 0.1, 0.4]], rtol=0, atol=1e-15)
    assert micro_f1(threshold, labels) == pytest.approx(4 / 6, rel=1e-12)
    relative = oracle.build(label_rule="relative_to_largest").label_scores(predictions).numpy()
    np.testing.assert_allclose(relative, [[0.7 / 1.3, 0.49 / 1.3, 0.0, 1.0], [0.75, 0.5, 0.25, 1.0]], rtol=1e-12)
    assert micro_f1(relative, labels) == pytest.approx(4 / 9, rel=1e-12)


def test_evaluation_gives_unit_features_and_the_label_scores():
    model = oracle.build().eval()
    b = batch()
    with torch.no_grad():
        img, txt = model.encode_images(b), model.encode_texts(b)
    (f1, p1), (f2, p2) = references(model, b)
    torch.testing.assert_close(img.embedding, f1 / f1.norm(dim=1, keepdim=True), rtol=1e-10, atol=1e-12)
    ip, tp = model.label_predictions(img, txt)
    np.testing.assert_allclose(ip, p1.clamp(0, 1).detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tp, p2.clamp(0, 1).detach().numpy(), rtol=1e-10, atol=1e-12)


# -- method file and plan ---------------------------------------------------------------------

@pytest.mark.parametrize("dataset, classes", [("synthtags", 14), ("mirflickr", 24), ("nuswide", 10),
                                              ("cocolabelwise", 80)])
def test_method_file_runs_mainpy_settings_on_every_dataset(dataset, classes):
    cfg = api.experiment_config(METHOD, dataset)
    assert cfg["model"]["kind"] == "dscmr" and cfg["model"]["n_classes"] == classes
    assert {t["kind"]: t.get("weight", 1.0) for t in cfg["loss"]["terms"]} == {
        "dscmr_label_regression": 1.0, "dscmr_label_likelihood": ALPHA, "dscmr_invariance": BETA}
    (stage,) = cfg["training"]["stages"]
    assert (stage["epochs"], stage["lr"], stage["schedule"]["kind"]) == (500, 1e-4, "constant")
    assert (cfg["training"]["batch_size"], cfg["training"]["optimizer"], cfg["training"]["grad_clip"]) == (100, "adam", None)
    if dataset != "synthtags":
        assert (cfg["model"]["hidden_dim"], cfg["model"]["embed_dim"]) == (2048, 1024)


def test_the_label_wise_table_plans_dscmr_training_on_every_dataset():
    from methods.plan import Plan
    from tests.conftest import config_with_every_table

    plan = Plan(config_with_every_table())
    for dataset in ("synthtags", "mirflickr", "nuswide", "cocolabelwise"):
        rows = {r.id: r for r in plan.table("label_wise_t1", dataset).rows}
        row = rows["dscmr"]
        assert row.runs_models
        (exp_id,) = row.members
        exp = plan.experiment(dataset, exp_id)
        assert exp.method == "dscmr" and exp.config["model"]["kind"] == "dscmr"
        assert row.seeds == ([0] if dataset == "synthtags" else [0, 1, 2])   # synthtags: one seed (its budget)
        assert row.reported, dataset                                         # the supplement's numbers stay
        ledger = {d["name"] for entry in row.ledger for d in entry["deviations"]}
        assert {"image_input", "text_input", "model_selection"} <= ledger
        assert exp.config["training"]["betas"] == [0.5, 0.999]   # main.py's Adam betas


def test_the_configured_betas_reach_adam():
    from methods.training.loop import make_optimizer

    p = torch.nn.Parameter(torch.zeros(2))
    assert make_optimizer("adam", [([p], 1.0)], 1e-4, 0.0, [0.5, 0.999]).param_groups[0]["betas"] == (0.5, 0.999)
    assert make_optimizer("adam", [([p], 1.0)], 1e-4, 0.0).param_groups[0]["betas"] == (0.9, 0.999)
