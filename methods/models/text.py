"""GRU caption encoder: word embedding -> [dropout] -> (bi)GRU.

``forward`` gives one vector per caption (last valid state, l2); ``words`` gives one vector
per word (the two directions averaged, l2), for cross-attention models, and ``word_states``
the same before the l2 (for a model that pools the words).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from methods.data.word_vectors import WORD_INITS
from methods.models.layers import PLAIN_L2NORM_EPS, l2norm


EMBED_INITS = ("uniform", "normal")


class GRUTextEncoder(nn.Module):
    def __init__(self, vocab_size: int, word_dim: int, hidden_dim: int, num_layers: int = 1,
                 bidirectional: bool = False, word_vectors: torch.Tensor | None = None,
                 embed_dropout: float = 0.0, l2norm_eps: float = PLAIN_L2NORM_EPS, embed_init: str = "uniform",
                 train_words: bool = True):
        super().__init__()
        if embed_init not in EMBED_INITS:
            raise ValueError(f"embed_init must be one of {EMBED_INITS}, not {embed_init!r}")
        self.l2norm_eps = l2norm_eps  # the source model's (methods.models.layers)
        self.embed = nn.Embedding(vocab_size, word_dim)   # N(0, 1): nn.Embedding's own init, kept by DivE
        if embed_init == "uniform":   # SCAN, VSE++, SGRAF init_weights
            nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        if word_vectors is not None:  # GloVe rows for known words; others keep the init
            known = word_vectors.abs().sum(dim=1) > 0
            with torch.no_grad():
                self.embed.weight[known] = word_vectors[known]
        self.embed.weight.requires_grad_(train_words)   # PVSE: GloVe kept fixed without --txt_finetune
        self.dropout = nn.Dropout(embed_dropout)  # SGRAF: 0.4 on the word embeddings
        self.gru = nn.GRU(word_dim, hidden_dim, num_layers, batch_first=True, bidirectional=bidirectional)
        self.bidirectional = bidirectional

    @classmethod
    def from_config(cls, cfg: dict, vocab_size: int, word_vectors: torch.Tensor | None = None,
                    l2norm_eps: float = PLAIN_L2NORM_EPS) -> "GRUTextEncoder":
        """From a ``text`` block of a model config (word vectors are used only with a pre-trained
        ``word_init``: ``methods.data.word_vectors``). The block's other keys are constructor keywords."""
        pretrained = WORD_INITS.get(cfg["word_init"]).pretrained
        settings = {key: value for key, value in cfg.items() if key != "word_init"}
        return cls(vocab_size, word_vectors=word_vectors if pretrained else None, l2norm_eps=l2norm_eps, **settings)

    def _packed(self, tokens: torch.Tensor, lengths: torch.Tensor):
        return pack_padded_sequence(self.dropout(self.embed(tokens)), lengths.cpu(), batch_first=True,
                                    enforce_sorted=False)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """tokens (B, L) padded with 0, lengths (B,) -> (B, hidden) unit vectors."""
        _, hidden = self.gru(self._packed(tokens, lengths))  # (layers * dirs, B, H), final valid step of each sequence
        if self.bidirectional:
            out = (hidden[-2] + hidden[-1]) / 2  # directions averaged (SCAN/SGRAF convention)
        else:
            out = hidden[-1]
        return l2norm(out, eps=self.l2norm_eps)

    def word_states(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, max(lengths), hidden): the GRU's output at each word (the two directions averaged);
        padded positions are zero."""
        out, _ = self.gru(self._packed(tokens, lengths))
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=int(lengths.max()))
        if self.bidirectional:
            half = out.shape[-1] // 2
            out = (out[..., :half] + out[..., half:]) / 2
        return out

    def words(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, max(lengths), hidden) unit vectors, one per word; padded positions are zero."""
        out = self.word_states(tokens, lengths)
        mask = torch.arange(out.shape[1], device=out.device)[None, :] < lengths.to(out.device)[:, None]
        return l2norm(out, eps=self.l2norm_eps) * mask[..., None]
