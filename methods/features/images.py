"""Image files of a split as a torch Dataset."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from PIL import Image
from torch.utils.data import Dataset

from methods.errors import HarnessError


class ImageFiles(Dataset):
    def __init__(self, images_dir: str | Path, filenames: list[str], transform: Callable):
        self.images_dir = Path(images_dir)
        self.filenames = filenames
        self.transform = transform

    def __len__(self) -> int:
        return len(self.filenames)

    def __getitem__(self, index: int) -> torch.Tensor:
        path = self.images_dir / self.filenames[index]
        try:
            with Image.open(path) as img:
                return self.transform(img.convert("RGB"))
        except (FileNotFoundError, OSError) as exc:
            raise HarnessError(f"cannot read image {path}: {exc}") from None
