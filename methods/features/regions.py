"""Region features for the synthetic dataset in the BUTD precomputed layout.

RoIAlign over a cached grid map (no second CNN pass): the ground-truth object boxes first,
then seeded random proposals until every image has ``n_regions`` rows.
Writes ``{split}_ims.npy`` (N, n_regions, C), ``{split}_caps.txt``, ``{split}_ids.txt``, ``{split}_boxes.npy``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torchvision.ops import roi_align

from methods.cli import run_command
from methods.data.datasets import load_dataset_payload
from methods.data.karpathy import build_split, load_karpathy
from methods.io import open_npy_for_writing, save_npy, write_text


def proposal_boxes(object_boxes: list[list[float]], image_size: int, n_regions: int, rng: np.random.Generator) -> np.ndarray:
    """Object boxes then random boxes (side 15-70% of the image), clipped; (n_regions, 4) x0,y0,x1,y1 pixels."""
    boxes = [b for b in object_boxes[:n_regions]]
    while len(boxes) < n_regions:
        w, h = rng.uniform(0.15, 0.7, size=2) * image_size
        x0, y0 = rng.uniform(0, image_size - w), rng.uniform(0, image_size - h)
        boxes.append([x0, y0, x0 + w, y0 + h])
    return np.asarray(boxes, dtype=np.float32)


def to_crop_coordinates(boxes: np.ndarray, image_size: int, resize: int, crop: int) -> np.ndarray:
    """Map boxes of a square image through Resize(resize) + CenterCrop(crop)."""
    scale = resize / image_size
    offset = (resize - crop) / 2
    return np.clip(boxes * scale - offset, 0, crop)


def region_features(grid: np.ndarray, boxes_crop: np.ndarray, crop: int, output_size: int) -> np.ndarray:
    """grid (N, H, W, C); boxes (N, R, 4) in crop pixels -> (N, R, C) mean of an RoIAlign window."""
    n, h, _, _ = grid.shape
    fmap = torch.from_numpy(np.ascontiguousarray(grid, dtype=np.float32)).permute(0, 3, 1, 2)
    rois = torch.from_numpy(boxes_crop.astype(np.float32))
    pooled = roi_align(fmap, list(rois), output_size=output_size, spatial_scale=h / crop,
                       sampling_ratio=2, aligned=True)
    return pooled.mean(dim=(2, 3)).reshape(n, rois.shape[1], -1).numpy()


def _region_features(args) -> None:
    payload = load_dataset_payload(args.dataset_config)
    ds = payload.dataset
    feats, region = ds["features"], ds["features"]["region"]
    images = load_karpathy(payload.paths["karpathy_json"], ds["texts_per_image"])
    split = build_split(images, args.split, ds["splits"][args.split], payload.name, ds["texts_per_image"])
    by_file = {e["filename"]: e for e in images}
    grid = np.load(args.grid, mmap_mode="r")
    side = ds["generator"]["image_size"]
    out = Path(args.out_dir)
    all_boxes = np.stack([
        proposal_boxes(by_file[f]["boxes"], side, region["n_regions"],
                       np.random.default_rng([region["seed"], split.image_ids[i]]))
        for i, f in enumerate(split.filenames)])
    n = len(split)
    with open_npy_for_writing(out / f"{args.split}_ims.npy", (n, region["n_regions"], grid.shape[-1]), "float32") as ims:
        for start in range(0, n, 256):
            end = min(n, start + 256)
            crop_boxes = to_crop_coordinates(all_boxes[start:end], side, feats["resize"], feats["crop"])
            ims[start:end] = region_features(grid[start:end], crop_boxes, feats["crop"], region["output_size"])
    save_npy(out / f"{args.split}_boxes.npy", all_boxes)
    write_text(out / f"{args.split}_caps.txt", "".join(c + "\n" for c in split.captions))
    write_text(out / f"{args.split}_ids.txt", "".join(f"{i}\n" for i in split.image_ids))


def _arguments(parser) -> None:
    parser.add_argument("--split", required=True)
    parser.add_argument("--grid", required=True, help="cached grid map (N, H, W, C)")
    parser.add_argument("--out-dir", required=True)


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, _region_features, argv)


if __name__ == "__main__":
    main()
