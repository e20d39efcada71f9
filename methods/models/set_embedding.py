"""Set embeddings (Kim, Kim, Kwak, CVPR 2023, "Improving Cross-Modal Retrieval with Set of Diverse
Embeddings"), as kdwonn/DivE's model_spm.py computes them, and the PIE-Net set module of PVSE
(Song and Soleymani, CVPR 2019) on the same pipeline. Two image inputs, two registered models:

- ``set_embedding``: precomputed (BUTD) regions. During training a fraction ``region_drop`` of
  each image's regions is removed first (VSE-infinity's augmentation: keep a region when a
  uniform draw exceeds it), the kept ones moved to the front and the rest zero-padded, as the
  public data loader does. No positional encoding.
- ``set_embedding_grid``: the cells of a ResNet's last map (7x7 at 224 px), cached while the CNN
  is frozen and computed by it while it is fine-tuned (``methods.models.grid_backbone``); a 2-D
  sine positional encoding on the slot module's keys (the paper, Section 3.2: "When using
  convolutional features ... we add sinusoidal positional encoding"). DivE's EncoderImage runs
  the same projection and pooling on grid cells as on regions.

Image, either input: local = dropout(fc(x) + MLP(fc(x))) (fc: input dim -> D, MLP: D -> D/2,
BatchNorm, ReLU -> D; DivE's ``--gpo_1x1``); global = max over the valid inputs of the same
projection run a second time (``--img_res_pool max --img_res_first_fc``: DivE's residual_connection
calls it again; ``image_projection.global_pass``), with nn.Linear's default init
(``image_projection.init``). Regions of a training batch are padded to the longest kept image of
the batch (``region_padding``), as DivE's collate function pads.
Text: word embeddings (GloVe, fine-tuned) -> dropout -> bi-GRU of D units, directions averaged;
global = the final hidden state (dropout); the set module reads the *word embeddings*, with a
sine positional encoding on its keys. Or a BERT (``text.kind: bert``, DivE's EncoderTextBERT,
``--use_bert``): local = linear(BERT's last hidden states) of every token ([CLS] ... [SEP]), D
wide; global = the max over the valid tokens' locals (``text_global: max_tokens``, the paper's
"max pooled feature", ``--txt_pooling max``) or the [CLS] token's (``first_token``, ``--txt_pooling
cls``), no dropout on either (EncoderTextBERT builds one and never applies it); the slot module
reads the locals (D wide), with the sine encoding on its keys. The BERT trains at its own factor
of the rate (``text.lr_factor``; DivE: the whole text encoder but its set module at
``--txt_lr_scale``).
Set module (``set_module.kind``): ``slot`` (``methods.models.set_prediction.SlotAggregation``:
element k = LayerNorm(global) + slot_k) or ``pie`` (PIE-Net: LayerNorm(global + residual_k)).
Each element is l2-normalised; a pair of sets is scored by a registered set similarity
(``methods.models.set_similarity``).

PVSE's own encoders (yalesong/pvse model.py EncoderImage / EncoderText, the ResNet-152 recipe
whose released checkpoints ``methods.released.pvse`` imports) are switches whose absence keeps
the above: ``image_projection.mlp: false`` (fc only: EncoderImage.fc), ``image_projection.
global_pool: mean`` (global = the projection of the cells' average: avgpool -> fc -> dropout;
``global_pass`` is then not read), ``set_module.image_input: raw`` (PIE-Net attends over the
image input itself, d_h = C/2 and fc C -> D, with dropout, instead of the projected locals) and
``text_global`` (``average_final``: the directions' final states averaged, a GRU of D units;
``concatenate_final``: [forward final, backward final] of a GRU of D/2 units, PVSE's EncoderText;
``concatenate_last_outputs``: the bi-GRU's output at the last word, [forward final, backward
after the last word alone], PVSE's ``--legacy`` with which its released models were trained).

``evaluation_statistics`` gives the within-set circular variance of the test sets (the paper's
Table 3): per set 1 - |mean of its unit elements|, averaged over the sets, reported as its
natural log for images, texts and both (none for one-element sets).
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from methods.features.backbone import ResNetBackbone
from methods.models.base import EmbeddingModel, register_model
from methods.models.bert_text import BertTextEncoder
from methods.models.grid_backbone import GridBackbone
from methods.models.layers import PLAIN_L2NORM_EPS, l2norm
from methods.models.set_prediction import PIENet, SlotAggregation, SlotSetPrediction
from methods.models.set_similarity import set_score_matrix, set_similarity
from methods.models.text import GRUTextEncoder

SET_MODULES = ("slot", "pie")
PROJECTION_INITS = ("pytorch", "xavier")
# separate: DivE's EncoderImage runs fc + MLP (and its dropout) again on the local inputs for the
# max-pooled global feature (residual_connection), so in training BatchNorm's running statistics
# move twice a step and the global feature has its own dropout draw; shared: pool the local features
GLOBAL_PASSES = ("separate", "shared")
GLOBAL_POOLS = ("max", "mean")          # max over the projected locals (DivE); projection of the mean input (PVSE)
SET_INPUTS = ("projected", "raw")       # what the image PIE-Net attends over: projected locals (DivE) or the input (PVSE)
GRU_TEXT_GLOBALS = ("average_final", "concatenate_final", "concatenate_last_outputs")
BERT_TEXT_GLOBALS = ("max_tokens", "first_token")   # DivE --txt_pooling max / cls
TEXT_GLOBALS = GRU_TEXT_GLOBALS + BERT_TEXT_GLOBALS
REGION_PADDINGS = ("batch_longest", "all")
BLOCK_ELEMENTS = {"cuda": 2 ** 28, "cpu": 2 ** 23}   # element cosines per scoring block


class RegionMLP(nn.Module):
    """fc(x) + MLP(fc(x)), DivE's ``--gpo_1x1`` (VSE-infinity's two-layer MLP with a residual).
    ``init``: ``pytorch`` keeps nn.Linear's default initialisation, as DivE's released script does
    (EncoderImage.init_weights runs only with ``--spm_xavier_init``, which it does not pass);
    ``xavier``: that init_weights (Xavier uniform fc, Xavier normal MLP, zero biases)."""

    def __init__(self, in_dim: int, dim: int, init: str = "xavier", mlp: bool = True):
        super().__init__()
        if init not in PROJECTION_INITS:
            raise ValueError(f"image projection init must be one of {PROJECTION_INITS}, not {init!r}")
        self.fc = nn.Linear(in_dim, dim)
        self.has_mlp = mlp   # false: fc alone (PVSE's EncoderImage.fc)
        if mlp:
            self.mlp_in = nn.Linear(dim, dim // 2)
            self.bn = nn.BatchNorm1d(dim // 2)
            self.mlp_out = nn.Linear(dim // 2, dim)
        if init == "xavier":
            nn.init.xavier_uniform_(self.fc.weight)
            nn.init.zeros_(self.fc.bias)
            for layer in (self.mlp_in, self.mlp_out) if mlp else ():
                nn.init.xavier_normal_(layer.weight)
                nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        base = self.fc(x)
        if not self.has_mlp:
            return base
        hidden = self.mlp_in(base)
        # BatchNorm over every position of the batch, padded ones included (SequenceBN)
        hidden = self.bn(hidden.reshape(-1, hidden.shape[-1])).reshape(hidden.shape)
        return base + self.mlp_out(torch.relu(hidden))


def drop_regions(regions: torch.Tensor, p: float, generator: torch.Generator | None = None,
                 padding: str = "all") -> tuple[torch.Tensor, torch.Tensor]:
    """Remove each region with probability ``p`` (kept when a uniform draw exceeds p), kept regions
    first and zeros after: (regions, lengths). An image left with none keeps all of its regions.
    ``padding``: ``batch_longest`` pads to the most regions any image of the batch kept, as DivE's
    collate_fn_butd (data.py) pads; ``all`` keeps every image at its full region count."""
    if padding not in REGION_PADDINGS:
        raise ValueError(f"region padding must be one of {REGION_PADDINGS}, not {padding!r}")
    b, n, _ = regions.shape
    keep = torch.rand(b, n, generator=generator).to(regions.device) > p
    keep[keep.sum(dim=1) == 0] = True
    order = torch.argsort((~keep).to(torch.uint8), dim=1, stable=True)
    kept = regions.gather(1, order[..., None].expand_as(regions))
    lengths = keep.sum(dim=1)
    valid = torch.arange(n, device=regions.device)[None, :] < lengths[:, None]
    kept = kept * valid[..., None]
    return (kept[:, :int(lengths.max())] if padding == "batch_longest" else kept), lengths


def circular_variance(sets: torch.Tensor) -> torch.Tensor:
    """(N, K, D) unit elements -> (N,) 1 - |mean element|."""
    return 1 - torch.linalg.vector_norm(sets.mean(dim=1), dim=-1)


class SetEmbeddingModel(EmbeddingModel):
    """What both image inputs share: the text encoder, the two set modules, the set similarity,
    scoring and statistics. Subclasses give the image's local features (``image_locals``)."""

    def __init__(self, input_dim: int, embed_dim: int, set_size: int, text: GRUTextEncoder | BertTextEncoder,
                 set_module: dict, similarity: dict, dropout: float = 0.0, lr_scale: dict | None = None,
                 image_positional: str = "none", grid: tuple[int, int] | None = None,
                 image_projection: dict | None = None, text_global: str = "average_final"):
        super().__init__()
        projection = image_projection or {"init": "xavier", "global_pass": "shared"}
        if projection["global_pass"] not in GLOBAL_PASSES:
            raise ValueError(f"image_projection.global_pass must be one of {GLOBAL_PASSES}, "
                             f"not {projection['global_pass']!r}")
        self.global_pass = projection["global_pass"]
        self.global_pool = projection.get("global_pool", "max")
        if self.global_pool not in GLOBAL_POOLS:
            raise ValueError(f"image_projection.global_pool must be one of {GLOBAL_POOLS}, not {self.global_pool!r}")
        kind = set_module["kind"]
        if kind not in SET_MODULES:
            raise ValueError(f"set_module.kind must be one of {SET_MODULES}, not {kind!r}")
        self.set_input = set_module.get("image_input", "projected")
        if self.set_input not in SET_INPUTS or (kind != "pie" and self.set_input != "projected"):
            raise ValueError(f"set_module.image_input must be one of {SET_INPUTS} (raw: PIE-Net only), "
                             f"not {self.set_input!r} for a {kind} set module")
        if text_global not in TEXT_GLOBALS:
            raise ValueError(f"text_global must be one of {TEXT_GLOBALS}, not {text_global!r}")
        self.text_global = text_global
        self.bert_text = isinstance(text, BertTextEncoder)
        if self.bert_text:
            if text_global not in BERT_TEXT_GLOBALS:
                raise ValueError(f"a BERT text encoder's global feature is one of {BERT_TEXT_GLOBALS} "
                                 f"(DivE --txt_pooling max / cls), not text_global {text_global!r}")
            if text.out_dim != embed_dim:
                raise ValueError(f"the BERT's tokens are projected to embed_dim: text.out_dim {text.out_dim} "
                                 f"is not embed_dim {embed_dim}")
            if kind != "slot":
                raise ValueError("DivE's PIE-Net over BERT tokens sizes its attention by --word_dim, which a BERT "
                                 "text block has not: a BERT text encoder takes set_module.kind slot")
        elif text_global not in GRU_TEXT_GLOBALS:
            raise ValueError(f"text_global {text_global} pools a BERT's tokens; a GRU's global feature is one of "
                             f"{GRU_TEXT_GLOBALS}")
        elif text_global == "average_final" and text.gru.hidden_size != embed_dim:
            raise ValueError(f"the text GRU's hidden_dim ({text.gru.hidden_size}) must equal embed_dim "
                             f"({embed_dim}): its final state is the global text feature")
        elif text_global != "average_final" and (not text.bidirectional or 2 * text.gru.hidden_size != embed_dim):
            raise ValueError(f"text_global {text_global} concatenates the two directions of a bidirectional GRU: "
                             f"its hidden_dim ({text.gru.hidden_size}) must be half of embed_dim ({embed_dim})")
        self.embed_dim, self.set_size = embed_dim, set_size
        self.region = RegionMLP(input_dim, embed_dim, projection["init"], projection.get("mlp", True))
        self.local_dropout = nn.Dropout(dropout)     # --img_1x1_dropout
        self.text = text
        self.global_dropout = nn.Dropout(dropout)    # EncoderText's dropout on the GRU outputs
        word_dim = embed_dim if self.bert_text else text.embed.embedding_dim   # what the text set module reads
        if kind == "slot":
            def slots(dim: int, positional: str, grid: tuple[int, int] | None = None) -> SlotSetPrediction:
                return SlotSetPrediction(SlotAggregation(
                    set_size, embed_dim, dim, set_module["iterations"], set_module["heads"],
                    set_module["head_dim"], set_module["ff_mult"], dropout, set_module["competition"],
                    set_module["padding"], positional, grid, set_module.get("initial_slots", "learned"),
                    set_module.get("slot_update", "residual")), embed_dim, set_module.get("global_residual", True))
            self.image_set, self.text_set = slots(embed_dim, image_positional, grid), slots(word_dim, "sine")
        elif self.set_input == "raw":   # PIE-Net as PVSE's EncoderImage builds it: over the input, d_h = C/2
            self.image_set = PIENet(set_size, input_dim, embed_dim, input_dim // 2, dropout)
            self.text_set = PIENet(set_size, word_dim, embed_dim, word_dim // 2, dropout)
        else:   # PIE-Net as DivE's model_spm.py builds it: image d_h = D/2, text d_h = word_dim/2
            self.image_set = PIENet(set_size, embed_dim, embed_dim, embed_dim // 2)
            self.text_set = PIENet(set_size, word_dim, embed_dim, word_dim // 2, dropout)
        params = {k: v for k, v in similarity.items() if k != "kind"}
        self.similarity_name = similarity["kind"]
        self.set_similarity = set_similarity(similarity["kind"], params)
        self.lr_scale = dict(lr_scale or {})

    def select_elements(self, img: torch.Tensor, txt: torch.Tensor, image_elements: list[int] | None,
                        text_elements: list[int] | None) -> tuple[torch.Tensor, torch.Tensor]:
        return (img if image_elements is None else img[:, image_elements],
                txt if text_elements is None else txt[:, text_elements])

    def cnn_parameters(self) -> list[nn.Parameter]:
        """The CNN's parameters that the optimizer holds (a grid model while it fine-tunes it)."""
        return []

    def parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        """(parameters, lr scale): DivE's image encoder (``img_pie_lr_scale``) and text set module
        (``txt_pie_lr_scale``) apart from the rest of the text encoder, a BERT at its factor
        (``text.lr_factor``), and a CNN at ``lr_scale.backbone`` (DivE: the base lr). The CNN's group
        holds all of it, frozen or not: a grid model may freeze it for its first epochs
        (``at_epoch``), and the optimizer skips a parameter without a gradient."""
        image = [*self.region.parameters(), *self.image_set.parameters()]   # not a CNN's
        text_set = list(self.text_set.parameters())
        if self.bert_text:
            (text, _), (bert, bert_factor) = self.text.parameter_groups()
        else:
            text, bert, bert_factor = list(self.text.parameters()), [], 1.0
        cnn = self.cnn_parameters()
        scaled = {id(p) for p in [*image, *text_set, *text, *bert, *cnn]}
        rest = [p for p in self.parameters() if id(p) not in scaled]
        groups = [(image, self.lr_scale.get("image", 1.0)), (text_set, self.lr_scale.get("text_set", 1.0)),
                  (text, 1.0), (bert, bert_factor), (rest, 1.0)]
        return ([([p for p in ps if p.requires_grad], scale) for ps, scale in groups]
                + [(cnn, self.lr_scale.get("backbone", 1.0))])

    def image_locals(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, N, input_dim) local inputs, valid ones first, and their (B,) counts."""
        raise NotImplementedError

    def encode_image_sets(self, batch: dict) -> dict[str, torch.Tensor]:
        inputs, lengths = self.image_locals(batch)
        valid = torch.arange(inputs.shape[1], device=inputs.device)[None, :] < lengths[:, None]
        local = (self.local_dropout(self.region(inputs))
                 if self.global_pool == "max" or self.set_input == "projected" else None)
        if self.global_pool == "max":
            # in eval mode a second pass gives the same values (running statistics, no dropout): skipped
            pooled = (self.local_dropout(self.region(inputs)) if self.training and self.global_pass == "separate"
                      else local)
            glob = pooled.masked_fill(~valid[..., None], -torch.finfo(local.dtype).max).amax(dim=1)
        else:   # PVSE's EncoderImage: avgpool over the cells, then fc, then dropout
            mean = (inputs * valid[..., None]).sum(dim=1) / lengths[:, None].to(inputs.dtype)
            glob = self.local_dropout(self.region(mean))
        elements, residuals, attn = self.image_set(local if self.set_input == "projected" else inputs, glob, lengths)
        return {"sets": l2norm(elements, eps=PLAIN_L2NORM_EPS), "residuals": residuals, "attention": attn}

    def encode_text_sets(self, tokens: torch.Tensor, lengths: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.bert_text:
            return self.encode_bert_sets(tokens, lengths)
        words = self.text.dropout(self.text.embed(tokens))
        packed = pack_padded_sequence(words, lengths.cpu(), batch_first=True, enforce_sorted=False)
        outputs, hidden = self.text.gru(packed)
        if self.text_global == "average_final":
            glob = (hidden[-2] + hidden[-1]) / 2 if self.text.bidirectional else hidden[-1]
        elif self.text_global == "concatenate_final":   # PVSE EncoderText: h_n permuted to (B, 2, H), viewed (B, 2H)
            glob = torch.cat([hidden[-2], hidden[-1]], dim=-1)
        else:   # PVSE --legacy: the padded outputs gathered at each caption's last word
            padded, _ = pad_packed_sequence(outputs, batch_first=True)
            glob = padded[torch.arange(len(lengths), device=padded.device), lengths.to(padded.device) - 1]
        elements, residuals, attn = self.text_set(words, self.global_dropout(glob), lengths.to(words.device))
        return {"sets": l2norm(elements, eps=PLAIN_L2NORM_EPS), "residuals": residuals, "attention": attn}

    def encode_bert_sets(self, tokens: torch.Tensor, lengths: torch.Tensor) -> dict[str, torch.Tensor]:
        """EncoderTextBERT.forward: the projected token states are the set module's inputs, and their
        max over the valid tokens (or the [CLS] one) its global feature."""
        local = self.text.word_states(tokens, lengths)
        lengths = lengths.to(local.device)
        if self.text_global == "max_tokens":
            valid = torch.arange(local.shape[1], device=local.device)[None, :] < lengths[:, None]
            glob = local.masked_fill(~valid[..., None], -torch.finfo(local.dtype).max).amax(dim=1)
        else:
            glob = local[:, 0]
        elements, residuals, attn = self.text_set(local, glob, lengths)
        return {"sets": l2norm(elements, eps=PLAIN_L2NORM_EPS), "residuals": residuals, "attention": attn}

    # The training step calls encode_* once per batch and reads the residuals as well as the sets;
    # evaluation keeps only the sets (one (N, K, D) tensor per side).
    def encode_images(self, batch: dict):
        out = self.encode_image_sets(batch)
        return out if self.training else out["sets"]

    def encode_texts(self, batch: dict):
        out = self.encode_text_sets(batch["tokens"], batch["lengths"])
        return out if self.training else out["sets"]

    def score(self, img: torch.Tensor, txt: torch.Tensor) -> torch.Tensor:
        return self.set_similarity(img, txt)

    def score_matrix(self, img: torch.Tensor, txt: torch.Tensor, amp: bool = False) -> torch.Tensor:
        with torch.no_grad():
            budget = BLOCK_ELEMENTS.get(img.device.type, BLOCK_ELEMENTS["cpu"])
            return set_score_matrix(self.set_similarity, img, txt, budget)

    def training_outputs(self, img: dict, txt: dict) -> dict:
        return {"scores": [self.score(img["sets"], txt["sets"])], "sets": (img["sets"], txt["sets"]),
                "residuals": (img["residuals"], txt["residuals"])}

    def evaluation_statistics(self, img: torch.Tensor, txt: torch.Tensor) -> dict[str, float]:
        if self.set_size == 1:
            return {}   # a one-element set has no within-set variance (its log would be -inf)
        image_cv, text_cv = circular_variance(img.double()), circular_variance(txt.double())
        both = torch.cat([image_cv, text_cv])
        return {"image_log_circular_variance": math.log(float(image_cv.mean())),
                "text_log_circular_variance": math.log(float(text_cv.mean())),
                "log_circular_variance": math.log(float(both.mean()))}


@register_model("set_embedding")
class SetEmbedding(SetEmbeddingModel):
    image_arguments = {"region_dim": "dim"}

    def __init__(self, region_dim: int, embed_dim: int, set_size: int, text: GRUTextEncoder, set_module: dict,
                 similarity: dict, dropout: float = 0.0, region_drop: float = 0.0,
                 lr_scale: dict | None = None, image_projection: dict | None = None, region_padding: str = "all",
                 text_global: str = "average_final"):
        super().__init__(region_dim, embed_dim, set_size, text, set_module, similarity, dropout, lr_scale,
                         image_projection=image_projection, text_global=text_global)
        if region_padding not in REGION_PADDINGS:
            raise ValueError(f"region_padding must be one of {REGION_PADDINGS}, not {region_padding!r}")
        self.region_drop, self.region_padding = region_drop, region_padding

    def image_locals(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        regions = batch["features"].to(self.region.fc.weight.dtype)
        if self.training and self.region_drop > 0:
            return drop_regions(regions, self.region_drop, padding=self.region_padding)
        return regions, torch.full((regions.shape[0],), regions.shape[1], device=regions.device)


@register_model("set_embedding_grid")
class SetEmbeddingGrid(GridBackbone, SetEmbeddingModel):
    """Set embeddings of a CNN grid (the paper's ResNet-152 + bi-GRU and ResNeXt-101 + BERT rows):
    the cells of one map (``grid_scales``, one name) are the local inputs, with a 2-D sine encoding
    on the slot keys. ``backbone_frozen_epochs``: while a stage fine-tunes the CNN, it does not
    train in the run's first that many epochs (DivE's ``--warm_img --warm_epoch``: train.py
    ``warmup`` sets the CNN's requires_grad each epoch; its optimizer holds the CNN throughout)."""

    def __init__(self, backbone: ResNetBackbone | str, scale_shapes: dict[str, list[int]], grid_scales: list[str],
                 backbone_bn: str, embed_dim: int, set_size: int, text: GRUTextEncoder | BertTextEncoder,
                 set_module: dict, similarity: dict, dropout: float = 0.0, lr_scale: dict | None = None,
                 image_projection: dict | None = None, text_global: str = "average_final",
                 backbone_frozen_epochs: int = 0):
        if len(grid_scales) != 1:
            raise ValueError(f"grid_scales must name one scale, not {grid_scales}")
        (scale,) = grid_scales
        if scale not in scale_shapes:
            raise ValueError(f"the grid input has no {scale} maps (it has {sorted(scale_shapes)})")
        height, width, channels = scale_shapes[scale]
        super().__init__(channels, embed_dim, set_size, text, set_module, similarity, dropout, lr_scale,
                         "sine_2d" if set_module["kind"] == "slot" else "none",
                         (height, width) if set_module["kind"] == "slot" else None, image_projection, text_global)
        self.init_backbone(backbone, backbone_bn, [scale], scale_shapes)
        if backbone_frozen_epochs < 0:
            raise ValueError(f"backbone_frozen_epochs must be >= 0, not {backbone_frozen_epochs}")
        self.backbone_frozen_epochs = backbone_frozen_epochs

    def grid_dtype(self) -> torch.dtype:
        return self.region.fc.weight.dtype

    def cnn_parameters(self) -> list[nn.Parameter]:
        return list(self.backbone.parameters()) if self.backbone is not None and self.finetune else []

    def at_epoch(self, epoch: int) -> None:
        if self.finetune:
            for p in self.backbone.parameters():
                p.requires_grad_(epoch >= self.backbone_frozen_epochs)

    def image_locals(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        grid = self.grids(batch)[self.scales[0]]                              # (B, H, W, C)
        cells = grid.reshape(grid.shape[0], -1, grid.shape[-1]).to(self.grid_dtype())   # row-major, as the encoding
        return cells, torch.full((cells.shape[0],), cells.shape[1], device=cells.device)
