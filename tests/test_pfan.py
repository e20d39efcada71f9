"""PFAN (Wang et al., IJCAI 2019) against its oracle (``tests/oracles/pfan.py``, written from
HaoYang0123/Position-Focused-Attention-Network's equations one region and one pair at a time):
the block rule, scores in float64 and float32, one training step's loss and gradients, blocked
scoring, the float64 evaluation, the recipe and the settings the schema refuses; the box files
(read only for PFAN, checked, one line naming the file) and the plan leaving out a PFAN row on a
dataset without them."""
import copy

import numpy as np
import pytest
import torch
import yaml

from methods.config import load_harness_config, load_yaml
from methods.data.inputs import IMAGE_INPUTS, REGIONS_WITH_BOXES, CachedRegionBoxes
from methods.data.region_boxes import check_region_boxes
from methods.errors import HarnessError
from methods.losses.weighted_sum import Loss
from methods.model_kinds import image_input_of
from methods.model_kinds.method_schema import validate_method
from methods.models.pfan import PFAN, position_blocks
from methods.models.text import GRUTextEncoder
from methods.plan import Plan, resolve_method_config
from methods.training.step import TrainingStep
from tests.conftest import REPO
from tests.oracles._float64 import EMBED, REGION_DIM, REGIONS, VOCAB, WORD_DIM, features
from tests.oracles.pfan import boxes, contrastive_loss, reference_pair, region_blocks, score_matrix
from tests.test_error_lines import error_line
from tests.test_texts_per_image import payload, write_regions

METHOD = REPO / "config" / "methods" / "pfan.yaml"
LENGTHS = (2, 5, 7, 3, 7, 4)   # two tokens at least, as the harness's <start> ... <end>; ties, padding
T2I = {"direction": "t2i", "aggregation": "avg", "lambda_softmax": 9.0}
SETTINGS = [(T2I, 16, 15, "attend"), ({"direction": "i2t", "aggregation": "avg", "lambda_softmax": 4.0}, 16, 15, "attend"),
            ({"direction": "t2i", "aggregation": "lse", "lambda_softmax": 9.0, "lambda_lse": 6.0}, 4, 5, "attend"),
            (T2I, 4, 5, "masked")]


def tiny(similarity=T2I, grid=16, region_blocks=15, padding_blocks="attend"):
    """A small float64 PFAN with random fc and fc_att biases (xavier_linear starts fc's at 0)."""
    torch.manual_seed(0)
    text = GRUTextEncoder(VOCAB, WORD_DIM, EMBED, bidirectional=True)
    model = PFAN(REGION_DIM, REGIONS, EMBED, text, similarity=similarity, grid=grid, region_blocks=region_blocks,
                 position_dim=6, padding_blocks=padding_blocks).double()
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for layer in (model.fc, model.fc_att):
            layer.bias.copy_(torch.rand(layer.bias.shape, generator=g, dtype=torch.float64) * 0.2 - 0.1)
    return model


def batch(lengths=LENGTHS, dtype=torch.float64):
    g = torch.Generator().manual_seed(1)
    tokens = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, n in enumerate(lengths):
        tokens[row, :n] = torch.randint(1, VOCAB, (n,), generator=g)
    images = {"regions": features(len(lengths), REGIONS, REGION_DIM).to(dtype), "boxes": boxes(len(lengths), REGIONS).to(dtype)}
    return {"features": images, "tokens": tokens, "lengths": torch.tensor(lengths),
            "positives": torch.eye(len(lengths), dtype=torch.bool)}


def model_scores(model, b):
    return model.score(model.encode_images(b), model.encode_texts(b))


# -- the blocks of a box ------------------------------------------------------------------------

def test_the_blocks_of_a_box_on_a_hand_worked_example():
    """A 4 x 4 grid (blocks of 0.25): the box (0.1, 0.3)-(0.6, 0.45) covers columns 0-2 and rows
    1; its overlaps are 0.15 x 0.15, 0.25 x 0.15, 0.1 x 0.15 (blocks 4, 5, 6), so the weights are
    0.3, 0.5, 0.2, the largest first; the other two of five slots pad (index 16, weight 0)."""
    index, weights = position_blocks(torch.tensor([[0.1, 0.3, 0.6, 0.45]], dtype=torch.float64), 4, 5)
    assert index.tolist() == [[5, 4, 6, 16, 16]]
    torch.testing.assert_close(weights, torch.tensor([[0.5, 0.3, 0.2, 0.0, 0.0]], dtype=torch.float64))
    # the whole image: 16 equal blocks, the five of the lowest indices kept at 1/5 each
    index, weights = position_blocks(torch.tensor([[0.0, 0.0, 1.0, 1.0]], dtype=torch.float64), 4, 5)
    assert index.tolist() == [[0, 1, 2, 3, 4]] and torch.allclose(weights, torch.full((1, 5), 0.2, dtype=torch.float64))


def test_the_blocks_equal_the_oracles_block_by_block_rule():
    b = boxes(4, 9).reshape(-1, 4)
    for grid, kept in ((16, 15), (4, 5), (3, 9)):
        index, weights = position_blocks(b, grid, kept)
        for row, box in enumerate(b):
            want_index, want_weights = region_blocks(box, grid, kept)
            assert index[row].tolist() == want_index
            torch.testing.assert_close(weights[row], torch.tensor(want_weights, dtype=torch.float64), rtol=0, atol=1e-15)
        # the released files' layout: weights sum to 1, descending, padding exactly where the weight is 0
        torch.testing.assert_close(weights.sum(-1), torch.ones(len(b), dtype=torch.float64))
        assert (weights[:, 1:] <= weights[:, :-1]).all() and ((index == grid * grid) == (weights == 0)).all()


# -- scores, a training step, blocks ------------------------------------------------------------

@pytest.mark.parametrize("similarity,grid,kept,padding", SETTINGS)
def test_scores_equal_the_per_pair_oracle(similarity, grid, kept, padding):
    model, b = tiny(similarity, grid, kept, padding).eval(), batch()
    with torch.no_grad():
        got, want = model_scores(model, b), score_matrix(model, b, b)
        got32 = model_scores(copy.deepcopy(model).float(), batch(dtype=torch.float32))
    assert got.dtype == torch.float64 and want.std() > 1e-3
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    assert got32.dtype == torch.float32
    torch.testing.assert_close(got32.double(), want, rtol=0, atol=1e-5)


def test_the_position_feature_and_the_padding_switch_matter():
    """Moving the boxes changes the scores; ``masked`` differs from the source's ``attend`` where
    a region has padding slots (the one-block box of the oracle's boxes)."""
    model, b = tiny().eval(), batch()
    moved = copy.deepcopy(b)
    moved["features"]["boxes"] = boxes(len(LENGTHS), REGIONS, seed=9)
    masked = copy.deepcopy(model)
    masked.padding_blocks = "masked"
    with torch.no_grad():
        base = model_scores(model, b)
        assert (model_scores(model, moved) - base).abs().max() > 1e-4
        assert (model_scores(masked, b) - base).abs().max() > 1e-6


@pytest.mark.parametrize("similarity", [T2I, {"direction": "i2t", "aggregation": "avg", "lambda_softmax": 4.0}])
def test_one_training_step_gives_the_sources_loss_and_gradients(similarity):
    """The recipe's loss on a batch (ContrastiveLoss, max_violation, margin 0.2) through the
    harness's training step, against the oracle's per-pair scores and loop loss: float64 to 1e-9,
    float32 to 1e-5 of the float64 values; every parameter (the block embeddings and fc_att too)."""
    loss_cfg = resolve_method_config(METHOD, "flickr")["loss"]
    model = tiny(similarity).train()
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
    names = []
    for (name, p), q, p32 in zip(model.named_parameters(), oracle_model.parameters(), model32.parameters()):
        assert p.grad is not None and float(p.grad.abs().sum()) > 0, name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-9, atol=1e-9, msg=lambda m: f"{name}: {m}")
        torch.testing.assert_close(p32.grad.double(), q.grad, rtol=1e-5, atol=1e-5, msg=lambda m: f"{name} fp32: {m}")
        names.append(name)
    assert {"position_embedding.weight", "fc_att.weight", "fc_att.bias", "fc.weight"} <= set(names)


@pytest.mark.parametrize("similarity", [T2I, {"direction": "i2t", "aggregation": "avg", "lambda_softmax": 4.0}])
def test_blocked_and_packed_scoring_equal_all_pairs(similarity):
    model, b = tiny(similarity).eval(), batch()
    with torch.no_grad():
        img, txt = model.encode_images(b), model.encode_texts(b)
        whole = model.score(img, txt)
        model.block_elements = model.pair_elements(3)   # one caption per block, padded to its own length
        blocked, packed = model.score_matrix(img, txt), model.score_matrix(img, txt.packed())
    torch.testing.assert_close(blocked, whole, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(packed, blocked, rtol=0, atol=0)


def test_a_float32_model_evaluates_in_float64_as_its_source():
    model = tiny().float().eval()
    b = batch(dtype=torch.float32)
    with torch.no_grad():
        img, txt = model.encode_images(b), model.encode_texts(b)
        model.evaluation_dtype = "float64"
        source = model.score_matrix(img, txt)
        model.evaluation_dtype = "model"
        own = model.score_matrix(img, txt)
        want = torch.stack([torch.stack([reference_pair(img.regions[i].double(), txt.words[c, :n].double(), "t2i", "avg", 9.0)
                                         for c, n in enumerate(LENGTHS)]) for i in range(len(LENGTHS))])
    assert source.dtype == torch.float64 and own.dtype == torch.float32
    torch.testing.assert_close(source, want, rtol=1e-12, atol=1e-12)


def test_features_without_boxes_are_refused():
    model, b = tiny().eval(), batch()
    with pytest.raises(HarnessError, match="PFAN reads each region's box"):
        model.encode_images({"features": b["features"]["regions"]})


# -- config ---------------------------------------------------------------------------------------

def method_config() -> dict:
    return {"method": "pfan", **copy.deepcopy(load_yaml(METHOD)["base"])}


@pytest.mark.parametrize("key,value,message", [
    ("grid", 0, r"model\.grid: 0 is less than the minimum of 1"),
    ("region_blocks", 1.5, r"model\.region_blocks: 1\.5 is not of type 'integer'"),
    ("padding_blocks", "drop", r"model\.padding_blocks: 'drop' is not one of \['attend', 'masked'\]"),
    ("evaluation_dtype", "float16", r"model\.evaluation_dtype: 'float16' is not one of"),
    ("focal", "equal", r"Additional properties are not allowed \('focal'"),   # BFAN's, not PFAN's
])
def test_the_schema_refuses_bad_settings(key, value, message):
    cfg = method_config()
    validate_method(cfg, "pfan.yaml")
    cfg["model"][key] = value
    with pytest.raises(HarnessError, match=message):
        validate_method(cfg, "x.yaml")
    cfg = method_config()
    del cfg["model"]["similarity"]
    with pytest.raises(HarnessError, match=r"'similarity' is a required property"):
        validate_method(cfg, "x.yaml")


def test_the_constructor_refuses_bad_settings():
    text = GRUTextEncoder(VOCAB, WORD_DIM, EMBED, bidirectional=True)
    for kwargs, message in [({"grid": 2, "region_blocks": 5}, "exceeds"), ({"padding_blocks": "drop"}, "padding_blocks"),
                            ({"similarity": {**T2I, "lambda_softmax": -1.0}}, "lambda_softmax")]:
        with pytest.raises(ValueError, match=message):
            PFAN(REGION_DIM, REGIONS, EMBED, text, **{"similarity": T2I, **kwargs})


def test_the_recipe_is_the_readme_arguments():
    flickr, coco = resolve_method_config(METHOD, "flickr"), resolve_method_config(METHOD, "coco")
    i2t = resolve_method_config(METHOD, "coco", variants=["i2t"])
    for cfg in (flickr, coco):
        model, tr = cfg["model"], cfg["training"]
        assert model["similarity"] == T2I and (model["grid"], model["region_blocks"], model["position_dim"]) == (16, 15, 200)
        assert (model["embed_dim"], model["padding_blocks"], model["evaluation_dtype"]) == (1024, "attend", "float64")
        assert cfg["loss"] == {"kind": "triplet_hardest", "margin": 0.2}
        assert (tr["batch_size"], tr["optimizer"], tr["grad_clip"], tr["amp"]) == (128, "adam", 2.0, False)
    assert [(s["epochs"], s["lr"], s["schedule"]["decay_epochs"]) for s in flickr["training"]["stages"]] == [(30, 2e-4, [15])]
    assert [(s["epochs"], s["lr"], s["schedule"]["decay_epochs"]) for s in coco["training"]["stages"]] == [(30, 5e-4, [15])]
    assert i2t["model"]["similarity"] == {"direction": "i2t", "aggregation": "avg", "lambda_softmax": 4.0}
    assert i2t["training"] == coco["training"]


# -- the box files --------------------------------------------------------------------------------

PFAN_CFG = {"kind": "pfan"}


def write_boxes(tmp_path, split, array):
    np.save(tmp_path / f"{split}_boxes.npy", array)


def good_boxes(n, regions=3):
    rng = np.random.default_rng(0)
    low = rng.uniform(0, 0.5, (n, regions, 2))
    return np.concatenate([low, low + rng.uniform(0.05, 0.5, (n, regions, 2))], axis=-1).astype(np.float32)


def test_box_files_are_read_only_for_a_model_that_reads_boxes(tmp_path):
    write_regions(tmp_path, "train", 4)
    write_boxes(tmp_path, "train", good_boxes(4))
    regions, plain = image_input_of(PFAN_CFG), image_input_of({"kind": "scan"})
    assert regions is REGIONS_WITH_BOXES and plain is IMAGE_INPUTS.get("regions") and regions.name == plain.name
    assert regions.files("d", "train", PFAN_CFG) == ["d/train_ims.npy", "d/train_caps.txt", "d/train_boxes.npy"]
    assert plain.files("d", "train", {"kind": "scan"}) == ["d/train_ims.npy", "d/train_caps.txt"]
    data = regions.load(payload(tmp_path), "train", tmp_path, PFAN_CFG)
    assert isinstance(data.features, CachedRegionBoxes) and isinstance(data.features.boxes, np.memmap)
    taken, block = data.features.take(np.array([2, 0])), data.features.block(1, 3)
    assert taken["regions"].shape == (2, 3, 2) and np.array_equal(taken["boxes"], good_boxes(4)[[2, 0]])
    assert np.array_equal(block["boxes"], good_boxes(4)[1:3]) and block["regions"].shape == (2, 3, 2)
    assert not isinstance(plain.load(payload(tmp_path), "train", tmp_path, {"kind": "scan"}).features, CachedRegionBoxes)


def test_synthetic_boxes_in_pixels_are_read_as_fractions_of_the_image(tmp_path):
    write_regions(tmp_path, "train", 4)
    write_boxes(tmp_path, "train", good_boxes(4) * 64)
    synthetic = payload(tmp_path, kind="synthetic", generator={"image_size": 64})
    data = REGIONS_WITH_BOXES.load(synthetic, "train", tmp_path, PFAN_CFG)
    np.testing.assert_allclose(data.features.take(np.arange(4))["boxes"], good_boxes(4), rtol=1e-6)


def bad_box_files():
    nan, outside, flipped = good_boxes(4), good_boxes(4), good_boxes(4)
    nan[2, 1, 0] = np.nan
    outside[1, 0, 2] = 1.5
    flipped[3, 2] = [0.6, 0.1, 0.2, 0.3]
    return [(good_boxes(3), "shape (3, 3, 4)"), (good_boxes(4)[..., :2], "shape (4, 3, 2)"),
            (good_boxes(4).astype(np.int64), "dtype int64"), (nan, "1 of 4 rows hold NaN or inf boxes (first: row 2)"),
            (outside, "(first: row 1)"), (flipped, "(first: row 3)")]


@pytest.mark.parametrize("bad,message", bad_box_files())
def test_a_bad_box_file_is_a_one_line_error_naming_it(tmp_path, bad, message):
    write_regions(tmp_path, "train", 4)
    write_boxes(tmp_path, "train", bad)
    line = error_line(REGIONS_WITH_BOXES.load, payload(tmp_path), "train", tmp_path, PFAN_CFG)
    assert line.startswith(f"{tmp_path / 'train_boxes.npy'}: ") and message in line


def test_a_missing_box_file_is_a_one_line_error_naming_it(tmp_path):
    write_regions(tmp_path, "train", 4)
    line = error_line(REGIONS_WITH_BOXES.load, payload(tmp_path), "train", tmp_path, PFAN_CFG)
    assert f"region box file not found: {tmp_path / 'train_boxes.npy'}" in line
    line = error_line(check_region_boxes, tmp_path / "train_boxes.npy", 4, 3)
    assert "x0, y0, x1, y1 as fractions" in line


def pfan_paper(tmp_path) -> str:
    paper = {"paper": "Harness test: PFAN on box positions", "key": "pfan_test",
             "methods": {"pfan": str(METHOD), "scan": str(REPO / "config" / "methods" / "scan.yaml")},
             "tables": {"pfantest": {"title": "PFAN beside SCAN", "datasets": ["flickr"], "rows": [
                 {"id": "scan", "label": "SCAN t-i", "method": "scan", "seeds": [0]},
                 {"id": "pfan", "label": "PFAN t-i", "method": "pfan", "seeds": [0]}]}}}
    (tmp_path / "paper.yaml").write_text(yaml.safe_dump(paper))
    return str(tmp_path / "paper.yaml")


def test_a_pfan_row_without_box_files_is_left_out_naming_the_key_and_files(tmp_path):
    precomp = tmp_path / "f30k_precomp"
    precomp.mkdir()
    overrides = {"papers": [pfan_paper(tmp_path)], "datasets": {"flickr": {"precomp_dir": str(precomp)}}}
    plan = Plan(load_harness_config(REPO / "config" / "config.yaml", overrides))
    assert [r.id for r in plan.table("pfantest", "flickr").rows] == ["scan"]
    (left,) = plan.table_spec("pfantest", "flickr").unconfigured
    assert left["id"] == "pfan" and left["needs"] == "each region's box"
    assert left["keys"] == ["datasets.flickr.precomp_dir (missing there: train_boxes.npy, dev_boxes.npy, "
                            "test_boxes.npy, docs/real-data.md)"]
    for split in ("train", "dev", "test"):   # with its files, the row is planned
        (precomp / f"{split}_boxes.npy").write_bytes(b"")
    plan = Plan(load_harness_config(REPO / "config" / "config.yaml", overrides))
    assert [r.id for r in plan.table("pfantest", "flickr").rows] == ["scan", "pfan"]
    assert not plan.table_spec("pfantest", "flickr").unconfigured
