"""Portable convolutions (numpy's OpenBLAS GEMMs over ATen's im2col) against torch's own
``F.conv2d``, an independent implementation, in float64: outputs and all three gradients."""
import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from methods.features.portable_conv import PortableConv2d, portable_convolutions

GEOMETRIES = [  # (in, out, kernel, stride, padding, dilation, size, bias): ResNet's and odd ones
    (3, 8, 7, 2, 3, 1, 17, False),   # the stem
    (8, 16, 3, 1, 1, 1, 9, True),
    (16, 4, 1, 2, 0, 1, 8, False),   # downsampling 1x1
    (5, 6, 1, 1, 0, 1, 5, True),     # pointwise (no im2col)
    (4, 4, 3, 2, 2, 2, 11, False),   # dilated
    (70, 130, 3, 1, 1, 1, 12, False),  # rows and columns over one thread block (64)
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g[:7])))
def test_matches_torch_conv2d_and_its_gradients(geometry, threads):
    c, o, k, s, p, d, size, bias = geometry
    g = torch.Generator().manual_seed(0)
    conv = nn.Conv2d(c, o, k, s, p, d, bias=bias).double()
    x = torch.randn(3, c, size, size, dtype=torch.float64, generator=g, requires_grad=True)
    upstream = torch.randn(conv(x).shape, dtype=torch.float64, generator=g)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        portable = portable_convolutions(nn.Sequential(conv))[0]
        assert type(portable) is PortableConv2d
        out = portable(x)
        gx, gw, *gb = torch.autograd.grad(out, [x, conv.weight, *([conv.bias] if bias else [])], upstream)
    finally:
        torch.set_num_threads(before)
    ref = F.conv2d(x, conv.weight, conv.bias, s, p, d)
    rx, rw, *rb = torch.autograd.grad(ref, [x, conv.weight, *([conv.bias] if bias else [])], upstream)
    for got, want in [(out, ref), (gx, rx), (gw, rw), *zip(gb, rb)]:
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_swaps_every_convolution_and_keeps_the_state_dict():
    net = torchvision.models.resnet18(weights=None)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    portable_convolutions(net)
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 20 and all(type(m) is PortableConv2d for m in convs)
    after = net.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)


def test_falls_back_to_torch_where_numpy_cannot_compute():
    conv = nn.Conv2d(3, 4, 3, padding=1).bfloat16()
    x = torch.randn(2, 3, 6, 6).bfloat16()
    want = F.conv2d(x, conv.weight, conv.bias, padding=1)
    portable_convolutions(nn.Sequential(conv))
    assert torch.equal(conv(x), want)
    grouped = nn.Conv2d(4, 4, 3, padding=1, groups=2)
    x = torch.randn(2, 4, 6, 6)
    want = F.conv2d(x, grouped.weight, grouped.bias, padding=1, groups=2)
    portable_convolutions(nn.Sequential(grouped))
    assert torch.equal(grouped(x), want)
