"""Losses against independent computations: loops over the definitions, VSE++'s diagonal form,
pytorch-metric-learning's NT-Xent, a brute-force AP, and the closed-form SmoothAP gradient of
the metric-learning study's appendix (Eq. 18)."""
import numpy as np
import pytest
import torch

from methods.losses.ranking import build_loss, directional_losses
from methods.losses.gradient_count import count_gradient_negatives
from methods.losses.smooth_ap import smooth_ap_per_query


def triplet(kind, margin=0.2):
    return build_loss({"kind": kind, "margin": margin}, 0)


def random_batch(seed, n_img=6, n_cap=14):
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(n_img, n_cap, generator=g) * 2 - 1
    owner = torch.cat([torch.arange(n_img), torch.randint(0, n_img, (n_cap - n_img,), generator=g)])
    return scores, owner[None, :] == torch.arange(n_img)[:, None]


def loop_triplet_losses(scores, positives, margin):
    s, p = scores.numpy(), positives.numpy()
    total_sum = total_max = 0.0
    for i, c in zip(*np.nonzero(p)):
        i2t = [max(0.0, margin - s[i, c] + s[i, c2]) for c2 in range(s.shape[1]) if not p[i, c2]]
        t2i = [max(0.0, margin - s[i, c] + s[i2, c]) for i2 in range(s.shape[0]) if not p[i2, c]]
        total_sum += sum(i2t) + sum(t2i)
        total_max += max(i2t, default=0.0) + max(t2i, default=0.0)
    return total_sum, total_max


@pytest.mark.parametrize("seed", range(5))
def test_masked_triplet_losses_match_loops(seed):
    scores, positives = random_batch(seed)
    want_sum, want_max = loop_triplet_losses(scores, positives, 0.2)
    assert triplet("triplet_sum")(scores, positives).item() == pytest.approx(want_sum, rel=1e-5)
    assert triplet("triplet_hardest")(scores, positives).item() == pytest.approx(want_max, rel=1e-5)


def test_diagonal_case_equals_vsepp_formulation():
    g = torch.Generator().manual_seed(3)
    s = torch.rand(8, 8, generator=g)
    m = 0.2
    d = s.diag()
    cost_s = (m + s - d[:, None]).clamp(min=0).fill_diagonal_(0)   # image query, caption negatives
    cost_im = (m + s - d[None, :]).clamp(min=0).fill_diagonal_(0)  # caption query, image negatives
    eye = torch.eye(8, dtype=torch.bool)
    assert triplet("triplet_sum")(s, eye).item() == pytest.approx((cost_s.sum() + cost_im.sum()).item(), rel=1e-6)
    assert triplet("triplet_hardest")(s, eye).item() == pytest.approx(
        (cost_s.max(1).values.sum() + cost_im.max(0).values.sum()).item(), rel=1e-6)


def test_hardest_gradient_reaches_only_the_hardest_negative():
    s = torch.tensor([[0.9, 0.8, 0.1], [0.2, 0.5, 0.3], [0.0, 0.1, 0.7]], requires_grad=True)
    triplet("triplet_hardest")(s, torch.eye(3, dtype=torch.bool)).backward()
    # Worked by hand: the only violating negative is s[0, 1], hardest for image 0 (0.2-0.9+0.8)
    # and for caption 1 (0.2-0.5+0.8); every other hinge is <= 0.
    expected = torch.tensor([[-1.0, 2.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, 0.0]])
    assert torch.equal(s.grad, expected)


def test_warmup_uses_the_sum_before_hardest_negative_mining():
    from methods.losses.ranking import loss_kind_at

    cfg = {"kind": "triplet_hardest", "margin": 0.2, "warmup_sum_epochs": 2}
    assert [loss_kind_at(cfg, e) for e in range(4)] == ["triplet_sum", "triplet_sum", "triplet_hardest", "triplet_hardest"]
    s, eye = torch.rand(5, 5), torch.eye(5, dtype=torch.bool)
    assert build_loss(cfg, 0)(s, eye).item() == pytest.approx(triplet("triplet_sum")(s, eye).item())
    assert build_loss(cfg, 2)(s, eye).item() == pytest.approx(triplet("triplet_hardest")(s, eye).item())


# -- NT-Xent ------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_nt_xent_equals_pytorch_metric_learning(seed):
    from pytorch_metric_learning import losses as pml  # a dev dependency: the oracle must be there
    g = torch.Generator().manual_seed(seed)
    n_img, n_cap, dim = 5, 12, 16
    img = torch.nn.functional.normalize(torch.randn(n_img, dim, generator=g, dtype=torch.float64), dim=1)
    cap = torch.nn.functional.normalize(torch.randn(n_cap, dim, generator=g, dtype=torch.float64), dim=1)
    owner = torch.cat([torch.arange(n_img), torch.randint(0, n_img, (n_cap - n_img,), generator=g)])
    positives = owner[None, :] == torch.arange(n_img)[:, None]
    oracle = pml.NTXentLoss(temperature=0.1)
    i2t = oracle(img, torch.arange(n_img), ref_emb=cap, ref_labels=owner)
    t2i = oracle(cap, owner, ref_emb=img, ref_labels=torch.arange(n_img))
    ours = build_loss({"kind": "nt_xent", "tau": 0.1}, 0)(img @ cap.t(), positives)
    assert ours.item() == pytest.approx(((i2t + t2i) / 2).item(), rel=1e-9)


def test_nt_xent_diagonal_is_half_row_plus_half_column_cross_entropy():
    g = torch.Generator().manual_seed(0)
    s = torch.rand(7, 7, generator=g, dtype=torch.float64) * 2 - 1
    target = torch.arange(7)
    want = 0.5 * torch.nn.functional.cross_entropy(s / 0.1, target) + 0.5 * torch.nn.functional.cross_entropy(s.t() / 0.1, target)
    got = build_loss({"kind": "nt_xent", "tau": 0.1}, 0)(s, torch.eye(7, dtype=torch.bool))
    assert got.item() == pytest.approx(want.item(), rel=1e-12)


# -- SmoothAP -----------------------------------------------------------------------------------

def brute_force_ap(scores_row, positives_row):
    order = sorted(range(len(scores_row)), key=lambda c: -scores_row[c])
    hits, precisions = 0, []
    for rank, c in enumerate(order, start=1):
        if positives_row[c]:
            hits += 1
            precisions.append(hits / rank)
    return sum(precisions) / len(precisions)


@pytest.mark.parametrize("seed", range(4))
def test_smooth_ap_tends_to_exact_ap(seed):
    g = torch.Generator().manual_seed(seed)
    n_img, n_cap = 6, 30
    # distinct scores at least 1e-2 apart, so a sigmoid at tau=1e-4 is a step to within e^-100
    scores = (torch.randperm(n_img * n_cap, generator=g).reshape(n_img, n_cap).double() / (n_img * n_cap))
    positives = (torch.arange(n_cap)[None, :] // 5) == torch.arange(n_img)[:, None]
    for s, p in ((scores, positives), (scores.t(), positives.t())):
        got = smooth_ap_per_query(s, p, tau=1e-4)
        want = [brute_force_ap(s[q].tolist(), p[q].tolist()) for q in range(s.shape[0])]
        assert got.tolist() == pytest.approx(want, abs=1e-12)


def test_smooth_ap_chunking_changes_nothing():
    scores, positives = random_batch(7, n_img=9, n_cap=45)
    whole = smooth_ap_per_query(scores, positives, tau=0.05)
    chunked = smooth_ap_per_query(scores, positives, tau=0.05, chunk_elements=50)
    assert torch.allclose(whole, chunked, atol=0, rtol=0)


def test_smooth_ap_gradient_equals_closed_form_of_the_appendix():
    """∂AP/∂q = 1/|P| Σ_{i∈P} [R_P(i) Σ_{j∈N} sim(D_ij)(v_i - v_j)
                                - (R_Ω(i) - R_P(i)) Σ_{j∈P, j≠i} sim(D_ij)(v_i - v_j)] / R_Ω(i)²,
    sim(D) = G(D)(1 - G(D))/τ (appendix Eqs. 11, 18; there R(i, S_N) - 1 = Σ_{j∈N} G(D_ij))."""
    g = torch.Generator().manual_seed(11)
    tau, dim, m = 0.2, 5, 8
    q = torch.nn.functional.normalize(torch.randn(dim, generator=g, dtype=torch.float64), dim=0)
    v = torch.nn.functional.normalize(torch.randn(m, dim, generator=g, dtype=torch.float64), dim=1)
    pos = torch.tensor([True, False, True, False, False, True, False, False])
    s = (v @ q).tolist()

    def G(x):
        return 1.0 / (1.0 + np.exp(-x / tau))

    grad = np.zeros(dim)
    P = [i for i in range(m) if pos[i]]
    N = [j for j in range(m) if not pos[j]]
    for i in P:
        r_p = 1 + sum(G(s[j] - s[i]) for j in P if j != i)
        r_all = r_p + sum(G(s[j] - s[i]) for j in N)
        sim = {j: G(s[j] - s[i]) * (1 - G(s[j] - s[i])) / tau for j in range(m)}
        term_n = sum(sim[j] * (v[i] - v[j]).numpy() for j in N)
        term_p = sum((sim[j] * (v[i] - v[j]).numpy() for j in P if j != i), np.zeros(dim))
        grad += (r_p * term_n - (r_all - r_p) * term_p) / r_all ** 2
    grad /= len(P)

    q_leaf = q.clone().requires_grad_(True)
    ap = smooth_ap_per_query((v @ q_leaf)[None, :], pos[None, :], tau=tau)[0]
    (autograd,) = torch.autograd.grad(ap, q_leaf)
    np.testing.assert_allclose(autograd.numpy(), grad, rtol=1e-10, atol=1e-12)


# -- gradient counting --------------------------------------------------------------------------

def test_gradient_counts_worked_example():
    # 2 images; captions 0,1 belong to image 0, captions 2,3 to image 1.
    s = torch.tensor([[0.9, 0.5, 0.62, 0.1],
                      [0.25, 0.65, 0.8, 0.7]])
    pos = torch.tensor([[True, True, False, False], [False, False, True, True]])
    cfg = {"margin": 0.2, "tau": 0.1}
    # triplet_sum, image 0 (positives 0.9, 0.5; negatives 0.62, 0.1): 0.2-0.9+0.62 < 0,
    #   0.2-0.9+0.1 < 0, 0.2-0.5+0.62 > 0, 0.2-0.5+0.1 < 0 -> caption 2 only.
    # image 1 (positives 0.8, 0.7; negatives 0.25, 0.65): 0.2-0.8+0.65 > 0 and 0.2-0.7+0.65 > 0,
    #   both caption 1; the hinges with 0.25 are < 0 -> caption 1 only.
    counts = count_gradient_negatives("triplet_sum", cfg, s, pos, 0.01)
    assert counts["i2t"]["nonzero"].tolist() == [1, 1]
    assert counts["i2t"]["negatives"].tolist() == [2, 2]
    # captions as queries: caption 0 (0.9 vs image 1 at 0.25): no violation; caption 1 (0.5 vs 0.65):
    # yes; caption 2 (0.8 vs 0.62: 0.2-0.8+0.62 > 0): yes; caption 3 (0.7 vs 0.1): no.
    assert counts["t2i"]["nonzero"].tolist() == [0, 1, 1, 0]
    assert counts["t2i"]["contributing"].tolist() == [0, 1, 1, 0]
    # NT-Xent: every negative has a softmax weight, so every negative counts as non-zero.
    counts = count_gradient_negatives("nt_xent", cfg, s, pos, 0.01)
    assert counts["i2t"]["nonzero"].tolist() == [2, 2] and counts["t2i"]["nonzero"].tolist() == [1, 1, 1, 1]
    # with a relative threshold of 1 only the largest-gradient negative of each query remains
    counts = count_gradient_negatives("nt_xent", cfg, s, pos, 1.0)
    assert counts["i2t"]["contributing"].tolist() == [1, 1]


def test_hardest_negative_gives_at_most_one_negative_per_positive_pair():
    scores, positives = random_batch(2, n_img=8, n_cap=40)
    hardest = count_gradient_negatives("triplet_hardest", {"margin": 0.2}, scores, positives, 0.01)
    everything = count_gradient_negatives("triplet_sum", {"margin": 0.2}, scores, positives, 0.01)
    for d, pos in (("i2t", positives), ("t2i", positives.t())):
        assert (hardest[d]["nonzero"] <= pos.sum(dim=1)).all()
        assert (hardest[d]["nonzero"] <= everything[d]["nonzero"]).all()
    i2t, t2i = directional_losses("triplet_sum", {"margin": 0.2}, scores, positives)
    assert (i2t + t2i).item() == pytest.approx(build_loss({"kind": "triplet_sum", "margin": 0.2}, 0)(scores, positives).item())
