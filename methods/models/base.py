"""The model contract, written down once, and the model and similarity registries.

A model is built from its ``model`` config block and a ``BuildContext`` (vocabulary size, word
vectors, the image input's shape, the configured backbones): ``MODELS.get(kind).from_config(cfg,
ctx)``. The block's keys are the constructor's keywords, as they are (a nested block is a dict
argument); the context builds what the block only describes (the text encoder, the CNN) and gives
the image input's sizes (``image_arguments``). It encodes each side once (``encode_images``,
``encode_texts``: a tensor of embeddings, or a feature set for cross-attention and set models),
scores one block of pairs (``score``: (I, C)), scores a whole split (``score_matrix``: on the
CPU, float32, or float64 for a float64 model), and in training returns a dict of named outputs
that loss terms read (``training_outputs``: at least ``scores``, a list with one (I, C) matrix per
scoring head).
Generic code (training, evaluation, ensembles) uses only these; it never probes a model with
``hasattr`` or reads its fields.

A model implements a model kind declared in ``methods.model_kinds`` (the image input it reads, its
set sizes, its run description: what the DAG build needs, without torch): ``@register_model(kind)``
registers the class under the kind's name and gives it the kind's ``image_input``.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np
import torch
from torch import nn

from methods.errors import HarnessError
from methods.model_kinds import MODEL_KINDS
from methods.models.cross_attention import score_in_blocks
from methods.models.layers import at_least_float32
from methods.models.bert_text import BertTextEncoder
from methods.models.text import GRUTextEncoder
from methods.registry import Registry
from methods.runtime import autocast


@dataclass(frozen=True)
class BuildContext:
    vocab_size: int
    image_shape: dict = field(default_factory=dict)   # from the image input: dim, regions, scales
    backbones: dict = field(default_factory=dict)     # config `backbones`
    word_vectors: torch.Tensor | None = None           # (vocab, word_dim) when configured
    text_encoders: dict = field(default_factory=dict)  # config `text_encoders` (BERT folders)
    # whether the model will run its CNN (a run with a fine-tune stage, or a fine-tuned model
    # file); a model that reads only cached maps may then skip building it (MVSA)
    cnn: bool = True

    def image(self, key: str, model: str) -> Any:
        if key not in self.image_shape:
            raise HarnessError(f"a {model} model needs the image input's '{key}' (image shape given: {self.image_shape})")
        return self.image_shape[key]


def text_encoder(text_cfg: dict, ctx: BuildContext) -> nn.Module:
    """The text encoder of a ``text`` block: a BERT (``kind: bert``) or the GRU (the others)."""
    if text_cfg.get("kind") == "bert":
        encoder = BertTextEncoder.from_config(text_cfg, ctx.text_encoders)
        if encoder.vocab_size != ctx.vocab_size:
            raise HarnessError(f"text_encoders.{text_cfg['encoder']}: its BERT has {encoder.vocab_size} token ids, "
                               f"but the captions were tokenised to {ctx.vocab_size}: tokenise with its vocab.txt")
        return encoder
    return GRUTextEncoder.from_config(text_cfg, ctx.vocab_size, ctx.word_vectors)


class RetrievalModel(nn.Module):
    image_input: ClassVar[str]   # its kind's (``register_model``): pooled, regions or grid
    finetune: bool = False   # True while the CNN backbone is trained (models with a backbone)
    # what ``build_model`` built it for (token ids below ``vocab_size``; image features of
    # ``image_shape``): the public API checks a caller's inputs against them
    vocab_size: int | None = None
    image_shape: dict | None = None
    vocab_words: int | None = None   # words of the vocabulary it reads (vocab_size less training-only ids), where known
    # constructor keywords that the build context gives, not the config: keyword -> key of the
    # image input's shape (e.g. {"region_dim": "dim"})
    image_arguments: ClassVar[dict[str, str]] = {}

    @classmethod
    def from_config(cls, cfg: dict, ctx: BuildContext) -> "RetrievalModel":
        """The model of a ``model`` config block: every key but ``kind`` is a constructor keyword,
        passed as it is, and ``context_arguments`` replaces or adds the ones the context builds."""
        settings = {key: value for key, value in cfg.items() if key != "kind"}
        unknown = sorted(set(settings) - set(constructor_keywords(cls)))
        if unknown:
            raise HarnessError(f"model.{unknown[0]}: a {cfg['kind']} model has no such setting "
                               f"(its settings: {', '.join(sorted(constructor_keywords(cls)))})")
        return cls(**{**settings, **cls.context_arguments(cfg, ctx)})

    @classmethod
    def context_arguments(cls, cfg: dict, ctx: BuildContext) -> dict[str, Any]:
        """The constructor keywords the context gives: the text encoder built from the ``text``
        block (first: building it draws random numbers), then the image input's sizes. Models
        with a CNN add it."""
        arguments = {}
        if "text" in cfg:
            arguments["text"] = text_encoder(cfg["text"], ctx)
        arguments.update({keyword: ctx.image(key, cfg["kind"]) for keyword, key in cls.image_arguments.items()})
        return arguments

    def set_finetune(self, finetune: bool) -> None:
        if finetune:
            raise ValueError(f"{type(self).__name__} reads precomputed {self.image_input} features; "
                             f"it has no backbone to fine-tune")

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]

    def clipped_parameters(self) -> list[nn.Parameter]:
        """The trainable parameters whose gradient norm ``training.grad_clip`` bounds: all of them
        unless a model's source clips a part only (PCME: not its match head's scale and shift)."""
        return self.trainable_parameters()

    def at_epoch(self, epoch: int) -> None:
        """Called as each training epoch starts (``epoch``: the run's, from 0): a model whose source
        changes by epoch which of its parts train (VSE-infinity's CNN warm-up) sets them here."""

    def loss_scale(self, epoch: int, step: int, steps: int) -> float:
        """The factor of step ``step`` (of about ``steps``) of ``epoch``'s loss before its gradients:
        1 unless the model's source ramps it (VSE-infinity's warmup_alpha)."""
        return 1.0

    def parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        """The trainable parameters as (parameters, learning-rate scale) groups: one group at the
        stage's rate unless a model's source trains parts of it at a scaled rate."""
        return [(self.trainable_parameters(), 1.0)]

    def encode_images(self, batch: dict) -> Any:
        raise NotImplementedError

    def encode_texts(self, batch: dict) -> Any:
        raise NotImplementedError

    def score(self, img: Any, txt: Any) -> torch.Tensor:
        """(I, C) scores of one block of encoded images and texts."""
        raise NotImplementedError

    def score_matrix(self, img: Any, txt: Any, amp: bool = False) -> torch.Tensor:
        """(N_img, N_txt) scores of a whole split, on the CPU: float32 (float64 for a float64 model)."""
        raise NotImplementedError

    def select_elements(self, img: Any, txt: Any, image_elements: list[int] | None,
                        text_elements: list[int] | None) -> tuple[Any, Any]:
        """Encodings restricted to some set elements (``methods.model_kinds.element_views``)."""
        raise HarnessError(f"{type(self).__name__} does not embed items as sets: it has no elements to select")

    def evaluation_statistics(self, img: Any, txt: Any) -> dict[str, float]:
        """Statistics of a split's encodings that a paper reports beside its metrics (set models:
        within-set circular variance); none for most models."""
        return {}

    def label_predictions(self, img: Any, txt: Any) -> tuple[np.ndarray, np.ndarray] | None:
        """Per-item label probabilities of a split's encodings, (N_img, C) and (N_txt, C), for
        models with a label head (label-wise retrieval: micro-F1); None for the others."""
        return None

    def training_outputs(self, img: Any, txt: Any) -> dict[str, Any]:
        """Named outputs of a training batch for the loss terms (one score matrix per head)."""
        return {"scores": [self.score(img, txt)]}

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device


MODELS: Registry[type[RetrievalModel]] = Registry("model", declared=MODEL_KINDS)
SIMILARITIES: Registry[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = Registry("similarity")


def register_model(kind: str) -> Callable[[type[RetrievalModel]], type[RetrievalModel]]:
    """``@register_model(kind)``: the class implements model kind ``kind`` (declared in
    ``methods.model_kinds``), whose image input it reads."""
    def add(cls: type[RetrievalModel]) -> type[RetrievalModel]:
        cls.image_input = MODEL_KINDS.get(kind).image_input
        return MODELS.register(kind, cls)

    return add


@SIMILARITIES.register("cosine")
def cosine_similarity(img: torch.Tensor, txt: torch.Tensor) -> torch.Tensor:
    """(N, D) x (M, D) -> (N, M) dot products: the cosines of a model's unit vectors (VSE0's
    unnormalised image embeddings score by their dot products, as its source)."""
    return img @ txt.t()


class EmbeddingModel(RetrievalModel):
    """One vector per image and per text, scored by a registered similarity."""

    similarity: ClassVar[str] = "cosine"
    score_chunk: ClassVar[int] = 2048   # images per block of a score matrix

    def score(self, img: torch.Tensor, txt: torch.Tensor) -> torch.Tensor:
        return SIMILARITIES.get(self.similarity)(img, txt)

    def score_matrix(self, img: torch.Tensor, txt: torch.Tensor, amp: bool = False) -> torch.Tensor:
        # embeddings are in (at least) fp32 already: one GEMM per block, no autocast needed
        with torch.no_grad():
            return torch.cat([at_least_float32(self.score(img[s:s + self.score_chunk], txt)).cpu()
                              for s in range(0, img.shape[0], self.score_chunk)])


class CrossAttentionModel(RetrievalModel):
    """Scores every pair with a learned pairwise function: ``score`` takes feature sets
    (``methods.models.cross_attention``), and a score matrix is computed in length-sorted
    blocks of pairs whose size comes from ``pair_elements`` and an element budget."""

    block_elements: int | None = None   # None: by device (cross_attention.BLOCK_ELEMENTS)
    # "float64": a split's scores from its float32 encodings cast to float64, as kuanghuei/SCAN's
    # evaluation and the codes built on it (BFAN, NAAF, PFAN) copy them into float64 numpy arrays and
    # score those; "model": in the encodings' dtype. Training batches always score in the model's dtype.
    evaluation_dtype: str = "model"
    # images per scoring block: 128, or None for blocks whose cosine product is about square
    # (cross_attention.square_image_block), for the models whose pair intermediates hold no embedding dimension
    scoring_image_block: int | None = 128

    def pair_elements(self, length: int) -> int:
        """Elements of the per-pair intermediates for a caption of this length."""
        raise NotImplementedError

    def score_matrix(self, img: Any, txt: Any, amp: bool = False) -> torch.Tensor:
        if self.evaluation_dtype == "float64":
            img, txt = img.double(), txt.double()
        with autocast(self.device, amp):
            return score_in_blocks(self.score, img, txt, self.pair_elements, self.block_elements,
                                   self.scoring_image_block)


def constructor_keywords(cls: type[RetrievalModel]) -> dict[str, inspect.Parameter]:
    """The constructor's keywords and their parameters (defaults)."""
    return {name: p for name, p in inspect.signature(cls.__init__).parameters.items() if name != "self"}


def model_class(kind: str) -> type[RetrievalModel]:
    return MODELS.get(kind)


def build_model(cfg: dict, ctx: BuildContext) -> RetrievalModel:
    """The model of a ``model`` config block (random weights)."""
    model = model_class(cfg["kind"]).from_config(cfg, ctx)
    model.vocab_size, model.image_shape = ctx.vocab_size, dict(ctx.image_shape)
    return model
