"""torchvision ResNet backbones exposing conv3_x / conv4_x / conv5_x maps, weights from a local path only.

torchvision is imported where a CNN or an image transform is built, not with this module: its
import costs about 3 s of CPU (its ops pull in torch._dynamo), and every training and evaluation
job imports this module through the model registry, while only the jobs that run a CNN use it.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from methods.errors import HarnessError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
LAYER_OF = {"conv3": "layer2", "conv4": "layer3", "conv5": "layer4"}  # torchvision names
CHANNELS = {  # (conv3, conv4, conv5) output channels
    "resnet18": (128, 256, 512), "resnet34": (128, 256, 512),
    "resnet50": (512, 1024, 2048), "resnet101": (512, 1024, 2048), "resnet152": (512, 1024, 2048),
}


def layer_channels(arch: str, layer: str) -> int:
    return CHANNELS[arch][("conv3", "conv4", "conv5").index(layer)]


class ResNetBackbone(nn.Module):
    """ResNet trunk; ``forward`` returns the requested stage maps keyed conv3/conv4/conv5."""

    def __init__(self, arch: str, weights: str | None):
        super().__init__()
        if weights is None:
            raise HarnessError(
                f"backbone {arch}: no weights configured. Set backbones.<name>.weights to a local "
                f"ImageNet state dict (e.g. ~/.cache/torch/hub/checkpoints/{arch}-*.pth), or to "
                f"the string 'none' to train from random initialisation on purpose")
        import torchvision  # see the module doc: only CNN jobs pay its import

        net = getattr(torchvision.models, arch)(weights=None)
        if weights != "none":
            path = Path(weights).expanduser()
            if not path.is_file():
                raise HarnessError(f"backbone {arch}: weights file not found: {path}")
            try:
                state = torch.load(path, map_location="cpu", weights_only=True)
                net.load_state_dict(state)
            except Exception as exc:  # corrupt file or another architecture's weights
                raise HarnessError(f"backbone {arch}: cannot load weights {path}: {exc}") from None
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
