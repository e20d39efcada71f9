"""VSE-infinity on a CNN grid (woodfrog/vse_infty, ``--precomp_enc_type backbone``; Chen et al.,
CVPR 2021): the CNN's last map, its cells pooled by GPO, as ``lib/encoders.py`` EncoderImageFull
and ``lib/modules/resnet.py`` ResnetFeatureExtractor compute it:

- image: the CNN (``backbone``, BatchNorm always in eval mode) on the batch's images -> the last
  map's cells in row-major order (B, H*W, C) -> in training the source's grid drop (below) -> fc
  (Xavier-uniform, zero bias; no MLP on this path) -> GPO over the kept cells -> l2;
- text: a bi-GRU or a BERT, pooled by GPO, as the region model (``methods.models.vse_infinity``);
- the CNN's schedule (train.py): frozen for the first ``embedding_warmup_epochs`` epochs; then
  its last block alone, then from its third, its second, for ``backbone_warmup_epochs`` epochs
  each (``fixed_blocks`` 3, 2, 1), then all of it; the first epoch that trains it scales the loss
  by step / (items // batch_size + 1) (its warmup_alpha); the CNN at ``backbone_lr_factor``
  times the stage's rate (lib/vse.py's AdamW groups, which hold the CNN from the first epoch).

Grid drop (EncoderImageFull.forward, training only): per image two uniform draws, u for the
image and one per cell; when u > 0.2 the cells whose draw exceeds 0.2 u are kept, packed first
and zero-padded, else every cell is kept; the batch is cut to the most cells any image kept,
and the pooling sees each image's kept count. An image whose draws drop every cell keeps them all:
the source would stop there (GPO over no cell), which at its 16 x 16 grid takes 256 drops
(probability below 1e-179), but a 2 x 2 grid of the built-in 64-px images meets about once in
3,000 images.
"""
from __future__ import annotations

import torch
from torch import nn

from methods.features.backbone import ResNetBackbone
from methods.models.base import EmbeddingModel, register_model
from methods.models.bert_text import BertTextEncoder
from methods.models.grid_backbone import GridBackbone
from methods.models.layers import SCAN_L2NORM_EPS, l2norm, xavier_linear
from methods.models.pooling import POOLINGS
from methods.models.text import GRUTextEncoder


def drop_grid_cells(cells: torch.Tensor, cell_draws: torch.Tensor, image_draws: torch.Tensor,
                    rate: float = 0.2) -> tuple[torch.Tensor, torch.Tensor]:
    """The source's grid drop of (B, N, C) ``cells`` given its uniform draws, (B, N) and (B,):
    (the kept cells first, zero-padded, cut to the longest; each image's kept count)."""
    keep = (image_draws[:, None] <= rate) | (cell_draws > rate * image_draws[:, None])
    keep |= ~keep.any(dim=1, keepdim=True)   # none kept: all kept (see the module doc)
    lengths = keep.sum(dim=1)
    order = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices   # kept cells first, in order
    packed = cells.gather(1, order[..., None].expand_as(cells))
    kept = torch.arange(cells.shape[1], device=cells.device)[None] < lengths[:, None]
    packed = packed * kept[..., None].to(packed.dtype)
    return packed[:, :int(lengths.max())], lengths


def trainable_blocks(epoch: int, embedding_warmup_epochs: int, backbone_warmup_epochs: int) -> int:
    """How many of the CNN's blocks train in ``epoch`` (from 0): 0 (frozen), 1 (its last, layer4),
    2, 3, or 4 (all, the stem and layer1 included); train.py's fixed_blocks is 4 minus this."""
    if epoch < embedding_warmup_epochs:
        return 0
    for blocks in (1, 2, 3):
        if epoch < embedding_warmup_epochs + backbone_warmup_epochs * blocks:
            return blocks
    return 4


@register_model("vse_infinity_grid")
class VSEInfinityGrid(GridBackbone, EmbeddingModel):
    def __init__(self, backbone: ResNetBackbone | str, scale_shapes: dict[str, list[int]], backbone_bn: str,
                 grid_scales: list[str], embed_dim: int, text: GRUTextEncoder | BertTextEncoder,
                 backbone_schedule: dict, pooling: str = "gpo", grid_drop: float = 0.2):
        super().__init__()
        if list(grid_scales) != ["conv5"]:
            raise ValueError(f"VSE-infinity pools the CNN's last map: grid_scales must be ['conv5'], not {grid_scales}")
        if isinstance(text, BertTextEncoder) and text.out_dim != embed_dim:
            raise ValueError(f"VSE-infinity projects BERT's tokens to embed_dim: text.out_dim {text.out_dim} "
                             f"is not embed_dim {embed_dim}")
        if isinstance(text, GRUTextEncoder) and (not text.bidirectional or text.gru.hidden_size != embed_dim):
            raise ValueError("VSE-infinity's GRU text encoder is a bi-GRU of embed_dim units")
        self.init_backbone(backbone, backbone_bn, ["conv5"], scale_shapes)
        self.fc = xavier_linear(scale_shapes["conv5"][2], embed_dim)
        self.image_pool = POOLINGS.get(pooling)()
        self.text = text
        self.text_pool = POOLINGS.get(pooling)()
        self.grid_drop = grid_drop
        self.schedule = dict(backbone_schedule)

    def grid_dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    def at_epoch(self, epoch: int) -> None:
        """The CNN's blocks that train in ``epoch`` of the run (train.py's warm-up options)."""
        if not self.finetune:
            return
        blocks = trainable_blocks(epoch, self.schedule["embedding_warmup_epochs"],
                                  self.schedule["backbone_warmup_epochs"])
        parts = [self.backbone.stem, self.backbone.layer2, self.backbone.layer3, self.backbone.layer4]
        for index, part in enumerate(parts):
            for p in part.parameters():
                p.requires_grad_(index >= len(parts) - blocks)

    def loss_scale(self, epoch: int, step: int, steps: int) -> float:
        """warmup_alpha: step / steps in the first epoch that trains the CNN, else 1."""
        if self.finetune and epoch == self.schedule["embedding_warmup_epochs"]:
            return step / steps
        return 1.0

    def encode_images(self, batch: dict) -> torch.Tensor:
        grid = self.grids(batch)["conv5"]
        cells = grid.reshape(grid.shape[0], -1, grid.shape[-1]).to(self.grid_dtype())
        if self.training and self.grid_drop > 0:
            cells, lengths = drop_grid_cells(cells, torch.rand(cells.shape[:2], device=cells.device),
                                             torch.rand(cells.shape[0], device=cells.device), self.grid_drop)
        else:
            lengths = torch.full((cells.shape[0],), cells.shape[1], device=cells.device)
        return l2norm(self.image_pool(self.fc(cells), lengths), eps=SCAN_L2NORM_EPS)

    def encode_texts(self, batch: dict) -> torch.Tensor:
        words = self.text.word_states(batch["tokens"], batch["lengths"])
        return l2norm(self.text_pool(words, batch["lengths"].to(words.device)), eps=SCAN_L2NORM_EPS)

    def parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        """lib/vse.py's groups: the CNN at backbone_lr_factor (all of it, frozen blocks included:
        the optimizer skips a parameter without a gradient), a BERT at its factor, the rest at 1."""
        cnn = list(self.backbone.parameters()) if self.backbone is not None and self.finetune else []
        bert, factor = [], 1.0
        if isinstance(self.text, BertTextEncoder):
            (_, _), (bert, factor) = self.text.parameter_groups()
        apart = {id(p) for p in [*cnn, *bert]}
        rest = [p for p in self.parameters() if p.requires_grad and id(p) not in apart]
        return [(rest, 1.0), (bert, factor), (cnn, self.schedule["backbone_lr_factor"])]
