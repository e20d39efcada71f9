"""Set embeddings (Kim, Kim, Kwak, CVPR 2023, "Improving Cross-Modal Retrieval with Set of Diverse
Embeddings"), as kdwonn/DivE's model_spm.py computes them for BUTD regions, and the PIE-Net set
module of PVSE (Song and Soleymani, CVPR 2019) on the same pipeline.

Image: precomputed regions -> local = dropout(fc(x) + MLP(fc(x))) (fc: region_dim -> D, MLP:
D -> D/2, BatchNorm, ReLU -> D; DivE's ``--gpo_1x1``); global = max over the valid regions of
the local features. During training a fraction ``region_drop`` of each image's regions is
removed first (VSE-infinity's augmentation: keep a region when a uniform draw exceeds it),
the kept ones moved to the front and the rest zero-padded, as the public data loader does.
Text: word embeddings (GloVe, fine-tuned) -> dropout -> bi-GRU of D units, directions averaged;
global = the final hidden state (dropout); the set module reads the *word embeddings*, with a
sine positional encoding on its keys.
Set module (``set_module.kind``): ``slot`` (``methods.models.set_prediction.SlotAggregation``:
element k = LayerNorm(global) + slot_k) or ``pie`` (PIE-Net: LayerNorm(global + residual_k)).
Each element is l2-normalised; a pair of sets is scored by a registered set similarity
(``methods.models.set_similarity``).

``evaluation_statistics`` gives the within-set circular variance of the test sets (the paper's
Table 3): per set 1 - |mean of its unit elements|, averaged over the sets, reported as its
natural log for images, texts and both (none for one-element sets).
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from methods.models.base import MODELS, BuildContext, EmbeddingModel
from methods.models.description import DescribeContext, gru_text, regions_text
from methods.models.layers import PLAIN_L2NORM_EPS, l2norm
from methods.models.set_prediction import PIENet, SlotAggregation, SlotSetPrediction
from methods.models.set_similarity import set_score_matrix, set_similarity
from methods.models.text import GRUTextEncoder

SET_MODULES = ("slot", "pie")
BLOCK_ELEMENTS = {"cuda": 2 ** 28, "cpu": 2 ** 23}   # element cosines per scoring block


class RegionMLP(nn.Module):
    """fc(x) + MLP(fc(x)), DivE's ``--gpo_1x1`` (VSE-infinity's two-layer MLP with a residual)."""

    def __init__(self, in_dim: int, dim: int):
        super().__init__()
        self.fc = nn.Linear(in_dim, dim)
        nn.init.xavier_uniform_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)
        self.mlp_in = nn.Linear(dim, dim // 2)
        self.bn = nn.BatchNorm1d(dim // 2)
        self.mlp_out = nn.Linear(dim // 2, dim)
        for layer in (self.mlp_in, self.mlp_out):   # model_spm.py init_weights: Xavier normal, zero bias
            nn.init.xavier_normal_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        base = self.fc(x)
        hidden = self.mlp_in(base)
        # BatchNorm over every position of the batch, padded ones included (SequenceBN)
        hidden = self.bn(hidden.reshape(-1, hidden.shape[-1])).reshape(hidden.shape)
        return base + self.mlp_out(torch.relu(hidden))


def drop_regions(regions: torch.Tensor, p: float, generator: torch.Generator | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Remove each region with probability ``p`` (kept when a uniform draw exceeds p), kept regions
    first and zeros after: (regions, lengths). An image left with none keeps all of its regions."""
    b, n, _ = regions.shape
    keep = torch.rand(b, n, generator=generator).to(regions.device) > p
    keep[keep.sum(dim=1) == 0] = True
    order = torch.argsort((~keep).to(torch.uint8), dim=1, stable=True)
    kept = regions.gather(1, order[..., None].expand_as(regions))
    lengths = keep.sum(dim=1)
    valid = torch.arange(n, device=regions.device)[None, :] < lengths[:, None]
    return kept * valid[..., None], lengths


def circular_variance(sets: torch.Tensor) -> torch.Tensor:
    """(N, K, D) unit elements -> (N,) 1 - |mean element|."""
    return 1 - torch.linalg.vector_norm(sets.mean(dim=1), dim=-1)


@MODELS.register("set_embedding")
class SetEmbedding(EmbeddingModel):
    image_input = "regions"

    def __init__(self, region_dim: int, embed_dim: int, set_size: int, text: GRUTextEncoder, set_module: dict,
                 similarity: dict, dropout: float = 0.0, region_drop: float = 0.0,
                 lr_scale: dict | None = None):
        super().__init__()
        kind = set_module["kind"]
        if kind not in SET_MODULES:
            raise ValueError(f"set_module.kind must be one of {SET_MODULES}, not {kind!r}")
        if text.gru.hidden_size != embed_dim:
            raise ValueError(f"the text GRU's hidden_dim ({text.gru.hidden_size}) must equal embed_dim "
                             f"({embed_dim}): its final state is the global text feature")
        self.embed_dim, self.set_size, self.region_drop = embed_dim, set_size, region_drop
        self.region = RegionMLP(region_dim, embed_dim)
        self.local_dropout = nn.Dropout(dropout)     # --img_1x1_dropout
        self.text = text
        self.global_dropout = nn.Dropout(dropout)    # EncoderText's dropout on the GRU outputs
        word_dim = text.embed.embedding_dim
        if kind == "slot":
            def slots(input_dim: int, positional: bool) -> SlotSetPrediction:
                return SlotSetPrediction(SlotAggregation(
                    set_size, embed_dim, input_dim, set_module["iterations"], set_module["heads"],
                    set_module["head_dim"], set_module["ff_mult"], dropout, set_module["competition"],
                    set_module["padding"], positional), embed_dim)
            self.image_set, self.text_set = slots(embed_dim, False), slots(word_dim, True)
        else:   # PIE-Net as DivE's model_spm.py builds it: image d_h = D/2, text d_h = word_dim/2
            self.image_set = PIENet(set_size, embed_dim, embed_dim, embed_dim // 2)
            self.text_set = PIENet(set_size, word_dim, embed_dim, word_dim // 2, dropout)
        params = {k: v for k, v in similarity.items() if k != "kind"}
        self.similarity_name = similarity["kind"]
        self.set_similarity = set_similarity(similarity["kind"], params)
        self.lr_scale = dict(lr_scale or {})

    @classmethod
    def from_config(cls, cfg: dict, ctx: BuildContext) -> "SetEmbedding":
        text = GRUTextEncoder.from_config(cfg["text"], ctx.vocab_size, ctx.word_vectors)
        return cls(ctx.image("dim", "set_embedding"), cfg["embed_dim"], cfg["set_size"], text, cfg["set_module"],
                   cfg["similarity"], cfg["dropout"], cfg["region_drop"], cfg.get("lr_scale"))

    @classmethod
    def describe(cls, cfg: dict, ctx: DescribeContext) -> str:
        model = cfg["model"]
        module = model["set_module"]
        if module["kind"] == "slot":
            attention = "slot" if module["competition"] == "slots" else "transformer"
            arch = f"{attention} set module (T {module['iterations']}, padding {module['padding']})"
        else:
            arch = "PIE-Net set module"
        sim = model["similarity"]
        params = ", ".join(f"{k} {v:g}" for k, v in sim.items() if k != "kind")
        return (f"{regions_text(ctx)}, D {model['embed_dim']}, K {model['set_size']}, {arch}, "
                f"{sim['kind']}{f' ({params})' if params else ''}, {gru_text(model['text'])}")

    @classmethod
    def set_sizes(cls, cfg: dict) -> tuple[int, int]:
        return cfg["set_size"], cfg["set_size"]

    def select_elements(self, img: torch.Tensor, txt: torch.Tensor, image_elements: list[int] | None,
                        text_elements: list[int] | None) -> tuple[torch.Tensor, torch.Tensor]:
        return (img if image_elements is None else img[:, image_elements],
                txt if text_elements is None else txt[:, text_elements])

    def parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        """(parameters, lr scale): DivE's image encoder (``img_pie_lr_scale``) and text set module
        (``txt_pie_lr_scale``) apart from the rest of the text encoder."""
        image = [*self.region.parameters(), *self.image_set.parameters()]
        text_set = list(self.text_set.parameters())
        text = list(self.text.parameters())
        groups = [(image, self.lr_scale.get("image", 1.0)), (text_set, self.lr_scale.get("text_set", 1.0)),
                  (text, 1.0)]
        return [([p for p in ps if p.requires_grad], scale) for ps, scale in groups]

    def encode_image_sets(self, features: torch.Tensor) -> dict[str, torch.Tensor]:
        regions = features.to(self.region.fc.weight.dtype)
        if self.training and self.region_drop > 0:
            regions, lengths = drop_regions(regions, self.region_drop)
        else:
            lengths = torch.full((regions.shape[0],), regions.shape[1], device=regions.device)
        local = self.local_dropout(self.region(regions))
        valid = torch.arange(local.shape[1], device=local.device)[None, :] < lengths[:, None]
        glob = local.masked_fill(~valid[..., None], -torch.finfo(local.dtype).max).amax(dim=1)
        elements, residuals, attn = self.image_set(local, glob, lengths)
        return {"sets": l2norm(elements, eps=PLAIN_L2NORM_EPS), "residuals": residuals, "attention": attn}

    def encode_text_sets(self, tokens: torch.Tensor, lengths: torch.Tensor) -> dict[str, torch.Tensor]:
        words = self.text.dropout(self.text.embed(tokens))
        packed = pack_padded_sequence(words, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, hidden = self.text.gru(packed)
        glob = (hidden[-2] + hidden[-1]) / 2 if self.text.bidirectional else hidden[-1]
        elements, residuals, attn = self.text_set(words, self.global_dropout(glob), lengths.to(words.device))
        return {"sets": l2norm(elements, eps=PLAIN_L2NORM_EPS), "residuals": residuals, "attention": attn}

    # The training step calls encode_* once per batch and reads the residuals as well as the sets;
    # evaluation keeps only the sets (one (N, K, D) tensor per side).
    def encode_images(self, batch: dict):
        out = self.encode_image_sets(batch["features"])
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
