"""The CNN's input images of a run: what a fine-tuned CNN sees in training and in evaluation.

Two pipelines, chosen by the method config:

- the dataset's (no ``training.images``): resize the short side to ``features.resize``, centre
  crop ``features.crop``, ImageNet normalisation; in training ``finetune_augment``
  ``random_resized_crop_flip`` (VSE++) or ``none`` (the evaluation crop);
- ``training.images: {kind: squash, size, pixels}``: VSE-infinity's RawImageDataset
  (woodfrog/vse_infty, ``lib/datasets/image_caption.py``): the whole image resized to
  ``size`` x ``size`` whatever its aspect (256 x ``--input_scale_factor``), bilinear without
  antialiasing (its cv2.resize INTER_LINEAR), pixels ImageNet-normalised or, for the Caffe
  detector backbone, BGR minus the Caffe means on the 0-255 scale; in training
  ``finetune_augment: crop_squash_flip``: first a crop of a random fraction r in [0.6, 1) of both
  sides (one r, ``int(side * r)``, its offset uniform over [0, side - crop) as np.random.randint),
  then the resize, then a horizontal flip with probability 0.5; or ``random_resized_crop_flip_36``:
  torchvision's RandomResizedCrop(size, scale=(0.36, 1)) (its crop box, ratio in [3/4, 4/3]) and a
  flip, as kdwonn/DivE's ``--gpo_aug`` (data.py get_image_transform). ``images.antialias: true``
  resizes with antialiasing, as torchvision's Resize on PIL images does (DivE's evaluation
  ``Resize((512, 512))``); false (the default) as cv2's INTER_LINEAR.

``training.random_erasing`` (PCME's ``random_erasing_prob``) erases a random box of the
transformed training image (``random_erase``).

The random draws come from torch's generator, which the training data seeds per item
(``methods.training.data``), as torchvision's own random transforms do.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F

from methods.features.backbone import IMAGENET_MEAN, IMAGENET_STD, eval_transform, train_transform

CAFFE_BGR_MEANS = (102.9801, 115.9465, 122.7717)   # image_caption.py pixel_means (B, G, R)
PIXELS = ("imagenet", "caffe_bgr")


def _pixels(img) -> torch.Tensor:
    """(3, H, W) float32 on the 0-255 scale from a PIL RGB image."""
    from torchvision.transforms.functional import pil_to_tensor  # see methods.features.backbone's doc

    return pil_to_tensor(img).to(torch.float32)


def random_crop(im: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """The source's training crop: one ratio r ~ U[0.6, 1) for both sides, each side int(side * r),
    its start uniform in [0, side - crop) (0 when the crop is the whole side)."""
    h, w = im.shape[-2:]
    ratio = float(torch.rand((), generator=generator)) * 0.4 + 0.6
    ch, cw = int(h * ratio), int(w * ratio)
    x0 = 0 if w == cw else int(torch.randint(w - cw, (), generator=generator))
    y0 = 0 if h == ch else int(torch.randint(h - ch, (), generator=generator))
    return im[..., y0:y0 + ch, x0:x0 + cw]


def squash(im: torch.Tensor, size: int, antialias: bool = False) -> torch.Tensor:
    """``im`` (3, H, W) resized to (3, size, size), bilinear on half-pixel centres, antialiased or not."""
    return F.interpolate(im[None], size=(size, size), mode="bilinear", align_corners=False, antialias=antialias)[0]


RESIZED_CROP_SCALE = (0.36, 1.0)   # DivE --gpo_aug: RandomResizedCrop(512, scale=(0.36, 1))


def random_resized_crop(im: torch.Tensor) -> torch.Tensor:
    """torchvision's RandomResizedCrop box (area fraction in RESIZED_CROP_SCALE, aspect ratio in
    [3/4, 4/3] log-uniform, ten tries, then the centre fallback) cut from ``im``."""
    from torchvision.transforms import RandomResizedCrop  # see methods.features.backbone's doc

    top, left, h, w = RandomResizedCrop.get_params(im, scale=RESIZED_CROP_SCALE, ratio=(3 / 4, 4 / 3))
    return im[..., top:top + h, left:left + w]


def normalise(im: torch.Tensor, pixels: str) -> torch.Tensor:
    """RGB 0-255 -> the CNN's input: ImageNet's mean and std on 0-1, or Caffe's BGR minus means."""
    if pixels == "caffe_bgr":
        return im.flip(0) - torch.tensor(CAFFE_BGR_MEANS, dtype=im.dtype)[:, None, None]
    mean = torch.tensor(IMAGENET_MEAN, dtype=im.dtype)[:, None, None]
    std = torch.tensor(IMAGENET_STD, dtype=im.dtype)[:, None, None]
    return (im / 255 - mean) / std


# augment -> (crop, flip test of a uniform draw): VSE-infinity flips when np.random.rand() > 0.5,
# torchvision's RandomHorizontalFlip when torch.rand(1) < 0.5 (the same draws give its flips)
SQUASH_AUGMENTS = {"none": None, "crop_squash_flip": (random_crop, lambda u: u > 0.5),
                   "random_resized_crop_flip_36": (random_resized_crop, lambda u: u < 0.5)}


class SquashImages:
    """VSE-infinity's image pipeline (see the module doc); ``augment`` (a key of SQUASH_AUGMENTS)
    for training."""

    def __init__(self, size: int, pixels: str, augment: str = "none", antialias: bool = False):
        if pixels not in PIXELS:
            raise ValueError(f"images.pixels must be one of {PIXELS}, not {pixels!r}")
        if augment not in SQUASH_AUGMENTS:
            raise ValueError(f"finetune_augment with training.images must be one of {sorted(SQUASH_AUGMENTS)}, "
                             f"not {augment!r}")
        self.size, self.pixels, self.augment, self.antialias = size, pixels, SQUASH_AUGMENTS[augment], antialias

    def __call__(self, img) -> torch.Tensor:
        im = _pixels(img)
        if self.augment is not None:
            im = self.augment[0](im)
        im = squash(im, self.size, self.antialias)
        if self.augment is not None and self.augment[1](float(torch.rand(()))):
            im = im.flip(-1)
        return normalise(im, self.pixels)


def evaluation_images(training: dict, resize: int, crop: int) -> Callable:
    """The transform of evaluation (and validation) images for a run's ``training`` config."""
    images = training.get("images")
    if images is None:
        return eval_transform(resize, crop)
    return SquashImages(images["size"], images["pixels"], antialias=images.get("antialias", False))


ERASED_AREA = (0.02, 1 / 3)          # timm RandomErasing defaults, as naver-ai/pcme copies them
ERASED_ASPECT = (math.log(0.3), math.log(1 / 0.3))
ERASING_ATTEMPTS = 10


def random_erase(im: torch.Tensor, prob: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """Random erasing (Zhong et al., AAAI 2020) as naver-ai/pcme's RandomErasing(prob, mode='const',
    max_count=1) runs it on a normalised (3, H, W) image: with probability ``prob`` (erased unless a
    uniform draw exceeds it), up to 10 attempts at a box of area U(0.02, 1/3) x H W and log aspect
    U(log 0.3, log 1/0.3), sides rounded; the first that fits strictly inside is set to 0, its
    corner uniform over the positions. A copy; the input is kept."""
    if float(torch.rand((), generator=generator)) > prob:
        return im
    _, height, width = im.shape
    for _ in range(ERASING_ATTEMPTS):
        area = float(torch.empty(()).uniform_(*ERASED_AREA, generator=generator)) * height * width
        aspect = math.exp(float(torch.empty(()).uniform_(*ERASED_ASPECT, generator=generator)))
        h, w = int(round(math.sqrt(area * aspect))), int(round(math.sqrt(area / aspect)))
        if w < width and h < height:
            top = int(torch.randint(height - h + 1, (), generator=generator))
            left = int(torch.randint(width - w + 1, (), generator=generator))
            im = im.clone()
            im[:, top:top + h, left:left + w] = 0
            return im
    return im


class ErasedImages:
    """A training transform followed by ``random_erase``."""

    def __init__(self, transform: Callable, prob: float):
        self.transform, self.prob = transform, prob

    def __call__(self, img) -> torch.Tensor:
        return random_erase(self.transform(img), self.prob)


def training_images(training: dict, resize: int, crop: int) -> Callable:
    """The transform of training images while the CNN is fine-tuned (``finetune_augment``), then
    ``random_erasing`` where configured."""
    augment, images = training["finetune_augment"], training.get("images")
    if images is not None:
        transform = SquashImages(images["size"], images["pixels"], augment, images.get("antialias", False))
    elif augment == "random_resized_crop_flip":
        transform = train_transform(crop)
    else:
        transform = eval_transform(resize, crop)
    erasing = training.get("random_erasing")
    if not erasing:
        return transform
    return ErasedImages(transform, erasing["prob"])
