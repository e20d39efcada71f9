"""Model parts against independent computations."""
import pytest
import torch

from methods.benchmarks import cross_attention as cross_attention_benchmark
from methods.features.backbone import ResNetBackbone
from methods.models.layers import PLAIN_L2NORM_EPS, SCAN_L2NORM_EPS, l2norm
from methods.models.text import GRUTextEncoder
from methods.models.vsepp import VSEPP


def test_gru_encoder_takes_the_last_valid_step_regardless_of_padding():
    torch.manual_seed(0)
    enc = GRUTextEncoder(20, 8, 6).eval()
    caption = torch.tensor([[1, 5, 7, 9, 2]])
    alone = enc(caption, torch.tensor([5]))
    padded = torch.tensor([[1, 5, 7, 9, 2, 0, 0, 0], [1, 3, 2, 0, 0, 0, 0, 0]])
    batch = enc(padded, torch.tensor([5, 3]))
    torch.testing.assert_close(batch[0], alone[0])
    # independent: run the GRU step by step over the 5 real tokens
    out, h = enc.gru(enc.embed(caption))
    torch.testing.assert_close(alone[0], h[-1, 0] / h[-1, 0].norm())


def test_vsepp_frozen_backbone_stays_in_eval_mode_and_gets_no_gradient():
    torch.manual_seed(0)
    model = VSEPP(ResNetBackbone("resnet18", "none"), 16, GRUTextEncoder(10, 4, 16))
    model.set_finetune(False)
    model.train()
    assert not model.backbone.training and model.fc.training
    assert all(not p.requires_grad for p in model.backbone.parameters())
    images = torch.randn(2, 3, 64, 64)
    emb = model.encode_images({"images": images})
    torch.testing.assert_close(emb.norm(dim=1), torch.ones(2))
    # cached pooled features and the CNN path give the same embedding
    pooled = model.backbone.pooled(images)
    torch.testing.assert_close(model.encode_images({"features": pooled}), emb)
    model.set_finetune(True)
    assert any(p.requires_grad for p in model.backbone.parameters())


# -- VSRN ---------------------------------------------------------------------------------------

def vsrn(**kw):
    from methods.models.vsrn import VSRN

    torch.manual_seed(0)
    return VSRN(12, 8, GRUTextEncoder(10, 4, 8), **kw)


def test_vsrn_gcn_blocks_start_as_identity_and_follow_the_formula():
    from methods.models.vsrn import ResidualGCN

    torch.manual_seed(1)
    block = ResidualGCN(6).train()
    v = torch.randn(3, 5, 6)
    torch.testing.assert_close(block(v), v)  # BN scale and shift start at 0
    with torch.no_grad():
        block.bn.weight.fill_(1.0)
        block.bn.bias.fill_(0.5)
    block.bn.reset_running_stats()  # the train-mode call above moved them
    block.eval()  # running stats (0 mean, unit var): BN(x) = x / sqrt(1 + eps) + 0.5
    # independent: loop over batch items and region pairs
    want = torch.empty_like(v)
    for b in range(3):
        th, ph, g = block.theta(v[b]), block.phi(v[b]), block.g(v[b])
        for i in range(5):
            y = sum((th[i] @ ph[j]) / 5 * g[j] for j in range(5))
            want[b, i] = v[b, i] + block.w(y) / (1 + block.bn.eps) ** 0.5 + 0.5
    torch.testing.assert_close(block(v), want, rtol=1e-5, atol=1e-5)


def test_vsrn_region_l2norm_axis_option():
    regions = torch.randn(4, 7, 12)
    for option, axis in (("feature", 2), ("region_axis", 1)):
        model = vsrn(region_l2norm=option).eval()
        seen = {}
        model.gcn.register_forward_hook(lambda m, i, o: seen.update(gcn_in=i[0]))
        emb = model.encode_images({"features": regions})
        norms = seen["gcn_in"].norm(dim=axis)
        torch.testing.assert_close(norms, torch.ones_like(norms))
        torch.testing.assert_close(emb.norm(dim=1), torch.ones(4))


def test_vsrn_image_embedding_is_the_last_gru_state_over_regions_in_order():
    model = vsrn(gcn_blocks=0, final_bn=False, l2norm_after_fc=False).eval()
    regions = torch.randn(2, 5, 12)
    emb = model.encode_images({"features": regions})
    # independent: step the GRU cell by cell over fc(regions) normalised per region
    v = model.fc(regions)
    v = v / v.norm(dim=2, keepdim=True)
    cell = torch.nn.GRUCell(8, 8)
    cell.load_state_dict({"weight_ih": model.gru.weight_ih_l0, "weight_hh": model.gru.weight_hh_l0,
                          "bias_ih": model.gru.bias_ih_l0, "bias_hh": model.gru.bias_hh_l0})
    h = torch.zeros(2, 8)
    for r in range(5):
        h = cell(v[:, r], h)
    torch.testing.assert_close(emb, h / h.norm(dim=1, keepdim=True), rtol=1e-5, atol=1e-6)
    # region order matters (a GRU, not a pooling)
    assert not torch.allclose(model.encode_images({"features": regions.flip(1)}), emb)


@pytest.mark.parametrize("eps", [SCAN_L2NORM_EPS, PLAIN_L2NORM_EPS])
def test_l2norm_divides_by_norm_plus_the_sources_eps_and_maps_zero_vectors_to_zero(eps):
    x = torch.randn(6, 33, dtype=torch.float64) * torch.logspace(-3, 3, 6, dtype=torch.float64)[:, None]
    x[2] = 0
    # independent: SGRAF's X / (sqrt(sum X^2) + 1e-8), VSE++/VSRN's X / sqrt(sum X^2), in float64
    norm = x.pow(2).sum(dim=1, keepdim=True).sqrt()
    want = torch.where(norm > 0, x / (norm + eps), torch.zeros_like(x))
    for dtype, tol in ((torch.float64, 1e-14), (torch.float32, 1e-6), (torch.float16, 2e-3), (torch.bfloat16, 1e-2)):
        got = l2norm(x.to(dtype), dim=1, eps=eps)
        assert got.dtype == dtype
        assert torch.isfinite(got).all() and (got[2] == 0).all()
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
    # where the eps shows: |(3e-8, 4e-8)| = 5e-8, so SGRAF gives (3, 4) / 6 and VSE++ (3, 4) / 5
    tiny = torch.tensor([3e-8, 4e-8], dtype=torch.float64)
    expected = torch.tensor([3.0, 4.0], dtype=torch.float64) / (6 if eps else 5)
    torch.testing.assert_close(l2norm(tiny, eps=eps), expected, rtol=1e-12, atol=0)


def test_cross_attention_benchmark_runs_on_a_few_pairs(capsys):
    cross_attention_benchmark.main(["--images", "3", "--captions", "4", "--device", "cpu", "--repeats", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:]] == ["sgr", "saf", "mvsa_t2i_49", "mvsa_i2t_49", "mvsa_t2i_98",
                                                       "mvsa_i2t_98"]
    assert all("pairs/s" in line for line in lines[1:])
