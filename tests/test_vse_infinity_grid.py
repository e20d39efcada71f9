"""VSE-infinity on a CNN grid against woodfrog/vse_infty (branch master): the grid drop, the CNN's
warm-up schedule and loss ramp, the optimizer groups, and the image pipeline, each checked against
a reference written from the source's code (lib/encoders.py EncoderImageFull, lib/modules/resnet.py
ResnetFeatureExtractor, train.py, lib/vse.py, lib/datasets/image_caption.py RawImageDataset)."""
import math

import numpy as np
import pytest
import torch
from PIL import Image

from methods.errors import HarnessError
from methods.features.backbone import ResNetBackbone
from methods.features.image_transforms import (CAFFE_BGR_MEANS, SquashImages, evaluation_images, normalise,
                                               random_crop, squash, training_images)
from methods.model_kinds.method_schema import validate_method
from methods.models.vse_infinity_grid import VSEInfinityGrid, drop_grid_cells
from methods.training.loop import make_optimizer
from tests.oracles.vse_infinity import gpo, scan_l2, tiny_bert_encoder
from tests.oracles.vse_infinity_grid import GRID_SCHEDULE
from tests.test_sgraf import linear

SHAPES = {"conv4": [6, 6, 256], "conv5": [3, 3, 512]}   # ResNet-18 at 96 px


def source_grid_drop(features, rand_1, rand_2):
    """EncoderImageFull.forward's training branch, a loop over the images as the source writes it."""
    base_length = features.shape[1]
    kept, lengths = [], []
    for i in range(features.shape[0]):
        if rand_2[i] > 0.2:
            feat = features[i][np.where(rand_1[i] > 0.20 * rand_2[i])]
            feat = torch.cat([feat, torch.zeros(base_length - len(feat), features.shape[-1], dtype=features.dtype)])
            lengths.append(int((rand_1[i] > 0.20 * rand_2[i]).sum()))
        else:
            feat = features[i]
            lengths.append(base_length)
        kept.append(feat)
    return torch.stack(kept)[:, :max(lengths)], lengths


def test_the_grid_drop_keeps_what_the_sources_loop_keeps():
    g = torch.Generator().manual_seed(0)
    cells = torch.randn(6, 9, 4, generator=g, dtype=torch.float64)
    rand_1 = torch.rand(6, 9, generator=g, dtype=torch.float64)
    rand_2 = torch.tensor([0.1, 0.9, 0.5, 0.21, 1.0, 0.2], dtype=torch.float64)   # two images keep all (u <= 0.2)
    ours, lengths = drop_grid_cells(cells, rand_1, rand_2)
    expected, expected_lengths = source_grid_drop(cells, rand_1.numpy(), rand_2.numpy())
    assert lengths.tolist() == expected_lengths and expected_lengths[0] == expected_lengths[5] == 9
    assert torch.equal(ours, expected)
    # an image whose draws drop every cell keeps them all (the source would pool no cell)
    cells = cells[:2, :3]
    ours, lengths = drop_grid_cells(cells, torch.tensor([[0.01, 0.02, 0.03], [0.5, 0.01, 0.9]], dtype=torch.float64),
                                    torch.tensor([0.9, 0.9], dtype=torch.float64))
    assert lengths.tolist() == [3, 2] and torch.equal(ours[0], cells[0])
    assert torch.equal(ours[1], torch.cat([cells[1, [0, 2]], torch.zeros(1, 4, dtype=torch.float64)]))


def source_frozen_parameters(epoch, embedding_warmup, backbone_warmup):
    """The CNN's parameter names with requires_grad False in ``epoch``, from train.py's warm-up
    options and resnet.py's unfreeze_base (base = conv1, bn1, relu, maxpool, layer1..3; top = layer4)."""
    if epoch < embedding_warmup:
        return {"conv1", "bn1", "layer1", "layer2", "layer3", "layer4"}          # freeze_backbone
    elif epoch < embedding_warmup + backbone_warmup:
        fixed = 3
    elif epoch < embedding_warmup + backbone_warmup * 2:
        fixed = 2
    elif epoch < embedding_warmup + backbone_warmup * 3:
        fixed = 1
    else:
        fixed = 0
    return {3: {"conv1", "bn1", "layer1", "layer2", "layer3"}, 2: {"conv1", "bn1", "layer1", "layer2"},
            1: {"conv1", "bn1", "layer1"}, 0: set()}[fixed]


# the harness's stem holds torchvision's conv1, bn1, relu, maxpool and layer1 in that order
STEM = {"stem.0": "conv1", "stem.1": "bn1", "stem.4": "layer1"}


def grid_model(schedule=GRID_SCHEDULE, text=None):
    torch.manual_seed(0)
    return VSEInfinityGrid(ResNetBackbone("resnet18", "none"), SHAPES, "frozen", ["conv5"], 12, text or tiny_bert_encoder(),
                           backbone_schedule=schedule)


@pytest.mark.parametrize("embedding_warmup, backbone_warmup", [(1, 0), (2, 5), (0, 1)])
def test_the_cnn_trains_by_epoch_as_the_sources_warm_up_options(embedding_warmup, backbone_warmup):
    model = grid_model({**GRID_SCHEDULE, "embedding_warmup_epochs": embedding_warmup,
                        "backbone_warmup_epochs": backbone_warmup})
    model.set_finetune(True)
    for epoch in range(embedding_warmup + 3 * backbone_warmup + 2):
        model.at_epoch(epoch)
        frozen = {STEM.get(".".join(name.split(".")[:2]), name.split(".")[0])
                  for name, p in model.backbone.named_parameters() if not p.requires_grad}
        assert frozen == source_frozen_parameters(epoch, embedding_warmup, backbone_warmup), epoch
        assert all(p.requires_grad for p in model.fc.parameters())
        steps = 7
        scales = [model.loss_scale(epoch, i, steps) for i in range(steps)]
        # train.py: warmup_alpha = i / num_loader_iter in the first epoch that trains the CNN
        assert scales == ([i / steps for i in range(steps)] if epoch == embedding_warmup else [1.0] * steps)


def test_the_optimizer_holds_the_frozen_cnn_and_moves_it_only_once_it_trains():
    model = grid_model().double()
    model.set_finetune(True)
    groups = model.parameter_groups()
    scales = {id(p): s for params, s in groups for p in params}
    assert all(scales[id(p)] == 0.01 for p in model.backbone.parameters())      # lib/vse.py: top and base groups
    assert all(scales[id(p)] == 0.1 for p in model.text.bert.parameters())
    assert all(scales[id(p)] == 1.0 for p in [*model.fc.parameters(), *model.text.linear.parameters(),
                                              *model.image_pool.parameters()])
    assert len(scales) == len(list(model.parameters()))
    optimizer = make_optimizer("adamw", groups, 1e-3, 1e-4)
    g = torch.Generator().manual_seed(1)
    batch = {"images": torch.randn(4, 3, 96, 96, generator=g, dtype=torch.float64),
             "tokens": torch.randint(1, 30, (4, 5), generator=g), "lengths": torch.tensor([5, 5, 4, 3])}
    before = {k: v.clone() for k, v in model.backbone.state_dict().items()}
    for epoch in (0, 1):
        model.at_epoch(epoch)
        model.train()
        fc_before = model.fc.weight.detach().clone()
        loss = -(model.encode_images(batch) * model.encode_texts(batch)).sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        assert not torch.equal(model.fc.weight, fc_before)
        moved = [k for k, v in model.backbone.state_dict().items() if not torch.equal(v, before[k])]
        # epoch 0: no gradient, so AdamW neither steps nor decays the CNN; BatchNorm statistics stay
        # (every BatchNorm in eval mode); epoch 1: every weight moves, the statistics still stay
        if epoch == 0:
            assert moved == []
        else:
            assert moved and not any(k.endswith(("running_mean", "running_var", "num_batches_tracked")) for k in moved)
            assert "stem.0.weight" in moved and "layer4.1.conv2.weight" in moved


def test_a_training_batch_drops_cells_with_the_draws_the_model_takes():
    model = grid_model().double()
    model.set_finetune(True)
    model.train()
    g = torch.Generator().manual_seed(3)
    images = torch.randn(5, 3, 96, 96, generator=g, dtype=torch.float64)
    torch.manual_seed(11)
    ours = model.encode_images({"images": images})
    torch.manual_seed(11)
    rand_1, rand_2 = torch.rand(5, 9), torch.rand(5)   # float32 draws, as the model's
    with torch.no_grad():
        maps = model.backbone(images, ("conv5",))["conv5"]                          # (B, C, H, W)
        features = maps.reshape(5, maps.shape[1], -1).permute(0, 2, 1)          # top_feat.view(b, c, -1).permute(0, 2, 1)
        dropped, lengths = source_grid_drop(features, rand_1.numpy(), rand_2.numpy())
        expected = torch.stack([scan_l2(gpo(model.image_pool, linear(model.fc, dropped[i, :n])))
                                for i, n in enumerate(lengths)])
    assert min(lengths) < 9
    assert torch.allclose(ours, expected, atol=1e-10)


def cv2_linear_resize(im, size):
    """cv2.resize INTER_LINEAR written out: destination pixel d samples the source at
    (d + 0.5) * in / out - 0.5, clamped to the image, between its two neighbours."""
    c, h, w = im.shape
    out = torch.empty(c, size, size, dtype=torch.float64)

    def taps(d, n):
        x = min(max((d + 0.5) * n / size - 0.5, 0.0), n - 1)
        x0 = math.floor(x)
        return x0, min(x0 + 1, n - 1), x - x0

    for y in range(size):
        y0, y1, fy = taps(y, h)
        for x in range(size):
            x0, x1, fx = taps(x, w)
            top = im[:, y0, x0] * (1 - fx) + im[:, y0, x1] * fx
            bottom = im[:, y1, x0] * (1 - fx) + im[:, y1, x1] * fx
            out[:, y, x] = top * (1 - fy) + bottom * fy
    return out


@pytest.mark.parametrize("h, w, size", [(13, 20, 8), (7, 5, 16)])   # shrunk and enlarged, any aspect
def test_squash_is_opencvs_bilinear_resize(h, w, size):
    im = torch.rand(3, h, w, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 255
    assert torch.allclose(squash(im, size), cv2_linear_resize(im, size), atol=1e-9)


def test_the_training_crop_is_the_sources():
    im = torch.arange(3 * 50 * 40, dtype=torch.float32).reshape(3, 50, 40)
    for seed in range(20):
        crop = random_crop(im, torch.Generator().manual_seed(seed))
        g = torch.Generator().manual_seed(seed)
        ratio = float(torch.rand((), generator=g)) * 0.4 + 0.6
        ch, cw = int(50 * ratio), int(40 * ratio)                    # _crop: int(side * crop_ratio)
        assert crop.shape == (3, ch, cw)
        x0, y0 = int(crop[0, 0, 0]) % 40, int(crop[0, 0, 0]) // 40
        assert 0 <= x0 < 40 - cw or (x0 == 0 and cw == 40)                  # np.random.randint(w - crop_w)
        assert 0 <= y0 < 50 - ch or (y0 == 0 and ch == 50)
        assert torch.equal(crop, im[:, y0:y0 + ch, x0:x0 + cw])


def test_pixels_are_normalised_as_the_source_does():
    im = torch.tensor([[[10.0]], [[100.0]], [[200.0]]])                      # R, G, B
    bgr = normalise(im, "caffe_bgr")
    assert bgr[:, 0, 0].tolist() == pytest.approx([200 - CAFFE_BGR_MEANS[0], 100 - CAFFE_BGR_MEANS[1],
                                                   10 - CAFFE_BGR_MEANS[2]])
    rgb = normalise(im, "imagenet")
    assert rgb[:, 0, 0].tolist() == pytest.approx([(10 / 255 - 0.485) / 0.229, (100 / 255 - 0.456) / 0.224,
                                                   (200 / 255 - 0.406) / 0.225])


def test_evaluation_squashes_the_whole_image_and_training_crops_flips_it():
    img = Image.fromarray(np.random.default_rng(0).integers(0, 255, (30, 60, 3), dtype=np.uint8))
    training = {"images": {"kind": "squash", "size": 16, "pixels": "imagenet"}, "finetune_augment": "crop_squash_flip"}
    whole = evaluation_images(training, 64, 64)(img)
    pixels = torch.from_numpy(np.array(img)).permute(2, 0, 1).double()
    assert torch.allclose(whole.double(), normalise(cv2_linear_resize(pixels, 16), "imagenet"), atol=1e-4)
    augment = training_images(training, 64, 64)
    assert isinstance(augment, SquashImages) and augment.augment
    torch.manual_seed(4)
    first = augment(img)
    torch.manual_seed(4)
    assert torch.equal(first, augment(img)) and first.shape == (3, 16, 16) and not torch.equal(first, whole)
    assert not training_images({**training, "finetune_augment": "none"}, 64, 64).augment


def test_the_method_schema_ties_the_squash_crops_to_the_images_block():
    from methods.fidelity import load_method_file
    from methods.plan.method_files import resolve_method_config
    from methods.config import load_harness_config
    from tests.conftest import REPO

    path = REPO / "config" / "methods" / "vse_infinity_grid_bert.yaml"
    cfg = resolve_method_config(path, "coco", {}, [], load_harness_config(REPO / "config" / "config.yaml")["backbones"],
                                load_method_file(path))
    validate_method(cfg, "ok")
    no_images = {**cfg, "training": {k: v for k, v in cfg["training"].items() if k != "images"}}
    with pytest.raises(HarnessError, match="images"):
        validate_method(no_images, "grid.yaml")
    vsepp_crops = {**cfg, "training": {**cfg["training"], "finetune_augment": "random_resized_crop_flip"}}
    with pytest.raises(HarnessError, match="finetune_augment"):
        validate_method(vsepp_crops, "grid.yaml")


def test_the_resnext_bert_rows_are_left_out_naming_both_keys_until_both_are_set():
    from methods.config import load_harness_config
    from methods.plan import Plan
    from tests.conftest import REPO

    papers = {"papers": ["methods/papers/set_embeddings.yaml"]}
    plan = Plan(load_harness_config(REPO / "config" / "config.yaml", papers))
    for table, dataset in (("set_embeddings_t1", "coco"), ("set_embeddings_t2", "flickr")):
        left_out = {r["id"]: r for r in plan.table_spec(table, dataset).unconfigured}
        for row in ("vse_infinity_resnext_bert", "vse_infinity_resnext_bert_ensemble"):
            assert left_out[row]["keys"] == ["text_encoders.bert_base_uncased.path", "backbones.resnext101_wsl.weights"]
            assert left_out[row]["needs"] == "a BERT folder and the CNN's weights"
    # the BERT folder alone is not enough: the WSL weights are still named
    with_bert = {**papers, "text_encoders": {"bert_base_uncased": {"kind": "bert", "path": "/data/bert-base-uncased"}}}
    plan = Plan(load_harness_config(REPO / "config" / "config.yaml", with_bert))
    left_out = {r["id"]: r for r in plan.table_spec("set_embeddings_t1", "coco").unconfigured}
    assert left_out["vse_infinity_resnext_bert"]["keys"] == ["backbones.resnext101_wsl.weights"]
    both = {**with_bert, "backbones": {"resnext101_wsl": {"arch": "resnext101_32x8d", "optional": True,
                                                          "weights": "/data/ig_resnext101_32x8-c38310e5.pth"}}}
    plan = Plan(load_harness_config(REPO / "config" / "config.yaml", both))
    rows = {r.id: r for r in plan.table("set_embeddings_t1", "coco").rows}
    single, ensemble = rows["vse_infinity_resnext_bert"], rows["vse_infinity_resnext_bert_ensemble"]
    assert single.seeds == [0, 1, 2] and ensemble.ensemble_size == 2 and set(ensemble.members) == set(single.members)
    exp = plan.experiment("coco", single.members[0])
    assert exp.method == "vse_infinity_grid_bert" and exp.finetunes and not exp.may_evaluate_on_cached_features
    assert plan.text_vocabulary("coco", single.members[0]) == "results/coco/text/bert_base_uncased.json"
    assert single.ran.startswith("ResNeXt-101 32x8d (weights ig_resnext101_32x8-c38310e5.pth) last-map grid at "
                                 "512×512 px, CNN fine-tuned (lr x0.01)")
    assert not any(r["id"].startswith("vse_infinity_resnext") for r in plan.table_spec("set_embeddings_t1", "coco").unconfigured or [])


@pytest.mark.parametrize("crop", [64, 100, 224])
def test_a_run_that_never_reads_cached_maps_knows_their_shape_from_the_architecture(crop):
    """cached_shape: what torchvision's ResNet gives (its maps computed here), for a run whose
    every stage fine-tunes (no feature job runs for it)."""
    from methods.features.architectures import cached_shape

    maps = ResNetBackbone("resnet18", "none").eval()(torch.zeros(1, 3, crop, crop), ("conv4", "conv5"))
    expected = {s: [m.shape[2], m.shape[3], m.shape[1]] for s, m in maps.items()}
    assert cached_shape("grid", "resnet18", {"grid_scales": ["conv4", "conv5"]}, crop) == {"scales": expected}
    assert cached_shape("pooled", "resnet18", {}, crop) == {"dim": 512}


def test_the_trainer_runs_the_cnn_warm_up_and_ramps_the_first_trained_epochs_loss(tmp_path):
    """The epoch loop's side of train.py: the model's at_epoch before each epoch's first step (the
    CNN frozen in epoch 0, trained in epoch 1), the loss of epoch 1 scaled by i / (items // batch + 1)
    at its step i, one optimizer for both epochs, and the CNN moved only once it trains."""
    from methods import api
    from methods.data.caption_augment import extra_tokens
    from methods.data.inputs import SplitData
    from methods.data.text import Vocabulary
    from methods.data.tokenizers import Tokenizer
    from methods.training.loop import TrainInputs, train

    rng = np.random.default_rng(0)
    words = ["a", "red", "blue", "ball", "box", "left", "right", "of"]
    n_images, tpi = 12, 2
    for i in range(n_images):
        Image.fromarray(rng.integers(0, 255, (40, 30, 3), dtype=np.uint8)).save(tmp_path / f"im{i}.png")
    captions = [" ".join(rng.choice(words, size=4)) for _ in range(n_images * tpi)]
    split = SplitData("train", captions, None, [f"im{i}.png" for i in range(n_images)], tpi)
    vocab = Vocabulary.build(captions, 1, Tokenizer("nltk_line"))
    cfg = api.experiment_config("vse_infinity_grid_bert", "synthetic")
    cfg["model"].update(embed_dim=16, text={"word_dim": 8, "hidden_dim": 16, "num_layers": 1, "bidirectional": True,
                                           "word_init": "random"})
    cfg["training"].update(batch_size=10, eval_batch_size=12, images={"kind": "squash", "size": 32, "pixels": "imagenet"})
    del cfg["training"]["caption_augment"]   # four-word captions: a deletion could empty one
    backbones = {"resnet18_synthetic": {"arch": "resnet18", "weights": "none"}}
    torch.manual_seed(0)
    model = api.build_model(cfg, len(vocab) + extra_tokens(cfg["training"]), {"scales": {"conv5": [1, 1, 512]}},
                            backbones, cnn=True)
    start = {k: v.clone() for k, v in model.backbone.state_dict().items()}
    calls, scales, frozen = [], [], []
    at_epoch, loss_scale = model.at_epoch, model.loss_scale
    model.at_epoch = lambda epoch: calls.append(epoch) or at_epoch(epoch)

    def recorded(epoch, step, steps):
        scales.append((epoch, step, steps, loss_scale(epoch, step, steps)))
        frozen.append(not any(p.requires_grad for p in model.backbone.parameters()))
        return scales[-1][-1]

    model.loss_scale = recorded
    inp = TrainInputs(config=cfg, config_hash="0", seed=0, run_dir=tmp_path / "run", device=torch.device("cpu"),
                      vocab=vocab, train=split, dev=split, images_dir=tmp_path, crop=32, resize=32,
                      val_max_images=n_images, progress=False)
    result = train(model, inp)
    steps = len(captions) // 10 + 1                                   # num_loader_iter: 24 // 10 + 1
    assert calls == [0, 1]
    assert [s[:3] for s in scales] == [(e, i, steps) for e in (0, 1) for i in range(3)]
    assert [s[3] for s in scales] == [1.0] * 3 + [0.0, 1 / 3, 2 / 3]
    assert frozen == [True] * 3 + [False] * 3
    assert [h["stage"] for h in result["history"]] == ["train", "train"]
    assert any(not torch.equal(v, start[k]) for k, v in model.backbone.state_dict().items() if "running" not in k)
    assert all(torch.equal(v, start[k]) for k, v in model.backbone.state_dict().items() if "running" in k)
