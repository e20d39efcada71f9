"""SGRAF (Diao, Zhang, Ma, Lu, AAAI 2021): similarity graph reasoning and attention filtration.

Image: precomputed regions -> fc -> l2 (v_r); global v = self-attention over the regions queried
by their mean. Text: bi-GRU (directions averaged) -> l2 per word (t_j); global t the same way
without BatchNorm. Pair (image, caption): global similarity vector s_g = l2norm(W_g (v - t)^2),
local vectors s_j = l2norm(W_l (a_j - t_j)^2) with a_j the text-to-visual attended regions
(smooth temperature 9). Nodes [s_g; s_1..s_L] are aggregated by one or more heads:

- ``sgr``: ``steps`` graph-reasoning steps (separate parameters), each E = softmax_rows((W_q N)(W_k N)^T),
  N <- ReLU(W_r (E N)); read out the global node (or the mean of the local nodes when there is no
  global node); score = sigmoid(w . s).
- ``saf``: beta = L1-normalise(sigmoid(BN(w_a . N))), s = l2norm(sum beta N), score = sigmoid(w . s).
- ``avg``: the mean over nodes of sigmoid(w . s_n) (vector similarity) or of the cosines
  (scalar similarity), the "AA" rows of the paper's Table 4.

The paper's ablation switches are constructor arguments (from ``model`` config): which nodes
(global / local), the number of SGR steps, the attention direction (``t2i`` or ``i2t``: then
regions query words and the local nodes are regions), scalar or vector similarity, the heads,
the graph (similarity) dimension. Several heads = joint training (shared representations, the
sum of the heads' losses, the mean of their scores at inference); split training is an
ensemble row of separately trained models.

Batch statistics: the public code runs its per-pair function once per caption, so SAF's
BatchNorm sees one caption against all images at a time. Here one call covers all pairs of a
block, so SAF's training-mode statistics are taken over every valid node of the block (padded
word nodes excluded); in eval mode both use the running statistics and agree.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from methods.models.base import CrossAttentionModel, register_model
from methods.models.cross_attention import (RegionFeatures, WordFeatures, text_to_visual_attention,
                                            visual_to_text_attention)
from methods.models.layers import SCAN_L2NORM_EPS, at_least_float32, l2norm, xavier_linear
from methods.models.text import GRUTextEncoder

HEADS = ("sgr", "saf", "avg")


class VisualSelfAttention(nn.Module):
    """Global image vector: l = tanh(BN_regions(W_l v)), g = tanh(BN(W_g mean(v))), weights
    softmax_r(w . (l_r * g)) applied to the regions v themselves, then l2. BatchNorm over region
    slots (one channel per region index), as in the public code."""

    def __init__(self, dim: int, n_regions: int, dropout: float):
        super().__init__()
        self.local = nn.Sequential(xavier_linear(dim, dim), nn.BatchNorm1d(n_regions), nn.Tanh(), nn.Dropout(dropout))
        self.mean = nn.Sequential(xavier_linear(dim, dim), nn.BatchNorm1d(dim), nn.Tanh(), nn.Dropout(dropout))
        self.weight = xavier_linear(dim, 1)

    def forward(self, regions: torch.Tensor) -> torch.Tensor:
        query = self.mean(regions.mean(dim=1))                                   # (B, D)
        logits = self.weight(self.local(regions) * query[:, None]).squeeze(-1)   # (B, R)
        return l2norm((torch.softmax(logits, dim=1)[..., None] * regions).sum(dim=1), eps=SCAN_L2NORM_EPS)


class TextSelfAttention(nn.Module):
    """The same over a caption's words (no BatchNorm), padded words excluded."""

    def __init__(self, dim: int, dropout: float):
        super().__init__()
        self.local = nn.Sequential(xavier_linear(dim, dim), nn.Tanh(), nn.Dropout(dropout))
        self.mean = nn.Sequential(xavier_linear(dim, dim), nn.Tanh(), nn.Dropout(dropout))
        self.weight = xavier_linear(dim, 1)

    def forward(self, words: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        mean = (words * mask[..., None]).sum(dim=1) / mask.sum(dim=1, keepdim=True)
        logits = self.weight(self.local(words) * self.mean(mean)[:, None]).squeeze(-1)
        weights = torch.softmax(at_least_float32(logits).masked_fill(~mask, float("-inf")), dim=1).to(words.dtype)
        return l2norm((weights[..., None] * words).sum(dim=1), eps=SCAN_L2NORM_EPS)


class VectorSimilarity(nn.Module):
    """Eq. (1): s(x, y) = l2norm(W (x - y)^2), a sim_dim vector."""

    def __init__(self, dim: int, sim_dim: int):
        super().__init__()
        self.proj = xavier_linear(dim, sim_dim)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # y comes from the fp32 cache, x is fp16 under autocast; d * d, not d ** 2: autocast runs
        # pow in fp32, which would cast the largest tensor of the pair step twice.
        d = x - y.to(x.dtype)
        return l2norm(self.proj(d * d), eps=SCAN_L2NORM_EPS)


class MaskedBatchNorm(nn.Module):
    """BatchNorm of one channel (like BatchNorm1d(1)) over the valid entries of a masked tensor."""

    def __init__(self, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.weight = nn.Parameter(torch.ones(1))
        self.bias = nn.Parameter(torch.zeros(1))
        self.register_buffer("running_mean", torch.zeros(1))
        self.register_buffer("running_var", torch.ones(1))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.training:
            values = at_least_float32(x)[mask.expand_as(x)]
            mean, var = values.mean(), values.var(unbiased=False)
            with torch.no_grad():
                unbiased = var * values.numel() / max(1, values.numel() - 1)
                self.running_mean.lerp_(mean.reshape(1), self.momentum)
                self.running_var.lerp_(unbiased.reshape(1), self.momentum)
        else:
            mean, var = self.running_mean, self.running_var
        return ((at_least_float32(x) - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias).to(x.dtype)


class GraphReasoningStep(nn.Module):
    """Eqs. (6)-(8): directed edges softmax((W_q N)(W_k N)^T) over the valid nodes, N <- ReLU(W_r E N)."""

    def __init__(self, sim_dim: int):
        super().__init__()
        self.query, self.key, self.update = (xavier_linear(sim_dim, sim_dim) for _ in range(3))

    def forward(self, nodes: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # (W_q n_i + b_q) . (W_k n_j + b_k) = n_j . (W_k^T W_q n_i + W_k^T b_q) + a term constant in j,
        # which the softmax over j cancels: one projection instead of two, and no key tensor per pair.
        weight = self.key.weight.t() @ self.query.weight
        bias = self.key.weight.t() @ self.query.bias
        edges = F.linear(nodes, weight, bias) @ nodes.transpose(-1, -2)          # (..., N, N), no 1/sqrt(d)
        edges = torch.softmax(at_least_float32(edges).masked_fill(~mask[..., None, :], float("-inf")), dim=-1)
        return torch.relu(self.update(edges.to(nodes.dtype) @ nodes))


def sigmoid_score(linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """sigmoid(w . x + b) in (at least) fp32 even under autocast: fp16 sigmoids near 1 would tie many pairs."""
    with torch.autocast(x.device.type, enabled=False):
        return torch.sigmoid(linear(at_least_float32(x)).squeeze(-1))


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over dim -2 of (..., N, S) (or dim -1 of (..., N)) over the valid nodes."""
    if x.dim() == mask.dim():
        return (x * mask).sum(-1) / mask.sum(-1)
    return (x * mask[..., None]).sum(-2) / mask.sum(-1, keepdim=True)


class SimilarityGraphReasoning(nn.Module):
    def __init__(self, sim_dim: int, steps: int, readout: str):
        super().__init__()
        self.steps = nn.ModuleList(GraphReasoningStep(sim_dim) for _ in range(steps))
        self.readout = readout  # 'global' (node 0) or 'mean' (local nodes only)
        self.score = xavier_linear(sim_dim, 1)

    def forward(self, nodes: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for step in self.steps:
            nodes = step(nodes, mask)
        pooled = nodes[..., 0, :] if self.readout == "global" else masked_mean(nodes, mask)
        return sigmoid_score(self.score, pooled)


class AttentionFiltration(nn.Module):
    def __init__(self, sim_dim: int):
        super().__init__()
        self.attention = xavier_linear(sim_dim, 1)
        self.bn = MaskedBatchNorm()
        self.score = xavier_linear(sim_dim, 1)

    def weights(self, nodes: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """beta (..., N): sigmoid(BN(w . N)) L1-normalised over the valid nodes (0 on padding)."""
        beta = torch.sigmoid(at_least_float32(self.bn(self.attention(nodes).squeeze(-1), mask))) * mask
        return beta / beta.sum(-1, keepdim=True)

    def forward(self, nodes: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        beta = self.weights(nodes, mask).to(nodes.dtype)
        pooled = l2norm((beta[..., None, :] @ nodes).squeeze(-2), eps=SCAN_L2NORM_EPS)     # weighted sum over nodes, as a GEMV
        return sigmoid_score(self.score, pooled)


class AverageAggregation(nn.Module):
    """Mean over nodes of sigmoid(w . s_n); on scalar similarities, the mean of the cosines."""

    def __init__(self, sim_dim: int | None):
        super().__init__()
        self.score = xavier_linear(sim_dim, 1) if sim_dim else None

    def forward(self, nodes: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.score is None:
            return masked_mean(at_least_float32(nodes), mask)
        return masked_mean(sigmoid_score(self.score, nodes), mask)


@register_model("sgraf")
class SGRAF(CrossAttentionModel):
    image_arguments = {"region_dim": "dim", "n_regions": "regions"}

    def __init__(self, region_dim: int, n_regions: int, embed_dim: int, sim_dim: int, text: GRUTextEncoder,
                 heads: list[str], nodes: dict | None = None, sgr_steps: int = 3, attention: dict | None = None,
                 similarity: str = "vector", sa_dropout: float = 0.4):
        """``nodes``: {global, local} (both when None); ``attention``: {direction, smooth} (t2i, 9)."""
        super().__init__()
        nodes_global, nodes_local = (nodes["global"], nodes["local"]) if nodes else (True, True)
        attention, smooth = (attention["direction"], attention["smooth"]) if attention else ("t2i", 9.0)
        if not heads or len(set(heads)) != len(heads) or set(heads) - set(HEADS):
            raise ValueError(f"heads must be distinct names from {HEADS}, got {heads}")
        if not (nodes_global or nodes_local):
            raise ValueError("at least one of the global and local nodes is needed")
        if similarity not in ("vector", "scalar"):
            raise ValueError(f"similarity must be 'vector' or 'scalar', not {similarity!r}")
        if similarity == "scalar" and heads != ["avg"]:
            raise ValueError("scalar similarities (cosines) can only be averaged: heads must be ['avg']")
        if attention not in ("t2i", "i2t"):
            raise ValueError(f"attention must be 't2i' or 'i2t', not {attention!r}")
        self.fc = xavier_linear(region_dim, embed_dim)
        self.text = text
        self.text.l2norm_eps = SCAN_L2NORM_EPS  # SGRAF normalises its words as the rest: by |t| + 1e-8
        self.visual_sa = VisualSelfAttention(embed_dim, n_regions, sa_dropout)
        self.text_sa = TextSelfAttention(embed_dim, sa_dropout)
        self.nodes_global, self.nodes_local = nodes_global, nodes_local
        self.attention, self.smooth, self.similarity_kind = attention, smooth, similarity
        self.sim_dim = sim_dim if similarity == "vector" else None
        if similarity == "vector":
            self.global_sim = VectorSimilarity(embed_dim, sim_dim) if nodes_global else None
            self.local_sim = VectorSimilarity(embed_dim, sim_dim) if nodes_local else None
        self.head_names = list(heads)
        modules = {"sgr": lambda: SimilarityGraphReasoning(sim_dim, sgr_steps, "global" if nodes_global else "mean"),
                   "saf": lambda: AttentionFiltration(sim_dim),
                   "avg": lambda: AverageAggregation(self.sim_dim)}
        self.heads = nn.ModuleDict({h: modules[h]() for h in heads})
        self.embed_dim = embed_dim

    # -- encoders: each side once ----------------------------------------------------------------
    def encode_images(self, batch: dict) -> RegionFeatures:
        regions = l2norm(self.fc(batch["features"].to(self.fc.weight.dtype)), eps=SCAN_L2NORM_EPS)   # cached features: any float dtype
        return RegionFeatures(regions, self.visual_sa(regions))

    def encode_texts(self, batch: dict) -> WordFeatures:
        lengths = batch["lengths"].to(batch["tokens"].device)
        words = self.text.words(batch["tokens"], lengths)
        mask = torch.arange(words.shape[1], device=words.device)[None, :] < lengths[:, None]
        return WordFeatures(words, lengths, self.text_sa(words, mask))

    # -- pairs --------------------------------------------------------------------------------------
    def pair_nodes(self, img: RegionFeatures, cap: WordFeatures) -> tuple[torch.Tensor, torch.Tensor]:
        """Similarity nodes (I, C, N, S) of every pair of a block, or (I, C, N) cosines for scalar
        similarity, and their validity mask (C, N): global node first, then words (t2i) or regions (i2t)."""
        nodes, masks = [], []
        word_mask = cap.mask
        if self.nodes_global:
            if self.similarity_kind == "vector":
                nodes.append(self.global_sim(img.glob[:, None], cap.glob[None])[:, :, None])
            else:
                nodes.append((img.glob @ cap.glob.t())[:, :, None])
            masks.append(word_mask.new_ones(len(cap), 1))
        if self.nodes_local:
            if self.attention == "t2i":
                attended = text_to_visual_attention(img.regions, cap.words, word_mask, self.smooth)
                queries, local_mask = cap.words[None], word_mask                        # (1, C, L, D)
            else:
                attended = visual_to_text_attention(img.regions, cap.words, word_mask, self.smooth)
                queries = img.regions[:, None]                                          # (I, 1, R, D)
                local_mask = word_mask.new_ones(len(cap), img.regions.shape[1])
            if self.similarity_kind == "vector":
                nodes.append(self.local_sim(attended, queries))
            else:
                nodes.append((attended * queries.to(attended.dtype)).sum(-1))
            masks.append(local_mask)
        return torch.cat(nodes, dim=2), torch.cat(masks, dim=1)

    def head_scores(self, img: RegionFeatures, cap: WordFeatures) -> list[torch.Tensor]:
        """One (I, C) score matrix per head for a block of pairs."""
        nodes, mask = self.pair_nodes(img, cap)
        return [self.heads[h](nodes, mask[None]) for h in self.head_names]

    def score(self, img: RegionFeatures, cap: WordFeatures) -> torch.Tensor:
        """(I, C) scores of a block: the head's, or the mean of the heads' (joint training)."""
        scores = self.head_scores(img, cap)
        return scores[0] if len(scores) == 1 else torch.stack(scores).mean(0)

    def training_outputs(self, img: RegionFeatures, cap: WordFeatures) -> dict:
        """Per-head scores of a training batch (joint training sums the heads' losses)."""
        return {"scores": self.head_scores(img, cap)}

    def pair_elements(self, length: int) -> int:
        """Elements of the per-pair intermediates for a caption of this length: the attention
        matrix, the attended vectors, the similarity nodes and the graph's edges."""
        regions = self.visual_sa.local[1].num_features
        attended = length if self.attention == "t2i" else regions
        nodes = 1 + attended
        return regions * length + attended * self.embed_dim + 2 * nodes * (self.sim_dim or 1) + nodes * nodes

    @torch.no_grad()
    def saf_weights(self, img: RegionFeatures, cap: WordFeatures) -> torch.Tensor:
        """SAF's beta (I, C, N) over the nodes of each pair (global node first when present)."""
        if "saf" not in self.heads:
            raise ValueError(f"this model has no SAF head (heads: {self.head_names})")
        nodes, mask = self.pair_nodes(img, cap)
        return self.heads["saf"].weights(nodes, mask[None])
