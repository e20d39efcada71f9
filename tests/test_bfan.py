"""BFAN (Liu et al., ACM MM 2019) against its oracle (``tests/oracles/bfan.py``, written from
CrossmodalGroup/BFAN's equations one pair at a time): scores in float64 and float32, one training
step's loss and gradients, blocked scoring, the focal rule on a hand-worked example, the source's
0/0 of an empty focus, the recipe and the settings the schema refuses."""
import copy

import pytest
import torch

from methods.config import load_yaml
from methods.errors import HarnessError
from methods.losses.weighted_sum import Loss
from methods.model_kinds.method_schema import validate_method
from methods.models.bfan import BFAN, reassign
from methods.models.cross_attention import RegionFeatures
from methods.models.text import GRUTextEncoder
from methods.plan import resolve_method_config
from methods.training.step import TrainingStep
from tests.conftest import REPO
from tests.oracles._float64 import EMBED, REGION_DIM, REGIONS, VOCAB, WORD_DIM, features
from tests.oracles.bfan import contrastive_loss, reference_pair, score_matrix

METHOD = REPO / "config" / "methods" / "bfan.yaml"
LENGTHS = (2, 5, 7, 3, 7, 4)   # two tokens at least, as the harness's <start> ... <end>; ties, padding
SETTINGS = [("equal", 20.0), ("prob", 20.0), ("equal", 4.0), ("prob", 4.0)]


def tiny(focal, lambda_softmax, empty_focus="nan"):
    """A small float64 BFAN with random fc biases (xavier_linear starts them at 0)."""
    torch.manual_seed(0)
    text = GRUTextEncoder(VOCAB, WORD_DIM, EMBED, bidirectional=True)
    model = BFAN(REGION_DIM, REGIONS, EMBED, text, focal=focal, lambda_softmax=lambda_softmax,
                 empty_focus=empty_focus).double()
    with torch.no_grad():
        model.fc.bias.copy_(torch.rand(EMBED, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 0.2 - 0.1)
    return model


def batch(lengths=LENGTHS, dtype=torch.float64):
    g = torch.Generator().manual_seed(1)
    tokens = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, n in enumerate(lengths):
        tokens[row, :n] = torch.randint(1, VOCAB, (n,), generator=g)
    return {"features": features(len(lengths), REGIONS, REGION_DIM).to(dtype), "tokens": tokens,
            "lengths": torch.tensor(lengths), "positives": torch.eye(len(lengths), dtype=torch.bool)}


def model_scores(model, b):
    return model.score(model.encode_images(b), model.encode_texts(b))


@pytest.mark.parametrize("focal,lambda_softmax", SETTINGS)
@pytest.mark.parametrize("empty_focus", ["nan", "keep_all"])
def test_scores_equal_the_per_pair_oracle(focal, lambda_softmax, empty_focus):
    model, b = tiny(focal, lambda_softmax, empty_focus).eval(), batch()
    with torch.no_grad():
        got, want = model_scores(model, b), score_matrix(model, b, b)
        got32 = model_scores(copy.deepcopy(model).float(), batch(dtype=torch.float32))
    assert got.dtype == torch.float64 and want.std() > 1e-3
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    assert got32.dtype == torch.float32
    torch.testing.assert_close(got32.double(), want, rtol=0, atol=1e-5)


def test_the_focal_rules_on_a_hand_worked_example():
    """Weights (0.6, 0.27, 0.07, 0.06): their mean is 0.25, so ``equal`` keeps the first two;
    ``prob``'s threshold sum a^1.5 / sum sqrt(a) is 0.354, so it keeps the first alone."""
    a = torch.tensor([[0.6, 0.27, 0.07, 0.06]], dtype=torch.float64)
    valid = torch.ones_like(a, dtype=torch.bool)
    torch.testing.assert_close(reassign(a, valid, "equal", "nan"),
                               torch.tensor([[0.6 / 0.87, 0.27 / 0.87, 0.0, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(reassign(a, valid, "prob", "nan"), torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64))
    # a padded fragment (weight 0, not valid) counts for neither n nor the sums
    padded = torch.tensor([[0.6, 0.27, 0.07, 0.06, 0.0]], dtype=torch.float64)
    valid = torch.tensor([[True, True, True, True, False]])
    torch.testing.assert_close(reassign(padded, valid, "equal", "nan")[:, :4], reassign(a, valid[:, :4], "equal", "nan"))


@pytest.mark.parametrize("focal", ["equal", "prob"])
def test_a_one_word_caption_is_the_sources_nan_unless_every_fragment_is_kept(focal):
    """One word: its i-t weight is 1, F = 0, nothing is kept and the source divides 0 by 0. With
    ``keep_all`` it keeps the word (and the float64 oracle cases of tests/test_float64.py hold)."""
    b = batch(lengths=(3, 1, 4))
    with torch.no_grad():
        source = model_scores(tiny(focal, 20.0).eval(), b)
        kept_model = tiny(focal, 20.0, "keep_all").eval()
        kept = model_scores(kept_model, b)
    assert torch.isnan(source[:, 1]).all() and torch.isfinite(source[:, [0, 2]]).all()
    torch.testing.assert_close(source[:, [0, 2]], kept[:, [0, 2]], rtol=0, atol=0)
    torch.testing.assert_close(kept, score_matrix(kept_model, b, b), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("focal", ["equal", "prob"])
def test_one_training_step_gives_the_sources_loss_and_gradients(focal):
    """The recipe's loss on a batch (ContrastiveLoss, max_violation, margin 0.2) through the
    harness's training step, against the oracle's per-pair scores and loop loss: float64 to 1e-9,
    float32 to 1e-5 of the float64 values."""
    loss_cfg = resolve_method_config(METHOD, "flickr")["loss"]
    model = tiny(focal, 20.0).train()
    oracle_model, model32 = copy.deepcopy(model), copy.deepcopy(model).float()
    got, outputs = TrainingStep(model, Loss(loss_cfg), torch.device("cpu"), amp=False)(batch(), epoch=0)
    got.backward()
    b = batch()
    want_scores = score_matrix(oracle_model, b, b)
    want = contrastive_loss(want_scores, margin=loss_cfg["margin"])
    want.backward()
    assert float(want.detach()) > 0.5
    torch.testing.assert_close(outputs["scores"][0], want_scores, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    got32, _ = TrainingStep(model32, Loss(loss_cfg), torch.device("cpu"), amp=False)(batch(dtype=torch.float32), 0)
    got32.backward()
    assert abs(float(got32.detach()) - float(want.detach())) <= 1e-5
    for (name, p), q, p32 in zip(model.named_parameters(), oracle_model.parameters(), model32.parameters()):
        assert p.grad is not None and float(p.grad.abs().sum()) > 0, name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-9, atol=1e-9, msg=lambda m: f"{name}: {m}")
        torch.testing.assert_close(p32.grad.double(), q.grad, rtol=1e-5, atol=1e-5, msg=lambda m: f"{name} fp32: {m}")


@pytest.mark.parametrize("focal", ["equal", "prob"])
def test_blocked_and_packed_scoring_equal_all_pairs(focal):
    model, b = tiny(focal, 20.0).eval(), batch()
    with torch.no_grad():
        img, txt = model.encode_images(b), model.encode_texts(b)
        whole = model.score(img, txt)
        model.block_elements = model.pair_elements(3)   # one caption per block, padded to its own length
        blocked, packed = model.score_matrix(img, txt), model.score_matrix(img, txt.packed())
    torch.testing.assert_close(blocked, whole, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(packed, blocked, rtol=0, atol=0)


def test_a_float32_model_evaluates_in_float64_as_its_source():
    """evaluation.py scores its float32 encodings in float64: ``evaluation_dtype: float64`` gives the
    float64 oracle on those encodings; ``model`` float32."""
    model = tiny("prob", 20.0).float().eval()
    b = batch(dtype=torch.float32)
    with torch.no_grad():
        img, txt = model.encode_images(b), model.encode_texts(b)
        model.evaluation_dtype = "float64"
        source = model.score_matrix(img, txt)
        model.evaluation_dtype = "model"
        own = model.score_matrix(img, txt)
        want = torch.stack([torch.stack([reference_pair(img.regions[i].double(), txt.words[c, :n].double(), "prob", 20.0)
                                         for c, n in enumerate(LENGTHS)]) for i in range(len(LENGTHS))])
    assert source.dtype == torch.float64 and own.dtype == torch.float32
    torch.testing.assert_close(source, want, rtol=1e-12, atol=1e-12)
    assert not torch.equal(own.double(), source)
    assert isinstance(img, RegionFeatures)


def method_config() -> dict:
    return {"method": "bfan", **copy.deepcopy(load_yaml(METHOD)["base"])}


@pytest.mark.parametrize("key,value,message", [
    ("focal", "max", r"model\.focal: 'max' is not one of \['equal', 'prob'\]"),
    ("lambda_softmax", 0, r"model\.lambda_softmax: 0 is less than or equal to the minimum of 0"),
    ("empty_focus", "zero", r"model\.empty_focus: 'zero' is not one of \['nan', 'keep_all'\]"),
    ("evaluation_dtype", "float16", r"model\.evaluation_dtype: 'float16' is not one of"),
    ("direction", "t2i", r"Additional properties are not allowed \('direction'"),   # SCAN's, not BFAN's
])
def test_the_schema_refuses_bad_settings(key, value, message):
    cfg = method_config()
    validate_method(cfg, "bfan.yaml")
    cfg["model"][key] = value
    with pytest.raises(HarnessError, match=message):
        validate_method(cfg, "x.yaml")
    cfg = method_config()
    del cfg["model"]["focal"]
    with pytest.raises(HarnessError, match=r"'focal' is a required property"):
        validate_method(cfg, "x.yaml")


def test_the_constructor_refuses_bad_settings():
    text = GRUTextEncoder(VOCAB, WORD_DIM, EMBED, bidirectional=True)
    for kwargs, message in [({"focal": "max", "lambda_softmax": 20.0}, "focal"),
                            ({"focal": "equal", "lambda_softmax": -1.0}, "lambda_softmax"),
                            ({"focal": "equal", "lambda_softmax": 20.0, "empty_focus": "zero"}, "empty_focus")]:
        with pytest.raises(ValueError, match=message):
            BFAN(REGION_DIM, REGIONS, EMBED, text, **kwargs)


def test_the_recipe_is_the_readme_commands():
    flickr, coco = resolve_method_config(METHOD, "flickr"), resolve_method_config(METHOD, "coco")
    prob = resolve_method_config(METHOD, "coco", variants=["prob"])
    for cfg in (flickr, coco):
        model, tr = cfg["model"], cfg["training"]
        assert (model["focal"], model["lambda_softmax"], model["embed_dim"], model["empty_focus"]) == ("equal", 20.0, 1024, "nan")
        assert cfg["loss"] == {"kind": "triplet_hardest", "margin": 0.2}
        assert (tr["batch_size"], tr["optimizer"], tr["grad_clip"], tr["amp"]) == (128, "adam", 2.0, False)
    assert [(s["epochs"], s["lr"], s["schedule"]["decay_epochs"]) for s in flickr["training"]["stages"]] == [(15, 2e-4, [15])]
    assert [(s["epochs"], s["lr"], s["schedule"]["decay_epochs"]) for s in coco["training"]["stages"]] == [(20, 5e-4, [15])]
    assert prob["model"]["focal"] == "prob" and prob["training"] == coco["training"]
