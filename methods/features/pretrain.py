"""Pre-train a ResNet on the synthetic training split's multi-label annotations.

Stands in for ImageNet pre-training, which cannot be downloaded: a randomly initialised
ResNet gives pooled features that carry no usable information (a linear probe of the
shape/colour labels scores at the base rate), so frozen-backbone training would learn nothing.
Only the training split is used. Output: a torchvision state dict for ``backbones.<name>.weights``.
"""
from __future__ import annotations

import time

import torch
from torch import nn
from torch.utils.data import DataLoader
from torchvision import transforms
from tqdm import tqdm

from methods.cli import run_command
from methods.data.datasets import load_dataset_payload
from methods.errors import HarnessError
from methods.features.backbone import build_resnet, eval_transform
from methods.features.images import ImageFiles
from methods.features.portable_conv import portable_convolutions
from methods.io import torch_save
from methods.numerics import environment_mode
from methods.runtime import compute_setup, resolve_device, seed_everything


class _Labelled(torch.utils.data.Dataset):
    def __init__(self, images: ImageFiles, labels: list[list[int]]):
        self.images, self.labels = images, torch.tensor(labels, dtype=torch.float32)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        return self.images[i], self.labels[i]


def pretrain(arch: str, images: ImageFiles, labels: list[list[int]], epochs: int, lr: float, batch_size: int,
             seed: int, device: torch.device) -> dict:
    seed_everything(seed)
    net = build_resnet(arch, num_classes=len(labels[0])).to(device)   # a Caffe-style arch too
    if environment_mode() == "portable":
        portable_convolutions(net)
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=1e-4)
    loader = DataLoader(_Labelled(images, labels), batch_size=batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    loss_fn = nn.BCEWithLogitsLoss()
    net.train()
    for epoch in range(epochs):
        t0, seen, correct, total = time.perf_counter(), 0, 0.0, 0.0
        for x, y in tqdm(loader, desc=f"pretrain {epoch + 1}/{epochs}", mininterval=2.0):
            x, y = x.to(device), y.to(device)
            logits = net(x)
            loss = loss_fn(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            seen += x.shape[0]
            correct += ((logits > 0) == (y > 0.5)).float().sum().item()
            total += y.numel()
        print(f"pretrain epoch {epoch + 1}: loss {loss.item():.4f} label accuracy {correct / total:.3f} "
              f"({seen / (time.perf_counter() - t0):.0f} img/s)", flush=True)
    state = {k: v.cpu() for k, v in net.state_dict().items()}
    # Keep the layout of an ImageNet state dict (1000-way fc) so the weights load like any other.
    state["fc.weight"] = torch.zeros(1000, state["fc.weight"].shape[1])
    state["fc.bias"] = torch.zeros(1000)
    return state


def _pretrain(args) -> None:
    payload = load_dataset_payload(args.dataset_config)
    ds, paths = payload.dataset, payload.paths
    bb = payload.backbones[args.backbone]
    cfg = bb["pretrain"]
    train = payload.split("train")
    if train.labels is None:
        raise HarnessError(f"{paths['karpathy_json']}: pre-training needs per-image 'labels'")
    # Flips only: random resized crops of tiny images cut objects out and make the labels wrong.
    feats = ds["features"]
    transform = transforms.Compose([transforms.RandomHorizontalFlip(), eval_transform(feats["resize"], feats["crop"])])
    images = ImageFiles(paths["images_dir"], train.filenames, transform)
    state = pretrain(bb["arch"], images, train.labels, cfg["epochs"], cfg["lr"], cfg["batch_size"], cfg["seed"],
                     resolve_device(args.device))
    torch_save(args.out, state)


def _arguments(parser) -> None:
    parser.add_argument("--backbone", required=True)
    parser.add_argument("--out", required=True)


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, _pretrain, argv, compute=compute_setup)


if __name__ == "__main__":
    main()
