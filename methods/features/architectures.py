"""What the harness knows of a ResNet architecture without building one: the output channels of its
conv3_x / conv4_x / conv5_x stages. Torch-free: the DAG build reads them (run descriptions).

Each name is a torchvision architecture, built with ``weights=None`` and filled from a configured
file. ``resnext101_32x8d`` is also the architecture of the Instagram-hashtag WSL weights
(Mahajan et al., ECCV 2018; facebookresearch/WSL-Images ``resnext101_32x8d_wsl``, torchvision's
ResNeXt with those weights) that VSE-infinity and the set-embedding paper fine-tune: the file
torch.hub caches for it (``ig_resnext101_32x8-c38310e5.pth``) is a state dict of it. Its 3x3
convolutions are grouped (32 groups): in portable numerics they run torch's own CPU kernel, not the
pinned BLAS path (``methods.features.portable_conv``: groups 1 only).

``resnet101_caffe`` is the ResNet-101 of the bottom-up-attention (BUTD) detector (Anderson et al.,
CVPR 2018; peteanderson80/bottom-up-attention, a Caffe ResNet v1), as VSE-infinity builds it for
``--backbone_source detector`` (woodfrog/vse_infty ``lib/modules/resnet.py``, weights
``original_updown_backbone.pth``): torchvision's ResNet-101 with the parameters of the same names
and shapes, but each stage's stride on the first block's 1x1 ``conv1`` rather than its 3x3
``conv2``, and a stem max pool of padding 0 rounding up (``ceil_mode``). ``CAFFE_STYLE`` maps it
to the torchvision architecture it is built from (``methods.features.backbone.build_resnet``)."""
from __future__ import annotations

CHANNELS = {  # (conv3, conv4, conv5) output channels
    "resnet18": (128, 256, 512), "resnet34": (128, 256, 512),
    "resnet50": (512, 1024, 2048), "resnet101": (512, 1024, 2048), "resnet152": (512, 1024, 2048),
    "resnext101_32x8d": (512, 1024, 2048), "resnet101_caffe": (512, 1024, 2048),
}
CAFFE_STYLE = {"resnet101_caffe": "resnet101"}   # Caffe-style ResNet v1 -> its torchvision base


def layer_channels(arch: str, layer: str) -> int:
    return CHANNELS[arch][("conv3", "conv4", "conv5").index(layer)]


def map_shape(arch: str, layer: str, crop: int) -> list[int]:
    """(H, W, C) of the ``layer`` map of a crop x crop image: every downsampling of a torchvision
    ResNet (the stem's 7x7 conv and max pool, the first block of layer2..4) gives ceil(side / 2).
    A Caffe-style one's max pool (kernel 3, stride 2, padding 0, ceil_mode) gives
    ceil((side - 3) / 2) + 1 instead: side / 2 for an even side, but (side - 1) / 2 for an odd one
    (torchvision's: (side + 1) / 2); its strided 1x1 convolutions, like torchvision's 3x3 ones of
    padding 1, give ceil(side / 2)."""
    side = -(-crop // 2)   # the stem's 7x7 conv, stride 2, padding 3
    side = -(-(side - 3) // 2) + 1 if arch in CAFFE_STYLE else -(-side // 2)   # the stem's max pool
    for _ in range(("conv3", "conv4", "conv5").index(layer) + 1):   # layer2 .. the layer's stage
        side = -(-side // 2)
    return [side, side, layer_channels(arch, layer)]


def cached_shape(image_input: str, arch: str, model_cfg: dict, crop: int) -> dict:
    """The image shape of what the dataset's feature rule caches for a model (``pooled``: conv5's
    channels; ``grid``: each of its ``grid_scales`` maps), known without the files: the shape a
    model is built for when its run never reads them (every stage fine-tunes the CNN)."""
    if image_input == "pooled":
        return {"dim": layer_channels(arch, "conv5")}
    return {"scales": {s: map_shape(arch, s, crop) for s in model_cfg["grid_scales"]}}
