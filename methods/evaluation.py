"""Encode a split and score every (image, caption) pair without a Python loop over queries."""
from __future__ import annotations

import contextlib

import torch
from torch.utils.data import DataLoader

from methods.data.karpathy import CAPTIONS_PER_IMAGE
from methods.features.images import ImageFiles
from methods.training.data import CachedImageFeatures, pad_tokens


def autocast(device: torch.device, enabled: bool):
    if enabled and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.float16)
    return contextlib.nullcontext()


@torch.no_grad()
def encode_split(model, token_lists: list[list[int]], n_images: int, device: torch.device, batch_size: int,
                 features: CachedImageFeatures | None = None, images: ImageFiles | None = None,
                 amp: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Image embeddings (N, D) from cached features or images, caption embeddings (5N, D)."""
    model.eval()
    img_chunks = []
    if images is not None:
        for x in DataLoader(images, batch_size=batch_size, shuffle=False):
            with autocast(device, amp):
                img_chunks.append(model.encode_images({"images": x.to(device)}).float())
    else:
        for start in range(0, n_images, batch_size):
            block = features.block(start, min(n_images, start + batch_size))
            with autocast(device, amp):
                img_chunks.append(model.encode_images({"features": block.to(device)}).float())
    cap_chunks = []
    for start in range(0, len(token_lists), batch_size):
        tokens, lengths = pad_tokens(token_lists[start:start + batch_size])
        with autocast(device, amp):
            cap_chunks.append(model.encode_captions({"tokens": tokens.to(device), "lengths": lengths}).float())
    img_emb, cap_emb = torch.cat(img_chunks), torch.cat(cap_chunks)
    assert cap_emb.shape[0] == CAPTIONS_PER_IMAGE * img_emb.shape[0]
    return img_emb, cap_emb


@torch.no_grad()
def score_matrix(model, img_emb: torch.Tensor, cap_emb: torch.Tensor, chunk: int = 2048) -> torch.Tensor:
    """(N, 5N) float32 scores, computed in image blocks on the embeddings' device, returned on CPU."""
    return torch.cat([model.similarity(img_emb[s:s + chunk], cap_emb).float().cpu()
                      for s in range(0, img_emb.shape[0], chunk)])
