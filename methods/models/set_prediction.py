"""Set prediction modules: K embeddings of one input from its local features (regions or words)
and a global feature, as kdwonn/DivE computes them.

``SlotAggregation`` (Kim, Kim, Kwak, CVPR 2023, Section 3.2; agg_block/agg_block.py and
attention.py): K learned slots, T weight-tied iterations of a pre-LN cross-attention of the slots
over the inputs (4 heads; q/k/v without bias; scale 1/sqrt(head_dim)) and a pre-LN GELU FFN,
each with a residual, then a final LayerNorm. ``competition: slots`` normalises the attention
over the slot axis and then renormalises it over the inputs (eps 1e-7), so slots compete for
inputs; ``competition: inputs`` is the ordinary transformer softmax over inputs (the
"Transformer" row of the paper's Table 3). A sine positional encoding may be added to the keys:
1-D over a caption's words (``sine``), or 2-D over a CNN grid's cells (``sine_2d``, DETR's
``PositionEmbeddingSine`` with half the channels for rows and half for columns; the paper:
"When using convolutional features ... we add sinusoidal positional encoding").

``padding`` names how padded inputs (words of shorter captions, dropped regions) are treated:
- ``leak`` (the public code): padded logits are set to -max before the softmax over *slots*,
  which makes each padded input's column uniform (1/K) instead of zero, so after the
  renormalisation over inputs padded positions carry weight; the sine positions are scaled by
  the batch's padded length. A caption's set then depends on the batch it is encoded in.
- ``masked``: padded inputs get zero weight and positions are scaled by each input's own length.

``PIENet`` (Song and Soleymani, CVPR 2019; yalesong/pvse model.py, DivE model_spm.py): K-head
self-attention pooling (Lin et al. 2017) of the local features, fc, sigmoid, dropout, added to
the global feature, LayerNorm.

Both return (elements before l2, residuals, attention); residuals are the slot outputs (or PIE
residuals) that the uniformity and diversity losses read.

The paper's three modifications of slot attention (Locatello et al., NeurIPS 2020), each a switch
whose default is the paper's model (its appendix B.3 ablates them; no public code runs the
ablations, so what the paper leaves open is written here):

- ``initial_slots``: ``learned`` K embeddings (the paper's), or ``sampled`` as the original: each
  input's K initial slots drawn from N(mu, diag(sigma^2)), mu and log sigma learned (1 x D each,
  Xavier-uniform as the original's); in evaluation the slots are mu (the paper does not say how
  it evaluates the ablation; the mean keeps a caption's set independent of the random state);
- ``slot_update``: ``residual``, slots + to_out(attended) (the paper's), or ``gru``, the original's
  GRUCell(to_out(attended), slots), both followed by the pre-LN FFN residual;
- ``global_residual`` (``SlotSetPrediction``): element k = LayerNorm(global) + slot_k (the
  paper's), or slot_k alone (false).
"""
from __future__ import annotations

import math

import torch
from torch import nn

COMPETITIONS = ("slots", "inputs")
PADDINGS = ("leak", "masked")
INITIAL_SLOTS = ("learned", "sampled")
SLOT_UPDATES = ("residual", "gru")
POSITIONALS = ("none", "sine", "sine_2d")
RENORM_EPS = 1e-7   # attention.py: attn / (attn.sum(-1) + 1e-7)


def _sine_table(t: torch.Tensor, dim: int) -> torch.Tensor:
    """(..., dim) sine encoding of scaled positions ``t``: channel pairs (sin, cos) of t / 10000^(2i/dim)."""
    freq = 10000 ** (2 * (torch.arange(dim, device=t.device) // 2).to(t.dtype) / dim)
    angles = t[..., None] / freq
    return torch.stack((angles[..., 0::2].sin(), angles[..., 1::2].cos()), dim=-1).flatten(-2)


def sine_positions(lengths: torch.Tensor, n_positions: int, dim: int, padding: str,
                   dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(B, n_positions, dim) DETR-style 1-D sine encoding with ``normalize=True``: position t
    (1-based) scaled to t / L * 2 pi, L the padded length (``leak``) or each input's own
    (``masked``); channel pairs (sin, cos) of t / 10000^(2i/dim). ``dtype``: at least float32 (the
    public code's), float64 for a float64 model."""
    dtype = torch.promote_types(dtype, torch.float32)
    t = torch.arange(1, n_positions + 1, dtype=dtype, device=lengths.device)[None, :]
    total = (torch.full_like(lengths, n_positions) if padding == "leak" else lengths).to(dtype)[:, None]
    return _sine_table(t / (total + 1e-6) * 2 * math.pi, dim)


def sine_positions_2d(height: int, width: int, dim: int, dtype: torch.dtype = torch.float32,
                      device: torch.device | None = None) -> torch.Tensor:
    """(height * width, dim) 2-D sine encoding of a grid's cells in row-major order, DivE's
    ``PositionEmbeddingSine2D(dim // 2, normalize=True)`` (DETR's): row i and column j (1-based)
    scaled to i / H * 2 pi and j / W * 2 pi, each encoded on dim / 2 channels; rows first."""
    if dim % 4:
        raise ValueError(f"a 2-D sine encoding gives rows and columns (sin, cos) pairs on half the channels each: "
                         f"dim {dim} must be a multiple of 4")
    dtype = torch.promote_types(dtype, torch.float32)
    rows = torch.arange(1, height + 1, dtype=dtype, device=device) / (height + 1e-6) * 2 * math.pi
    cols = torch.arange(1, width + 1, dtype=dtype, device=device) / (width + 1e-6) * 2 * math.pi
    half = dim // 2
    pos_y = _sine_table(rows, half)[:, None, :].expand(height, width, half)
    pos_x = _sine_table(cols, half)[None, :, :].expand(height, width, half)
    return torch.cat([pos_y, pos_x], dim=-1).reshape(height * width, dim)


class SlotAggregation(nn.Module):
    def __init__(self, n_slots: int, slot_dim: int, input_dim: int, iterations: int, heads: int = 4,
                 head_dim: int = 512, ff_mult: int = 4, dropout: float = 0.0, competition: str = "slots",
                 padding: str = "leak", positional: str = "none", grid: tuple[int, int] | None = None,
                 initial_slots: str = "learned", slot_update: str = "residual"):
        super().__init__()
        if initial_slots not in INITIAL_SLOTS:
            raise ValueError(f"initial_slots must be one of {INITIAL_SLOTS}, not {initial_slots!r}")
        if slot_update not in SLOT_UPDATES:
            raise ValueError(f"slot_update must be one of {SLOT_UPDATES}, not {slot_update!r}")
        if competition not in COMPETITIONS:
            raise ValueError(f"competition must be one of {COMPETITIONS}, not {competition!r}")
        if padding not in PADDINGS:
            raise ValueError(f"padding must be one of {PADDINGS}, not {padding!r}")
        if positional not in POSITIONALS:
            raise ValueError(f"positional must be one of {POSITIONALS}, not {positional!r}")
        if (positional == "sine_2d") != (grid is not None):
            raise ValueError("a 2-D positional encoding needs the grid's (height, width), and only it takes one")
        self.iterations, self.heads, self.head_dim = iterations, heads, head_dim
        self.competition, self.padding, self.positional, self.grid = competition, padding, positional, grid
        inner = heads * head_dim
        self.n_slots, self.initial_slots, self.slot_update = n_slots, initial_slots, slot_update
        if initial_slots == "learned":
            self.slots = nn.Parameter(torch.randn(n_slots, slot_dim))   # agg_block.py: randn, learned
        else:   # the original slot attention's: mu and log sigma, Xavier-uniform
            self.slots_mu = nn.Parameter(nn.init.xavier_uniform_(torch.empty(1, 1, slot_dim)))
            self.slots_log_sigma = nn.Parameter(nn.init.xavier_uniform_(torch.empty(1, 1, slot_dim)))
        self.norm_slots = nn.LayerNorm(slot_dim)
        self.norm_inputs = nn.LayerNorm(input_dim)
        self.to_q = nn.Linear(slot_dim, inner, bias=False)
        self.to_k = nn.Linear(input_dim, inner, bias=False)
        self.to_v = nn.Linear(input_dim, inner, bias=False)
        self.to_out = nn.Sequential(nn.Linear(inner, slot_dim), nn.Dropout(dropout))
        self.norm_ff = nn.LayerNorm(slot_dim)
        self.ff = nn.Sequential(nn.Linear(slot_dim, slot_dim * ff_mult), nn.GELU(), nn.Dropout(dropout),
                                nn.Linear(slot_dim * ff_mult, slot_dim))
        self.norm_out = nn.LayerNorm(slot_dim)
        if slot_update == "gru":
            self.gru = nn.GRUCell(slot_dim, slot_dim)

    def initial(self, batch: int, like: torch.Tensor) -> torch.Tensor:
        """(B, K, slot_dim) initial slots: the learned ones, or drawn from N(mu, sigma^2) (mu in evaluation)."""
        if self.initial_slots == "learned":
            return self.slots.expand(batch, -1, -1)
        mu = self.slots_mu.expand(batch, self.n_slots, -1)
        if not self.training:
            return mu
        return mu + self.slots_log_sigma.exp() * torch.randn(mu.shape, dtype=like.dtype, device=like.device)

    def attention(self, slots: torch.Tensor, keys: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """(B, heads, K, N) weights of the slots over the inputs (``valid``: (B, N) bool)."""
        b, k = slots.shape[:2]
        q = self.to_q(self.norm_slots(slots)).view(b, k, self.heads, self.head_dim).transpose(1, 2)
        logits = (q @ keys.transpose(-1, -2)) * self.head_dim ** -0.5        # (B, h, K, N)
        invalid = ~valid[:, None, None, :]
        if self.competition == "inputs":
            return logits.masked_fill(invalid, float("-inf")).softmax(dim=-1)
        if self.padding == "leak":
            attn = logits.masked_fill(invalid, -torch.finfo(logits.dtype).max).softmax(dim=2)
        else:
            attn = logits.softmax(dim=2).masked_fill(invalid, 0.0)
        return attn / (attn.sum(dim=-1, keepdim=True) + RENORM_EPS)

    def forward(self, inputs: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """inputs (B, N, input_dim), lengths (B,) valid inputs first -> slots (B, K, slot_dim) and
        the last iteration's attention (B, heads, K, N)."""
        b, n, _ = inputs.shape
        valid = torch.arange(n, device=inputs.device)[None, :] < lengths.to(inputs.device)[:, None]
        context = self.norm_inputs(inputs)
        keyed = context
        if self.positional == "sine":
            keyed = context + sine_positions(lengths.to(inputs.device), n, inputs.shape[-1], self.padding,
                                             context.dtype).to(context.dtype)
        elif self.positional == "sine_2d":
            if n != self.grid[0] * self.grid[1]:
                raise ValueError(f"{n} inputs are not the cells of the {self.grid[0]}x{self.grid[1]} grid")
            keyed = context + sine_positions_2d(*self.grid, inputs.shape[-1], context.dtype,
                                                inputs.device).to(context.dtype)
        keys = self.to_k(keyed).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        values = self.to_v(context).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        slots = self.initial(b, context)
        attn = None
        for _ in range(self.iterations):   # weight-tied: the same block every iteration
            attn = self.attention(slots, keys, valid)
            update = self.to_out((attn @ values).transpose(1, 2).reshape(b, slots.shape[1], -1))
            if self.slot_update == "residual":
                slots = slots + update
            else:
                slots = self.gru(update.reshape(-1, update.shape[-1]), slots.reshape(-1, slots.shape[-1])).view_as(slots)
            slots = slots + self.ff(self.norm_ff(slots))
        return self.norm_out(slots), attn


class SlotSetPrediction(nn.Module):
    """Element k = LayerNorm(global) + slot_k (DivE's ``--spm_residual --spm_residual_norm``), or
    slot_k alone (``global_residual`` false, the appendix B.3 ablation)."""

    def __init__(self, aggregation: SlotAggregation, embed_dim: int, global_residual: bool = True):
        super().__init__()
        self.aggregation = aggregation
        self.global_residual = global_residual
        if global_residual:
            self.norm_global = nn.LayerNorm(embed_dim)

    def forward(self, local: torch.Tensor, glob: torch.Tensor, lengths: torch.Tensor):
        slots, attn = self.aggregation(local, lengths)
        if not self.global_residual:
            return slots, slots, attn
        return self.norm_global(glob)[:, None, :] + slots, slots, attn


class PIENet(nn.Module):
    """Polysemous instance embedding: K attention-pooled local features -> fc -> sigmoid ->
    dropout, added to the global feature, LayerNorm (yalesong/pvse model.py PIENet)."""

    def __init__(self, n_embeds: int, input_dim: int, embed_dim: int, hidden_dim: int, dropout: float = 0.0):
        super().__init__()
        self.w1 = nn.Linear(input_dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, n_embeds, bias=False)
        nn.init.xavier_uniform_(self.w1.weight)
        nn.init.xavier_uniform_(self.w2.weight)
        self.fc = nn.Linear(input_dim, embed_dim)
        nn.init.xavier_uniform_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(embed_dim)

    def forward(self, local: torch.Tensor, glob: torch.Tensor, lengths: torch.Tensor):
        n = local.shape[1]
        valid = torch.arange(n, device=local.device)[None, :] < lengths.to(local.device)[:, None]
        logits = self.w2(torch.tanh(self.w1(local))).masked_fill(~valid[..., None], float("-inf"))
        attn = logits.softmax(dim=1)                                        # (B, N, K), over positions
        residual = self.dropout(torch.sigmoid(self.fc(attn.transpose(1, 2) @ local)))   # (B, K, D)
        return self.norm(glob[:, None, :] + residual), residual, attn.transpose(1, 2)[:, None]

