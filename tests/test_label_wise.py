"""Label-wise retrieval (Yang et al., IJCAI 2021; methods/models/label_wise.py, methods/losses/label_wise.py,
methods/metrics/label_prediction.py): the shared transformer is one module, the Independent variant
two; the loss terms against closed forms and hand-computed cross-entropies; micro-F1 against
scikit-learn; the batched encoders against a per-item float64 forward written here from the
module's parameters; a training step lowers the loss; the method file resolves on every dataset."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from methods import api
from methods.config import REPO_ROOT
from methods.errors import HarnessError
from methods.losses.weighted_sum import Loss
from methods.metrics.label_prediction import LabelPredictions, micro_f1
from methods.metrics.evaluation import evaluate_protocol
from methods.metrics.protocols import Protocol
from methods.models.label_wise import LabelWise, code_transformer

METHOD = REPO_ROOT / "config" / "methods" / "label_wise.yaml"
VOCAB, REGION_DIM, N_REGIONS, C, K = 30, 12, 5, 6, 4


def small_config(**model) -> dict:
    cfg = api.experiment_config(METHOD, "synthtags")
    cfg["model"].update({"embed_dim": 16, "n_classes": C, "n_region_classes": K,
                         "transformer": {"layers": 2, "heads": 4, "ff_dim": 24, "dropout": 0.0, "init_weights": None},
                         "text": {"word_dim": 8, "hidden_dim": 16, "num_layers": 1, "bidirectional": True,
                                  "word_init": "random"}, **model})
    return cfg


def build(seed=0, dtype=torch.float64, **model) -> LabelWise:
    torch.manual_seed(seed)
    net = api.build_model(small_config(**model), VOCAB, {"dim": REGION_DIM, "regions": N_REGIONS})
    return net.to(dtype)


def batch(n=4, seed=0, dtype=torch.float64, masks=True) -> dict:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([7, 3, 5, 2][:n])
    tokens = torch.randint(1, VOCAB, (n, 7), generator=g)
    tokens[torch.arange(7)[None, :] >= lengths[:, None]] = 0
    out = {"features": torch.randn(n, N_REGIONS, REGION_DIM, generator=g, dtype=dtype), "tokens": tokens,
           "lengths": lengths, "positives": torch.eye(n, dtype=torch.bool),
           "image_labels": (torch.rand(n, C, generator=g) < 0.4).float(),
           "text_labels": (torch.rand(n, C, generator=g) < 0.4).float()}
    if masks:
        tt = torch.full((n, 7), -100)
        tt[0, 1], tt[0, 4], tt[2, 3] = tokens[0, 1], tokens[0, 4], tokens[2, 3]
        rt = torch.full((n, N_REGIONS), -100)
        rt[1, 0], rt[3, 2], rt[3, 4] = 2, 0, 3
        out.update(token_targets=tt, region_class_targets=rt)
    return out


# -- sharing ----------------------------------------------------------------------------------

def test_shared_transformer_is_one_module_for_both_modalities():
    net = build()
    assert net.image_transformer is net.text_transformer and net.image_head is net.text_head
    image_params = list(net.image_transformer.parameters())
    assert all(a is b for a, b in zip(image_params, net.text_transformer.parameters()))
    ids = [id(p) for p in net.trainable_parameters()]
    assert len(ids) == len(set(ids))                     # the optimiser sees each tensor once


def test_independent_variant_has_two_distinct_transformers():
    net = build(shared_transformer=False)
    assert net.image_transformer is not net.text_transformer and net.image_head is not net.text_head
    image_ids = {id(p) for p in [*net.image_transformer.parameters(), *net.image_head.parameters()]}
    assert not image_ids & {id(p) for p in [*net.text_transformer.parameters(), *net.text_head.parameters()]}
    cfg = api.experiment_config(METHOD, "mirflickr", variants=["independent"])
    assert cfg["model"]["shared_transformer"] is False


def test_transformer_init_is_xavier_per_projection_and_loads_a_state_dict(tmp_path):
    enc = code_transformer(16, 2, 4, 24, 0.1)
    q = enc.layers[0].self_attn.in_proj_weight[:16]
    assert q.abs().max() <= math.sqrt(6 / 32) and q.abs().max() > math.sqrt(6 / 64)  # (d, d) bound, not (3d, d)
    other = code_transformer(16, 2, 4, 24, 0.1)
    path = tmp_path / "enc.pt"
    torch.save(other.state_dict(), path)
    net = build(transformer={"layers": 2, "heads": 4, "ff_dim": 24, "dropout": 0.0, "init_weights": str(path)})
    for a, b in zip(net.image_transformer.state_dict().values(), other.state_dict().values()):
        torch.testing.assert_close(a, b.to(a.dtype))
    with pytest.raises(HarnessError, match="does not exist"):
        build(transformer={"layers": 2, "heads": 4, "ff_dim": 24, "dropout": 0.0, "init_weights": str(tmp_path / "x")})
    with pytest.raises(HarnessError, match="not a state dict"):
        build(transformer={"layers": 3, "heads": 4, "ff_dim": 24, "dropout": 0.0, "init_weights": str(path)})


def test_code_layer_norm_divides_by_the_unbiased_std_plus_eps():
    net = build()
    ln = net.image_transformer.layers[0].norm1
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0] * 4], dtype=torch.float64)   # d = 16
    std = math.sqrt(sum((v - 2.5) ** 2 for v in [1.0, 2.0, 3.0, 4.0] * 4) / 15)
    torch.testing.assert_close(ln(x), (x - 2.5) / (std + 1e-6), rtol=1e-12, atol=0)
    # a near-zero token (a padded position's 1e-5 p / 2): the code lifts it to a fraction of a real
    # token's size where torch's eps inside the square root leaves it near zero
    tiny = 5e-6 * torch.empty(1, 16, dtype=torch.float64).uniform_(-0.1, 0.1)
    assert 0.05 < ln(tiny).norm() / math.sqrt(16) < 1.0
    assert build(layer_norm="torch").image_transformer.layers[0].norm1(tiny).norm() / math.sqrt(16) < 1e-2


def test_the_code_layer_norm_runs_in_evaluation_too():
    """torch's fused inference path of TransformerEncoderLayer would apply its own layer norm."""
    net = build(dtype=torch.float32).eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        got = net.image_transformer(x)
        want = net.train().image_transformer(x)   # dropout 0: training mode is the module path
    torch.testing.assert_close(got, want)


# -- per-item reference ------------------------------------------------------------------------

def ref_layer_norm(x, ln):
    """torch.nn.LayerNorm: / sqrt(biased variance + eps); the code's (transformer.py): / (unbiased std + eps)."""
    mu = x.mean(-1, keepdim=True)
    squares = ((x - mu) ** 2).sum(-1, keepdim=True)
    d = x.shape[-1]
    if isinstance(ln, torch.nn.LayerNorm):
        return (x - mu) / torch.sqrt(squares / d + ln.eps) * ln.weight + ln.bias
    return (x - mu) / (torch.sqrt(squares / (d - 1)) + 1e-6) * ln.weight + ln.bias


def ref_encoder(x, enc, key_valid):
    """x (T, d) of one item, pre-norm layers, keys restricted to ``key_valid`` (T,) bool."""
    for layer in enc.layers:
        attn = layer.self_attn
        d, h = x.shape[1], attn.num_heads
        hd = d // h
        y = ref_layer_norm(x, layer.norm1)
        w, b = attn.in_proj_weight, attn.in_proj_bias
        q, k, v = (y @ w[i * d:(i + 1) * d].T + b[i * d:(i + 1) * d] for i in range(3))
        heads = []
        for j in range(h):
            s = q[:, j * hd:(j + 1) * hd] @ k[:, j * hd:(j + 1) * hd].T / math.sqrt(hd)
            s = s.masked_fill(~key_valid[None, :], float("-inf"))
            heads.append(torch.softmax(s, dim=-1) @ v[:, j * hd:(j + 1) * hd])
        x = x + torch.cat(heads, dim=1) @ attn.out_proj.weight.T + attn.out_proj.bias
        y = ref_layer_norm(x, layer.norm2)
        x = x + torch.relu(y @ layer.linear1.weight.T + layer.linear1.bias) @ layer.linear2.weight.T + layer.linear2.bias
    return ref_layer_norm(x, enc.norm)


def ref_gru_direction(xs, gru, suffix):
    w_ih, w_hh = getattr(gru, f"weight_ih_l0{suffix}"), getattr(gru, f"weight_hh_l0{suffix}")
    b_ih, b_hh = getattr(gru, f"bias_ih_l0{suffix}"), getattr(gru, f"bias_hh_l0{suffix}")
    h = torch.zeros(gru.hidden_size, dtype=xs.dtype)
    out = []
    for x in xs:
        r, z, n = (x @ w_ih.T + b_ih).chunk(3)
        hr, hz, hn = (h @ w_hh.T + b_hh).chunk(3)
        r, z = torch.sigmoid(r + hr), torch.sigmoid(z + hz)
        n = torch.tanh(n + r * hn)
        h = (1 - z) * n + z * h
        out.append(h)
    return torch.stack(out)


def ref_label_vector(hidden, head):
    p = torch.sigmoid(hidden @ head.fc.weight.T + head.fc.bias)
    return p / (p.norm(dim=-1, keepdim=True) + 1e-8), p


def reference_text(net, tokens, length, padded_to, masked, over_padding):
    """One text alone: its words through the bi-GRU (directions averaged), zeros up to ``padded_to``
    (the batch's longest text), plus 1e-5 x the position vector at every position (Model.py
    EncoderText), halved, the encoder, ReLU, the head, the mean, l2 (cosine scores) or not (dot)."""
    words = net.text.embed.weight[tokens[:length]]
    fwd = ref_gru_direction(words, net.text.gru, "")
    bwd = ref_gru_direction(words.flip(0), net.text.gru, "_reverse").flip(0)
    x = torch.zeros(padded_to, fwd.shape[1], dtype=fwd.dtype)
    x[:length] = (fwd + bwd) / 2
    if net.text_position is not None:
        x = x + 1e-5 * net.text_position
    x = x / 2
    valid = torch.arange(padded_to) < length
    hidden = torch.relu(ref_encoder(x, net.text_transformer, valid if masked else torch.ones_like(valid)))
    vec, prob = ref_label_vector(hidden, net.text_head)
    mean = vec.mean(0) if over_padding else vec[:length].mean(0)
    own = vec[:length].mean(0)   # label scores: the text's own words, relative to the largest
    return mean / mean.norm() if net.retrieval_score == "cosine" else mean, own / own.max()


def reference_image(net, regions):
    x = (regions @ net.region_fc.weight.T + net.region_fc.bias) / 2
    hidden = torch.relu(ref_encoder(x, net.image_transformer, torch.ones(len(x), dtype=torch.bool)))
    vec, prob = ref_label_vector(hidden, net.image_head)
    mean = vec.mean(0)
    return mean / mean.norm() if net.retrieval_score == "cosine" else mean, mean / mean.max()


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("over_padding", [True, False])
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("code", [{}, {"layer_norm": "torch", "text_position_term": False, "retrieval_score": "dot"}],
                         ids=["code", "torch_layer_norm_no_position_dot"])
def test_batched_encoders_equal_a_per_item_float64_forward(masked, over_padding, shared, code):
    net = build(text_padding_mask=masked, mean_over_padding=over_padding, shared_transformer=shared, **code)
    net.eval()
    b = batch(masks=False)
    with torch.no_grad():
        img, txt = net.encode_images(b), net.encode_texts(b)
        for i in (1, 3):   # a short text padded to the batch's longest (7)
            emb, prob = reference_text(net, b["tokens"][i], int(b["lengths"][i]), 7, masked, over_padding)
            torch.testing.assert_close(txt.embedding[i], emb, rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(txt.label_scores[i], prob, rtol=1e-10, atol=1e-12)
        emb, prob = reference_image(net, b["features"][2])
        torch.testing.assert_close(img.embedding[2], emb, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(img.label_scores[2], prob, rtol=1e-10, atol=1e-12)
        scores = net.score_matrix(img, txt)
    torch.testing.assert_close(scores, img.embedding @ txt.embedding.T)
    ip, tp = net.label_predictions(img, txt)
    assert ip.shape == (4, C) and tp.shape == (4, C) and ((ip > 0) & (ip <= 1)).all()
    assert (ip.max(axis=1) == 1).all() and (tp.max(axis=1) == 1).all()   # each item's strongest label


def test_max_length_cuts_texts():
    net = build(max_length=3)
    net.eval()
    b = batch(masks=False)
    with torch.no_grad():
        cut = net.encode_texts(b).embedding
        b3 = dict(b, tokens=b["tokens"][:, :3], lengths=b["lengths"].clamp(max=3))
        torch.testing.assert_close(cut, build(max_length=None).eval().encode_texts(b3).embedding)


# -- loss terms -------------------------------------------------------------------------------

def test_label_logistic_equals_the_closed_form():
    img = torch.tensor([[0.6, 0.8, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    txt = torch.tensor([[0.5, 0.5, 0.5]], dtype=torch.float64)
    y_img = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    y_txt = torch.tensor([[0.0, 1.0, 1.0]])
    want = (math.log(1 + math.exp(-1.4)) + math.log(1 + math.exp(0.0)) + math.log(1 + math.exp(-1.0))) / 3
    got = Loss({"kind": "label_logistic"})({"image_label_vectors": img, "text_label_vectors": txt},
                                           {"image_labels": y_img, "text_labels": y_txt}, 0)
    assert got.item() == pytest.approx(want, rel=1e-12)
    with pytest.raises(HarnessError, match="n_classes"):
        Loss({"kind": "label_logistic"})({"image_label_vectors": img, "text_label_vectors": txt},
                                         {"image_labels": y_img[:, :2], "text_labels": y_txt[:, :2]}, 0)


def test_consistency_equals_the_closed_form_over_positive_pairs():
    img = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    txt = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.6, 0.8]], dtype=torch.float64)
    positives = torch.tensor([[True, False, False], [False, True, True]])
    sq = [2.0, 0.0, 0.36 + 0.04]                       # (0,0), (1,1), (1,2)
    got = Loss({"kind": "consistency"})({"image_label_vectors": img, "text_label_vectors": txt},
                                        {"positives": positives}, 0)
    assert got.item() == pytest.approx(sum(sq) / 3, rel=1e-12)
    plain = Loss({"kind": "consistency", "squared": False})({"image_label_vectors": img, "text_label_vectors": txt},
                                                            {"positives": positives}, 0)
    assert plain.item() == pytest.approx(sum(math.sqrt(v) for v in sq) / 3, rel=1e-12)


def test_masked_prediction_is_the_cross_entropy_at_the_masked_positions():
    net = build()
    net.train()
    b = batch()
    out = net.training_outputs(net.encode_images(b), net.encode_texts(b))
    got = Loss({"kind": "masked_prediction"})(out, b, 0)
    # by hand: the encoder's hidden states at the chosen positions, the predictors, sigmoid, CE
    with torch.no_grad():
        x = net.text_tokens(b["tokens"], b["lengths"])
        h_txt = torch.relu(net.text_transformer(x))
        h_img = torch.relu(net.image_transformer(net.image_tokens(b)))
    words = [(0, 1), (0, 4), (2, 3)]
    regions = [((1, 0), 2), ((3, 2), 0), ((3, 4), 3)]
    ce_w = sum(-torch.log_softmax(torch.sigmoid(net.word_predictor(h_txt[i, j])), -1)[b["tokens"][i, j]]
               for i, j in words) / len(words)
    ce_r = sum(-torch.log_softmax(torch.sigmoid(net.region_predictor(h_img[i, j])), -1)[c]
               for (i, j), c in regions) / len(regions)
    assert got.item() == pytest.approx((ce_w + ce_r).item(), rel=1e-9)
    # a batch without any masked position adds 0, not NaN
    empty = dict(b, token_targets=torch.full((4, 7), -100), region_class_targets=torch.full((4, N_REGIONS), -100))
    out = net.training_outputs(net.encode_images(empty), net.encode_texts(empty))
    zero = Loss({"kind": "masked_prediction"})(out, empty, 0)
    assert zero.item() == 0.0 and not torch.isnan(zero)
    # without the sigmoid: plain logits
    net2 = build(sigmoid_before_cross_entropy=False).train()
    out = net2.training_outputs(net2.encode_images(b), net2.encode_texts(b))
    assert torch.equal(out["word_targets"], torch.stack([b["tokens"][i, j] for i, j in words]))
    torch.testing.assert_close(Loss({"kind": "masked_prediction"})(out, b, 0),
                               F.cross_entropy(out["word_scores"], out["word_targets"])
                               + F.cross_entropy(out["region_scores"], out["region_targets"]))


def test_a_training_step_lowers_the_loss():
    net = build(dtype=torch.float32)
    net.train()
    b = batch(dtype=torch.float32)
    loss = Loss({"terms": [{"kind": "label_logistic"}, {"kind": "masked_prediction", "weight": 0.1},
                           {"kind": "consistency", "weight": 0.1}]})
    opt = torch.optim.Adam(net.trainable_parameters(), lr=1e-2)

    def value():
        return loss(net.training_outputs(net.encode_images(b), net.encode_texts(b)), b, 0)

    first = value()
    for _ in range(5):
        opt.zero_grad()
        value().backward()
        opt.step()
    assert value().item() < first.item()


# -- micro-F1 ---------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(3))
def test_micro_f1_equals_scikit_learn(seed):
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(seed)
    probs, labels = rng.random((40, 7)), rng.random((40, 7)) < 0.3
    want = f1_score(labels, probs >= 0.5, average="micro", zero_division=0)
    assert micro_f1(probs, labels) == pytest.approx(want, rel=1e-12)
    assert micro_f1(np.zeros((3, 2)), np.zeros((3, 2))) == 0.0


def test_micro_f1_metrics_by_protocol_and_folds():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(0)
    ip, il, tp, tl = rng.random((10, 4)), rng.random((10, 4)) < 0.5, rng.random((20, 4)), rng.random((20, 4)) < 0.5
    protocol = Protocol("lp_test", "test", 2, None, "test", relevance="label_predictions",
                        metrics=("image_micro_f1", "text_micro_f1"))
    result = evaluate_protocol(torch.zeros(10, 20), protocol, LabelPredictions(ip, il, tp, tl))
    want_img = np.mean([f1_score(il[s], ip[s] >= 0.5, average="micro") for s in (slice(0, 5), slice(5, 10))])
    want_txt = np.mean([f1_score(tl[s], tp[s] >= 0.5, average="micro") for s in (slice(0, 10), slice(10, 20))])
    assert result["metrics"]["image_micro_f1"] == pytest.approx(want_img)
    assert result["metrics"]["text_micro_f1"] == pytest.approx(want_txt)
    with pytest.raises(HarnessError, match="images x texts"):
        evaluate_protocol(torch.zeros(10, 19), protocol, LabelPredictions(ip, il, tp, tl))


# -- method file ------------------------------------------------------------------------------

@pytest.mark.parametrize("dataset", ["synthtags", "mirflickr", "nuswide", "cocolabelwise"])
def test_method_file_resolves_on_every_dataset_with_its_lambda(dataset):
    for variants in ([], ["independent"], ["consistency"], ["lambda_0"], ["lambda_1"]):
        cfg = api.experiment_config(METHOD, dataset, variants=variants)
        weights = {t["kind"]: t.get("weight", 1.0) for t in cfg["loss"]["terms"]}
        if not variants or variants == ["consistency"]:
            assert weights["masked_prediction"] == (0.01 if dataset == "cocolabelwise" else 0.1)
        assert cfg["model"]["kind"] == "label_wise" and cfg["training"]["selection_metric"] == "ndcg500_sum"
    assert api.experiment_config(METHOD, "synthtags", variants=["consistency"])["loss"]["terms"][2] == \
        {"kind": "consistency", "weight": 0.1}
