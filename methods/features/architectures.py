"""What the harness knows of a ResNet architecture without building one: the output channels of its
conv3_x / conv4_x / conv5_x stages. Torch-free: the DAG build reads them (run descriptions)."""
from __future__ import annotations

CHANNELS = {  # (conv3, conv4, conv5) output channels
    "resnet18": (128, 256, 512), "resnet34": (128, 256, 512),
    "resnet50": (512, 1024, 2048), "resnet101": (512, 1024, 2048), "resnet152": (512, 1024, 2048),
}


def layer_channels(arch: str, layer: str) -> int:
    return CHANNELS[arch][("conv3", "conv4", "conv5").index(layer)]
