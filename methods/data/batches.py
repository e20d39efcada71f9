"""Data as the tensors a model reads: token lists padded, feature arrays wrapped."""
from __future__ import annotations

import numpy as np
import torch


def pad_tokens(token_lists: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, longest) token ids padded with 0 (``<pad>``), and the (B,) lengths."""
    lengths = torch.tensor([len(t) for t in token_lists], dtype=torch.long)
    tokens = torch.zeros(len(token_lists), int(lengths.max()), dtype=torch.long)
    for row, t in enumerate(token_lists):
        tokens[row, : len(t)] = torch.tensor(t, dtype=torch.long)
    return tokens, lengths


def feature_tensors(features: np.ndarray | dict[str, np.ndarray]) -> torch.Tensor | dict[str, torch.Tensor]:
    """Image features read from a split (``methods.data.inputs``: an array, or one per grid scale)
    as tensors sharing their memory."""
    if isinstance(features, dict):
        return {k: torch.from_numpy(v) for k, v in features.items()}
    return torch.from_numpy(features)
