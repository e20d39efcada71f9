"""VSRN's caption generator (Li et al., ICCV 2019, Section 3.3): an attention GRU decoder that learns
to generate an image's caption from its reasoned region features, trained jointly with the
matching loss (KunpengLi1994/VSRN models/S2VTAttModel.py, EncoderRNN.py, DecoderRNN.py,
Attention.py; misc/utils.py LanguageModelCriterion; data.py's caption labels).

- encoder: h = GRU(dropout(W_v r_n)) over the regions in detector order (``hidden_dim`` units);
  its outputs are the attention's memory, its final state the decoder's first state;
- each step t: context c_t = sum_n softmax_n(w2 tanh(W1 [h_n; s_{t-1}])) h_n, then
  s_t = GRU(dropout([E y_t; c_t]), s_{t-1}) and log p(y_{t+1}) = log_softmax(W_o s_t);
- teacher forcing: the inputs are the caption's own ids, ``<start>`` first; the targets are the
  next ids, up to and including the first padding id after ``<end>`` (0: the source's data.py mask
  covers it, and its decoder's eos id is 0); the source pads every label row to ``max_len + 1`` ids
  and decodes ``max_len - 1`` steps, and a caption longer than ``max_len`` ids is cut to ``max_len``
  with ``<end>`` last.

Steps past a batch's longest target neither change nor read the loss, so the decoder runs only as
far as that. The source's GRU dropout (``rnn_dropout_p`` 0.5 on a one-layer GRU) does nothing and
is not a setting.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

DECODER_SETTINGS = ("hidden_dim", "word_dim", "max_len", "input_dropout", "listed_twice")


class CaptionDecoder(nn.Module):
    def __init__(self, region_dim: int, vocab_size: int, hidden_dim: int = 512, word_dim: int = 300,
                 max_len: int = 60, input_dropout: float = 0.2):
        super().__init__()
        if max_len < 3:
            raise ValueError(f"caption_decoder.max_len must be at least 3 (<start>, a word, <end>), not {max_len}")
        self.max_len = max_len
        self.region_to_hidden = nn.Linear(region_dim, hidden_dim)     # EncoderRNN.vid2hid
        nn.init.xavier_normal_(self.region_to_hidden.weight)
        self.encoder = nn.GRU(hidden_dim, hidden_dim, batch_first=True)
        self.attention_hidden = nn.Linear(2 * hidden_dim, hidden_dim)   # Attention.linear1 over [memory; state]
        self.attention_score = nn.Linear(hidden_dim, 1, bias=False)    # Attention.linear2
        self.embed = nn.Embedding(vocab_size, word_dim)                 # N(0, 1), as the source keeps
        self.decoder = nn.GRU(word_dim + hidden_dim, hidden_dim, batch_first=True)
        self.out = nn.Linear(hidden_dim, vocab_size)
        nn.init.xavier_normal_(self.out.weight)
        self.dropout = nn.Dropout(input_dropout)

    def labels(self, tokens: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(inputs (B, S), targets (B, S), boolean mask (B, S)) of padded caption ids (<start> ... <end>, 0
        after), S the steps this batch needs: the source's labels cut to max_len ids, <end> last."""
        end = tokens[torch.arange(len(tokens)), lengths - 1]          # each caption's <end> id
        lengths = lengths.to(tokens.device)
        cut = lengths > self.max_len
        n = torch.clamp(lengths, max=self.max_len)                    # ids kept, <end> included
        width = int(n.max()) + 1                                      # room for the padding target
        labels = torch.zeros(len(tokens), width, dtype=tokens.dtype, device=tokens.device)
        keep = min(width, tokens.shape[1])
        labels[:, :keep] = tokens[:, :keep]
        position = torch.arange(width, device=tokens.device)[None, :]
        labels = labels.masked_fill(position >= n[:, None], 0)
        labels[cut, n[cut] - 1] = end[cut]
        steps = min(self.max_len - 1, width - 1)                      # the source decodes max_len - 1 steps
        mask = position[:, 1:steps + 1] <= n[:, None]
        return labels[:, :steps], labels[:, 1:steps + 1], mask

    def log_probs(self, regions: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        """(B, S, V) log-probabilities of the next id, teacher-forced on ``inputs`` (B, S)."""
        memory, state = self.encoder(self.dropout(self.region_to_hidden(regions)))   # (B, N, H), (1, B, H)
        hidden = memory.shape[-1]
        w_memory, w_state = self.attention_hidden.weight[:, :hidden], self.attention_hidden.weight[:, hidden:]
        memory_part = memory @ w_memory.t() + self.attention_hidden.bias           # once per batch
        words = self.embed(inputs)
        out = []
        for t in range(inputs.shape[1]):
            energy = self.attention_score(torch.tanh(memory_part + (state[0] @ w_state.t())[:, None, :]))
            context = (torch.softmax(energy.squeeze(-1), dim=1)[:, :, None] * memory).sum(dim=1)
            step, state = self.decoder(self.dropout(torch.cat([words[:, t], context], dim=1))[:, None], state)
            out.append(F.log_softmax(self.out(step[:, 0]), dim=-1))
        return torch.stack(out, dim=1)

    def forward(self, regions: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor) -> dict[str, torch.Tensor]:
        """regions (B, N, D), each caption's own image's; tokens (B, L) padded with 0 -> the outputs
        the caption-generation loss term reads."""
        inputs, targets, mask = self.labels(tokens, lengths)
        return {"caption_log_probs": self.log_probs(regions, inputs), "caption_targets": targets,
                "caption_mask": mask.to(regions.dtype)}
