"""Encode a split and score every (image, caption) pair without a Python loop over queries.

Embedding models return one vector per image and caption and score by a matrix product;
cross-attention models return feature sets (``methods.models.cross_attention``) and provide
their own blocked ``score_matrix``.
"""
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
    img_emb, cap_emb = _concat(img_chunks), _concat(cap_chunks)
    assert len(cap_emb) == CAPTIONS_PER_IMAGE * len(img_emb)
    return img_emb, cap_emb


def _concat(chunks: list):
    return torch.cat(chunks) if torch.is_tensor(chunks[0]) else type(chunks[0]).cat(chunks)


@torch.no_grad()
def score_matrix(model, img_emb, cap_emb, chunk: int = 2048, amp: bool = False) -> torch.Tensor:
    """(N, 5N) float32 scores, computed in image blocks on the embeddings' device, returned on CPU."""
    if hasattr(model, "score_matrix"):  # a cross-attention model scores blocks of pairs itself
        with autocast(img_emb.glob.device, amp):
            return model.score_matrix(img_emb, cap_emb)
    return torch.cat([model.similarity(img_emb[s:s + chunk], cap_emb).float().cpu()
                      for s in range(0, img_emb.shape[0], chunk)])
