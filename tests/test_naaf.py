"""NAAF (Zhang et al., CVPR 2022) against its oracle (``tests/oracles/naaf.py``, written from
CrossmodalGroup/NAAF's equations one pair and one caption at a time): scores in float64 and float32,
one training step's loss, gradients and mined thresholds, blocked scoring, the threshold's
closed form, the state kept with the weights, the recipe and the settings the schema refuses."""
import copy
import math

import pytest
import torch

from methods.config import load_yaml
from methods.errors import HarnessError
from methods.losses.weighted_sum import Loss
from methods.model_kinds.method_schema import validate_method
from methods.models.naaf import NAAF, optimal_thresholds
from methods.models.text import GRUTextEncoder
from methods.plan import resolve_method_config
from methods.training.step import TrainingStep
from tests.conftest import REPO
from tests.oracles._float64 import EMBED, REGION_DIM, REGIONS, VOCAB, WORD_DIM
from tests.oracles.naaf import contrastive_loss, estimate, reference_pair, score_matrix, training_scores

METHOD = REPO / "config" / "methods" / "naaf.yaml"
LENGTHS = (6, 5, 8, 3, 7, 4, 6, 5, 2, 7)   # two tokens at least, as the harness's <start> ... <end>; padding
SEED = 3             # a batch in which two captions are ranked correctly: two estimates, the second from both
MINED_WORDS = 4      # small enough for a batch of ten captions to estimate (the source's 200 needs ~128)


def tiny(lambda_softmax=20.0, seed=SEED, **settings):
    """A small float64 NAAF with random fc biases (xavier_linear starts them at 0)."""
    torch.manual_seed(seed)
    text = GRUTextEncoder(VOCAB, WORD_DIM, EMBED, bidirectional=True)
    model = NAAF(REGION_DIM, REGIONS, EMBED, text, lambda_softmax=lambda_softmax, **settings).double()
    with torch.no_grad():
        model.fc.bias.copy_(torch.rand(EMBED, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 0.2 - 0.1)
    return model


def batch(lengths=LENGTHS, dtype=torch.float64, seed=SEED):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, n in enumerate(lengths):
        tokens[row, :n] = torch.randint(1, VOCAB, (n,), generator=g)
    regions = torch.randn(len(lengths), REGIONS, REGION_DIM, generator=g, dtype=torch.float64)
    return {"features": regions.to(dtype), "tokens": tokens, "lengths": torch.tensor(lengths),
            "positives": torch.eye(len(lengths), dtype=torch.bool)}


def model_scores(model, b):
    return model.score(model.encode_images(b), model.encode_texts(b))


@pytest.mark.parametrize("safe,lambda_softmax,intra", [(0.0, 20.0, True), (0.08, 20.0, True), (0.15, 4.0, True),
                                                       (0.08, 20.0, False)])
def test_scores_equal_the_per_pair_oracle(safe, lambda_softmax, intra):
    model, b = tiny(lambda_softmax, intra_propagation=intra).eval(), batch()
    model.safe_threshold.fill_(safe)
    with torch.no_grad():
        got, want = model_scores(model, b), score_matrix(model, b, b)
        got32 = model_scores(copy.deepcopy(model).float(), batch(dtype=torch.float32))
    assert got.dtype == torch.float64 and want.std() > 1e-3
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    assert got32.dtype == torch.float32
    torch.testing.assert_close(got32.double(), want, rtol=0, atol=1e-5)


def test_the_cases_reach_both_branches_and_the_intra_relation_changes_the_negatives():
    """At a safe threshold of 0.08 some words have no region above it (a negative term and an
    attended term of 0) and others do; the intra-modal indicator differs from each word's own."""
    model, b = tiny().eval(), batch()
    with torch.no_grad():
        img, txt = model.encode_images(b), model.encode_texts(b)
        best = (torch.einsum("ird,cld->icrl", img.regions, txt.words).max(dim=2).values - 0.08)[:, txt.mask]
    assert bool((best < 0).any()) and bool((best > 0).any())
    model.safe_threshold.fill_(0.08)
    with torch.no_grad():
        intra = model_scores(model, b)
        model.intra_propagation = False
        own = model_scores(model, b)
    assert (intra - own).abs().max() > 1e-3


@pytest.mark.parametrize("unmined", ["zero", "keep"])
def test_one_training_step_gives_the_sources_loss_gradients_and_thresholds(unmined):
    """The recipe's loss (ContrastiveLoss, max_violation, margin 0.2) on the mined training scores
    through the harness's training step, against the oracle's caption-by-caption mining: the
    carried threshold for the first caption, the estimates, the loss, every gradient and the state
    after the batch; float64 to 1e-10, float32 to 1e-5 (gradients: 1e-4 relative)."""
    loss_cfg = resolve_method_config(METHOD, "flickr")["loss"]
    model = tiny(mined_words=MINED_WORDS, unmined_thresholds=unmined).train()
    model.threshold.fill_(0.08)
    model.safe_threshold.fill_(0.05)
    oracle_model, model32 = copy.deepcopy(model), copy.deepcopy(model).float()
    got, outputs = TrainingStep(model, Loss(loss_cfg), torch.device("cpu"), amp=False)(batch(), epoch=0)
    got.backward()
    b = batch()
    want_scores, (threshold, safe, stats) = training_scores(oracle_model, b, b, 0.08, 0.05, MINED_WORDS,
                                                            reset=unmined == "zero")
    want = contrastive_loss(want_scores, margin=loss_cfg["margin"])
    want.backward()
    assert float(want.detach()) > 0.5 and stats is not None and threshold > 0.1 and safe > 0.1
    torch.testing.assert_close(outputs["scores"][0], want_scores, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    state = [float(model.threshold), float(model.safe_threshold), float(model.matched_mean),
             float(model.matched_std), float(model.mismatched_mean), float(model.mismatched_std)]
    assert state == pytest.approx([threshold, safe, *stats], rel=1e-12, abs=1e-12)
    got32, _ = TrainingStep(model32, Loss(loss_cfg), torch.device("cpu"), amp=False)(batch(dtype=torch.float32), 0)
    got32.backward()
    assert abs(float(got32.detach()) - float(want.detach())) <= 1e-5
    assert float(model32.threshold) == pytest.approx(threshold, abs=1e-5)
    for (name, p), q, p32 in zip(model.named_parameters(), oracle_model.parameters(), model32.parameters()):
        assert p.grad is not None and float(p.grad.abs().sum()) > 0, name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-10, atol=1e-10, msg=lambda m: f"{name}: {m}")
        # fp32: lambda 20 inside the exponentials amplifies rounding (observed up to 1.6e-5 relative)
        torch.testing.assert_close(p32.grad.double(), q.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name} fp32: {m}")


@pytest.mark.parametrize("unmined,kept", [("zero", (0.0, 0.0)), ("keep", (0.08, 0.05))])
def test_a_batch_that_mines_too_few_words_resets_the_thresholds_unless_kept(unmined, kept):
    """The source's 200 words: ten short captions never reach them, so the batch ends at 0 (its
    first caption scored at the carried 0.08); ``keep`` carries the thresholds on."""
    model = tiny(unmined_thresholds=unmined).train()
    model.threshold.fill_(0.08)
    model.safe_threshold.fill_(0.05)
    b = batch()
    with torch.no_grad():
        scores = model.training_outputs(model.encode_images(b), model.encode_texts(b))["scores"][0]
        want, state = training_scores(model, b, b, 0.08, 0.05, 200, reset=unmined == "zero")
    assert (float(model.threshold), float(model.safe_threshold)) == kept == state[:2]
    torch.testing.assert_close(scores, want, rtol=1e-10, atol=1e-10)


def test_the_threshold_is_where_the_matched_density_is_alpha_times_the_mismatched():
    """The larger root of A x^2 + B x + C = 0 is where N(x; mp, sp) = alpha N(x; mn, sn); from
    thresholds of 0 a new estimate enters at 0.7, and the safe threshold is mp - 3 sp."""
    g = torch.Generator().manual_seed(0)
    matched = 0.6 + 0.08 * torch.randn(400, generator=g, dtype=torch.float64)
    mismatched = 0.2 + 0.12 * torch.randn(400, generator=g, dtype=torch.float64)
    threshold, safe, (mp, sp, mn, sn) = optimal_thresholds(matched, mismatched, 2.0, 0.0, 0.0)
    root = threshold / 0.7

    def density(x, m, s):
        return math.exp(-(x - m) ** 2 / (2 * s * s)) / s

    assert mn < root < mp
    assert density(root, mp, sp) / density(root, mn, sn) == pytest.approx(2.0, rel=1e-6)
    assert safe == pytest.approx(0.7 * (mp - 3 * sp), rel=1e-12)
    assert (threshold, safe) == pytest.approx(estimate(matched, mismatched, 2.0, 0.0, 0.0)[:2], rel=1e-12)
    # out of [0, 1], the source's 0, then the blend: 0.3 of the value before
    assert optimal_thresholds(matched + 1.0, mismatched + 1.0, 2.0, 0.5, 0.4)[:2] == (0.3 * 0.5, 0.3 * 0.4)


def test_blocked_and_packed_scoring_equal_all_pairs():
    model, b = tiny().eval(), batch()
    model.safe_threshold.fill_(0.08)
    with torch.no_grad():
        img, txt = model.encode_images(b), model.encode_texts(b)
        whole = model.score(img, txt)
        model.block_elements = model.pair_elements(3)   # one caption per block, padded to its own length
        blocked, packed = model.score_matrix(img, txt), model.score_matrix(img, txt.packed())
    torch.testing.assert_close(blocked, whole, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(packed, blocked, rtol=0, atol=0)


def test_the_threshold_state_is_saved_with_the_weights_and_restored():
    """The mined thresholds and fitted statistics are float64 buffers of the state dict: a model
    loaded from it scores (evaluation: the safe threshold) and trains (the carried threshold) as
    the one saved."""
    model = tiny(mined_words=MINED_WORDS).train()
    b = batch()
    model.training_outputs(model.encode_images(b), model.encode_texts(b))
    state = model.state_dict()
    for name in ("threshold", "safe_threshold", "matched_mean", "matched_std", "mismatched_mean", "mismatched_std"):
        assert state[name].dtype == torch.float64 and float(state[name]) != 0.0, name
    restored = tiny(seed=7, mined_words=MINED_WORDS)
    restored.load_state_dict(copy.deepcopy(state))
    model.eval(), restored.eval()
    with torch.no_grad():
        torch.testing.assert_close(model_scores(restored, b), model_scores(model, b), rtol=0, atol=0)
    model.train(), restored.train()
    with torch.no_grad():
        again = model.training_outputs(model.encode_images(b), model.encode_texts(b))["scores"][0]
        resumed = restored.training_outputs(restored.encode_images(b), restored.encode_texts(b))["scores"][0]
    torch.testing.assert_close(resumed, again, rtol=0, atol=0)
    assert float(restored.threshold) == float(model.threshold)


def test_a_float32_model_evaluates_in_float64_as_its_source():
    model = tiny().float().eval()
    model.safe_threshold.fill_(0.08)
    b = batch(dtype=torch.float32)
    with torch.no_grad():
        img, txt = model.encode_images(b), model.encode_texts(b)
        model.evaluation_dtype = "float64"
        source = model.score_matrix(img, txt)
        model.evaluation_dtype = "model"
        own = model.score_matrix(img, txt)
        want = torch.stack([torch.stack([reference_pair(img.regions[i].double(), txt.words[c, :n].double(), 0.08,
                                                        20.0, 5.0) for c, n in enumerate(LENGTHS)])
                            for i in range(len(LENGTHS))])
    assert source.dtype == torch.float64 and own.dtype == torch.float32
    torch.testing.assert_close(source, want, rtol=1e-12, atol=1e-12)
    assert not torch.equal(own.double(), source)


def method_config() -> dict:
    return {"method": "naaf", **copy.deepcopy(load_yaml(METHOD)["base"])}


@pytest.mark.parametrize("key,value,message", [
    ("lambda_softmax", 0, r"model\.lambda_softmax: 0 is less than or equal to the minimum of 0"),
    ("alpha", -1.0, r"model\.alpha: -1\.0 is less than or equal to the minimum of 0"),
    ("mined_words", 0, r"model\.mined_words: 0 is less than the minimum of 1"),
    ("unmined_thresholds", "last", r"model\.unmined_thresholds: 'last' is not one of \['zero', 'keep'\]"),
    ("intra_propagation", "yes", r"model\.intra_propagation: 'yes' is not of type 'boolean'"),
    ("evaluation_dtype", "float16", r"model\.evaluation_dtype: 'float16' is not one of"),
    ("focal", "equal", r"Additional properties are not allowed \('focal'"),   # BFAN's, not NAAF's
])
def test_the_schema_refuses_bad_settings(key, value, message):
    cfg = method_config()
    validate_method(cfg, "naaf.yaml")
    cfg["model"][key] = value
    with pytest.raises(HarnessError, match=message):
        validate_method(cfg, "x.yaml")
    cfg = method_config()
    del cfg["model"]["lambda_softmax"]
    with pytest.raises(HarnessError, match=r"'lambda_softmax' is a required property"):
        validate_method(cfg, "x.yaml")


def test_the_constructor_refuses_bad_settings():
    text = GRUTextEncoder(VOCAB, WORD_DIM, EMBED, bidirectional=True)
    for kwargs, message in [({"lambda_softmax": -1.0}, "lambda_softmax"),
                            ({"lambda_softmax": 20.0, "alpha": 0.0}, "alpha"),
                            ({"lambda_softmax": 20.0, "mined_words": 0}, "mined_words"),
                            ({"lambda_softmax": 20.0, "unmined_thresholds": "last"}, "unmined_thresholds")]:
        with pytest.raises(ValueError, match=message):
            NAAF(REGION_DIM, REGIONS, EMBED, text, **kwargs)


def test_the_recipe_is_the_readme_arguments():
    flickr, coco = resolve_method_config(METHOD, "flickr"), resolve_method_config(METHOD, "coco")
    for cfg, batch_size in ((flickr, 128), (coco, 256)):
        model, tr = cfg["model"], cfg["training"]
        assert (model["lambda_softmax"], model["alpha"], model["embed_dim"], model["mined_words"]) == (20.0, 2.0, 1024, 200)
        assert (model["unmined_thresholds"], model["intra_propagation"], model["intra_lambda"]) == ("zero", True, 5.0)
        assert model["text"] == {"word_dim": 300, "hidden_dim": 1024, "num_layers": 1, "bidirectional": True,
                                 "word_init": "glove"}
        assert cfg["loss"] == {"kind": "triplet_hardest", "margin": 0.2}
        assert (tr["batch_size"], tr["optimizer"], tr["grad_clip"], tr["amp"]) == (batch_size, "adam", 2.0, False)
        assert [(s["epochs"], s["lr"], s["schedule"]["decay_epochs"]) for s in tr["stages"]] == [(20, 5e-4, [10])]
    assert resolve_method_config(METHOD, "flickr", variants=["bigru"])["model"]["text"]["word_init"] == "random"
    assert resolve_method_config(METHOD, "coco", variants=["no_intra"])["model"]["intra_propagation"] is False
