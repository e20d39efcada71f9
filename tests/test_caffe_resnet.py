"""``resnet101_caffe``: the BUTD detector's ResNet-101 as VSE-infinity builds it for
``--backbone_source detector`` (woodfrog/vse_infty, branch master, ``lib/modules/resnet.py``).

The expectations are computed here from the source's equations (``F.conv2d`` / ``F.batch_norm`` /
``F.max_pool2d`` with its strides and max pool), from PyTorch's output-size formulas, and from the
source's weights layout (``ResnetFeatureExtractor._init_modules``: ``base = Sequential(conv1, bn1,
relu, maxpool, layer1, layer2, layer3)``, ``top = Sequential(layer4)``), not from the harness's code.
"""
import math

import pytest
import torch
import torch.nn.functional as F
import torchvision

from methods.errors import HarnessError
from methods.features.architectures import layer_channels, map_shape
from methods.features.backbone import ResNetBackbone, weights_mismatch, weights_problem
from methods.untrusted.sandbox import ReaderLimits

pytestmark = pytest.mark.xdist_group("caffe_resnet")   # one worker builds the shared ResNet-101 weights

BLOCKS = (3, 4, 23, 3)          # ResNet-101's Bottlenecks per stage (layer1..4)
STRIDES = (1, 2, 2, 2)
# base.<index> of the source's Sequential(conv1, bn1, relu, maxpool, layer1, layer2, layer3), top.0: layer4
SOURCE_NAMES = {"conv1": "base.0", "bn1": "base.1", "layer1": "base.4", "layer2": "base.5", "layer3": "base.6",
                "layer4": "top.0"}
LIMITS = ReaderLimits(memory_mb=1024, seconds=120.0)


@pytest.fixture(scope="module")
def weights():
    """A random ResNet-101 state dict (torchvision's names) whose BatchNorms are not identities in
    eval mode (random affine and running statistics), so that the reference exercises each of them."""
    gen = torch.Generator().manual_seed(0)
    state = torchvision.models.resnet101(weights=None).state_dict()
    for key, value in state.items():
        if key.endswith(("bn1.weight", "bn2.weight", "bn3.weight", "downsample.1.weight")):
            state[key] = 0.5 + 0.5 * torch.rand(value.shape, generator=gen)
        elif key.endswith((".bias", "running_mean")) and not key.startswith("fc."):
            state[key] = 0.1 * torch.randn(value.shape, generator=gen)
        elif key.endswith("running_var"):
            state[key] = 0.5 + torch.rand(value.shape, generator=gen)
    return state


@pytest.fixture(scope="module")
def weights_file(weights, tmp_path_factory):
    path = tmp_path_factory.mktemp("caffe") / "resnet101_caffe.pth"
    torch.save(weights, path)
    return path


@pytest.fixture(scope="module")
def backbone(weights_file):
    return ResNetBackbone("resnet101_caffe", str(weights_file)).eval()


def source_layout(state: dict) -> dict:
    """``state`` as the source saves its detector backbone: ``{'base': base.state_dict(), 'top':
    top.state_dict()}`` (no fc: neither Sequential holds it)."""
    out = {"base": {}, "top": {}}
    for key, value in state.items():
        module, rest = key.split(".", 1)
        if module in SOURCE_NAMES:
            part, index = SOURCE_NAMES[module].split(".")
            out[part][f"{index}.{rest}"] = value
    return out


def reference_maps(state: dict, images: torch.Tensor, style: str = "caffe") -> dict:
    """conv3/conv4/conv5 of the source's ResNet-101 written from its equations: ``Bottleneck``
    strides its 1x1 conv1 (``stride=stride``) and not its 3x3 conv2, and the stem's max pool is
    ``MaxPool2d(kernel_size=3, stride=2, padding=0, ceil_mode=True)``. ``style='pytorch'``:
    torchvision's ResNet (stride on conv2, max pool padding 1), to show the two differ."""
    def bn(x, name):
        return F.batch_norm(x, state[f"{name}.running_mean"], state[f"{name}.running_var"],
                            state[f"{name}.weight"], state[f"{name}.bias"], training=False, eps=1e-5)

    def bottleneck(x, name, stride, downsample):
        s1, s2 = (stride, 1) if style == "caffe" else (1, stride)
        out = F.relu(bn(F.conv2d(x, state[f"{name}.conv1.weight"], stride=s1), f"{name}.bn1"))
        out = F.relu(bn(F.conv2d(out, state[f"{name}.conv2.weight"], stride=s2, padding=1), f"{name}.bn2"))
        out = bn(F.conv2d(out, state[f"{name}.conv3.weight"]), f"{name}.bn3")
        residual = bn(F.conv2d(x, state[f"{name}.downsample.0.weight"], stride=stride),
                      f"{name}.downsample.1") if downsample else x
        return F.relu(out + residual)

    x = F.relu(bn(F.conv2d(images, state["conv1.weight"], stride=2, padding=3), "bn1"))
    x = (F.max_pool2d(x, 3, 2, padding=0, ceil_mode=True) if style == "caffe"
         else F.max_pool2d(x, 3, 2, padding=1))
    maps = {}
    for stage, (blocks, stride) in enumerate(zip(BLOCKS, STRIDES), start=1):
        for block in range(blocks):
            # _make_layer: the first block downsamples (stride, or 64 -> 256 channels in layer1)
            x = bottleneck(x, f"layer{stage}.{block}", stride if block == 0 else 1, block == 0)
        if stage > 1:
            maps[f"conv{stage + 1}"] = x
    return maps


def maps_of(backbone, images):
    with torch.no_grad():
        return backbone(images, ("conv3", "conv4", "conv5"))


def test_the_backbone_computes_the_sources_resnet_101(backbone, weights):
    """With the same weights, the harness's conv3/conv4/conv5 maps are the source's equations'; and
    torchvision's own ResNet-101 computes others (so the comparison can fail)."""
    images = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    got = maps_of(backbone, images)
    with torch.no_grad():
        want = reference_maps(weights, images)
        pytorch_style = reference_maps(weights, images, "pytorch")
    for layer in ("conv3", "conv4", "conv5"):
        scale = float(want[layer].abs().max())
        assert scale > 0
        torch.testing.assert_close(got[layer], want[layer], rtol=1e-4, atol=1e-5 * max(1.0, scale))
        assert got[layer].shape == pytorch_style[layer].shape   # 64 is even: the same shapes...
        assert (got[layer] - pytorch_style[layer]).abs().max() > 1e-2 * scale   # ...other values


def pooled_side(side: int, kernel: int, stride: int, padding: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output size (aten pooling_output_shape), ceil_mode's last-window rule included."""
    out = math.floor((side + 2 * padding - kernel + (stride - 1 if ceil_mode else 0)) / stride) + 1
    if ceil_mode and (out - 1) * stride >= side + padding:
        out -= 1
    return out


@pytest.mark.parametrize("side", [33, 64, 65, 97])
def test_map_shape_is_the_real_maps_shape(backbone, side):
    """``map_shape`` (torch-free, the DAG build's) is the shape of the maps the CNN computes, for odd
    sides too, where the source's max pool (padding 0, ceil_mode) gives one row fewer than
    torchvision's."""
    got = maps_of(backbone, torch.zeros(1, 3, side, side))
    stem = (side + 2 * 3 - 7) // 2 + 1
    caffe_pool, torch_pool = pooled_side(stem, 3, 2, 0, True), pooled_side(stem, 3, 2, 1, False)
    for stage, layer in enumerate(("conv3", "conv4", "conv5"), start=1):
        assert map_shape("resnet101_caffe", layer, side) == [*got[layer].shape[2:], got[layer].shape[1]]
        caffe_side, torch_side = caffe_pool, torch_pool
        for _ in range(stage):   # a 1x1 stride-2 conv (caffe) or a 3x3 padding-1 one (torchvision)
            caffe_side, torch_side = (caffe_side - 1) // 2 + 1, (torch_side + 2 - 3) // 2 + 1
        assert map_shape("resnet101_caffe", layer, side) == [caffe_side, caffe_side, layer_channels("resnet101", layer)]
        assert map_shape("resnet101", layer, side) == [torch_side, torch_side, layer_channels("resnet101", layer)]
    if side % 2:   # an odd side: the two architectures' maps differ
        assert map_shape("resnet101_caffe", "conv5", side) != map_shape("resnet101", "conv5", side)


def test_the_sources_base_top_file_loads_as_the_plain_state_dict(backbone, weights, tmp_path):
    """The source's ``{'base', 'top'}`` file (no fc) gives the maps of the torchvision-named state
    dict; both pass the DAG build's check through the bounded reader of files from the internet."""
    source = source_layout(weights)
    assert not any(k.startswith(("2.", "3.")) for k in source["base"])   # relu and maxpool hold nothing
    path = tmp_path / "original_updown_backbone.pth"
    torch.save(source, path)
    images = torch.randn(1, 3, 65, 65, generator=torch.Generator().manual_seed(2))
    plain, from_source = maps_of(backbone, images), maps_of(ResNetBackbone("resnet101_caffe", str(path)).eval(), images)
    for layer in ("conv3", "conv4", "conv5"):
        assert torch.equal(plain[layer], from_source[layer])
    assert weights_problem("resnet101_caffe", path, LIMITS) == {"problem": None}
    assert weights_mismatch("resnet101_caffe", weights) is None   # with torchvision's fc: ignored
    assert weights_mismatch("resnet101_caffe", {k: v for k, v in weights.items() if not k.startswith("fc.")}) is None


def test_a_wrong_file_is_refused_in_one_line_naming_what_differs(weights, tmp_path):
    source = source_layout(weights)
    wrong = {"base": dict(source["base"]), "top": dict(source["top"])}
    wrong["base"]["6.3.conv2.weight"] = torch.zeros(256, 256, 1, 1)   # layer3.3's 3x3 conv as 1x1
    del wrong["top"]["0.2.bn3.running_var"]
    path = tmp_path / "wrong.pth"
    torch.save(wrong, path)
    problem = weights_problem("resnet101_caffe", path, LIMITS)["problem"]
    assert problem == ("does not fit resnet101_caffe: 1 of its keys are missing (e.g. top.0.2.bn3.running_var); "
                       "1 tensors have another shape (e.g. base.6.3.conv2.weight: (256, 256, 1, 1), "
                       "expected (256, 256, 3, 3))")
    with pytest.raises(HarnessError, match=r"cannot load weights .*wrong\.pth"):
        ResNetBackbone("resnet101_caffe", str(path))
    # a key the source's Sequential has no place for (base.3 is its max pool) is named as the file names it
    extra = {"base": {**source["base"], "3.weight": torch.zeros(1)}, "top": source["top"]}
    assert weights_mismatch("resnet101_caffe", extra) == "does not fit resnet101_caffe: 1 keys are not resnet101_caffe's (e.g. base.3.weight)"
    nan = {"base": source["base"], "top": {**source["top"], "0.0.conv1.weight": torch.full((512, 1024, 1, 1), float("nan"))}}
    assert weights_mismatch("resnet101_caffe", nan) == "holds NaN or inf values in 1 tensors (e.g. top.0.0.conv1.weight)"
    # torchvision's plain ResNet-101 is not this layout's architecture: the line says which one is
    problem = weights_mismatch("resnet101", source)
    assert "\n" not in problem and problem.startswith("is not a state dict of tensors") and "resnet101_caffe" in problem
