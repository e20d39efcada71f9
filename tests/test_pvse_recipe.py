"""PVSE's own COCO recipe (Song and Soleymani, CVPR 2019; yalesong/pvse, config/methods/pvse.yaml)
against references written from its equations (``tests/oracles/pvse.py``) and against torch's
ReduceLROnPlateau, which its train.py steps on each epoch's RSUM; its fixed CNN and word
embeddings, Adam with amsgrad, and the rows that run it."""
import copy
import random

import pytest
import torch

from methods import api
from methods.losses.weighted_sum import Loss
from methods.models.base import BuildContext, build_model
from methods.training.loop import make_optimizer
from methods.training.schedule import lr_at
from methods.training.step import TrainingStep, apply_gradients
from tests.oracles.pvse import plateau_rates, pvse_loss

VOCAB, CELLS = 30, [2, 2, 512]   # a ResNet-18's conv5 stands for ResNet-152's 7x7 x 2048
LENGTHS = (5, 1, 3, 5)            # a one-word caption, a tie, padding


@pytest.fixture(scope="module")
def recipe():
    return api.experiment_config("pvse", "coco")


def tiny_pvse(recipe, dtype=torch.float64):
    """The recipe's model at tiny widths, with random LayerNorm affines (so no LayerNorm is the identity)."""
    cfg = copy.deepcopy(recipe["model"])
    cfg.update(embed_dim=12, backbone="resnet18")
    cfg["text"] = {**cfg["text"], "word_dim": 8, "hidden_dim": 6}
    torch.manual_seed(0)
    vectors = torch.randn(VOCAB, 8)
    vectors[::3] = 0   # words GloVe lacks keep the N(0, 1) init
    model = build_model(cfg, BuildContext(VOCAB, {"scales": {"conv5": CELLS}},
                                          {"resnet18": {"arch": "resnet18", "weights": "none"}},
                                          word_vectors=vectors, cnn=False))
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for norm in (model.image_set.norm, model.text_set.norm):
            norm.weight.copy_(torch.rand(norm.weight.shape, generator=g) + 0.5)
            norm.bias.copy_(torch.rand(norm.bias.shape, generator=g) - 0.5)
    return model.to(dtype).train()


def batch(dtype=torch.float64):
    g = torch.Generator().manual_seed(1)
    tokens = torch.zeros(len(LENGTHS), max(LENGTHS), dtype=torch.long)
    for row, n in enumerate(LENGTHS):
        tokens[row, :n] = torch.randint(1, VOCAB, (n,), generator=g)
    grid = torch.randn(len(LENGTHS), *CELLS, generator=g, dtype=torch.float64).abs().to(dtype)   # post-ReLU maps
    return {"features": {"conv5": grid}, "tokens": tokens, "lengths": torch.tensor(LENGTHS),
            "positives": torch.eye(len(LENGTHS), dtype=torch.bool)}


def reference(model, recipe, b):
    (hinge, mmd, div) = recipe["loss"]["terms"]
    return pvse_loss(model, b["features"]["conv5"], b["tokens"], b["lengths"], hinge["margin"], div["weight"],
                     mmd["weight"])


def test_the_recipe_is_the_readme_command(recipe):
    model, (hinge, mmd, div), tr = recipe["model"], recipe["loss"]["terms"], recipe["training"]
    assert model["set_size"] == 2 and model["similarity"] == {"kind": "mil"} and model["dropout"] == 0.0
    assert model["set_module"] == {"kind": "pie", "image_input": "raw"}
    assert model["text_global"] == "concatenate_last_outputs" and model["text"]["train_words"] is False
    assert (hinge["kind"], hinge["margin"], hinge["reduction"]) == ("triplet_hardest", 0.1, "mean")
    assert (mmd["weight"], mmd["gamma"], div["kind"], div["weight"]) == (0.01, 0.5, "diversity", 0.1)
    assert (tr["batch_size"], tr["optimizer"], tr["grad_clip"], tr["batching"], tr["batch_positives"]) == \
        (256, "adam_amsgrad", 2.0, "captions", "diagonal")
    (stage,) = tr["stages"]
    assert (stage["epochs"], stage["lr"], stage["finetune_backbone"]) == (30, 2e-4, False)
    assert stage["schedule"]["kind"] == "plateau" and stage["schedule"]["mode"] == "min"
    assert tr["selection_metric"] == "rsum"


def test_one_training_step_gives_pvses_loss_and_gradients(recipe):
    model = tiny_pvse(recipe)
    reference_model = copy.deepcopy(model)
    b = batch()
    got, outputs = TrainingStep(model, Loss(recipe["loss"]), torch.device("cpu"), amp=False)(b, epoch=0)
    got.backward()
    want, want_scores = reference(reference_model, recipe, b)
    want.backward()
    torch.testing.assert_close(outputs["scores"][0], want_scores, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert float(want.detach()) > 0.2   # hinges, the diversity and the MMD all contribute
    for (name, p), q in zip(model.named_parameters(), reference_model.parameters()):
        if not p.requires_grad:
            continue
        # --legacy reads the backward direction after the last word alone: from h0 = 0, so its
        # recurrent weights multiply zeros and get no gradient, in the source as here
        assert p.grad is not None and (float(p.grad.abs().sum()) == 0) == (name == "text.gru.weight_hh_l0_reverse"), name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-9, atol=1e-12, msg=lambda m: f"{name}: {m}")


def test_the_float32_loss_is_the_float64_reference_within_1e5(recipe):
    model64 = tiny_pvse(recipe)
    model32 = tiny_pvse(recipe, torch.float32)
    with torch.no_grad():
        got, _ = TrainingStep(model32, Loss(recipe["loss"]), torch.device("cpu"), amp=False)(batch(torch.float32), 0)
        want, _ = reference(model64, recipe, batch())
    assert abs(float(got) - float(want)) <= 1e-5


def test_the_cnn_and_the_words_stay_fixed_and_adam_runs_amsgrad(recipe):
    model = tiny_pvse(recipe)
    words = model.text.embed.weight.detach().clone()
    others = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    optimizer = make_optimizer("adam_amsgrad", model.parameter_groups(), 2e-4, 0.0)
    assert all(group["amsgrad"] for group in optimizer.param_groups)
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert id(model.text.embed.weight) not in held and model.backbone is None   # cached maps, no CNN
    loss, _ = TrainingStep(model, Loss(recipe["loss"]), torch.device("cpu"), amp=False)(batch(), epoch=0)
    apply_gradients(loss, optimizer, torch.amp.GradScaler("cpu", enabled=False), model.clipped_parameters(), 2.0)
    assert torch.equal(model.text.embed.weight, words)
    moved = {n for n, p in model.named_parameters() if p.requires_grad and not torch.equal(p, others[n])}
    assert moved == set(others) - {"text.gru.weight_hh_l0_reverse"}   # no gradient there (--legacy, above)


@pytest.mark.parametrize("settings", [
    {"mode": "min", "factor": 0.5, "patience": 10, "threshold": 1e-4, "cooldown": 0, "min_lr": 1e-10},
    {"mode": "max", "factor": 0.5, "patience": 2, "threshold": 1e-4, "cooldown": 0, "min_lr": 0.0},
    {"mode": "min", "factor": 0.1, "patience": 1, "threshold": 0.05, "cooldown": 2, "min_lr": 3e-7},
    {"mode": "max", "factor": 0.3, "patience": 0, "threshold": 0.0, "cooldown": 1, "min_lr": 1e-4},
])
def test_the_plateau_schedule_is_torchs_reduce_on_plateau(settings):
    rng = random.Random(3)
    for trial in range(20):
        values = [rng.choice([rng.uniform(100, 500), 300.0]) for _ in range(40)]   # ties at 300 too
        rates = plateau_rates(2e-4 if trial % 2 else 1e-3, values, **settings)
        stage = {"lr": rates[0], "epochs": 40, "schedule": {"kind": "plateau", **settings}}
        for epoch in range(len(values) + 1):
            assert lr_at(stage, epoch, values[:epoch]) == pytest.approx(rates[epoch], rel=1e-12, abs=0), \
                (settings, trial, epoch)


def test_pvses_schedule_halves_the_rate_every_11_epochs_while_the_rsum_rises(recipe):
    """mode 'min' on a higher-better RSUM: the first epoch's RSUM stays the best, each 11 epochs
    after it count as bad (patience 10), so the rate halves after epochs 12 and 23 (1-based)."""
    (stage,) = recipe["training"]["stages"]
    rising = [100.0 + 10 * e for e in range(30)]
    rates = [lr_at(stage, e, rising[:e]) for e in range(30)]
    assert rates == [2e-4] * 12 + [1e-4] * 11 + [5e-5] * 7
    corrected = {**stage, "schedule": {**stage["schedule"], "mode": "max"}}
    assert [lr_at(corrected, e, rising[:e]) for e in range(30)] == [2e-4] * 30


def test_a_plateau_schedule_needs_the_epochs_values(recipe):
    (stage,) = recipe["training"]["stages"]
    with pytest.raises(ValueError, match="its 3 earlier validation values, not 2"):
        lr_at(stage, 3, [1.0, 2.0])


@pytest.mark.parametrize("schedule, message", [
    ({"kind": "plateau", "mode": "min", "factor": 0.5, "patience": 10, "per_step": True}, "per_step"),
    ({"kind": "plateau", "mode": "min", "factor": 0.5, "patience": 10, "warmup_epochs": 1}, "warmup_epochs"),
    ({"kind": "step", "decay_epochs": [5], "gamma": 0.5, "patience": 10}, "patience"),
])
def test_the_method_schema_keeps_the_plateau_keys_to_a_plateau_schedule(recipe, schedule, message):
    from methods.errors import HarnessError
    from methods.model_kinds.method_schema import validate_method

    validate_method(recipe, "pvse.yaml")
    (stage,) = recipe["training"]["stages"]
    bad = dict(recipe)
    bad["training"] = {**recipe["training"], "stages": [{**stage, "schedule": schedule}]}
    with pytest.raises(HarnessError, match=message):
        validate_method(bad, "pvse.yaml")
