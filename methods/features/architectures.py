"""What the harness knows of a ResNet architecture without building one: the output channels of its
conv3_x / conv4_x / conv5_x stages. Torch-free: the DAG build reads them (run descriptions).

Each name is a torchvision architecture, built with ``weights=None`` and filled from a configured
file. ``resnext101_32x8d`` is also the architecture of the Instagram-hashtag WSL weights
(Mahajan et al., ECCV 2018; facebookresearch/WSL-Images ``resnext101_32x8d_wsl``, torchvision's
ResNeXt with those weights) that VSE-infinity and the set-embedding paper fine-tune: the file
torch.hub caches for it (``ig_resnext101_32x8-c38310e5.pth``) is a state dict of it. Its 3x3
convolutions are grouped (32 groups): in portable numerics they run torch's own CPU kernel, not the
pinned BLAS path (``methods.features.portable_conv``: groups 1 only)."""
from __future__ import annotations

CHANNELS = {  # (conv3, conv4, conv5) output channels
    "resnet18": (128, 256, 512), "resnet34": (128, 256, 512),
    "resnet50": (512, 1024, 2048), "resnet101": (512, 1024, 2048), "resnet152": (512, 1024, 2048),
    "resnext101_32x8d": (512, 1024, 2048),
}


def layer_channels(arch: str, layer: str) -> int:
    return CHANNELS[arch][("conv3", "conv4", "conv5").index(layer)]
