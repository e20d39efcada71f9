"""MVSA (Zheng, Ben, Yuan, ACML 2019): multi-scale visual semantics aggregation with adaptive
self-attention, end to end. No public code exists; this follows the paper's supplement
(implementation details, Tables 1-2), and each choice it leaves open is a config value, listed
with the method file (config/methods/mvsa.yaml) and the paper file.

Image: ResNet maps of one or more stages (``grid_scales``: conv3 / conv4 / conv5, 28x28 / 14x14 /
7x7 at 224 px), read from the cached grid features while the CNN is frozen and computed by the
CNN itself while it is fine-tuned. Per scale: every cell is an instance candidate, projected to
``candidate_dim`` (C = 2048) by a 1x1 convolution; adaptive self-attention (ASA) over the
candidates, a non-local block in the embedded-Gaussian form (Wang, Girshick, Gupta, He, CVPR
2018) that starts as the identity; a linear map to the instance features (D = 1024). Two or more
scales are fused by pooling the finer maps' instance features down to the coarsest grid (max or
avg, supplement Table 2) and concatenating the candidates. Every instance feature is l2-normalised.
Text: (bi-)GRU words, l2 per word. Similarity: SCAN's cross attention between instance features
and words (``methods.models.scan_similarity``; i-t / t-i, AVG / LSE).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from methods.features.backbone import ResNetBackbone
from methods.models.base import CrossAttentionModel, register_model
from methods.models.cross_attention import RegionFeatures, WordFeatures
from methods.models.grid_backbone import GridBackbone
from methods.models.layers import SCAN_L2NORM_EPS, l2norm, xavier_linear
from methods.models.scan import check_similarity
from methods.models.scan_similarity import scan_pair_elements, scan_scores
from methods.models.text import GRUTextEncoder

SCALES = ("conv3", "conv4", "conv5")
FUSION_POOLING = ("max", "avg")
NONLOCAL_INIT_STD = 0.01   # Wang et al.'s non-local code: Gaussian init of the 1x1 convolutions, std 0.01


class AdaptiveSelfAttention(nn.Module):
    """Non-local block over N instance candidates x (B, N, C), embedded Gaussian:
    z = x + BN(W_z (softmax_j(theta(x_i) . phi(x_j)) g(x_j))), theta/phi/g: C -> inter_dim.
    Initialised as Wang et al. do: the 1x1 layers Gaussian (std 0.01), the BatchNorm's scale and
    shift zero, so the block starts as the identity. Without BatchNorm W_z itself starts at zero."""

    def __init__(self, dim: int, inter_dim: int, batchnorm: bool = True):
        super().__init__()
        self.theta, self.phi, self.g = (nn.Linear(dim, inter_dim) for _ in range(3))
        self.out = nn.Linear(inter_dim, dim)
        for layer in (self.theta, self.phi, self.g, self.out):
            nn.init.normal_(layer.weight, std=NONLOCAL_INIT_STD)
            nn.init.zeros_(layer.bias)
        self.bn = nn.BatchNorm1d(dim) if batchnorm else None
        last = self.bn if batchnorm else self.out
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """(B, N, N): row i = how candidate i attends to every candidate."""
        return torch.softmax(self.theta(x) @ self.phi(x).transpose(1, 2), dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.out(self.attention(x) @ self.g(x))
        if self.bn is not None:
            y = self.bn(y.transpose(1, 2)).transpose(1, 2)
        return x + y


class ScaleBranch(nn.Module):
    """One scale: candidates (B, H, W, C_s) -> projection to C -> ASA blocks -> instance features (B, H, W, D)."""

    def __init__(self, channels: int, candidate_dim: int, embed_dim: int, asa_blocks: int, asa_inter_dim: int,
                 asa_batchnorm: bool):
        super().__init__()
        self.project = xavier_linear(channels, candidate_dim)
        self.asa = nn.ModuleList(AdaptiveSelfAttention(candidate_dim, asa_inter_dim, asa_batchnorm)
                                 for _ in range(asa_blocks))
        self.instance = xavier_linear(candidate_dim, embed_dim)

    def candidates(self, grid: torch.Tensor) -> torch.Tensor:
        """(B, H*W, C) projected candidates, row-major over the grid."""
        b, h, w, c = grid.shape
        return self.project(grid.reshape(b, h * w, c))

    def forward(self, grid: torch.Tensor) -> torch.Tensor:
        b, h, w, _ = grid.shape
        x = self.candidates(grid)
        for block in self.asa:
            x = block(x)
        return self.instance(x).view(b, h, w, -1)


@register_model("mvsa")
class MVSA(GridBackbone, CrossAttentionModel):
    def __init__(self, backbone: ResNetBackbone | str, scale_shapes: dict[str, list[int]], grid_scales: list[str],
                 fusion_pooling: str | None, candidate_dim: int, embed_dim: int, text: GRUTextEncoder,
                 asa: dict, similarity: dict, backbone_bn: str = "frozen"):
        """``asa``: {blocks, inter_dim, batchnorm}; ``similarity``: SCAN's block (``check_similarity``)."""
        super().__init__()
        direction, aggregation, lambda_softmax, lambda_lse = check_similarity(similarity)
        if not grid_scales or len(set(grid_scales)) != len(grid_scales) or set(grid_scales) - set(SCALES):
            raise ValueError(f"grid_scales must be distinct names from {SCALES}, got {grid_scales}")
        missing = [s for s in grid_scales if s not in scale_shapes]
        if missing:
            raise ValueError(f"the grid input has no {missing} maps (it has {sorted(scale_shapes)})")
        if len(grid_scales) > 1 and fusion_pooling not in FUSION_POOLING:
            raise ValueError(f"fusing {len(grid_scales)} scales needs fusion_pooling in {FUSION_POOLING}, not {fusion_pooling!r}")
        if len(grid_scales) == 1 and fusion_pooling is not None:
            raise ValueError(f"fusion_pooling {fusion_pooling!r} has no effect on one scale: set it to null")
        # finest first; a frozen-only run reads cached maps: it is built without its CNN (``backbone`` = the arch name)
        self.init_backbone(backbone, backbone_bn, sorted(grid_scales, key=SCALES.index), scale_shapes)
        shapes = {s: scale_shapes[s] for s in self.scales}
        self.grid = min(shapes[s][0] for s in self.scales), min(shapes[s][1] for s in self.scales)
        for s in self.scales:
            h, w, _ = shapes[s]
            if h % self.grid[0] or w % self.grid[1]:
                raise ValueError(f"{s} maps ({h}x{w}) do not pool evenly to the coarsest grid {self.grid}")
        self.n_instances = (self.grid[0] * self.grid[1] * len(self.scales) if len(self.scales) > 1
                            else shapes[self.scales[0]][0] * shapes[self.scales[0]][1])
        self.branches = nn.ModuleDict({s: ScaleBranch(shapes[s][2], candidate_dim, embed_dim, asa["blocks"],
                                                      asa["inter_dim"], asa["batchnorm"]) for s in self.scales})
        self.fusion_pooling = fusion_pooling
        self.text = text
        self.text.l2norm_eps = SCAN_L2NORM_EPS
        self.direction, self.aggregation = direction, aggregation
        self.lambda_softmax, self.lambda_lse = lambda_softmax, lambda_lse

    def grid_dtype(self) -> torch.dtype:
        return self.branches[self.scales[0]].project.weight.dtype

    # -- encoders ----------------------------------------------------------------------------------
    def instance_maps(self, batch: dict) -> dict[str, torch.Tensor]:
        """Instance features per scale before fusion, (B, H, W, D), not normalised."""
        return {s: self.branches[s](grid) for s, grid in self.grids(batch).items()}

    def fuse(self, maps: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B, N, D) instances: one scale's cells, or every scale pooled to the coarsest grid, concatenated."""
        if len(maps) == 1:
            x = next(iter(maps.values()))
            return x.reshape(x.shape[0], -1, x.shape[-1])
        pool = F.max_pool2d if self.fusion_pooling == "max" else F.avg_pool2d
        parts = []
        for s in self.scales:
            x = maps[s].permute(0, 3, 1, 2)                                   # (B, D, H, W)
            factor = x.shape[2] // self.grid[0], x.shape[3] // self.grid[1]
            if factor != (1, 1):
                x = pool(x, kernel_size=factor, stride=factor)
            parts.append(x.flatten(2).transpose(1, 2))                        # (B, h*w, D)
        return torch.cat(parts, dim=1)

    def encode_images(self, batch: dict) -> RegionFeatures:
        instances = l2norm(self.fuse(self.instance_maps(batch)), eps=SCAN_L2NORM_EPS)
        return RegionFeatures(instances, instances.new_zeros(instances.shape[0], 0))   # no global vector

    def encode_texts(self, batch: dict) -> WordFeatures:
        lengths = batch["lengths"].to(batch["tokens"].device)
        words = self.text.words(batch["tokens"], lengths)
        return WordFeatures(words, lengths, words.new_zeros(words.shape[0], 0))

    @torch.no_grad()
    def asa_attention(self, batch: dict) -> dict[str, torch.Tensor]:
        """The first ASA block's attention per scale, (B, N_s, N_s) over that scale's candidates."""
        out = {}
        for s, grid in self.grids(batch).items():
            branch = self.branches[s]
            if branch.asa:
                out[s] = branch.asa[0].attention(branch.candidates(grid))
        return out

    # -- pairs -------------------------------------------------------------------------------------
    def score(self, img: RegionFeatures, cap: WordFeatures) -> torch.Tensor:
        return scan_scores(img.regions, cap.words, cap.mask, self.direction, self.aggregation,
                           self.lambda_softmax, self.lambda_lse)

    def pair_elements(self, length: int) -> int:
        return scan_pair_elements(self.n_instances, length)
