"""Extract ResNet grid maps and pooled features of one split, cached as DAG outputs.

Writes ``<out>/{split}_pooled.npy`` (N, C5) float32 and ``<out>/{split}_{layer}.npy``
(N, H, W, C) per configured grid layer (28/14/7 at 224 px for conv3/4/5).
"""
from __future__ import annotations

import contextlib
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from methods.cli import run_command
from methods.data.datasets import load_dataset_payload
from methods.features.architectures import layer_channels
from methods.features.backbone import ResNetBackbone, eval_transform
from methods.features.images import ImageFiles
from methods.io import open_npy_for_writing
from methods.runtime import compute_setup, resolve_device


@torch.no_grad()
def extract_split(backbone: ResNetBackbone, images: ImageFiles, out_dir: Path, split: str,
                  layers: list[str], dtype: str, batch_size: int, device: torch.device, num_workers: int = 0) -> dict:
    backbone.eval().to(device)
    loader = DataLoader(images, batch_size=batch_size, shuffle=False, num_workers=num_workers)
    n = len(images)
    probe = images[0].unsqueeze(0).to(device)
    shapes = {k: v.shape for k, v in backbone(probe, tuple(layers) or ("conv5",)).items()}
    with contextlib.ExitStack() as stack:
        pooled = stack.enter_context(open_npy_for_writing(out_dir / f"{split}_pooled.npy", (n, backbone.out_dim), "float32"))
        grids = {k: stack.enter_context(open_npy_for_writing(
            out_dir / f"{split}_{k}.npy", (n, shapes[k][2], shapes[k][3], layer_channels(backbone.arch, k)), dtype))
            for k in layers}
        start, row = time.perf_counter(), 0
        bar = tqdm(total=n, unit="img", desc=f"features {split}", mininterval=2.0)
        for batch in loader:
            batch = batch.to(device, non_blocking=True)
            maps = backbone(batch, tuple(sorted(set(layers) | {"conv5"})))
            end = row + batch.shape[0]
            pooled[row:end] = maps["conv5"].float().mean(dim=(2, 3)).cpu().numpy()
            for k in layers:
                grids[k][row:end] = maps[k].permute(0, 2, 3, 1).cpu().numpy().astype(dtype)
            row = end
            bar.update(batch.shape[0])
            bar.set_postfix(img_per_s=f"{row / (time.perf_counter() - start):.1f}", refresh=False)
        bar.close()
    return {"images": n, "seconds": time.perf_counter() - start}


def _extract(args) -> None:
    payload = load_dataset_payload(args.dataset_config)
    ds, paths = payload.dataset, payload.paths
    split = payload.split(args.split)
    bb_cfg = payload.backbones[args.backbone]
    backbone = ResNetBackbone(bb_cfg["arch"], bb_cfg["weights"])
    feats = ds["features"]
    images = ImageFiles(paths["images_dir"], split.filenames, eval_transform(feats["resize"], feats["crop"]))
    device = resolve_device(args.device)
    stats = extract_split(backbone, images, Path(args.out_dir), args.split, feats["grid_layers"],
                          feats["dtype"], feats["batch_size"], device)
    print(f"extracted {stats['images']} images in {stats['seconds']:.1f}s on {device}")


def _arguments(parser) -> None:
    parser.add_argument("--backbone", required=True)
    parser.add_argument("--split", required=True)
    parser.add_argument("--out-dir", required=True)


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, _extract, argv, compute=compute_setup)


if __name__ == "__main__":
    main()
