"""VSRN as its authors train it (Li et al., ICCV 2019; KunpengLi1994/VSRN,
config/methods/vsrn_captioning.yaml): the caption generator's loss against a reference written
from the source's data.py, models/ and misc/utils.py (``tests/oracles/caption_decoder.py``), one
training step against the summed hinge plus that loss, and the source's parameter list that holds
the generator twice (two Adam steps, its gradients counted and scaled twice by the clipping)."""
import copy

import pytest
import torch

from methods import api
from methods.losses.weighted_sum import Loss
from methods.models.base import BuildContext, build_model
from methods.training.loop import make_optimizer
from methods.training.step import TrainingStep, apply_gradients
from tests.oracles.caption_decoder import caption_loss, source_labels

VOCAB, REGIONS, DIM, MAX_LEN = 20, 4, 10, 6
CAPTIONS = ([1, 5, 7, 2], [1, 4, 2], [1, 9, 3, 11, 12, 6, 8, 2], [1, 13, 14, 15, 16, 2])   # one cut at 6 ids


@pytest.fixture(scope="module")
def recipe():
    return api.experiment_config("vsrn_captioning", "coco")


def tiny_vsrn(recipe, listed_twice=True, decoder=True):
    cfg = copy.deepcopy(recipe["model"])
    cfg.update(embed_dim=8, text={**cfg["text"], "word_dim": 6, "hidden_dim": 8})
    cfg["caption_decoder"] = ({"hidden_dim": 5, "word_dim": 4, "max_len": MAX_LEN, "input_dropout": 0.0,
                               "listed_twice": listed_twice} if decoder else None)
    torch.manual_seed(0)
    return build_model(cfg, BuildContext(VOCAB, {"dim": DIM, "regions": REGIONS})).double().train()


def batch():
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor([len(c) for c in CAPTIONS])
    tokens = torch.zeros(len(CAPTIONS), int(lengths.max()), dtype=torch.long)
    for row, ids in enumerate(CAPTIONS):
        tokens[row, :len(ids)] = torch.tensor(ids)
    return {"features": torch.randn(len(CAPTIONS), REGIONS, DIM, generator=g, dtype=torch.float64),
            "tokens": tokens, "lengths": lengths, "positives": torch.eye(len(CAPTIONS), dtype=torch.bool)}


def summed_hardest_hinges(scores, margin):
    """VSRN model.py ContrastiveLoss with max_violation, pair by pair."""
    n = len(scores)
    i2t = sum(max(torch.clamp(margin + scores[i, j] - scores[i, i], min=0) for j in range(n) if j != i)
              for i in range(n))
    t2i = sum(max(torch.clamp(margin + scores[i, j] - scores[j, j], min=0) for i in range(n) if i != j)
              for j in range(n))
    return i2t + t2i


def reference_loss(model, b):
    img, txt = model.encode_images(b), model.encode_texts(b)
    scores = img["embedding"] @ txt["embedding"].t()
    return summed_hardest_hinges(scores, 0.2) + caption_loss(model.caption_decoder, img["regions"], CAPTIONS, MAX_LEN)


def test_the_labels_are_the_source_labels():
    """data.py: a caption of n ids gives targets at positions 1..n (the first padding id 0 included);
    one longer than max_len is cut to max_len ids with <end> last."""
    labels, mask = source_labels([1, 9, 3, 11, 12, 6, 8, 2], 6)
    assert labels == [1, 9, 3, 11, 12, 2, 0] and mask == [1.0] * 7
    labels, mask = source_labels([1, 4, 2], 6)
    assert labels == [1, 4, 2, 0, 0, 0, 0] and mask == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    from methods.models.caption_decoder import CaptionDecoder
    decoder = CaptionDecoder(DIM, VOCAB, 5, 4, MAX_LEN)
    b = batch()
    inputs, targets, mask = decoder.labels(b["tokens"], b["lengths"])
    for row, ids in enumerate(CAPTIONS):
        want, want_mask = source_labels(ids, MAX_LEN)
        steps = inputs.shape[1]
        assert inputs[row].tolist() == want[:steps] and targets[row].tolist() == want[1:steps + 1]
        assert mask[row].tolist() == want_mask[1:steps + 1] and sum(want_mask[steps + 1:MAX_LEN]) == 0


def test_one_training_step_gives_the_sources_loss_and_gradients(recipe):
    model = tiny_vsrn(recipe)
    reference = copy.deepcopy(model)
    b = batch()
    got, outputs = TrainingStep(model, Loss(recipe["loss"]), torch.device("cpu"), amp=False)(b, epoch=0)
    got.backward()
    want = reference_loss(reference, b)
    want.backward()
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    caption_part = float(outputs["caption_mask"].sum())
    assert caption_part == sum(sum(source_labels(c, MAX_LEN)[1][1:MAX_LEN]) for c in CAPTIONS)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-9, atol=1e-12, msg=lambda m: f"{name}: {m}")
    assert float(model.caption_decoder.out.weight.grad.abs().sum()) > 0
    # the caption loss reaches the image side (the GCN blocks start as identities: their BN scale is 0)
    region_grad = torch.autograd.grad(caption_loss(reference.caption_decoder, reference.encode_images(b)["regions"],
                                                   CAPTIONS, MAX_LEN), reference.fc.weight)[0]
    assert float(region_grad.abs().sum()) > 0


def test_the_float32_loss_is_the_float64_reference_within_1e5(recipe):
    model64 = tiny_vsrn(recipe)
    model32 = copy.deepcopy(model64).float()
    b = batch()
    b32 = {**b, "features": b["features"].float()}
    with torch.no_grad():
        got, _ = TrainingStep(model32, Loss(recipe["loss"]), torch.device("cpu"), amp=False)(b32, epoch=0)
        want = reference_loss(model64, b)
    assert abs(float(got) - float(want)) <= 1e-5 * max(1.0, abs(float(want)))


def test_the_generator_is_stepped_twice_and_clipped_twice_as_the_sources_list(recipe):
    model = tiny_vsrn(recipe, listed_twice=True)
    b = batch()
    reference = copy.deepcopy(model)
    loss = reference_loss(reference, b)
    loss.backward()
    decoder_ids = {id(p) for p in reference.caption_decoder.parameters()}
    grads = {n: p.grad.clone() for n, p in reference.named_parameters()}
    twice = {n for n, p in reference.named_parameters() if id(p) in decoder_ids}
    norm = sum((2 if n in twice else 1) * float(g.pow(2).sum()) for n, g in grads.items()) ** 0.5
    clip = 0.5
    coef = clip / (norm + 1e-6)
    assert coef < 1   # the clipping acts
    lr, (b1, b2), eps = 1e-3, (0.9, 0.999), 1e-8
    want = {}
    for n, p in reference.named_parameters():
        g = grads[n] * (coef ** 2 if n in twice else coef)   # scaled once per listing
        value, m, v = p.detach().clone(), torch.zeros_like(p), torch.zeros_like(p)
        for t in range(1, 3 if n in twice else 2):           # one Adam step per listing, in a row
            m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
            value = value - lr / (1 - b1 ** t) * m / (v.sqrt() / (1 - b2 ** t) ** 0.5 + eps)
        want[n] = value
    optimizer = make_optimizer("adam", model.parameter_groups(), lr, 0.0)
    got, _ = TrainingStep(model, Loss(recipe["loss"]), torch.device("cpu"), amp=False)(b, epoch=0)
    apply_gradients(got, optimizer, torch.amp.GradScaler("cpu", enabled=False), model.clipped_parameters(), clip)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), want[n], rtol=1e-9, atol=1e-12, msg=lambda m: f"{n}: {m}")
    once = tiny_vsrn(recipe, listed_twice=False)
    listed = [p for group in make_optimizer("adam", once.parameter_groups(), lr, 0.0).param_groups
              for p in group["params"]]
    assert len(listed) == len({id(p) for p in listed}) == len(list(once.parameters()))


def test_the_generator_plays_no_part_in_scoring(recipe):
    with_generator, without = tiny_vsrn(recipe), tiny_vsrn(recipe, decoder=False)
    shared = {k: v for k, v in with_generator.state_dict().items() if not k.startswith("caption_decoder.")}
    without.load_state_dict(shared, strict=True)
    b = batch()
    with_generator.eval(), without.eval()
    with torch.no_grad():
        img, txt = with_generator.encode_images(b), with_generator.encode_texts(b)
        assert torch.is_tensor(img) and torch.is_tensor(txt)
        torch.testing.assert_close(with_generator.score(img, txt),
                                   without.score(without.encode_images(b), without.encode_texts(b)), rtol=0, atol=0)


def test_the_generator_needs_one_image_row_per_caption(recipe):
    model = tiny_vsrn(recipe)
    b = batch()
    img = model.encode_images({**b, "features": b["features"][:2]})
    with pytest.raises(ValueError, match="batch_positives: diagonal"):
        model.training_outputs(img, model.encode_texts(b))


def test_the_recipe_is_the_readme_commands(recipe):
    flickr = api.experiment_config("vsrn_captioning", "flickr")
    assert (recipe["model"]["final_bn"], recipe["model"]["l2norm_after_fc"]) == (False, True)
    assert (flickr["model"]["final_bn"], flickr["model"]["l2norm_after_fc"]) == (True, False)
    assert recipe["training"]["stages"][0]["schedule"]["decay_epochs"] == [15]
    assert flickr["training"]["stages"][0]["schedule"]["decay_epochs"] == [10]
    assert recipe["model"]["caption_decoder"] == {"hidden_dim": 512, "word_dim": 300, "max_len": 60,
                                                  "input_dropout": 0.2, "listed_twice": True}
    assert [t["kind"] for t in recipe["loss"]["terms"]] == ["triplet_hardest", "caption_generation"]


def test_the_caption_term_without_a_generator_is_refused_by_the_schema(recipe):
    from methods.errors import HarnessError
    from methods.model_kinds.method_schema import validate_method

    validate_method(recipe, "vsrn_captioning.yaml")
    with pytest.raises(HarnessError, match="caption_decoder"):
        validate_method({**recipe, "model": {**recipe["model"], "caption_decoder": None}}, "vsrn_captioning.yaml")
