"""The set-embedding model with a BERT text encoder (the ResNeXt-101 + BERT rows of Kim, Kim,
Kwak, CVPR 2023), against kdwonn/DivE's equations: model_spm.py EncoderTextBERT.forward
(``local = linear(bert(x, x != 0)[0])``, ``global = variable_len_pooling(local, lengths, 'max')``
or ``local[:, 0]`` for ``--txt_pooling cls``, no dropout, the set module over ``local``), train.py
``warmup`` (``--warm_img``: the CNN's requires_grad off for the first ``--warm_epoch`` epochs, its
parameters in the optimizer throughout) and param_groups, and data.py get_image_transform's
``--gpo_aug`` crops (torchvision's RandomResizedCrop(512, scale=(0.36, 1)) and flip)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from methods import api
from methods.config import load_harness_config
from methods.errors import HarnessError
from methods.features.image_transforms import SquashImages
from methods.plan import Plan
from tests.conftest import REPO
from tests.test_bert_text import PIECES, bert_folder

EMBED = 64


def bert_set_model(tmp_path, overrides=None, cnn=True):
    folder, _ = bert_folder(tmp_path / "bert", hidden=16,
                            config_changes={"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0})
    cfg = api.experiment_config("set_embeddings_grid_bert", "synthetic", overrides=overrides or {})
    cfg["model"]["text"]["encoder"] = "tiny"
    random_cnn = {"resnet18_synthetic": {"arch": "resnet18", "weights": "none"}}   # no pre-trained file needed
    return api.build_model(cfg, len(PIECES), {"scales": {"conv5": [2, 2, 512]}}, random_cnn, cnn=cnn,
                           text_encoders={"tiny": {"kind": "bert", "path": str(folder)}})


def captions(seed=0):
    """Three captions of 6, 4 and 3 tokens ([CLS] ... [SEP]), 0-padded."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([6, 4, 3])
    tokens = torch.zeros(3, 6, dtype=torch.long)
    for i, n in enumerate(lengths.tolist()):
        tokens[i, 0], tokens[i, n - 1] = 2, 3
        tokens[i, 1:n - 1] = torch.randint(5, len(PIECES), (n - 2,), generator=gen)
    return tokens, lengths


def dive_text_inputs(model, tokens, lengths, pooling):
    """EncoderTextBERT.forward up to the set module, from its equations: the BERT's last hidden
    states under the mask x != 0, the linear layer written out, and the max pooled per caption
    over its first ``length`` tokens (variable_len_pooling) or the first token (cls)."""
    hidden = model.text.bert(tokens, attention_mask=(tokens != 0).float())[0]
    local = hidden @ model.text.linear.weight.T + model.text.linear.bias
    if pooling == "max":
        glob = torch.stack([local[i, :n].max(dim=0).values for i, n in enumerate(lengths.tolist())])
    else:
        glob = local[:, 0]
    return local, glob


@pytest.mark.parametrize("text_global,pooling", [("max_tokens", "max"), ("first_token", "cls")])
def test_the_text_sets_are_dives_bert_locals_and_pooled_global(tmp_path, text_global, pooling):
    model = bert_set_model(tmp_path, {"model.text_global": text_global})
    tokens, lengths = captions()
    seen = {}
    hook = model.text_set.register_forward_hook(
        lambda module, args, output: seen.update(local=args[0], glob=args[1], lengths=args[2]))
    model.train()   # in training too: EncoderTextBERT applies no dropout to either feature
    model.encode_texts({"tokens": tokens, "lengths": lengths})
    hook.remove()
    with torch.no_grad():
        local, glob = dive_text_inputs(model, tokens, lengths, pooling)
    torch.testing.assert_close(seen["local"], local, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(seen["glob"], glob, rtol=1e-5, atol=1e-6)
    assert seen["lengths"].tolist() == lengths.tolist()
    model.eval()
    with torch.no_grad():
        sets = model.encode_texts({"tokens": tokens, "lengths": lengths})
        elements, _, _ = model.text_set(local, glob, lengths)
    assert sets.shape == (3, 4, EMBED)
    torch.testing.assert_close(sets, F.normalize(elements, dim=-1), rtol=1e-5, atol=1e-6)


def test_with_masked_padding_a_captions_padding_changes_nothing(tmp_path):
    """Tokens past a caption's length are masked in BERT, the pooling and (``padding: masked``)
    the slot module: extra padding leaves every set. (DivE's padding leak, the default, reads
    the padded positions and scales the sine positions by the padded length.)"""
    model = bert_set_model(tmp_path, {"model.set_module.padding": "masked"}).eval()
    tokens, lengths = captions()
    padded = torch.cat([tokens, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    with torch.no_grad():
        a = model.encode_texts({"tokens": tokens, "lengths": lengths})
        b = model.encode_texts({"tokens": padded, "lengths": lengths})
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("overrides,message", [
    ({"model.text_global": "average_final"}, "BERT text encoder's global feature is one of"),
    ({"model.text.out_dim": 32}, "text.out_dim 32 is not embed_dim 64"),
    ({"model.set_module": {"kind": "pie"}}, "a BERT text encoder takes set_module.kind slot"),
])
def test_a_bert_text_block_that_dive_cannot_build_is_refused(tmp_path, overrides, message):
    with pytest.raises((ValueError, HarnessError), match=message):
        bert_set_model(tmp_path, overrides)


def test_a_gru_set_model_refuses_a_bert_pooling():
    cfg = api.experiment_config("set_embeddings_grid", "synthetic", overrides={"model.text_global": "max_tokens"})
    with pytest.raises(ValueError, match="pools a BERT's tokens"):
        api.build_model(cfg, 20, {"scales": {"conv5": [2, 2, 512]}},
                        {"resnet18_synthetic": {"arch": "resnet18", "weights": "none"}}, cnn=False)


def test_the_cnn_is_frozen_in_its_first_epoch_but_held_by_the_optimizer(tmp_path):
    model = bert_set_model(tmp_path, {"model.lr_scale": {"image": 0.1, "text_set": 0.2, "backbone": 0.01},
                                      "model.text.lr_factor": 0.5})
    model.set_finetune(True)
    model.at_epoch(0)
    assert not any(p.requires_grad for p in model.backbone.parameters())
    groups = {}
    for params, scale in model.parameter_groups():
        groups.setdefault(scale, set()).update(id(p) for p in params)
    ids = lambda module: {id(p) for p in module.parameters()}   # noqa: E731
    assert groups[0.01] == ids(model.backbone)            # frozen, yet in the optimizer (train.py warmup)
    assert groups[0.1] == ids(model.region) | ids(model.image_set)
    assert groups[0.2] == ids(model.text_set)
    assert groups[0.5] == ids(model.text.bert)             # DivE: --txt_lr_scale for the whole text encoder
    assert groups[1.0] == ids(model.text.linear)
    optimizer = torch.optim.AdamW([{"params": [p for p in model.parameters() if id(p) in groups[0.01]]}], lr=1.0)
    before = [p.detach().clone() for p in model.backbone.parameters()]
    images = torch.randn(2, 3, 64, 64)
    model.train()
    model.encode_images({"images": images})["sets"].sum().backward()
    optimizer.step()   # AdamW skips parameters without a gradient: no decay while frozen
    assert all(torch.equal(a, p) for a, p in zip(before, model.backbone.parameters()))
    model.at_epoch(1)
    assert all(p.requires_grad for p in model.backbone.parameters())


def test_gpo_aug_crops_are_torchvisions_random_resized_crop_and_flip():
    """The same torch draws give torchvision's RandomResizedCrop(64, scale=(0.36, 1)) box and
    RandomHorizontalFlip, then PIL's antialiased resize (within its 8-bit rounding)."""
    from PIL import Image
    from torchvision import transforms

    ys, xs = np.mgrid[0:90, 0:120]
    pixels = np.stack([xs * 2, ys * 2.5, (xs + ys) % 97 * 2.5], axis=-1).clip(0, 255).astype(np.uint8)
    img = Image.fromarray(pixels)
    dive = transforms.Compose([transforms.RandomResizedCrop(64, scale=(0.36, 1)), transforms.RandomHorizontalFlip(),
                               transforms.ToTensor(),
                               transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])
    ours = SquashImages(64, "imagenet", "random_resized_crop_flip_36", antialias=True)
    flips = set()
    for seed in range(12):
        torch.manual_seed(seed)
        expected = dive(img)
        torch.manual_seed(seed)
        got = ours(img)
        torch.manual_seed(seed)
        transforms.RandomResizedCrop.get_params(img, (0.36, 1), (3 / 4, 4 / 3))
        flips.add(bool(torch.rand(1) < 0.5))
        assert (got - expected).abs().max() < 2.5 / 255 / 0.224, seed   # PIL rounds to 8 bits
    assert flips == {True, False}


def test_the_resnext_bert_rows_are_left_out_naming_both_keys_then_run_the_appendix_recipe():
    papers = {"papers": ["methods/papers/set_embeddings.yaml"]}
    plan = Plan(load_harness_config(REPO / "config" / "config.yaml", papers))
    for table, dataset in (("set_embeddings_t1", "coco"), ("set_embeddings_t2", "flickr")):
        left_out = {r["id"]: r for r in plan.table_spec(table, dataset).unconfigured}
        for row in ("ours_resnext_bert", "ours_resnext_bert_ensemble"):
            assert left_out[row]["keys"] == ["text_encoders.bert_base_uncased.path", "backbones.resnext101_wsl.weights"]
    both = {**papers, "text_encoders": {"bert_base_uncased": {"kind": "bert", "path": "/data/bert-base-uncased"}},
            "backbones": {"resnext101_wsl": {"arch": "resnext101_32x8d", "optional": True,
                                             "weights": "/data/ig_resnext101_32x8-c38310e5.pth"}}}
    plan = Plan(load_harness_config(REPO / "config" / "config.yaml", both))
    for table, dataset in (("set_embeddings_t1", "coco"), ("set_embeddings_t2", "flickr")):
        rows = {r.id: r for r in plan.table(table, dataset).rows}
        single, ensemble = rows["ours_resnext_bert"], rows["ours_resnext_bert_ensemble"]
        assert ensemble.ensemble_size == 2 and set(ensemble.members) == set(single.members)
        exp = plan.experiment(dataset, single.members[0])
        assert exp.method == "set_embeddings_grid_bert" and exp.finetunes
        assert plan.text_vocabulary(dataset, single.members[0]) == f"results/{dataset}/text/bert_base_uncased.json"
        assert "512×512 px, CNN fine-tuned (lr x0.01, frozen in epoch 1)" in single.ran
        assert "BERT bert_base_uncased -> 1024 (lr x1)" in single.ran and "text global max_tokens" in single.ran
    # the block's claims (Section 4.4): ours over VSE-infinity, and the ensemble over the best record,
    # tested once both rows run (until then left out of the claims, as their rows are of the tables)
    for dataset in ("coco", "flickr"):
        claims = {c["id"]: (c["left"], c["right"]) for c in plan.claims_spec("set_embeddings", dataset).to_json()["claims"]}
        assert claims[f"beats_vse_infinity_resnext_bert_{dataset}"] == (["ours_resnext_bert"], ["vse_infinity_resnext_bert"])
        assert claims[f"ensemble_beats_the_best_record_{dataset}"] == (["ours_resnext_bert_ensemble"],
                                                                       ["vse_infinity_resnext_bert_ensemble"])
    unset = Plan(load_harness_config(REPO / "config" / "config.yaml", papers)).claims_spec("set_embeddings", "coco")
    assert not any("resnext" in c["id"] or "record" in c["id"] for c in unset.to_json()["claims"])
    cfg = api.experiment_config("set_embeddings_grid_bert", "coco", harness=load_harness_config(
        REPO / "config" / "config.yaml", both))
    # the appendix: 50 epochs from 1e-4, decayed every 20 (factor lost: 0.5), 128 images per batch
    stage = cfg["training"]["stages"][0]
    assert (stage["epochs"], stage["lr"], stage["schedule"]["decay_epochs"]) == (50, 1.0e-4, [20, 40])
    assert cfg["training"]["batching"] == "images" and cfg["training"]["batch_size"] == 128
    assert cfg["loss"]["terms"][0]["warmup_sum_epochs"] == 1 and cfg["model"]["backbone_bn"] == "frozen"
