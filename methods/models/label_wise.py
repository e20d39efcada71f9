"""Label-wise retrieval by semantic sharing (Yang et al., IJCAI 2021, "Rethinking Label-Wise
Cross-Modal Retrieval from A Semantic Sharing Perspective"), as its public code computes it
(njustkmg/IJCAI21_Code-of-Rethinking-Label-Wise-Cross-Modal-Retrieval-from-A-Sematic-Sharing-Perspective:
model/Model.py, model/transformer.py, utils/evaluation.py).

Tokens. Image: each precomputed region -> fc (Xavier uniform, zero bias) -> d, then halved. Text:
word embedding U(-0.1, 0.1) (the paper says Word2Vec 300-d; the code initialises uniformly) ->
bi-GRU of d units, the two directions averaged, zero at padded positions, then halved. The code
adds ``w pos`` before halving, ``(x + w pos) / 2``, neither term l2-normalised (the code builds
both encoders with ``no_imgnorm`` / ``no_txtnorm`` True): for texts w = 1e-5 and pos the
embedding of position id 0 at every position, padded ones included, a U(-0.1, 0.1) row that
``init_weights`` writes over the padding row and no gradient reaches (``text_position_term:
true``, a fixed buffer here). At padded positions h is 0 and that constant is all the token
holds, which the code's LayerNorm (below) lifts to about 0.2 of a real token. For images w = 1e-4
and pos an embedding of image 0's boxes for *every* image (utils/data_m.py ``self.box[0]``)
through a box fc the optimiser never updates: image tokens are never zero (no padded regions),
so that term moves them by ~1e-4 of their size; omitted (a declared deviation).

Shared encoder. ONE transformer encoder reads the tokens of both modalities (``shared_transformer:
true``; false gives each modality its own encoder and label classifier of the same shape, the
supplement's "Independent" row of Table 1): the code's Annotated-Transformer encoder, i.e. pre-norm
layers (x + dropout(sublayer(LayerNorm(x)))) and a final LayerNorm, here
``torch.nn.TransformerEncoder(norm_first=True)`` with Xavier-uniform matrices as the code's
``make_model`` (each of the query/key/value projections on its own, Linear-default biases), then
ReLU. ``layer_norm: code`` normalises as the code's LayerNorm, a (x - mean) / (unbiased std +
1e-6) + b; ``torch`` as torch.nn.LayerNorm, (x - mean) / sqrt(biased variance + 1e-6): the two
agree to a factor sqrt(d / (d - 1)) on real tokens and differ on the near-zero padded ones. The
code's attention ignores every mask (transformer.py calls ``attention`` without it), so padded
words are attended: ``text_padding_mask: false``; true masks them.
``transformer.init_weights``: a torch state dict of an ``nn.TransformerEncoder`` of these sizes,
loaded strictly after the Xavier init (the paper initialises from BERT-base; no converter here).

Label head (the code's BackNet): per token sigmoid(fc -> C labels), l2-normalised (x / (|x| + 1e-8)).
The item's label vector p̄ is the token mean of those unit vectors; the code's mean runs over
every position of the padded batch (``mean_over_padding: true``; false: the text's own words).
Retrieval scores (``retrieval_score``) are the cosine of the p̄ (utils/evaluation.py ``i2t_one``,
MIRFlickr and NUS-WIDE: dot / (|a| |b|); the embedding is l2norm(p̄)) or their dot product (its
COCO ``i2t`` / ``t2i``: the embedding is p̄); either way the registered similarity is a dot product.

Masked prediction (training): the transformer output at each masked word -> fc over the vocabulary,
at each selected region -> fc over the detector classes; the code applies a sigmoid before its
cross-entropy (``sigmoid_before_cross_entropy: true``). Targets come from the batch
(``token_targets`` (B, L), ``region_class_targets`` (U, R), -100 where none).

Label predictions (micro-F1; our choice, the code computes none): the label loss fixes only the
direction of each token's label vector (it is l2-normalised before the loss), so the sigmoid
outputs are not calibrated probabilities (on the synthetic tags a true label's mean sigmoid is
about 0.45, a false one's 0.3: a 0.5 threshold on them measures where the sigmoid happens to
sit, not what is predicted). An item's label scores are therefore its label vector (the mean of
its own tokens' unit label vectors: regions; the text's words, never padding) divided by its
largest component, in [0, 1]; the metric predicts a label at >= 0.5, i.e. at least half the
item's strongest label (methods/metrics/label_prediction.py). At the loss's optimum the true
labels share equal components and the others are 0, which this rule recovers exactly. An item
always predicts at least its strongest label (an image without labels counts a false positive),
and a nearly flat label vector predicts every label.

``max_length`` cuts texts to their first words (the supplement's maximum sequence length 150; the
code asserts instead of cutting).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from methods.errors import HarnessError
from methods.models.base import SIMILARITIES, BuildContext, EmbeddingModel, register_model
from methods.models.layers import PLAIN_L2NORM_EPS, SCAN_L2NORM_EPS, ItemTensors, l2norm, xavier_linear
from methods.models.text import GRUTextEncoder

IGNORE = -100           # a token / region without a masked-prediction target
LAYER_NORM_EPS = 1e-6   # model/transformer.py LayerNorm
TEXT_POSITION_WEIGHT = 1e-5   # Model.py EncoderText self.w


def relative_to_largest(label_vectors: torch.Tensor) -> torch.Tensor:
    """(N, C) non-negative label vectors -> each divided by its largest component (in [0, 1])."""
    return label_vectors / label_vectors.amax(dim=1, keepdim=True).clamp_min(torch.finfo(label_vectors.dtype).tiny)


@dataclass
class LabelEncoding(ItemTensors):
    """A split's (or batch's) encodings: the unit retrieval embeddings (N, C) and the label
    scores (N, C, in [0, 1]) that micro-F1 reads."""
    embedding: torch.Tensor
    label_scores: torch.Tensor


class CodeLayerNorm(nn.Module):
    """model/transformer.py LayerNorm: a (x - mean) / (std + eps) + b, std the unbiased standard
    deviation (torch.std's default); parameters named as torch.nn.LayerNorm's."""

    def __init__(self, dim: int, eps: float = LAYER_NORM_EPS):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        return self.weight * (x - mean) / (x.std(dim=-1, keepdim=True) + self.eps) + self.bias


class PreNormEncoderLayer(nn.TransformerEncoderLayer):
    """The pre-norm layer, x + dropout(attn(norm1(x))) then x + dropout(ff(norm2(x))), always on
    the module path: torch's fused inference path would apply its own layer norm in place of
    norm1 / norm2 (a CodeLayerNorm)."""

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor | None = None,
                src_key_padding_mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        x = src + self._sa_block(self.norm1(src), src_mask, src_key_padding_mask, is_causal=is_causal)
        return x + self._ff_block(self.norm2(x))


LAYER_NORMS = {"code": CodeLayerNorm, "torch": lambda dim: nn.LayerNorm(dim, eps=LAYER_NORM_EPS)}


def code_transformer(dim: int, layers: int, heads: int, ff_dim: int, dropout: float,
                     layer_norm: str = "code") -> nn.TransformerEncoder:
    """The code's pre-norm encoder (make_model) as torch modules, initialised as make_model does:
    Xavier-uniform on every matrix (q, k and v projections each as its own (d, d) Linear), biases
    as nn.Linear's default U(-1/sqrt(fan_in), 1/sqrt(fan_in)); ``layer_norm``: ``LAYER_NORMS``."""
    norm = LAYER_NORMS[layer_norm]
    layer = PreNormEncoderLayer(dim, heads, ff_dim, dropout, activation="relu", layer_norm_eps=LAYER_NORM_EPS,
                                batch_first=True, norm_first=True)
    layer.norm1, layer.norm2 = norm(dim), norm(dim)
    encoder = nn.TransformerEncoder(layer, layers, norm=norm(dim), enable_nested_tensor=False)
    bound = 1 / math.sqrt(dim)
    with torch.no_grad():
        for block in encoder.layers:
            attn = block.self_attn
            for part in attn.in_proj_weight.view(3, dim, dim):
                nn.init.xavier_uniform_(part)
            nn.init.uniform_(attn.in_proj_bias, -bound, bound)
            nn.init.xavier_uniform_(attn.out_proj.weight)
            nn.init.uniform_(attn.out_proj.bias, -bound, bound)
            nn.init.xavier_uniform_(block.linear1.weight)
            nn.init.xavier_uniform_(block.linear2.weight)
    return encoder


def load_encoder_weights(encoder: nn.TransformerEncoder, path: str | None) -> None:
    if path is None:
        return
    if not Path(path).is_file():
        raise HarnessError(f"model.transformer.init_weights: {path} does not exist")
    state = torch.load(path, map_location="cpu", weights_only=True)
    try:
        encoder.load_state_dict(state, strict=True)
    except (RuntimeError, TypeError, AttributeError) as exc:
        raise HarnessError(f"model.transformer.init_weights: {path} is not a state dict of an nn.TransformerEncoder "
                           f"of these sizes: {str(exc).splitlines()[0]}") from None


class LabelHead(nn.Module):
    """BackNet's fc_predict: per token sigmoid(fc -> C); default nn.Linear init, as the code."""

    def __init__(self, dim: int, n_classes: int):
        super().__init__()
        self.fc = nn.Linear(dim, n_classes)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.fc(hidden))


@register_model("label_wise")
class LabelWise(EmbeddingModel):
    similarity = "cosine"
    image_arguments = {"region_dim": "dim"}

    def __init__(self, region_dim: int, vocab_size: int, embed_dim: int, n_classes: int, text: GRUTextEncoder,
                 transformer: dict, shared_transformer: bool = True, text_padding_mask: bool = False,
                 mean_over_padding: bool = True, sigmoid_before_cross_entropy: bool = True,
                 region_classes: bool = True, n_region_classes: int = 1000, max_length: int | None = None,
                 layer_norm: str = "code", text_position_term: bool = True, retrieval_score: str = "cosine"):
        super().__init__()
        if retrieval_score not in ("cosine", "dot"):
            raise ValueError(f"retrieval_score must be cosine or dot, got {retrieval_score!r}")
        if text.gru.hidden_size != embed_dim or not text.bidirectional:
            raise ValueError(f"the label-wise text encoder is a bi-GRU of embed_dim units (hidden_dim "
                             f"{text.gru.hidden_size}, bidirectional {text.bidirectional}, embed_dim {embed_dim})")
        self.embed_dim, self.n_classes = embed_dim, n_classes
        self.region_fc = xavier_linear(region_dim, embed_dim)
        self.text = text

        def encoder() -> nn.TransformerEncoder:
            enc = code_transformer(embed_dim, transformer["layers"], transformer["heads"], transformer["ff_dim"],
                                   transformer["dropout"], layer_norm)
            load_encoder_weights(enc, transformer["init_weights"])
            return enc

        self.shared = shared_transformer
        self.image_transformer = encoder()
        self.image_head = LabelHead(embed_dim, n_classes)
        if shared_transformer:   # one module, registered under both names: the same parameters
            self.text_transformer, self.text_head = self.image_transformer, self.image_head
        else:
            self.text_transformer, self.text_head = encoder(), LabelHead(embed_dim, n_classes)
        self.word_predictor = nn.Linear(embed_dim, vocab_size)               # BackNet fc_MLM
        self.region_predictor = nn.Linear(embed_dim, n_region_classes) if region_classes else None   # fc_MOC
        self.text_padding_mask = text_padding_mask
        self.mean_over_padding = mean_over_padding
        self.sigmoid_before_cross_entropy = sigmoid_before_cross_entropy
        self.max_length = max_length
        self.retrieval_score = retrieval_score
        # the code's position embedding of id 0 (a U(-0.1, 0.1) row no gradient reaches), drawn last
        # so the other parameters' draws do not depend on the switch; None: no position term
        self.register_buffer("text_position", torch.empty(embed_dim).uniform_(-0.1, 0.1) if text_position_term
                             else None)

    @classmethod
    def context_arguments(cls, cfg: dict, ctx: BuildContext) -> dict:
        """Adds the vocabulary's size: the masked-word predictor's outputs."""
        return {**super().context_arguments(cfg, ctx), "vocab_size": ctx.vocab_size}

    def parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        return [(self.trainable_parameters(), 1.0)]

    # -- tokens -----------------------------------------------------------------------------------

    def image_tokens(self, batch: dict) -> torch.Tensor:
        regions = batch["features"].to(self.region_fc.weight.dtype)
        return self.region_fc(regions) / 2

    def text_tokens(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, L, d) averaged bi-GRU states, zero at padded positions, halved; L = max(lengths)."""
        words = self.text.dropout(self.text.embed(tokens))
        packed = pack_padded_sequence(words, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.text.gru(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=tokens.shape[1])
        half = out.shape[-1] // 2
        averaged = (out[..., :half] + out[..., half:]) / 2   # the two directions
        if self.text_position is not None:   # the code's 1e-5 position term, at padded positions too
            averaged = averaged + TEXT_POSITION_WEIGHT * self.text_position.to(averaged.dtype)
        return averaged / 2   # the code's halving

    def truncated(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(tokens, lengths, token_targets) cut to the batch's longest text (and to max_length)."""
        lengths = batch["lengths"]
        if self.max_length is not None:
            lengths = lengths.clamp(max=self.max_length)
        longest = int(lengths.max())
        targets = batch.get("token_targets")
        return batch["tokens"][:, :longest], lengths, None if targets is None else targets[:, :longest]

    # -- encoders ---------------------------------------------------------------------------------

    def _labels(self, hidden: torch.Tensor, head: LabelHead, valid: torch.Tensor | None, lengths: torch.Tensor | None):
        """(token unit label vectors, p̄ over the configured positions, label scores over valid tokens)."""
        vectors = l2norm(head(hidden), eps=SCAN_L2NORM_EPS)
        if valid is None:
            mean = vectors.mean(dim=1)
            return vectors, mean, relative_to_largest(mean)
        count = lengths.to(vectors.device, vectors.dtype)[:, None]
        mask = valid[..., None].to(vectors.dtype)
        own = (vectors * mask).sum(dim=1) / count
        return vectors, vectors.mean(dim=1) if self.mean_over_padding else own, relative_to_largest(own)

    def _masked_scores(self, hidden: torch.Tensor, targets: torch.Tensor, predictor: nn.Module):
        chosen = targets.to(hidden.device) != IGNORE
        scores = predictor(hidden[chosen])
        if self.sigmoid_before_cross_entropy:
            scores = torch.sigmoid(scores)
        return scores, targets.to(hidden.device)[chosen]

    def encode_image_labels(self, batch: dict) -> dict:
        hidden = torch.relu(self.image_transformer(self.image_tokens(batch)))
        vectors, mean, scores = self._labels(hidden, self.image_head, None, None)
        out = {"tokens": vectors, "labels": mean, "label_scores": scores}
        targets = batch.get("region_class_targets")
        if self.training and targets is not None:
            if self.region_predictor is None:
                raise HarnessError("the batch has region-class targets but the model has no region-class head "
                                   "(model.region_classes: false)")
            out["masked_scores"], out["masked_targets"] = self._masked_scores(hidden, targets, self.region_predictor)
        return out

    def encode_text_labels(self, batch: dict) -> dict:
        tokens, lengths, targets = self.truncated(batch)
        x = self.text_tokens(tokens, lengths)
        valid = torch.arange(x.shape[1], device=x.device)[None, :] < lengths.to(x.device)[:, None]
        hidden = self.text_transformer(x, src_key_padding_mask=~valid if self.text_padding_mask else None)
        hidden = torch.relu(hidden)
        vectors, mean, scores = self._labels(hidden, self.text_head, valid, lengths)
        out = {"tokens": vectors, "labels": mean, "label_scores": scores}
        if self.training and targets is not None:
            out["masked_scores"], out["masked_targets"] = self._masked_scores(hidden, targets, self.word_predictor)
        return out

    def retrieval_embedding(self, labels: torch.Tensor) -> torch.Tensor:
        """The item's retrieval embedding from its label vector p̄: unit for cosine scores, p̄ for dot."""
        return l2norm(labels, eps=PLAIN_L2NORM_EPS) if self.retrieval_score == "cosine" else labels

    def encoding(self, out: dict) -> LabelEncoding:
        return LabelEncoding(self.retrieval_embedding(out["labels"]), out["label_scores"])

    # Training reads the token and mean label vectors and the masked predictions; evaluation keeps
    # the retrieval embedding and the label scores.
    def encode_images(self, batch: dict):
        out = self.encode_image_labels(batch)
        return out if self.training else self.encoding(out)

    def encode_texts(self, batch: dict):
        out = self.encode_text_labels(batch)
        return out if self.training else self.encoding(out)

    # -- scores -----------------------------------------------------------------------------------

    def _embedding(self, x) -> torch.Tensor:
        if isinstance(x, LabelEncoding):
            return x.embedding
        if isinstance(x, dict):
            return self.retrieval_embedding(x["labels"])
        return x

    def score(self, img, txt) -> torch.Tensor:
        return SIMILARITIES.get(self.similarity)(self._embedding(img), self._embedding(txt))

    def score_matrix(self, img, txt, amp: bool = False) -> torch.Tensor:
        return super().score_matrix(self._embedding(img), self._embedding(txt), amp)

    def training_outputs(self, img: dict, txt: dict) -> dict:
        out = {"scores": [self.score(img, txt)],
               "image_token_vectors": img["tokens"], "text_token_vectors": txt["tokens"],
               "image_label_vectors": img["labels"], "text_label_vectors": txt["labels"]}
        for side, enc in (("region", img), ("word", txt)):
            if "masked_scores" in enc:
                out[f"{side}_scores"], out[f"{side}_targets"] = enc["masked_scores"], enc["masked_targets"]
        return out

    def label_predictions(self, img: LabelEncoding, txt: LabelEncoding) -> tuple[np.ndarray, np.ndarray]:
        return (img.label_scores.double().cpu().numpy(), txt.label_scores.double().cpu().numpy())
