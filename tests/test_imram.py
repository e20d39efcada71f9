"""IMRAM: the vectorised block scoring and one training step against the per-pair reference written
from HuiChen24/IMRAM's equations (tests/oracles/imram.py), blocked scoring, the method file's
recipe per dataset, and the settings the schema refuses."""
import copy

import pytest
import torch

from methods.config import REPO_ROOT, load_yaml
from methods.errors import HarnessError
from methods.losses.ranking import build_loss
from methods.model_kinds.method_schema import validate_method
from methods.models.imram import IMRAM
from methods.plan import resolve_method_config
from tests.oracles._float64 import N_IMAGES, REGION_DIM, REGIONS, features, texts
from tests.oracles.imram import OPTIONS, build_imram, contrastive_loss, reference_matrix

METHOD_FILE = REPO_ROOT / "config" / "methods" / "imram.yaml"


def square_batch(n=4, seed=5):
    """n images and n captions (lengths with ties, padding and a one-word caption), pairs on the diagonal."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([6, 1, 6, 3, 4, 2][:n])
    tokens = torch.zeros(n, int(lengths.max()), dtype=torch.long)
    for row, length in enumerate(lengths):
        tokens[row, :length] = torch.randint(1, 30, (int(length),), generator=g)
    feats = torch.randn(n, REGIONS, REGION_DIM, generator=g, dtype=torch.float64)
    return feats, {"tokens": tokens, "lengths": lengths}


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_block_scores_equal_the_per_pair_reference(options):
    """float64: to 1e-10; the same weights in fp32: to 1e-5 of the float64 reference."""
    model = build_imram(**options)
    feats, text_batch = features(N_IMAGES, REGIONS, REGION_DIM), texts()
    with torch.no_grad():
        want = reference_matrix(model, feats, text_batch["tokens"], text_batch["lengths"])
        got = model.score(model.encode_images({"features": feats}), model.encode_texts(text_batch))
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
        single = copy.deepcopy(model).float()
        got32 = single.score(single.encode_images({"features": feats.float()}), single.encode_texts(text_batch))
    assert got32.dtype == torch.float32
    torch.testing.assert_close(got32.double(), want, rtol=1e-5, atol=1e-5)
    assert want.std() > 1e-2


@pytest.mark.parametrize("dtype, loss_tolerance, grad_tolerance", [(torch.float64, 1e-9, 1e-9),
                                                                 (torch.float32, 1e-5, 1e-4)])
@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_one_training_step_loss_and_gradients_equal_the_reference(options, dtype, loss_tolerance, grad_tolerance):
    """The harness's triplet_hardest on the model's scores against ContrastiveLoss(max_violation)
    on the per-pair reference's, on the same weights: the loss and every parameter's gradient
    (relative to the largest of that parameter's). The fp32 model runs on the float64 reference's
    weights rounded to fp32; its gradients are checked to 1e-4, since the reference itself run in
    fp32 is up to 4e-5 off its float64 gradients on Text-IMRAM's steps (the source's equations'
    own rounding: the l2 over a few words and the lambda 9 softmax), while the loss agrees to 2e-6."""
    model = build_imram(**options).float().double().train()    # weights representable in fp32
    feats, text_batch = square_batch()
    feats = feats.float().double()
    ours = copy.deepcopy(model).to(dtype)
    outputs = ours.training_outputs(ours.encode_images({"features": feats.to(dtype)}), ours.encode_texts(text_batch))
    (scores,) = outputs["scores"]
    loss = build_loss({"kind": "triplet_hardest", "margin": 0.2}, 0)(scores, torch.eye(len(feats), dtype=torch.bool))
    loss.backward()
    want = contrastive_loss(reference_matrix(model, feats, text_batch["tokens"], text_batch["lengths"]))
    want.backward()
    assert loss.dtype == dtype and want.item() > 0.5
    torch.testing.assert_close(loss.double(), want.detach(), rtol=loss_tolerance, atol=loss_tolerance)
    reference_grads = dict(model.named_parameters())
    checked = 0
    for name, param in ours.named_parameters():
        ref = reference_grads[name].grad
        if ref is None:   # the memory unit of a one-step model is never read, as in the source
            assert param.grad is None or not param.grad.any(), name
            continue
        error = (param.grad.double() - ref).abs().max().item() / max(1e-3, ref.abs().max().item())
        assert error <= grad_tolerance, f"{name}: gradient {error:.2e} off the reference's"
        checked += 1
    memory_params = sum(1 for name, _ in model.named_parameters() if name.startswith("memory."))
    expected = len(list(model.parameters())) - (memory_params if options["steps"] == 1 else 0)
    assert checked == expected


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_blocked_scoring_equals_scoring_all_pairs(options):
    """Captions in length-sorted blocks of one, packed by length, score as all pairs in one call."""
    model = build_imram(**options).float()
    feats, text_batch = features(N_IMAGES, REGIONS, REGION_DIM).float(), texts()
    with torch.no_grad():
        img, txt = model.encode_images({"features": feats}), model.encode_texts(text_batch)
        whole = model.score(img, txt)
        model.block_elements = 1
        blocked = model.score_matrix(img, txt)
        packed = model.score_matrix(img, txt.packed())
    torch.testing.assert_close(blocked, whole, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(packed, blocked, rtol=0, atol=0)


def test_the_memory_carries_the_steps():
    """Each step after the first attends with the gated memory: more steps change the scores,
    the memory units get gradients, and each direction has its own unit."""
    feats, text_batch = features(N_IMAGES, REGIONS, REGION_DIM), texts()
    one, three = build_imram(mode="full", steps=1, lambda_softmax=9.0), build_imram(mode="full", steps=3,
                                                                                    lambda_softmax=9.0)
    three.load_state_dict(one.state_dict())
    img, txt = three.encode_images({"features": feats}), three.encode_texts(text_batch)
    steps = three.step_scores(img, txt)
    assert set(steps) == {"t2i", "i2t"} and all(len(s) == 3 for s in steps.values())
    with torch.no_grad():
        first = one.score(one.encode_images({"features": feats}), one.encode_texts(text_batch))
    torch.testing.assert_close(first, steps["t2i"][0] + steps["i2t"][0], rtol=1e-12, atol=1e-12)
    assert (steps["t2i"][1] - steps["t2i"][0]).abs().max() > 1e-3
    three.score(img, txt).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in three.memory.parameters())
    assert set(build_imram(mode="text", steps=2, lambda_softmax=9.0).memory) == {"t2i"}
    assert set(build_imram(mode="image", steps=2, lambda_softmax=9.0).memory) == {"i2t"}


def test_the_method_file_runs_the_source_recipe_per_dataset():
    flickr = resolve_method_config(METHOD_FILE, "flickr")
    assert flickr["model"] == {"kind": "imram", "embed_dim": 1024, "mode": "full", "steps": 3, "lambda_softmax": 9.0,
                               "memory_l2norm": False,
                               "text": {"word_dim": 300, "hidden_dim": 1024, "num_layers": 1, "bidirectional": True,
                                        "word_init": "random"}}
    (stage,) = flickr["training"]["stages"]
    assert (stage["epochs"], stage["lr"], stage["schedule"]) == (30, 2e-4, {"kind": "step", "decay_epochs": [15],
                                                                             "gamma": 0.1})
    assert flickr["loss"] == {"kind": "triplet_hardest", "margin": 0.2}
    coco = resolve_method_config(METHOD_FILE, "coco")
    (stage,) = coco["training"]["stages"]
    assert coco["model"]["lambda_softmax"] == 11.0 and coco["model"]["steps"] == 3
    assert (stage["epochs"], stage["lr"], stage["schedule"]["decay_epochs"]) == (20, 5e-4, [10])
    for variant, mode in (("text_imram", "text"), ("image_imram", "image")):
        assert resolve_method_config(METHOD_FILE, "coco", variants=[variant])["model"]["mode"] == mode


@pytest.mark.parametrize("key, value, message", [
    ("mode", "both", r"model\.mode: 'both' is not one of"),
    ("steps", 0, r"model\.steps: 0 is less than the minimum of 1"),
    ("lambda_softmax", 0.0, r"model\.lambda_softmax: 0\.0 is less than or equal to the minimum of 0"),
    ("memory_l2norm", "yes", r"model\.memory_l2norm: 'yes' is not of type 'boolean'"),
    ("aggregation", "avg", r"model: Additional properties are not allowed \('aggregation'"),
])
def test_the_schema_refuses_bad_settings(key, value, message):
    cfg = {"method": "imram", **copy.deepcopy(load_yaml(METHOD_FILE)["base"])}
    validate_method(copy.deepcopy(cfg), "imram.yaml")
    cfg["model"][key] = value
    with pytest.raises(HarnessError, match=message):
        validate_method(cfg, "imram.yaml")


def test_the_constructor_refuses_bad_settings():
    for options, message in ((dict(mode="both"), "mode"), (dict(steps=0), "steps"),
                             (dict(lambda_softmax=-1.0), "lambda")):
        with pytest.raises(ValueError, match=message):
            build_imram(**{"mode": "full", "steps": 2, "lambda_softmax": 9.0, **options})
    assert isinstance(build_imram(mode="full", steps=2, lambda_softmax=9.0), IMRAM)
