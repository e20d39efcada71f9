"""PCME (Chun et al., CVPR 2021) against references written from naver-ai/pcme's equations
(``tests/oracles/pcme.py``): the sampled embeddings with the same random draws, the match
probability, the soft contrastive loss with VIB and one AdamP training step; PCME's data
augmentations (caption drop, random erasing) on hand-worked cases; its stages and its seeded
evaluation samples."""
import math

import pytest
import torch

from methods.data.caption_augment import CaptionUnkDrop
from methods.features.image_transforms import random_erase
from methods.losses.weighted_sum import Loss
from methods.training.loop import make_optimizer
from methods.training.step import apply_gradients
from tests.oracles._float64 import MVSA_SHAPES, features, texts
from tests.oracles.pcme import (SAMPLES, caption_distribution, distributions, reference,
                                samples, soft_contrastive_loss, tiny_pcme, vib_loss)

LOSS = {"terms": [{"kind": "soft_contrastive"}, {"kind": "vib", "weight": 1e-5}]}


def grid(n):
    return {"features": {"conv5": features(n, *MVSA_SHAPES["conv5"])}}


def batch_of(n_images, caption_owner):
    """Images, their captions (``texts()``'s five, caption c of image caption_owner[c]) and the positives."""
    text_batch = texts()
    owner = torch.tensor(caption_owner)
    return {**grid(n_images), **text_batch, "positives": owner[None, :] == torch.arange(n_images)[:, None]}


def training_draws(model, n_images, n_texts, seed):
    """The draws of a training step after torch.manual_seed(seed): images' eps, then the captions'."""
    torch.manual_seed(seed)
    shape = (model.n_samples, model.embed_dim)
    return (torch.randn((n_images, *shape), dtype=torch.float64), torch.randn((n_texts, *shape), dtype=torch.float64))


def reference_loss(model, batch, seed):
    img, txt = distributions(model, batch, batch)
    eps_img, eps_txt = training_draws(model, len(img), len(txt), seed)
    zi, zt = samples(img, eps_img), samples(txt, eps_txt)
    a, b = model.negative_scale[0], model.shift[0]
    return (soft_contrastive_loss(zi, zt, batch["positives"], a, b)
            + 1e-5 * (vib_loss(zi, [s for _, s in img]) + vib_loss(zt, [s for _, s in txt])))


def model_loss(model, batch, seed):
    model.train()
    torch.manual_seed(seed)
    img = model.encode_images(batch)
    txt = model.encode_texts(batch)
    return Loss(LOSS)(model.training_outputs(img, txt), batch, 0)


@pytest.mark.parametrize("owner", [[0, 1, 2, 0, 1], [0, 1, 2, 3, 4]], ids=["same_image", "diagonal"])
def test_loss_and_its_gradients_equal_the_source_equations(owner):
    n_images = max(owner) + 1
    batch = batch_of(n_images, owner)
    model = tiny_pcme()
    got = model_loss(model, batch, seed=5)
    grads = torch.autograd.grad(got, [model.negative_scale, model.shift, model.image_fc.weight,
                                      model.text_sigma_gru.weight_hh_l0])
    want = reference_loss(model, batch, seed=5)
    want_grads = torch.autograd.grad(want, [model.negative_scale, model.shift, model.image_fc.weight,
                                            model.text_sigma_gru.weight_hh_l0])
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-10)
    assert 1 < float(got.detach()) < 1e4 and all(g.abs().sum() > 0 for g in grads)


def test_float32_encodings_and_match_probability_are_the_float64_ones_within_1e5():
    model64 = tiny_pcme()
    model32 = tiny_pcme(dtype=torch.float32)
    with torch.no_grad():
        want = reference(model64, grid(3), texts())
        got = model32.score(model32.eval().encode_images(grid(3)), model32.eval().encode_texts(texts()))
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_one_adamp_step_clips_the_model_not_the_match_head():
    """The harness's step (loss, AdamP over the model's groups, grad_clip over clipped_parameters)
    equals the source's: clip_grad_norm_ of the model's parameters only, then AdamP over the model's
    and the criterion's (a, b), on the same draws."""
    batch = batch_of(3, [0, 1, 2, 0, 1])
    ours, theirs = tiny_pcme(), tiny_pcme()
    optimizer = make_optimizer("adamp", ours.parameter_groups(), 1e-2, 0.0)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    apply_gradients(model_loss(ours, batch, seed=7), optimizer, scaler, ours.clipped_parameters(), 0.05)

    from adamp import AdamP   # the source's optimizer package, as its optimizers/__init__.py builds it

    criterion = [theirs.negative_scale, theirs.shift]
    model_params = [p for p in theirs.parameters() if p.requires_grad and all(p is not c for c in criterion)]
    source_optimizer = AdamP(model_params + criterion, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0)
    theirs.train()
    loss = reference_loss(theirs, batch, seed=7)
    source_optimizer.zero_grad()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model_params, 0.05)
    assert norm > 0.05 and criterion[0].grad.abs() > 0   # the clip acts, and a's gradient is not part of it
    source_optimizer.step()
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-11, msg=lambda m: f"{name}: {m}")
    assert not torch.equal(ours.negative_scale, tiny_pcme().negative_scale)


def test_the_word_embeddings_train_only_with_the_cnn():
    model = tiny_pcme()
    assert not model.text.embed.weight.requires_grad   # train_coco.py pretrain: txt_finetune False
    assert all(id(p) != id(model.text.embed.weight) for p in model.trainable_parameters())
    model.backbone = torch.nn.Linear(1, 1)               # a stand-in CNN to fine-tune
    model.set_finetune(True)
    assert model.text.embed.weight.requires_grad and model.backbone.weight.requires_grad


def test_evaluation_samples_are_seeded_and_training_samples_are_not():
    model = tiny_pcme(dtype=torch.float32)
    with torch.no_grad():
        first = model.eval().encode_images(grid(3))
        again = model.eval().encode_images(grid(3))
        model.sample_seed = 4
        other = model.eval().encode_images(grid(3))
        model.train()
        one, two = model.encode_images(grid(3))["samples"], model.encode_images(grid(3))["samples"]
    assert first.shape == (3, SAMPLES, model.embed_dim)
    assert torch.equal(first, again) and not torch.equal(first, other) and not torch.equal(one, two)
    # each item's samples spread around its unit mean by exp(logsigma)
    with torch.no_grad():
        mu, logsigma = model.image_distributions(grid(3))
    spread = (first - mu[:, None]) / torch.exp(logsigma)[:, None]
    torch.testing.assert_close(spread, torch.randn(first.shape, generator=torch.Generator().manual_seed(0)),
                               rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.linalg.vector_norm(mu, dim=1), torch.ones(3))


def test_caption_distribution_reads_the_last_word_of_each_caption():
    """A caption's mean does not change with padding after it (the source's gather at length - 1)."""
    model = tiny_pcme()
    text_batch = texts()
    with torch.no_grad():
        mu, logsigma = model.text_distributions(text_batch["tokens"], text_batch["lengths"])
        for row, n in enumerate(text_batch["lengths"].tolist()):
            want_mu, want_sigma = caption_distribution(model, text_batch["tokens"][row, :n])
            torch.testing.assert_close(mu[row], want_mu, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(logsigma[row], want_sigma, rtol=1e-12, atol=1e-12)


def test_caption_drop_by_hand():
    """<start> w1..w12 <end>, prob 0.1: words whose draw is <= 0.1 become <unk> (3), then int(12 x 0.1)
    = 1 word is deleted at position int(u x 12)."""
    drop = CaptionUnkDrop(0.1, unk_id=3)
    tokens = [1, *range(10, 22), 2]
    draws = [0.5, 0.05, 0.9, 0.1, 0.3, 0.7, 0.11, 0.2, 0.02, 0.6, 0.8, 0.4]
    assert drop.deletions(12) == 1 and drop.deletions(9) == 0
    out = drop.apply(tokens, draws, [0.5])     # deletes word 6 of 12 (0-based): 16
    assert out == [1, 10, 3, 12, 3, 14, 15, 17, 3, 19, 20, 21, 2]
    assert drop.apply([1, 7, 8, 2], [0.0, 1.0], []) == [1, 3, 8, 2]
    with pytest.raises(ValueError, match="take 12 draws and 1 positions"):
        drop.apply(tokens, draws, [])


def test_random_erase_sets_one_box_to_zero():
    image = torch.ones(3, 40, 50)
    g = torch.Generator().manual_seed(0)
    boxes = []
    for _ in range(50):
        out = random_erase(image, 1.0, g)
        zero = (out == 0).all(dim=0)
        rows, cols = zero.any(dim=1).nonzero().flatten(), zero.any(dim=0).nonzero().flatten()
        h, w = len(rows), len(cols)
        assert int(zero.sum()) == h * w and (out[:, ~zero] == 1).all()   # one axis-aligned box, all channels
        assert rows.max() - rows.min() + 1 == h and cols.max() - cols.min() + 1 == w
        assert 0.02 * 2000 - 40 - 50 <= h * w <= 2000 / 3 + 40 + 50 + 1   # area U(0.02, 1/3) x HW, sides rounded
        assert 0 < h < 40 and 0 < w < 50
        boxes.append((int(rows.min()), int(cols.min()), h, w))
    assert (image == 1).all()                      # the input is kept
    assert len(set(boxes)) > 40                    # random boxes
    assert random_erase(image, 0.0, g) is image    # probability 0: never erased
    aspects = [math.log(h / w) for _, _, h, w in boxes]
    assert min(aspects) < -0.3 and max(aspects) > 0.3   # log aspect U(log 0.3, log 1/0.3)


def test_adamp_is_the_package_optimizer():
    from adamp import AdamP

    p = torch.nn.Parameter(torch.zeros(2))
    assert type(make_optimizer("adamp", [([p], 1.0)], 1e-3, 0.0)) is AdamP
