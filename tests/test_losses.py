"""Triplet losses against a loop-by-loop computation of the definitions, and VSE++'s diagonal form."""
import numpy as np
import pytest
import torch

from methods.losses.triplet import triplet_hardest, triplet_sum


def loop_losses(scores, positives, margin):
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
    g = torch.Generator().manual_seed(seed)
    n_img, n_cap = 6, 14
    scores = torch.rand(n_img, n_cap, generator=g) * 2 - 1
    owner = torch.randint(0, n_img, (n_cap,), generator=g)
    positives = owner[None, :] == torch.arange(n_img)[:, None]
    want_sum, want_max = loop_losses(scores, positives, 0.2)
    assert triplet_sum(scores, positives, 0.2).item() == pytest.approx(want_sum, rel=1e-5)
    assert triplet_hardest(scores, positives, 0.2).item() == pytest.approx(want_max, rel=1e-5)


def test_diagonal_case_equals_vsepp_formulation():
    g = torch.Generator().manual_seed(3)
    s = torch.rand(8, 8, generator=g)
    m = 0.2
    d = s.diag()
    cost_s = (m + s - d[:, None]).clamp(min=0).fill_diagonal_(0)   # image query, caption negatives
    cost_im = (m + s - d[None, :]).clamp(min=0).fill_diagonal_(0)  # caption query, image negatives
    eye = torch.eye(8, dtype=torch.bool)
    assert triplet_sum(s, eye, m).item() == pytest.approx((cost_s.sum() + cost_im.sum()).item(), rel=1e-6)
    assert triplet_hardest(s, eye, m).item() == pytest.approx(
        (cost_s.max(1).values.sum() + cost_im.max(0).values.sum()).item(), rel=1e-6)


def test_hardest_gradient_reaches_only_the_hardest_negative():
    s = torch.tensor([[0.9, 0.8, 0.1], [0.2, 0.5, 0.3], [0.0, 0.1, 0.7]], requires_grad=True)
    triplet_hardest(s, torch.eye(3, dtype=torch.bool), 0.2).backward()
    # Worked by hand: the only violating negative is s[0, 1], hardest for image 0 (0.2-0.9+0.8)
    # and for caption 1 (0.2-0.5+0.8); every other hinge is <= 0.
    expected = torch.tensor([[-1.0, 2.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, 0.0]])
    assert torch.equal(s.grad, expected)


def test_warmup_uses_the_sum_before_hardest_negative_mining():
    from methods.losses import build_loss, loss_kind_at

    cfg = {"kind": "triplet_hardest", "margin": 0.2, "warmup_sum_epochs": 2}
    assert [loss_kind_at(cfg, e) for e in range(4)] == ["triplet_sum", "triplet_sum", "triplet_hardest", "triplet_hardest"]
    s, eye = torch.rand(5, 5), torch.eye(5, dtype=torch.bool)
    assert build_loss(cfg, 0)(s, eye).item() == pytest.approx(triplet_sum(s, eye, 0.2).item())
    assert build_loss(cfg, 2)(s, eye).item() == pytest.approx(triplet_hardest(s, eye, 0.2).item())
