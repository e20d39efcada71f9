"""torchvision ResNet backbones exposing conv3_x / conv4_x / conv5_x maps, weights from a local path only.

torchvision is imported where a CNN or an image transform is built, not with this module: its
import costs about 3 s of CPU (its ops pull in torch._dynamo), and every training and evaluation
job imports this module through the model registry, while only the jobs that run a CNN use it.

``resnet101_caffe`` (``methods.features.architectures``: the BUTD detector's ResNet-101) is built
from torchvision's ResNet-101 with the source's strides and max pool (``build_resnet``). Its
weights file is either a torchvision-named state dict or the source's own layout,
``{'base': state dict of Sequential(conv1, bn1, relu, maxpool, layer1, layer2, layer3), 'top':
state dict of Sequential(layer4)}`` (woodfrog/vse_infty ``ResnetFeatureExtractor._init_modules``,
``original_updown_backbone.pth``), renamed here to torchvision's names (``loadable_state``).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch import nn

from methods.errors import HarnessError
from methods.features.architectures import CAFFE_STYLE, layer_channels
from methods.features.portable_conv import portable_convolutions
from methods.numerics import environment_mode
from methods.untrusted.safe_load import ReaderLimits, load_checkpoint

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class ResNetBackbone(nn.Module):
    """ResNet trunk; ``forward`` returns the requested stage maps keyed conv3/conv4/conv5."""

    def __init__(self, arch: str, weights: str | None):
        super().__init__()
        if weights is None:
            example = ("the BUTD detector's weights, e.g. VSE-infinity's original_updown_backbone.pth"
                       if arch in CAFFE_STYLE else f"ImageNet state dict (e.g. ~/.cache/torch/hub/checkpoints/{arch}-*.pth)")
            raise HarnessError(
                f"backbone {arch}: no weights configured. Set backbones.<name>.weights to a local "
                f"{example}, or to the string 'none' to train from random initialisation on purpose")
        net = build_resnet(arch)
        if arch in CAFFE_STYLE:   # no classifier: the source's file has none (loadable_state), and the
            net.fc = nn.Identity()   # backbone never runs it; everything else still loads strictly
        if weights != "none":
            path = Path(weights).expanduser()
            if not path.is_file():
                raise HarnessError(f"backbone {arch}: weights file not found: {path}")
            try:
                state = torch.load(path, map_location="cpu", weights_only=True)
                net.load_state_dict(loadable_state(arch, state))
            except Exception as exc:  # corrupt file or another architecture's weights
                raise HarnessError(f"backbone {arch}: cannot load weights {path}: {exc}") from None
        if environment_mode() == "portable":  # the same bits on every host (methods.features.portable_conv)
            portable_convolutions(net)
        self.arch = arch
        self.stem = nn.Sequential(net.conv1, net.bn1, net.relu, net.maxpool, net.layer1)
        self.layer2, self.layer3, self.layer4 = net.layer2, net.layer3, net.layer4
        self.out_dim = layer_channels(arch, "conv5")

    def forward(self, images: torch.Tensor, layers: tuple[str, ...] = ("conv5",)) -> dict[str, torch.Tensor]:
        c3 = self.layer2(self.stem(images))
        c4 = self.layer3(c3)
        c5 = self.layer4(c4)
        maps = {"conv3": c3, "conv4": c4, "conv5": c5}
        return {k: maps[k] for k in layers}

    def pooled(self, images: torch.Tensor) -> torch.Tensor:
        """Global average of conv5_x: the 'fc input' feature VSE++ uses."""
        return self.forward(images, ("conv5",))["conv5"].mean(dim=(2, 3))


# The source's {'base', 'top'} layout (module doc): its Sequential indices -> torchvision's names.
DETECTOR_LAYOUT = {"base.0.": "conv1.", "base.1.": "bn1.", "base.4.": "layer1.", "base.5.": "layer2.",
                   "base.6.": "layer3.", "top.0.": "layer4."}


def build_resnet(arch: str, **kwargs) -> nn.Module:
    """torchvision's ``arch`` with ``weights=None``; a Caffe-style one (``CAFFE_STYLE``) is its
    torchvision base with the source's downsampling, the same parameters (names and shapes): the
    first block of layer2..4 strides its 1x1 ``conv1`` and not its 3x3 ``conv2``
    (``nn.Conv2d(inplanes, planes, kernel_size=1, stride=stride)``, ``conv2`` stride 1), and the
    stem's max pool is ``nn.MaxPool2d(kernel_size=3, stride=2, padding=0, ceil_mode=True)``. Set
    before ``portable_convolutions``, which reads each convolution's stride."""
    import torchvision  # see the module doc: only CNN jobs and weights checks pay its import

    net = getattr(torchvision.models, CAFFE_STYLE.get(arch, arch))(weights=None, **kwargs)
    if arch in CAFFE_STYLE:
        net.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=0, ceil_mode=True)
        for stage in (net.layer2, net.layer3, net.layer4):
            first = stage[0]   # a Bottleneck; its downsample (1x1, the same stride) is unchanged
            first.conv1.stride, first.conv2.stride = first.conv2.stride, (1, 1)
    return net


def detector_layout(state) -> bool:
    """``state`` is in the source's ``{'base': ..., 'top': ...}`` layout (module doc)."""
    return isinstance(state, dict) and isinstance(state.get("base"), dict) and isinstance(state.get("top"), dict)


def _torchvision_name(key: str) -> str:
    prefix = next((p for p in DETECTOR_LAYOUT if key.startswith(p)), None)
    return DETECTOR_LAYOUT[prefix] + key[len(prefix):] if prefix else key


def detector_name(key: str) -> str:
    """A torchvision name as the source's layout spells it (``layer3.0.conv1.weight`` ->
    ``base.6.0.conv1.weight``); the names it has no place for as they are."""
    prefix = next((p for p, t in DETECTOR_LAYOUT.items() if key.startswith(t)), None)
    return prefix + key[len(DETECTOR_LAYOUT[prefix]):] if prefix else key


def loadable_state(arch: str, state):
    """``state`` as ``ResNetBackbone`` loads it (strictly) into ``build_resnet(arch)``: for a
    Caffe-style ``arch``, a file in the source's layout renamed to torchvision's names (its entries
    other than 'base' and 'top' ignored, as the source's loader ignores them; a key of base or top
    it has no place for kept as ``base.<key>`` / ``top.<key>``, so that the load names it), and
    without ``fc.*``: the source's file has no classifier and the backbone never runs one, so its
    net has none (a torchvision-named file's fc is ignored). Any other ``state`` as it is."""
    if arch not in CAFFE_STYLE:
        return state
    if detector_layout(state):
        state = {_torchvision_name(f"{part}.{k}"): v for part in ("base", "top") for k, v in state[part].items()}
    if isinstance(state, dict):
        state = {k: v for k, v in state.items() if not (isinstance(k, str) and k.startswith("fc."))}
    return state


def weights_mismatch(arch: str, state) -> str | None:
    """Why ``state`` (a loaded weights file) would not load into torchvision's ``arch`` as
    ``ResNetBackbone`` loads it (strictly, after ``loadable_state``), or hold NaN/inf; None when it
    fits. Keys of a file in the source's detector layout are named as that file names them."""
    if detector_layout(state) and arch not in CAFFE_STYLE:
        return ("is not a state dict of tensors: it is in the BUTD detector's {'base', 'top'} layout "
                "(VSE-infinity's original_updown_backbone.pth), whose architecture is resnet101_caffe")
    named = detector_name if arch in CAFFE_STYLE and detector_layout(state) else str
    state = loadable_state(arch, state)
    if not isinstance(state, dict) or not all(torch.is_tensor(v) for v in state.values()):
        inner = next((k for k in ("state_dict", "model") if isinstance(state, dict) and isinstance(state.get(k), dict)), None)
        hint = f": a checkpoint with a '{inner}' entry; save that state dict alone" if inner else ""
        return f"is not a state dict of tensors{hint}"
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        expected = loadable_state(arch, build_resnet(arch).state_dict())
    # load_state_dict fills in a missing BatchNorm batch counter (weights saved by PyTorch < 0.4.1)
    missing = [k for k in expected if k not in state and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in state if k not in expected]
    reshaped = [k for k in expected if k in state and tuple(state[k].shape) != tuple(expected[k].shape)]
    problems = []
    if missing:
        problems.append(f"{len(missing)} of its keys are missing (e.g. {named(missing[0])})")
    if unexpected:
        problems.append(f"{len(unexpected)} keys are not {arch}'s (e.g. {named(unexpected[0])})")
    if reshaped:
        k = reshaped[0]
        problems.append(f"{len(reshaped)} tensors have another shape (e.g. {named(k)}: {tuple(state[k].shape)}, "
                        f"expected {tuple(expected[k].shape)})")
    if problems:
        return f"does not fit {'' if arch in CAFFE_STYLE else 'torchvision '}{arch}: " + "; ".join(problems)
    bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        return f"holds NaN or inf values in {len(bad)} tensors (e.g. {named(bad[0])})"
    return None


def weights_problem(arch: str, path: Path, limits: ReaderLimits) -> dict:
    """``{"problem": why the weights file at ``path`` would not load into ``arch``, or None}``
    (``methods.features.weights_check`` asks this in a child process: ``python -m`` this module).
    The file comes from the internet (torchvision's download): it is read by the bounded reader of
    files from the internet (``methods.untrusted.safe_load``, within ``limits``), so that a crafted file is
    a problem named here, never a crash or a memory bomb of the DAG build."""
    if path.stat().st_size == 0:
        return {"problem": f"is an empty file; expected a {arch} state dict (an interrupted download?)"}
    try:
        state = load_checkpoint(path, (), limits)
    except HarnessError as exc:   # truncated, not a PyTorch file, or holding what a state dict never holds
        return {"problem": f"cannot be read as a PyTorch state dict ({str(exc).removeprefix(f'{path}: ')})"}
    return {"problem": weights_mismatch(arch, state)}


def eval_transform(resize: int, crop: int):
    """Resize + centre crop + ImageNet normalisation (a torchvision ``Compose``)."""
    from torchvision import transforms  # see the module doc

    return transforms.Compose([
        transforms.Resize(resize), transforms.CenterCrop(crop), transforms.ToTensor(),
        transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])


def train_transform(crop: int):
    """VSE++ training augmentation (RandomResizedCrop + horizontal flip)."""
    from torchvision import transforms  # see the module doc

    return transforms.Compose([
        transforms.RandomResizedCrop(crop), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
        transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])


if __name__ == "__main__":   # python -m methods.features.backbone ARCH WEIGHTS_FILE MEMORY_MB SECONDS: the verdict
    print(json.dumps(weights_problem(sys.argv[1], Path(sys.argv[2]),
                                     ReaderLimits(memory_mb=int(sys.argv[3]), seconds=float(sys.argv[4])))))
