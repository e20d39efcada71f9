"""Every registered model, converted to float64, gives the scores of a per-pair float64
reference written from the public code's equations, to 1e-10.

The tolerance is far below fp32 resolution, so a hidden cast to float32 anywhere in a model
fails the test. The references take one (image, caption) pair at a time, without padding,
masks, blocks or the vectorised tricks of the models (Gram-matrix norms, fused projections);
they write linear maps, norms, attention, graph steps and eval-mode BatchNorm out as plain
tensor ops and call only the model's own ``nn.GRU`` modules (a library primitive) on one
unpadded sequence. A model registered without a reference here fails the test."""
import math
from functools import partial

import pytest
import torch

from methods.features.backbone import ResNetBackbone
from methods.models import MODELS
from methods.models.mvsa import MVSA
from methods.models.scan import SCAN
from methods.models.set_embedding import SetEmbedding, SetEmbeddingGrid
from methods.models.sgraf import SGRAF
from methods.models.text import GRUTextEncoder
from methods.models.vsepp import VSEPP
from methods.models.vsrn import VSRN
from tests.test_sgraf import l2, linear
from tests.test_mvsa_scan import reference_pair as scan_reference_pair
from tests.test_mvsa_scan import scan_similarity
from tests.test_sgraf import reference_matrix as sgraf_reference_matrix
from tests.test_label_wise import build as build_label_wise
from tests.test_label_wise import reference_image as reference_label_image
from tests.test_label_wise import reference_text as reference_label_text

VOCAB, WORD_DIM, EMBED, SIM = 30, 8, 12, 6   # EMBED: a multiple of 4 (2-D sine positions)
N_IMAGES = 3
LENGTHS = (1, 4, 7, 2, 7)        # a one-word caption, ties, padding up to 7
REGIONS, REGION_DIM = 5, 12


def build(model_class, *args, bidirectional_text=False, **kwargs):
    """A small float64 model in eval mode, with random BatchNorm statistics and affine parameters,
    so that eval-mode BatchNorm is no identity (VSRN's GCN blocks would be: their BN scale starts at 0),
    and random linear biases (xavier_linear starts them at 0, which would hide a bias left out)."""
    torch.manual_seed(0)
    text = GRUTextEncoder(VOCAB, WORD_DIM, EMBED, bidirectional=bidirectional_text, embed_dropout=0.4)
    model = model_class(*args, text=text, **kwargs).double().eval()
    g = torch.Generator().manual_seed(2)

    def uniform_(tensor, low, high):
        tensor.copy_(torch.rand(tensor.shape, generator=g, dtype=tensor.dtype) * (high - low) + low)

    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Linear) and m.bias is not None:
                uniform_(m.bias, -0.1, 0.1)
            if getattr(m, "running_mean", None) is not None:      # BatchNorm1d and SGRAF's MaskedBatchNorm
                uniform_(m.running_mean, -0.3, 0.3)
                uniform_(m.running_var, 0.5, 2.0)
                uniform_(m.weight, 0.5, 1.5)
                uniform_(m.bias, -0.3, 0.3)
    return model


def texts():
    g = torch.Generator().manual_seed(1)
    tokens = torch.zeros(len(LENGTHS), max(LENGTHS), dtype=torch.long)
    for row, n in enumerate(LENGTHS):
        tokens[row, :n] = torch.randint(1, VOCAB, (n,), generator=g)
    return {"tokens": tokens, "lengths": torch.tensor(LENGTHS)}


def plain_l2(x, dim=-1):
    """VSE++ and VSRN model.py l2norm: X / sqrt(sum X^2), no epsilon (SGRAF's l2 adds 1e-8)."""
    return x / x.pow(2).sum(dim=dim, keepdim=True).sqrt()


def features(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)


def batch_norm_eval(bn, x):
    """Eval-mode BatchNorm over the last dim (the channels) with the running statistics."""
    return (x - bn.running_mean) / torch.sqrt(bn.running_var + bn.eps) * bn.weight + bn.bias


def reference_caption_vector(model, tokens):
    """VSE++/VSRN text: GRU over the caption's words, last state (directions averaged if any) -> l2."""
    _, hidden = model.text.gru(model.text.embed(tokens)[None])
    last = (hidden[-2, 0] + hidden[-1, 0]) / 2 if model.text.bidirectional else hidden[-1, 0]
    return plain_l2(last)


def cosine_matrix(image_vectors, caption_vectors):
    return torch.stack([torch.stack([(v * t).sum() for t in caption_vectors]) for v in image_vectors])


def caption_vectors(model, text_batch):
    return [reference_caption_vector(model, tok[:n]) for tok, n in zip(text_batch["tokens"], text_batch["lengths"])]


# -- VSE++: pooled -> [l2] -> fc -> l2; cosine ----------------------------------------------------

def vsepp_reference(model, images, text_batch, pre_fc_l2norm):
    image_vectors = [plain_l2(linear(model.fc, plain_l2(p) if pre_fc_l2norm else p)) for p in images["features"]]
    return cosine_matrix(image_vectors, caption_vectors(model, text_batch))


def vsepp_cases():
    for pre_fc_l2norm in (True, False):
        model = build(VSEPP, ResNetBackbone("resnet18", "none"), EMBED, pre_fc_l2norm=pre_fc_l2norm)
        yield (f"pre_fc_l2norm={pre_fc_l2norm}", model, {"features": features(N_IMAGES, 512)},
               partial(vsepp_reference, pre_fc_l2norm=pre_fc_l2norm))


# -- VSRN: fc -> [l2] -> residual GCN blocks -> l2 -> GRU over regions -> [BN] -> l2; cosine ------

def vsrn_reference(model, images, text_batch, region_l2norm, l2norm_after_fc, final_bn):
    axis = {"feature": 1, "region_axis": 0}[region_l2norm]   # of one image's (N regions, D)
    image_vectors = []
    for regions in images["features"]:
        v = linear(model.fc, regions)
        if l2norm_after_fc:
            v = plain_l2(v, dim=axis)
        for block in model.gcn:      # V* = V + BN(W (R g(V))), R = theta(V) phi(V)^T / N
            relation = linear(block.theta, v) @ linear(block.phi, v).t() / v.shape[0]
            v = v + batch_norm_eval(block.bn, linear(block.w, relation @ linear(block.g, v)))
        v = plain_l2(v, dim=axis)
        _, hidden = model.gru(v[None])                       # regions in order
        h = hidden[-1, 0]
        image_vectors.append(plain_l2(batch_norm_eval(model.bn, h) if final_bn else h))
    return cosine_matrix(image_vectors, caption_vectors(model, text_batch))


def vsrn_cases():
    for options in (dict(region_l2norm="feature", l2norm_after_fc=True, final_bn=True),
                    dict(region_l2norm="region_axis", l2norm_after_fc=True, final_bn=True),
                    dict(region_l2norm="region_axis", l2norm_after_fc=False, final_bn=False)):
        model = build(VSRN, REGION_DIM, EMBED, gcn_blocks=4, **options)
        yield (str(options), model, {"features": features(N_IMAGES, REGIONS, REGION_DIM)},
               partial(vsrn_reference, **options))


# -- SGRAF: the per-pair reference of tests/test_sgraf.py -----------------------------------------

def sgraf_reference(model, images, text_batch):
    return sgraf_reference_matrix(model, images["features"], text_batch["tokens"], text_batch["lengths"])


def sgraf_cases():
    for options in (dict(heads=["sgr", "saf"], sgr_steps=3),
                    dict(heads=["saf"], attention={"direction": "i2t", "smooth": 9.0}),
                    dict(heads=["avg"], similarity="scalar", nodes={"global": False, "local": True}),
                    dict(heads=["sgr"], nodes={"global": False, "local": True}, sgr_steps=1)):
        yield (str(options), build(SGRAF, REGION_DIM, REGIONS, EMBED, SIM, bidirectional_text=True, **options),
               {"features": features(N_IMAGES, REGIONS, REGION_DIM)}, sgraf_reference)


# -- SCAN and MVSA: SCAN's per-pair similarity (tests/test_mvsa_scan.py, kuanghuei/SCAN model.py) --

def caption_words(model, tokens):
    """(L, D) words of one unpadded caption: bi-GRU, directions averaged, l2 (SCAN's l2norm)."""
    out, _ = model.text.gru(model.text.embed(tokens[None]))
    half = out.shape[-1] // 2
    return l2((out[0, :, :half] + out[0, :, half:]) / 2)


def scan_matrix(model, instances, text_batch):
    """Scores of every image's (N, D) instances with every caption, one pair at a time."""
    words = [caption_words(model, text_batch["tokens"][c, :n]) for c, n in enumerate(LENGTHS)]
    return torch.tensor([[scan_reference_pair(inst, w, model.direction, model.aggregation, model.lambda_softmax,
                                              model.lambda_lse) for w in words] for inst in instances],
                        dtype=torch.float64)


def scan_reference(model, images, text_batch):
    return scan_matrix(model, [l2(linear(model.fc, f)) for f in images["features"]], text_batch)


def scan_cases():
    for direction, aggregation, lambda_softmax, lambda_lse in (("t2i", "avg", 9.0, None), ("t2i", "lse", 9.0, 6.0),
                                                               ("i2t", "avg", 4.0, None), ("i2t", "lse", 4.0, 20.0)):
        yield (f"scan {direction} {aggregation}",
               build(SCAN, REGION_DIM, REGIONS, EMBED, bidirectional_text=True,
                     similarity=scan_similarity(direction, aggregation, lambda_softmax, lambda_lse)),
               {"features": features(N_IMAGES, REGIONS, REGION_DIM)}, scan_reference)


MVSA_SHAPES = {"conv4": [4, 4, 256], "conv5": [2, 2, 512]}   # ResNet-18 channels


def mvsa_instances(model, grids):
    """(N, D) instances of one image from its (H, W, C) maps: per scale a projection, ASA blocks
    (softmax(theta phi^T) g, W_z, eval-mode BatchNorm, residual), the instance map; finer maps
    pooled over k x k cells to the coarsest grid, scales concatenated finest first; l2."""
    gh, gw = model.grid
    parts = []
    for scale in model.scales:
        h, w, c = grids[scale].shape
        branch = model.branches[scale]
        x = linear(branch.project, grids[scale].reshape(h * w, c))
        for block in branch.asa:
            attention = torch.softmax(linear(block.theta, x) @ linear(block.phi, x).t(), dim=1)
            y = linear(block.out, attention @ linear(block.g, x))
            if block.bn is not None:
                bn = block.bn
                y = (y - bn.running_mean) / torch.sqrt(bn.running_var + bn.eps) * bn.weight + bn.bias
            x = x + y
        inst = linear(branch.instance, x).reshape(h, w, -1)
        if len(model.scales) > 1 and (h, w) != (gh, gw):
            cells = inst.reshape(gh, h // gh, gw, w // gw, -1)
            inst = cells.amax(dim=(1, 3)) if model.fusion_pooling == "max" else cells.mean(dim=(1, 3))
        parts.append(inst.reshape(-1, inst.shape[-1]))
    return l2(torch.cat(parts))


def mvsa_reference(model, images, text_batch):
    grids = images["features"]
    return scan_matrix(model, [mvsa_instances(model, {s: g[i] for s, g in grids.items()}) for i in range(N_IMAGES)],
                       text_batch)


def mvsa_cases():
    grids = {s: features(N_IMAGES, *shape) for s, shape in MVSA_SHAPES.items()}
    for scales, pooling, asa, similarity in (
            (["conv4", "conv5"], "max", dict(blocks=2, batchnorm=True), scan_similarity()),
            (["conv4", "conv5"], "avg", dict(blocks=1, batchnorm=True), scan_similarity("i2t", "lse", 4.0, 5.0)),
            (["conv5"], None, dict(blocks=1, batchnorm=False), scan_similarity("t2i", "lse", 9.0, 6.0))):
        yield (f"mvsa {scales} {pooling} {asa} {similarity}",
               build(MVSA, "resnet18", MVSA_SHAPES, scales, pooling, 16, EMBED, asa={**asa, "inter_dim": 7},
                     similarity=similarity, bidirectional_text=True),
               {"features": {s: grids[s] for s in scales}}, mvsa_reference)


# -- set embeddings: regions -> fc + MLP -> slots or PIE-Net -> sets; set similarities ------------
# (kdwonn/DivE model_spm.py, agg_block/attention.py, similarity.py; yalesong/pvse model.py PIENet)

def layer_norm(ln, x):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


def plain_gelu(x):
    return 0.5 * x * (1 + torch.erf(x / 2 ** 0.5))


def sine(n_positions, dim, total):
    """DivE PositionEmbeddingSine1D(normalize=True): t / total * 2 pi, (sin, cos) pairs of t / 10000^(2i/dim)."""
    angles = [[t / (total + 1e-6) * 2 * math.pi / 10000 ** (2 * (i // 2) / dim) for i in range(dim)]
              for t in range(1, n_positions + 1)]
    out = torch.tensor(angles, dtype=torch.float64)
    out[:, 0::2], out[:, 1::2] = out[:, 0::2].sin(), out[:, 1::2].cos()
    return out


def sine_2d(height, width, dim):
    """DivE PositionEmbeddingSine2D(dim // 2, normalize=True), cell by cell in row-major order:
    the row's 1-D encoding on the first half of the channels, the column's on the second."""
    rows, cols = sine(height, dim // 2, height), sine(width, dim // 2, width)
    return torch.stack([torch.cat([rows[i], cols[j]]) for i in range(height) for j in range(width)])


def slot_reference(agg, inputs, n_valid, positions):
    """K slots over one input's (N, C) features, N - n_valid of them padding: per head the logits
    of each slot with each input, softmax over the slots (padded columns at -max, as the public
    code: uniform), each slot's weights renormalised over the inputs, the weighted values; then the
    output projection, the GELU FFN, T times with the same weights; the final LayerNorm.
    ``positions``: the (N, C) encoding added to the keys, or None."""
    context = layer_norm(agg.norm_inputs, inputs)
    keyed = context if positions is None else context + positions
    k, v = keyed @ agg.to_k.weight.t(), context @ agg.to_v.weight.t()
    slots = agg.slots.clone()
    for _ in range(agg.iterations):
        q = layer_norm(agg.norm_slots, slots) @ agg.to_q.weight.t()
        heads = []
        for h in range(agg.heads):
            cols = slice(h * agg.head_dim, (h + 1) * agg.head_dim)
            logits = (q[:, cols] @ k[:, cols].t()) * agg.head_dim ** -0.5          # (K, N)
            if agg.competition == "inputs":
                logits[:, n_valid:] = -torch.inf
                weights = torch.softmax(logits, dim=1)
            else:
                if agg.padding == "leak":
                    logits[:, n_valid:] = -torch.finfo(torch.float64).max
                weights = torch.softmax(logits, dim=0)
                if agg.padding == "masked":
                    weights[:, n_valid:] = 0
                weights = weights / (weights.sum(dim=1, keepdim=True) + 1e-7)
            heads.append(weights @ v[:, cols])
        slots = slots + linear(agg.to_out[0], torch.cat(heads, dim=1))
        ff = agg.ff
        slots = slots + linear(ff[3], plain_gelu(linear(ff[0], layer_norm(agg.norm_ff, slots))))
    return layer_norm(agg.norm_out, slots)


def pie_reference(pie, local, glob):
    logits = torch.tanh(local @ pie.w1.weight.t()) @ pie.w2.weight.t()              # (N, K)
    pooled = torch.softmax(logits, dim=0).t() @ local
    return layer_norm(pie.norm, glob + torch.sigmoid(linear(pie.fc, pooled)))


def set_elements(model, local, glob, module, n_valid, positions):
    if hasattr(module, "aggregation"):
        return plain_l2(layer_norm(module.norm_global, glob) + slot_reference(module.aggregation, local, n_valid,
                                                                              positions))
    return plain_l2(pie_reference(module, local[:n_valid], glob))


def set_pair(x, y, kind, alpha=None, scale=None, shift=None):
    """One pair of sets, element pair by element pair."""
    c = torch.tensor([[float((a * b).sum()) for b in y] for a in x], dtype=torch.float64)
    if kind == "smooth_chamfer":
        x_side = sum(torch.log(sum(torch.exp(alpha * c[i, j]) for j in range(len(y)))) for i in range(len(x)))
        y_side = sum(torch.log(sum(torch.exp(alpha * c[i, j]) for i in range(len(x)))) for j in range(len(y)))
        return float((x_side / (alpha * len(x)) + y_side / (alpha * len(y))) / 2)
    if kind == "chamfer":
        return float((c.max(dim=1).values.mean() + c.max(dim=0).values.mean()) / 2)
    if kind == "mil":
        return float(c.max())
    return float(torch.sigmoid(scale * c + shift).mean())


def set_reference(model, images, text_batch, similarity):
    image_sets = []
    if isinstance(images["features"], dict):   # a grid: its cells row by row, with 2-D positions on the keys
        (grid,) = images["features"].values()
        inputs = [g.reshape(-1, g.shape[-1]) for g in grid]
        positions = sine_2d(grid.shape[1], grid.shape[2], model.embed_dim)
    else:
        inputs, positions = list(images["features"]), None
    for cells in inputs:
        base = linear(model.region.fc, cells)
        hidden = batch_norm_eval(model.region.bn, linear(model.region.mlp_in, base))
        local = base + linear(model.region.mlp_out, torch.relu(hidden))
        image_positions = positions if hasattr(model.image_set, "aggregation") else None
        image_sets.append(set_elements(model, local, local.max(dim=0).values, model.image_set, len(local),
                                       image_positions))
    text_sets, longest = [], max(LENGTHS)
    for tokens, n in zip(text_batch["tokens"], LENGTHS):
        _, hidden = model.text.gru(model.text.embed(tokens[:n])[None])
        glob = (hidden[-2, 0] + hidden[-1, 0]) / 2
        words = model.text.embed(tokens[:longest])   # padded to the batch's longest, as the model sees it
        # DivE PositionEmbeddingSine1D(normalize=True) scaled by the padded length (leak) or the caption's own
        agg = getattr(model.text_set, "aggregation", None)
        text_positions = None if agg is None else sine(longest, WORD_DIM, longest if agg.padding == "leak" else int(n))
        text_sets.append(set_elements(model, words, glob, model.text_set, int(n), text_positions))
    params = {k: v for k, v in similarity.items() if k != "kind"}
    return torch.tensor([[set_pair(x, y, similarity["kind"], **params) for y in text_sets] for x in image_sets],
                        dtype=torch.float64)


def set_cases():
    slot = {"kind": "slot", "iterations": 2, "heads": 2, "head_dim": 3, "ff_mult": 2, "competition": "slots"}
    for module, similarity in (({**slot, "padding": "leak"}, {"kind": "smooth_chamfer", "alpha": 16.0}),
                               ({**slot, "padding": "masked"}, {"kind": "chamfer"}),
                               ({**slot, "competition": "inputs", "padding": "leak"}, {"kind": "mil"}),
                               ({"kind": "pie"}, {"kind": "mp", "scale": 2.0, "shift": -0.5})):
        yield (f"set {module} {similarity}",
               build(SetEmbedding, REGION_DIM, EMBED, 3, set_module=module, similarity=similarity, dropout=0.1,
                     region_drop=0.2, bidirectional_text=True),
               {"features": features(N_IMAGES, REGIONS, REGION_DIM)}, partial(set_reference, similarity=similarity))


def set_grid_cases():
    slot = {"kind": "slot", "iterations": 2, "heads": 2, "head_dim": 3, "ff_mult": 2, "competition": "slots"}
    grid = {"conv5": features(N_IMAGES, *MVSA_SHAPES["conv5"])}
    for module, similarity in (({**slot, "padding": "leak"}, {"kind": "smooth_chamfer", "alpha": 16.0}),
                               ({"kind": "pie"}, {"kind": "mil"})):
        yield (f"set grid {module} {similarity}",
               build(SetEmbeddingGrid, "resnet18", MVSA_SHAPES, ["conv5"], "frozen", EMBED, 3, set_module=module,
                     similarity=similarity, dropout=0.1, bidirectional_text=True),
               {"features": grid}, partial(set_reference, similarity=similarity))


# -- label-wise: regions / bi-GRU words -> one shared pre-norm transformer -> ReLU -> sigmoid label
# vectors (l2) -> mean over tokens -> cosine (the per-item forward of tests/test_label_wise.py)

def label_wise_reference(model, images, text_batch, masked, over_padding):
    padded_to = int(text_batch["lengths"].max())
    image_vectors = [reference_label_image(model, regions)[0] for regions in images["features"]]
    text_vectors = [reference_label_text(model, tok, int(n), padded_to, masked, over_padding)[0]
                    for tok, n in zip(text_batch["tokens"], text_batch["lengths"])]
    return cosine_matrix(image_vectors, text_vectors)


def label_wise_cases():
    for masked, over_padding, shared in ((False, True, True), (True, False, False)):
        model = build_label_wise(text_padding_mask=masked, mean_over_padding=over_padding, shared_transformer=shared).eval()
        yield (f"label_wise mask {masked} padded mean {over_padding} shared {shared}", model,
               {"features": features(N_IMAGES, REGIONS, REGION_DIM)},
               partial(label_wise_reference, masked=masked, over_padding=over_padding))


CASES = {"vsepp": vsepp_cases, "label_wise": label_wise_cases, "vsrn": vsrn_cases, "sgraf": sgraf_cases, "scan": scan_cases, "mvsa": mvsa_cases,
         "set_embedding": set_cases, "set_embedding_grid": set_grid_cases}


def as_dtype(feats, dtype):
    """Cached features (a tensor, or a dict of grid maps per scale) in another dtype."""
    return {k: v.to(dtype) for k, v in feats.items()} if isinstance(feats, dict) else feats.to(dtype)


@pytest.mark.parametrize("kind", MODELS.names())
def test_float64_scores_equal_the_per_pair_reference(kind):
    if kind not in CASES:
        raise AssertionError(f"model '{kind}' is registered but tests/test_float64.py has no float64 "
                             f"per-pair reference for it")
    text_batch = texts()
    for label, model, images, reference in CASES[kind]():
        with torch.no_grad():
            img, txt = model.encode_images(images), model.encode_texts(text_batch)
            block = model.score(img, txt)
            model.score_chunk = 2          # embedding models: image blocks of 2
            model.block_elements = 1       # cross-attention models: one caption per block
            matrix = model.score_matrix(img, txt)
            want = reference(model, images, text_batch)
            # cached float32 features are cast to the model's dtype (exactly: float32 -> float64)
            single = as_dtype(images["features"], torch.float32)
            from_float32 = model.score(model.encode_images({"features": single}), txt)
            from_float64 = model.score(model.encode_images({"features": as_dtype(single, torch.float64)}), txt)
        assert block.dtype == matrix.dtype == want.dtype == torch.float64, label
        assert matrix.device.type == "cpu" and matrix.shape == (N_IMAGES, len(LENGTHS)), label
        torch.testing.assert_close(block, want, rtol=1e-10, atol=1e-10, msg=lambda m: f"{label}: {m}")
        torch.testing.assert_close(matrix, want, rtol=1e-10, atol=1e-10, msg=lambda m: f"{label}: {m}")
        torch.testing.assert_close(from_float32, from_float64, rtol=0, atol=0, msg=lambda m: f"{label}: {m}")
        assert want.std() > 1e-3, f"{label}: the scores are (nearly) constant"


@pytest.mark.parametrize("kind", ["vsepp", "sgraf"])
def test_the_api_keeps_float64_features_of_a_float64_model(kind):
    """``api.encode_images`` on float64 features of a float64 model scores as the model itself
    does on them, not as on the features rounded to float32 (which gives other bits)."""
    from methods import api
    label, model, images, _ = next(iter(CASES[kind]()))
    feats, text_batch = images["features"], texts()
    with torch.no_grad():
        txt = model.encode_texts(text_batch)
        direct = model.score(model.encode_images({"features": feats}), txt)
        rounded = model.score(model.encode_images({"features": feats.to(torch.float32).to(torch.float64)}), txt)
        via_api = model.score(api.encode_images(model, feats.numpy(), batch_size=len(feats), device="cpu"), txt)
    torch.testing.assert_close(via_api, direct, rtol=0, atol=0)
    assert not torch.equal(rounded, direct), label   # the check can fail: float32 rounding moves the scores


def test_scan_evaluates_a_float32_model_in_float64_as_its_source():
    """kuanghuei/SCAN's evaluation scores its float32 encodings in float64: with
    ``evaluation_dtype: float64`` a float32 model's split scores are the float64 per-pair
    reference on those float32 encodings; with ``model`` they are float32 (other bits)."""
    for label, model64, images, _ in scan_cases():
        model = model64.float()
        feats, text_batch = images["features"].float(), texts()
        with torch.no_grad():
            img, txt = model.encode_images({"features": feats}), model.encode_texts(text_batch)
            model.evaluation_dtype = "float64"
            source = model.score_matrix(img, txt)
            model.evaluation_dtype = "model"
            own = model.score_matrix(img, txt)
            # the reference: the same float32 encodings, widened, scored pair by pair in float64
            want = torch.tensor([[scan_reference_pair(img.regions[i].double(), txt.words[c, :int(txt.lengths[c])].double(),
                                                      model.direction, model.aggregation, model.lambda_softmax,
                                                      model.lambda_lse)
                                  for c in range(len(txt))] for i in range(len(img))], dtype=torch.float64)
        assert source.dtype == torch.float64 and own.dtype == torch.float32, label
        torch.testing.assert_close(source, want, rtol=1e-12, atol=1e-12, msg=lambda m: f"{label}: {m}")
        assert not torch.equal(own.double(), source), label
