"""GRU caption encoder: word embedding -> (bi)GRU -> last valid state -> l2."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from methods.models.layers import l2norm


class GRUTextEncoder(nn.Module):
    def __init__(self, vocab_size: int, word_dim: int, hidden_dim: int, num_layers: int = 1,
                 bidirectional: bool = False, word_vectors: torch.Tensor | None = None):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, word_dim)
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        if word_vectors is not None:  # GloVe rows for known words; others keep the uniform init
            known = word_vectors.abs().sum(dim=1) > 0
            with torch.no_grad():
                self.embed.weight[known] = word_vectors[known]
        self.gru = nn.GRU(word_dim, hidden_dim, num_layers, batch_first=True, bidirectional=bidirectional)
        self.bidirectional = bidirectional

    @classmethod
    def from_config(cls, cfg: dict, vocab_size: int, word_vectors: torch.Tensor | None = None) -> "GRUTextEncoder":
        """From a ``text`` block of a model config (word vectors are used only with ``word_init: glove``)."""
        return cls(vocab_size, cfg["word_dim"], cfg["hidden_dim"], cfg["num_layers"], cfg["bidirectional"],
                   word_vectors if cfg["word_init"] == "glove" else None)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """tokens (B, L) padded with 0, lengths (B,) -> (B, hidden) unit vectors."""
        packed = pack_padded_sequence(self.embed(tokens), lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, hidden = self.gru(packed)  # (layers * dirs, B, H), final valid step of each sequence
        if self.bidirectional:
            out = (hidden[-2] + hidden[-1]) / 2  # directions averaged (SCAN/SGRAF convention)
        else:
            out = hidden[-1]
        return l2norm(out)
