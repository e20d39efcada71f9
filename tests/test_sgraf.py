"""SGRAF: the vectorised block scoring against a per-pair reference written from the paper's
equations, and the ablation switches against the modules they should build."""
import pytest
import torch

from methods.models.cross_attention import caption_blocks
from methods.models.sgraf import SGRAF
from methods.models.text import GRUTextEncoder

REGIONS, REGION_DIM, EMBED, SIM, VOCAB = 7, 12, 10, 6, 30


def build(**kw) -> SGRAF:
    torch.manual_seed(0)
    args = dict(heads=["sgr"], sgr_steps=3)
    args.update(kw)
    model = SGRAF(REGION_DIM, REGIONS, EMBED, SIM, GRUTextEncoder(VOCAB, 8, EMBED, bidirectional=True, embed_dropout=0.4),
                  **args)
    # non-trivial BatchNorm statistics, so that eval mode really uses them
    for m in model.modules():
        if hasattr(m, "running_mean") and m.running_mean is not None:
            m.running_mean.uniform_(-0.3, 0.3)
            m.running_var.uniform_(0.5, 2.0)
    return model.eval()


def random_inputs(n_img=3, lengths=(1, 4, 9, 2, 9, 5)):
    g = torch.Generator().manual_seed(1)
    features = torch.randn(n_img, REGIONS, REGION_DIM, generator=g)
    tokens = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, n in enumerate(lengths):
        tokens[row, :n] = torch.randint(1, VOCAB, (n,), generator=g)
    return features, tokens, torch.tensor(lengths)


# -- the reference: one (image, caption) pair at a time, no padding, no masks -------------------

def l2(x, dim=-1):
    """The public code's l2norm: X / (sqrt(sum X^2) + 1e-8)."""
    return x / ((x * x).sum(dim=dim, keepdim=True).sqrt() + 1e-8)


def linear(layer, x):
    return x @ layer.weight.t() + layer.bias


def reference_image(model, feats):
    """(R, D) regions and the global vector of one image."""
    v = l2(linear(model.fc, feats))
    sa = model.visual_sa
    lin, bn = sa.local[0], sa.local[1]
    local = torch.tanh((linear(lin, v) - bn.running_mean[:, None]) / torch.sqrt(bn.running_var[:, None] + bn.eps)
                       * bn.weight[:, None] + bn.bias[:, None])
    lin_g, bn_g = sa.mean[0], sa.mean[1]
    g = torch.tanh((linear(lin_g, v.mean(0)) - bn_g.running_mean) / torch.sqrt(bn_g.running_var + bn_g.eps)
                   * bn_g.weight + bn_g.bias)
    a = torch.softmax(linear(sa.weight, local * g).squeeze(-1), dim=0)
    return v, l2((a[:, None] * v).sum(0))


def reference_caption(model, tokens):
    """(L, D) words (each caption encoded alone) and its global vector."""
    out, _ = model.text.gru(model.text.embed(tokens[None]))
    half = out.shape[-1] // 2
    t = l2((out[0, :, :half] + out[0, :, half:]) / 2)
    sa = model.text_sa
    local = torch.tanh(linear(sa.local[0], t))
    g = torch.tanh(linear(sa.mean[0], t.mean(0)))
    a = torch.softmax(linear(sa.weight, local * g).squeeze(-1), dim=0)
    return t, l2((a[:, None] * t).sum(0))


def reference_score(model, v, vg, t, tg):
    nodes = []
    if model.nodes_global:
        nodes.append(l2(linear(model.global_sim.proj, (vg - tg) ** 2))[None] if model.similarity_kind == "vector"
                     else (vg @ tg)[None])
    if model.nodes_local:
        s = torch.nn.functional.leaky_relu(v @ t.t(), 0.1)                   # (R, L)
        if model.attention == "t2i":   # words attend to regions
            s = l2(s, dim=1)                                                    # over words
            alpha = torch.softmax(model.smooth * s, dim=0)
            attended, query = l2(alpha.t() @ v), t
        else:                           # regions attend to words
            s = l2(s, dim=0)                                                    # over regions
            alpha = torch.softmax(model.smooth * s, dim=1)
            attended, query = l2(alpha @ t), v
        if model.similarity_kind == "vector":
            nodes.append(l2(linear(model.local_sim.proj, (attended - query) ** 2)))
        else:
            nodes.append((attended * query).sum(-1))
    n = torch.cat(nodes)
    scores = []
    for name in model.head_names:
        head = model.heads[name]
        if name == "avg":
            scores.append(n.mean() if head.score is None else torch.sigmoid(linear(head.score, n)).mean())
        elif name == "sgr":
            for step in head.steps:
                e = torch.softmax(linear(step.query, n) @ linear(step.key, n).t(), dim=1)
                n_next = torch.relu(linear(step.update, e @ n))
                n = n_next
            out = n[0] if head.readout == "global" else n.mean(0)
            scores.append(torch.sigmoid(linear(head.score, out)).squeeze())
            n = torch.cat(nodes)  # other heads see the un-reasoned nodes
        else:
            bn = head.bn
            logit = (linear(head.attention, n).squeeze(-1) - bn.running_mean) / torch.sqrt(bn.running_var + bn.eps)
            beta = torch.sigmoid(logit * bn.weight + bn.bias)
            beta = beta / beta.sum()
            scores.append(torch.sigmoid(linear(head.score, l2((beta[:, None] * n).sum(0)))).squeeze())
    return torch.stack(scores).mean()


def reference_matrix(model, features, tokens, lengths):
    images = [reference_image(model, f) for f in features]
    captions = [reference_caption(model, tok[:n]) for tok, n in zip(tokens, lengths.tolist())]
    return torch.stack([torch.stack([reference_score(model, v, vg, t, tg) for t, tg in captions])
                        for v, vg in images])


LOCAL_NODES, GLOBAL_NODE = {"global": False, "local": True}, {"global": True, "local": False}
I2T = {"direction": "i2t", "smooth": 9.0}   # regions attend to words
CONFIGS = {
    "sgr": dict(heads=["sgr"]),
    "saf": dict(heads=["saf"]),
    "joint": dict(heads=["sgr", "saf"]),
    "sgr_local_1step": dict(heads=["sgr"], nodes=LOCAL_NODES, sgr_steps=1),
    "global_no_reasoning": dict(heads=["sgr"], nodes=GLOBAL_NODE, sgr_steps=0),
    "sgr_4steps": dict(heads=["sgr"], sgr_steps=4),
    "i2t_sgr_local": dict(heads=["sgr"], attention=I2T, nodes=LOCAL_NODES),
    "i2t_saf_local": dict(heads=["saf"], attention=I2T, nodes=LOCAL_NODES),
    "scalar_avg_t2i": dict(heads=["avg"], similarity="scalar", nodes=LOCAL_NODES),
    "scalar_avg_i2t": dict(heads=["avg"], similarity="scalar", nodes=LOCAL_NODES, attention=I2T),
    "vector_avg_t2i": dict(heads=["avg"], nodes=LOCAL_NODES),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_block_scores_equal_the_per_pair_reference(name):
    model = build(**CONFIGS[name])
    features, tokens, lengths = random_inputs()
    with torch.no_grad():
        img = model.encode_images({"features": features})
        cap = model.encode_texts({"tokens": tokens, "lengths": lengths})
        fast = model.score_matrix(img, cap)
        model.block_elements = 1  # one caption per block: padding, sorting and scatter-back exercised
        tiny_blocks = model.score_matrix(img, cap)
        expected = reference_matrix(model, features, tokens, lengths)
    assert fast.shape == (3, 6)
    torch.testing.assert_close(fast, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(tiny_blocks, expected, atol=1e-5, rtol=0)
    # the scores are not all the same (the test would pass on a constant otherwise)
    assert fast.std() > 1e-4


def test_training_similarity_keeps_gradients_and_matches_eval_scoring():
    model = build(heads=["sgr", "saf"])
    features, tokens, lengths = random_inputs()
    img = model.encode_images({"features": features})
    cap = model.encode_texts({"tokens": tokens, "lengths": lengths})
    heads = model.training_outputs(img, cap)["scores"]
    assert len(heads) == 2 and all(h.shape == (3, 6) for h in heads)
    torch.testing.assert_close(model.score(img, cap), (heads[0] + heads[1]) / 2)
    (heads[0].sum() + heads[1].sum()).backward()
    assert model.heads["sgr"].steps[0].query.weight.grad.abs().sum() > 0
    assert model.heads["saf"].attention.weight.grad.abs().sum() > 0
    assert model.local_sim.proj.weight.grad.abs().sum() > 0


def test_masked_batch_norm_in_training_uses_only_valid_nodes():
    model = build(heads=["saf"]).train()
    bn = model.heads["saf"].bn
    x = torch.randn(2, 3, 5)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False], [True] * 3 + [False] * 2])[None]
    x_padded = x.masked_fill(~mask, 1e6)  # garbage in padded slots must not move the statistics
    before = bn.running_mean.clone()
    out = bn(x_padded, mask)
    valid = x[mask.expand_as(x)]
    expected = (valid - valid.mean()) / torch.sqrt(valid.var(unbiased=False) + bn.eps)
    torch.testing.assert_close(out[mask.expand_as(x)], expected)
    torch.testing.assert_close(bn.running_mean, 0.9 * before + 0.1 * valid.mean())


def test_saf_weights_sum_to_one_over_the_caption_words():
    model = build(heads=["saf"])
    features, tokens, lengths = random_inputs()
    with torch.no_grad():
        img = model.encode_images({"features": features})
        cap = model.encode_texts({"tokens": tokens, "lengths": lengths})
        beta = model.saf_weights(img, cap)
    assert beta.shape == (3, 6, 1 + int(lengths.max()))
    torch.testing.assert_close(beta.sum(-1), torch.ones(3, 6))
    assert (beta[:, 0, 2:] == 0).all()  # the length-1 caption: the global node and one word only


def test_ablation_switches_build_the_named_modules():
    full = build(heads=["sgr"], sgr_steps=3)
    assert len(full.heads["sgr"].steps) == 3 and full.heads["sgr"].readout == "global"
    assert full.global_sim.proj.out_features == SIM and full.local_sim.proj.out_features == SIM
    assert len(build(heads=["sgr"], sgr_steps=1).heads["sgr"].steps) == 1
    local_only = build(heads=["sgr"], nodes=LOCAL_NODES)
    assert local_only.global_sim is None and local_only.heads["sgr"].readout == "mean"
    assert build(heads=["sgr"], nodes=GLOBAL_NODE, sgr_steps=0).local_sim is None
    joint = build(heads=["sgr", "saf"])
    assert set(joint.heads) == {"sgr", "saf"}
    scalar = build(heads=["avg"], similarity="scalar")
    assert not hasattr(scalar, "local_sim") and scalar.heads["avg"].score is None
    torch.manual_seed(0)
    wide = SGRAF(REGION_DIM, REGIONS, EMBED, 16, GRUTextEncoder(VOCAB, 8, EMBED, bidirectional=True), ["sgr"])
    assert wide.heads["sgr"].steps[0].query.in_features == 16
    # outputs: the node count follows the attention direction and the node switches
    features, tokens, lengths = random_inputs()
    with torch.no_grad():
        for model, nodes in ((full, 1 + 9), (local_only, 9), (build(heads=["saf"], attention=I2T), 1 + REGIONS),
                             (build(heads=["saf"], attention=I2T, nodes=LOCAL_NODES), REGIONS)):
            n, mask = model.pair_nodes(model.encode_images({"features": features}),
                                       model.encode_texts({"tokens": tokens, "lengths": lengths}))
            assert n.shape[2] == nodes and mask.shape == (6, nodes)
    with pytest.raises(ValueError, match="only be averaged"):
        build(heads=["sgr"], similarity="scalar")
    with pytest.raises(ValueError, match="at least one"):
        build(nodes={"global": False, "local": False})


def test_caption_blocks_respect_the_budget_and_cover_every_caption_once():
    lengths = torch.tensor([3, 12, 5, 12, 1, 7, 7, 2])

    def per_pair(length):
        return 10 * length

    budget = 4 * per_pair(12) * 2
    blocks = caption_blocks(lengths, n_images=4, pair_elements=per_pair, budget=budget, image_block=4)
    seen = torch.cat([idx for idx, _ in blocks])
    assert sorted(seen.tolist()) == list(range(8))
    for idx, longest in blocks:
        assert longest == int(lengths[idx].max())
        assert 4 * len(idx) * per_pair(longest) <= budget or len(idx) == 1
    longest = [lo for _, lo in blocks]
    assert longest == sorted(longest, reverse=True) and len(blocks) < 8  # short captions share blocks
