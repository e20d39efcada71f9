"""SCAN's similarity and the MVSA model: block scores against a per-pair transcription of SCAN's
public code, LSE in fp16, the non-local ASA block's identity start, the scale fusion, and each
config switch building the model it names."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from methods.errors import HarnessError
from methods.features.backbone import ResNetBackbone
from methods.models import BuildContext, build_model
from methods.models.cross_attention import RegionFeatures, WordFeatures, score_in_blocks
from methods.models.mvsa import MVSA, AdaptiveSelfAttention
from methods.models.scan import SCAN
from methods.models.scan_similarity import aggregate_alignments, scan_scores
from methods.models.text import GRUTextEncoder

SETTINGS = [("t2i", "avg", 9.0, None), ("t2i", "lse", 9.0, 6.0), ("i2t", "avg", 4.0, None), ("i2t", "lse", 4.0, 20.0)]


def scan_similarity(direction="t2i", aggregation="avg", lambda_softmax=9.0, lambda_lse=None) -> dict:
    """A SCAN ``similarity`` config block (lambda_lse left out when None)."""
    return {"direction": direction, "aggregation": aggregation, "lambda_softmax": lambda_softmax,
            **({} if lambda_lse is None else {"lambda_lse": lambda_lse})}


# -- a per-pair transcription of kuanghuei/SCAN model.py (func_attention, xattn_score_*) -------------
def scan_l2norm(x: torch.Tensor, dim: int) -> torch.Tensor:
    return x / (x.pow(2).sum(dim=dim, keepdim=True).sqrt() + 1e-8)


def scan_cosine(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    return (x1 * x2).sum(-1) / (x1.norm(dim=-1) * x2.norm(dim=-1)).clamp(min=1e-8)


def func_attention(query: torch.Tensor, context: torch.Tensor, smooth: float) -> torch.Tensor:
    """query (Q, D), context (S, D) -> the attended context per query (Q, D), clipped_l2norm."""
    attn = context @ query.t()                         # (S, Q)
    attn = scan_l2norm(F.leaky_relu(attn, 0.1), dim=1)  # over the query axis
    attn = torch.softmax(attn.t() * smooth, dim=1)     # (Q, S), over the context
    return attn @ context


def reference_pair(instances, words, direction, aggregation, lambda_softmax, lambda_lse) -> float:
    if direction == "t2i":
        row = scan_cosine(words, func_attention(words, instances, lambda_softmax))
    else:
        row = scan_cosine(instances, func_attention(instances, words, lambda_softmax))
    if aggregation == "lse":
        return float(torch.log(torch.exp(row * lambda_lse).sum()) / lambda_lse)   # SCAN's plain exp/log
    return float(row.mean())


def unit(*shape, generator):
    return F.normalize(torch.randn(*shape, generator=generator, dtype=torch.float64), dim=-1)


def features(n_img=7, n_regions=5, n_cap=9, max_len=11, dim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    regions = unit(n_img, n_regions, dim, generator=g)
    lengths = torch.randint(2, max_len, (n_cap,), generator=g)
    lengths[0], lengths[1] = 1, max_len                 # the shortest and the longest caption
    words = unit(n_cap, max_len, dim, generator=g)
    words = words * (torch.arange(max_len)[None, :] < lengths[:, None])[..., None]
    empty = torch.zeros(n_img, 0, dtype=torch.float64)
    return RegionFeatures(regions, empty), WordFeatures(words, lengths, torch.zeros(n_cap, 0, dtype=torch.float64))


@pytest.mark.parametrize("direction,aggregation,lambda_softmax,lambda_lse", SETTINGS)
def test_block_scores_equal_scans_per_pair_scores(direction, aggregation, lambda_softmax, lambda_lse):
    img, cap = features()

    def pair_scores(i, c):
        return scan_scores(i.regions, c.words, c.mask, direction, aggregation, lambda_softmax, lambda_lse)

    # a small budget and image block: several caption blocks (of different lengths) and image blocks
    got = score_in_blocks(pair_scores, img, cap, lambda length: 5 * 5 * length, budget=300, image_block=3)
    want = torch.tensor([[reference_pair(img.regions[i], cap.words[c, :int(cap.lengths[c])], direction, aggregation,
                                         lambda_softmax, lambda_lse)
                          for c in range(len(cap))] for i in range(len(img))], dtype=torch.float64)
    assert torch.allclose(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("direction,aggregation,lambda_softmax,lambda_lse", SETTINGS)
def test_scan_model_scores_its_encodings_blockwise_as_per_pair(direction, aggregation, lambda_softmax, lambda_lse):
    torch.manual_seed(0)
    text = GRUTextEncoder(30, 8, 12, bidirectional=True)
    model = SCAN(20, 6, 12, text, scan_similarity(direction, aggregation, lambda_softmax, lambda_lse)).eval()
    model.block_elements = 200   # many blocks
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor([1, 9, 4, 9, 2, 7])
    tokens = torch.randint(4, 30, (6, 9), generator=g) * (torch.arange(9)[None, :] < lengths[:, None])
    with torch.no_grad():
        img = model.encode_images({"features": torch.randn(4, 6, 20, generator=g)})
        cap = model.encode_texts({"tokens": tokens, "lengths": lengths})
        got = model.score_matrix(img, cap)
    want = torch.tensor([[reference_pair(img.regions[i].double(), cap.words[c, :int(lengths[c])].double(), direction,
                                         aggregation, lambda_softmax, lambda_lse) for c in range(6)] for i in range(4)],
                        dtype=torch.float64)
    assert got.dtype == torch.float32 and torch.allclose(got.double(), want, atol=1e-5, rtol=0)


def test_lse_is_finite_and_exact_for_fp16_alignments():
    # alignments near 1 with lambda_lse 20: exp(20) = 4.9e8 overflows fp16 (max 65504)
    r = torch.tensor([[[0.99, 0.97, 0.5, 0.98]]], dtype=torch.float16)
    mask = torch.ones(1, 4, dtype=torch.bool)
    assert torch.isinf(torch.exp(20 * r).sum())           # SCAN's plain exp/log in fp16 overflows
    got = aggregate_alignments(r, mask, "lse", 20.0)
    r64 = r.double()
    want = torch.log(torch.exp(20 * r64).sum(-1)) / 20
    assert got.dtype == torch.float32 and torch.isfinite(got).all()
    assert torch.allclose(got.double(), want, atol=1e-6)


@pytest.mark.parametrize("direction", ["t2i", "i2t"])
def test_lse_scores_of_fp16_features_match_float64(direction):
    img, cap = features(seed=3)
    want = scan_scores(img.regions, cap.words, cap.mask, direction, "lse", 9.0, 20.0)
    got = scan_scores(img.regions.half(), cap.words.half(), cap.mask, direction, "lse", 9.0, 20.0)
    assert torch.isfinite(got).all() and got.dtype == torch.float32
    assert torch.allclose(got.double(), want, atol=5e-3)   # fp16 inputs: 3 significant digits


def test_padded_words_do_not_change_a_captions_score():
    img, cap = features(seed=4)
    for direction in ("t2i", "i2t"):
        padded = scan_scores(img.regions, cap.words, cap.mask, direction, "lse", 5.0, 6.0)
        longer = WordFeatures(F.pad(cap.words, (0, 0, 0, 3)), cap.lengths, cap.glob)
        assert torch.allclose(scan_scores(img.regions, longer.words, longer.mask, direction, "lse", 5.0, 6.0), padded)


# -- MVSA ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("batchnorm", [True, False])
def test_asa_block_starts_as_the_identity_and_can_learn(batchnorm):
    torch.manual_seed(0)
    block = AdaptiveSelfAttention(32, 16, batchnorm)
    x = torch.randn(4, 10, 32)
    for mode in (True, False):
        block.train(mode)
        assert torch.equal(block(x), x)
    block.train()
    block(x).pow(2).sum().backward()
    last = block.bn if batchnorm else block.out
    assert last.weight.grad.abs().sum() > 0     # the zero-initialised layer gets a gradient: it does not stay identity
    # the attention itself is a proper softmax over candidates from the start
    a = block.attention(x)
    assert a.shape == (4, 10, 10) and torch.allclose(a.sum(-1), torch.ones(4, 10))
    if batchnorm:  # Wang et al.'s initialisation: 1x1 layers Gaussian with std 0.01, BatchNorm scale/shift 0
        assert abs(float(block.theta.weight.detach().std()) - 0.01) < 0.002
        assert torch.equal(block.bn.weight, torch.zeros(32)) and torch.equal(block.bn.bias, torch.zeros(32))


PAPER_SHAPES = {"conv3": [28, 28, 128], "conv4": [14, 14, 256], "conv5": [7, 7, 512]}   # ResNet-18 channels at 224 px


def mvsa_cfg(**changes):
    cfg = {"kind": "mvsa", "backbone": "r18", "backbone_bn": "frozen", "grid_scales": ["conv4", "conv5"],
           "fusion_pooling": "max", "candidate_dim": 24, "embed_dim": 16,
           "asa": {"blocks": 1, "inter_dim": 8, "batchnorm": True},
           "similarity": {"direction": "t2i", "aggregation": "avg", "lambda_softmax": 9.0},
           "text": {"word_dim": 8, "hidden_dim": 16, "num_layers": 1, "bidirectional": True, "word_init": "random"}}
    for key, value in changes.items():
        cfg[key] = value
    return cfg


def build_mvsa(seed=0, shapes=PAPER_SHAPES, **changes) -> MVSA:
    torch.manual_seed(seed)
    ctx = BuildContext(20, {"scales": shapes}, {"r18": {"arch": "resnet18", "weights": "none"}})
    return build_model(mvsa_cfg(**changes), ctx).eval()


def grids(n=2, shapes=PAPER_SHAPES, seed=1):
    g = torch.Generator().manual_seed(seed)
    return {s: torch.randn(n, *shape, generator=g) for s, shape in shapes.items()}


@pytest.mark.parametrize("scales,pooling,instances", [(["conv4"], None, 196), (["conv5"], None, 49),
                                                      (["conv4", "conv5"], "max", 98), (["conv4", "conv5"], "avg", 98),
                                                      (["conv3", "conv4", "conv5"], "max", 147)])
def test_scales_and_fusion_give_the_papers_candidate_counts(scales, pooling, instances):
    model = build_mvsa(grid_scales=scales, fusion_pooling=pooling)
    with torch.no_grad():
        img = model.encode_images({"features": grids()})
    assert img.regions.shape == (2, instances, 16) and model.n_instances == instances
    assert torch.allclose(img.regions.norm(dim=-1), torch.ones(2, instances))


@pytest.mark.parametrize("pooling", ["max", "avg"])
def test_fusion_pools_the_finer_instance_maps_over_2x2_cells(pooling):
    model = build_mvsa(fusion_pooling=pooling)
    with torch.no_grad():
        maps = model.instance_maps({"features": grids()})
        fused = model.fuse(maps)
    fine = maps["conv4"].reshape(2, 7, 2, 7, 2, 16)          # (B, 7, 2, 7, 2, D): 2x2 cells of the 14x14 map
    pooled = fine.amax(dim=(2, 4)) if pooling == "max" else fine.mean(dim=(2, 4))
    assert torch.allclose(fused[:, :49], pooled.reshape(2, 49, 16), atol=1e-6)
    assert torch.equal(fused[:, 49:], maps["conv5"].reshape(2, 49, 16))


def test_each_switch_changes_the_model_as_named():
    base = build_mvsa()
    assert [len(b.asa) for b in base.branches.values()] == [1, 1]
    assert [len(b.asa) for b in build_mvsa(asa={"blocks": 0, "inter_dim": 8, "batchnorm": True}).branches.values()] == [0, 0]
    assert build_mvsa(asa={"blocks": 2, "inter_dim": 8, "batchnorm": False}).branches["conv5"].asa[1].bn is None
    assert build_mvsa(asa={"blocks": 1, "inter_dim": 5, "batchnorm": True}).branches["conv4"].asa[0].theta.out_features == 5
    assert base.branches["conv4"].project.in_features == 256 and base.branches["conv5"].project.in_features == 512
    assert base.branches["conv4"].project.out_features == 24 and base.branches["conv4"].instance.out_features == 16
    # the similarity switches reach the scorer: same weights (same seed), scores as SCAN computes them
    batch = {"features": grids()}
    g = torch.Generator().manual_seed(2)
    lengths = torch.tensor([3, 5, 1])
    tokens = torch.randint(4, 20, (3, 5), generator=g) * (torch.arange(5)[None, :] < lengths[:, None])
    scores = {}
    for direction, aggregation, lambda_softmax, lambda_lse in SETTINGS:
        sim = {"direction": direction, "aggregation": aggregation, "lambda_softmax": lambda_softmax}
        if lambda_lse is not None:
            sim["lambda_lse"] = lambda_lse
        model = build_mvsa(similarity=sim)
        with torch.no_grad():
            img, cap = model.encode_images(batch), model.encode_texts({"tokens": tokens, "lengths": lengths})
            got = model.score_matrix(img, cap)
        want = torch.tensor([[reference_pair(img.regions[i].double(), cap.words[c, :int(lengths[c])].double(),
                                             direction, aggregation, lambda_softmax, lambda_lse) for c in range(3)]
                             for i in range(2)], dtype=torch.float64)
        assert torch.allclose(got.double(), want, atol=1e-5)
        scores[direction, aggregation] = got
    assert len({tuple(s.flatten().tolist()) for s in scores.values()}) == 4


def test_misconfigured_switches_are_refused():
    with pytest.raises(ValueError, match="no effect on one scale"):
        build_mvsa(grid_scales=["conv5"], fusion_pooling="max")
    with pytest.raises(ValueError, match="needs fusion_pooling"):
        build_mvsa(fusion_pooling=None)
    with pytest.raises(ValueError, match="no effect on AVG"):
        build_mvsa(similarity={"direction": "t2i", "aggregation": "avg", "lambda_softmax": 9.0, "lambda_lse": 6.0})
    with pytest.raises(ValueError, match="channels"):
        build_mvsa(shapes={"conv4": [14, 14, 1024], "conv5": [7, 7, 2048]})   # ResNet-152 maps, ResNet-18 model
    with pytest.raises(ValueError, match="pool evenly"):
        build_mvsa(shapes={"conv4": [13, 13, 256], "conv5": [7, 7, 512]})


def test_finetuning_runs_the_cnn_to_the_same_maps_as_the_cache():
    model = build_mvsa(shapes={"conv4": [4, 4, 256], "conv5": [2, 2, 512]})
    images = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        maps = model.backbone(images, ("conv4", "conv5"))
        cached = {s: m.permute(0, 2, 3, 1) for s, m in maps.items()}
        from_cache = model.encode_images({"features": cached})
        from_cnn = model.encode_images({"images": images})
    assert torch.allclose(from_cache.regions, from_cnn.regions, atol=1e-6)
    # the CNN trains only in the fine-tune stage, its BatchNorm stays in eval mode ('frozen')
    model.set_finetune(False)
    assert not any(p.requires_grad for p in model.backbone.parameters())
    model.set_finetune(True)
    model.train()
    assert all(p.requires_grad for p in model.backbone.parameters()) and not model.backbone.training
    assert model.branches["conv4"].training
    trainable_bn = build_mvsa(shapes={"conv4": [4, 4, 256], "conv5": [2, 2, 512]}, backbone_bn="train")
    trainable_bn.set_finetune(True)
    assert trainable_bn.train().backbone.training


def test_a_run_without_fine_tuning_builds_no_cnn():
    torch.manual_seed(0)
    ctx = BuildContext(20, {"scales": PAPER_SHAPES}, {"r18": {"arch": "resnet18", "weights": "none"}}, cnn=False)
    model = build_model(mvsa_cfg(), ctx).eval()
    assert model.backbone is None and not any(k.startswith("backbone.") for k in model.state_dict())
    model.set_finetune(False)
    assert model.train().training
    with pytest.raises(HarnessError, match="without its CNN"):
        model.set_finetune(True)
    with pytest.raises(HarnessError, match="without its CNN"):
        model.encode_images({"images": torch.zeros(1, 3, 224, 224)})
    with torch.no_grad():   # the same heads as a model with its CNN, on cached maps
        with_cnn = build_mvsa()
        with_cnn.load_state_dict(model.state_dict(), strict=False)
        batch = {"features": grids()}
        assert torch.equal(with_cnn.encode_images(batch).regions, model.encode_images(batch).regions)


def test_asa_attention_is_over_each_scales_candidates():
    model = build_mvsa()
    attention = model.asa_attention({"features": grids()})
    assert {s: tuple(a.shape) for s, a in attention.items()} == {"conv4": (2, 196, 196), "conv5": (2, 49, 49)}
    assert all(torch.allclose(a.sum(-1), torch.ones(a.shape[:2])) for a in attention.values())


def test_scan_model_checks_its_switches():
    text = GRUTextEncoder(10, 4, 6, bidirectional=True)
    with pytest.raises(ValueError, match="direction"):
        SCAN(8, 3, 6, text, scan_similarity("both"))
    with pytest.raises(ValueError, match="lambda_lse"):
        SCAN(8, 3, 6, text, scan_similarity("t2i", "lse", 9.0, None))
    assert math.isclose(SCAN(8, 3, 6, text, scan_similarity("i2t", "lse", 4.0, 5.0)).lambda_lse, 5.0)


def test_resnet_backbone_stage_shapes_at_224_px():
    backbone = ResNetBackbone("resnet18", "none").eval()
    with torch.no_grad():
        maps = backbone(torch.zeros(1, 3, 224, 224), ("conv3", "conv4", "conv5"))
    assert {k: tuple(v.shape[1:]) for k, v in maps.items()} == {
        "conv3": (128, 28, 28), "conv4": (256, 14, 14), "conv5": (512, 7, 7)}
    assert np.prod(PAPER_SHAPES["conv4"][:2]) == 196   # the supplement's "289" is not a 14x14 count
