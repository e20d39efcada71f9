"""Encode a split and score every (image, text) pair, without a Python loop over queries.

Each side is encoded once, in batches (``model.encode_images`` / ``model.encode_texts``); the
score matrix is the model's own (``model.score_matrix``: one GEMM per block for embedding
models, length-sorted pair blocks for cross-attention models). ``average_similarities`` averages
saved score matrices (ensembles, and the claims' ensemble rows).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from methods.data.inputs import CachedGridFeatures, CachedImageFeatures
from methods.data.batches import feature_tensors, pad_tokens
from methods.errors import HarnessError
from methods.features.images import ImageFiles
from methods.models.base import CrossAttentionModel, RetrievalModel
from methods.models.cross_attention import WordFeatures, default_block_elements
from methods.models.layers import at_least_float32
from methods.io import load_npy
from methods.runtime import autocast, to_device


def add_block_argument(parser: argparse.ArgumentParser) -> None:
    """``--block-elements cpu=N cuda=M``: config ``scoring.block_elements``, the per-block element
    budget of a cross-attention model's score matrix on each device."""
    parser.add_argument("--block-elements", nargs="+", type=_device_budget, default=[], metavar="DEVICE=N",
                        help="elements of one block's per-pair intermediates (cross-attention models), by device")


def _device_budget(text: str) -> tuple[str, int]:
    device, _, value = text.partition("=")
    if device not in ("cpu", "cuda") or not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"'{text}': expected cpu=N or cuda=N with N a positive integer")
    return device, int(value)


def use_block_budget(model: RetrievalModel, budgets: list[tuple[str, int]], device: torch.device) -> None:
    """A cross-attention model scores in blocks of the budget given for ``device`` (else the
    device's default, ``cross_attention.BLOCK_ELEMENTS``)."""
    if isinstance(model, CrossAttentionModel):
        model.block_elements = dict(budgets).get(device.type) or default_block_elements(device)


def block_provenance(model: RetrievalModel) -> dict:
    """What an evaluation record says of its blocks: a cross-attention model's budget (the blocks'
    shapes can move the last bits of a float32 score)."""
    return {"block_elements": model.block_elements} if isinstance(model, CrossAttentionModel) else {}


def concat_encoded(chunks: list) -> Any:
    """Encoded batches joined: tensors with torch.cat, feature sets with their own ``cat``."""
    return torch.cat(chunks) if torch.is_tensor(chunks[0]) else type(chunks[0]).cat(chunks)


def stored(encoded: Any) -> Any:
    """An encoding as kept between encoding and scoring: fp16 (autocast) outputs in fp32, a
    float64 model's in float64 (feature sets have their own ``at_least_float32``); word features
    packed by length, batch by batch, so a split's captions are never held padded to their longest."""
    if torch.is_tensor(encoded):
        return at_least_float32(encoded)
    encoded = encoded.at_least_float32()
    return encoded.packed() if isinstance(encoded, WordFeatures) else encoded


@torch.no_grad()
def encode_images(model: RetrievalModel, n_images: int, device: torch.device, batch_size: int,
                  features: CachedImageFeatures | CachedGridFeatures | None = None,
                  images: ImageFiles | None = None, amp: bool = False) -> Any:
    """Images from cached features (``features``) or from image files (``images``: the CNN runs)."""
    model.eval()
    chunks = []
    if images is not None:
        for x in DataLoader(images, batch_size=batch_size, shuffle=False):
            with autocast(device, amp):
                chunks.append(stored(model.encode_images({"images": x.to(device)})))
    else:
        dtype = next(p.dtype for p in model.parameters() if p.is_floating_point())
        for start in range(0, n_images, batch_size):
            block = feature_tensors(features.block(start, min(n_images, start + batch_size)))
            block = {k: v.to(dtype) for k, v in block.items()} if isinstance(block, dict) else block.to(dtype)
            with autocast(device, amp):
                chunks.append(stored(model.encode_images({"features": to_device(block, device)})))
    return concat_encoded(chunks)


@torch.no_grad()
def encode_texts(model: RetrievalModel, token_lists: list[list[int]], device: torch.device, batch_size: int,
                 amp: bool = False) -> Any:
    model.eval()
    chunks = []
    for start in range(0, len(token_lists), batch_size):
        tokens, lengths = pad_tokens(token_lists[start:start + batch_size])
        with autocast(device, amp):
            chunks.append(stored(model.encode_texts({"tokens": tokens.to(device), "lengths": lengths})))
    return concat_encoded(chunks)


def encode_split(model: RetrievalModel, token_lists: list[list[int]], n_images: int, device: torch.device,
                 batch_size: int, features: CachedImageFeatures | CachedGridFeatures | None = None,
                 images: ImageFiles | None = None, amp: bool = False) -> tuple[Any, Any]:
    """(encoded images, encoded texts) of one split."""
    return (encode_images(model, n_images, device, batch_size, features, images, amp),
            encode_texts(model, token_lists, device, batch_size, amp))


@torch.no_grad()
def score_matrix(model: RetrievalModel, img: Any, txt: Any, amp: bool = False) -> torch.Tensor:
    """(N_img, N_txt) scores on the CPU: float32 (float64 for a float64 model)."""
    return model.score_matrix(img, txt, amp=amp)


def average_similarities(paths: list[Path]) -> np.ndarray:
    """The mean of several runs' score matrices of one split (an ensemble: VSRN, SCAN t-i + i-t,
    SGRAF), summed in float64, returned in float32 (what the evaluation of a float32 run saves)."""
    total = None
    for path in paths:
        sims = load_npy(path)
        if total is not None and sims.shape != total.shape:
            raise HarnessError(f"{path}: shape {sims.shape} differs from the other members' {total.shape}")
        total = np.array(sims, dtype=np.float64) if total is None else total + sims
    return (total / len(paths)).astype(np.float32)
