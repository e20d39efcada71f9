"""The public Python API: what the command-line entry points use, and what a researcher can call
from a notebook. These names are stable.

    from methods import api
    cfg = api.experiment_config("sgraf", "flickr", variants=["saf"])          # a row's resolved config
    cfgs = api.row_configs("sgraf", "sgraf_t1", "saf", "flickr")             # the same, by paper row
    model = api.build_model(cfg, vocab_size=8000, image_shape={"dim": 2048, "regions": 36})
    model, info = api.load_model("results/flickr/runs/<exp>/seed0/model.pt")
    img = api.encode_images(model, features)                                  # (N, ...) features, any float dtype
    txt = api.encode_texts(model, captions, vocab)                           # strings, or token-id lists
    scores = api.score(model, img, txt)                                      # (N_img, N_txt), CPU
    result = api.evaluate(scores, "f30k_1k")                                 # metrics of a protocol
    runs = api.run_dirs("sgraf_t1", "saf", "flickr")                         # a row's run folders

Everything runs on the CPU by default; pass ``device="cuda"`` (and ``amp=True`` for fp16
autocast) to use a GPU.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from methods import numerics
from methods.config import REPO_ROOT, load_harness_config, load_yaml, validate
from methods.data.caption_augment import extra_tokens
from methods.data.inputs import CachedGridFeatures, CachedImageFeatures
from methods.data.text import Vocabulary, load_vocabulary
from methods.data.wordpiece import WordPieceVocabulary
from methods.errors import HarnessError
from methods.metrics.evaluation import evaluate_protocol
from methods.metrics.protocols import get_protocol
from methods.metrics.relevance import CaptionsOfImage
from methods.features.images import ImageFiles
from methods.models.base import BuildContext, RetrievalModel
from methods.models.base import build_model as build_from_context
from methods.models.checkpoint import load_trained_model
from methods.plan import Plan, resolve_method_config
from methods.plugins import file_root, method_files
from methods.scoring import encode_images as encode_image_batches
from methods.scoring import encode_texts as encode_text_batches
from methods.scoring import score_matrix

DEFAULT_CONFIG = REPO_ROOT / "config" / "config.yaml"

__all__ = ["harness_config", "experiment_config", "row_configs", "run_dirs", "build_model", "load_model",
           "encode_images", "encode_texts", "score", "evaluate"]


def harness_config(path: str | Path = DEFAULT_CONFIG, overrides: dict | None = None) -> dict:
    """The validated harness config (``config/config.yaml`` with optional overrides)."""
    return load_harness_config(path, overrides)


def method_file(method: str) -> Path:
    """A method name (``config/methods/<name>.yaml`` of the repository or a plug-in folder) or the
    path of a method file."""
    path = Path(method)
    if path.suffix in (".yaml", ".yml"):
        return path if path.is_absolute() else REPO_ROOT / path
    named = [p for p in method_files() if p.stem == method]
    return named[0] if named else REPO_ROOT / "config" / "methods" / f"{method}.yaml"


def experiment_config(method: str, dataset: str, variants: Sequence[str] = (), overrides: dict | None = None,
                      harness: dict | None = None) -> dict:
    """The resolved config of one experiment: the method's base, its preset for ``dataset``, the
    named variants, then dotted ``overrides`` (e.g. ``{"loss.margin": 0.1}``); no DAG is built."""
    harness = harness if harness is not None else harness_config()
    return numerics.experiment_config(resolve_method_config(method_file(method), dataset, overrides or {},
                                                            list(variants), harness["backbones"]),
                                      harness.get("datasets", {}).get(dataset))


def row_configs(paper: str, table: str, row: str, dataset: str, harness: dict | None = None) -> list[dict]:
    """The resolved configs of a paper row's models (one, or an ensemble's members). ``paper`` is
    a paper key (``methods/papers/<key>.yaml``) or the path of a paper file."""
    path = Path(paper) if Path(paper).suffix in (".yaml", ".yml") else REPO_ROOT / "methods" / "papers" / f"{paper}.yaml"
    spec = validate(load_yaml(path), "paper", str(path))
    if table not in spec["tables"]:
        raise HarnessError(f"{path}: no table '{table}' (tables: {', '.join(sorted(spec['tables']))})")
    rows = {r["id"]: r for r in spec["tables"][table]["rows"]}
    if row not in rows:
        raise HarnessError(f"{path}: table '{table}' has no row '{row}' (rows: {', '.join(rows)})")
    members = rows[row].get("ensemble") or [rows[row]]
    harness = harness if harness is not None else harness_config()
    return [numerics.experiment_config(resolve_method_config(file_root(path) / spec["methods"][m["method"]], dataset,
                                                             m.get("overrides", {}), m.get("variants", []),
                                                             harness["backbones"]), harness.get("datasets", {}).get(dataset))
            for m in members]


def run_dirs(table: str, row: str, dataset: str, harness: dict | None = None) -> list[Path]:
    """The run folders behind a table row (``tables/<table>_<dataset>.csv``, row id as in its paper
    file): every seed of every ensemble member, as the DAG names them (each holds ``model.pt``,
    ``eval_<split>.json``, ``sims_<split>.npy`` once trained)."""
    harness = harness if harness is not None else harness_config()
    plan = Plan(harness)
    return [Path(d) if Path(d).is_absolute() else REPO_ROOT / d
            for d in plan.row_runs(plan.row(table, dataset, row), dataset)]


def build_model(config: dict, vocab_size: int, image_shape: dict, backbones: dict | None = None,
                word_vectors: torch.Tensor | None = None, cnn: bool = True,
                text_encoders: dict | None = None) -> RetrievalModel:
    """A model with random weights from a resolved config (``config["model"]``, or the block itself).
    ``image_shape``: ``{"dim": C}`` (pooled), ``{"dim": C, "regions": R}`` (regions) or
    ``{"scales": {...}}`` (grid); ``backbones``: config ``backbones`` for models with a CNN;
    ``cnn``: False when the model will only read cached features (no stage fine-tunes);
    ``text_encoders``: config ``text_encoders`` for a model with a BERT text block."""
    model_cfg = config.get("model", config)
    if backbones is None:
        backbones = harness_config()["backbones"]
    if text_encoders is None:
        text_encoders = harness_config()["text_encoders"] if model_cfg.get("text", {}).get("kind") == "bert" else {}
    model = build_from_context(model_cfg, BuildContext(vocab_size, image_shape, backbones, word_vectors,
                                                       text_encoders=text_encoders, cnn=cnn))
    if "training" in config:
        model.vocab_words = vocab_size - extra_tokens(config["training"], config["model"].get("text"))
    return model


def load_model(path: str | Path, device: str | torch.device = "cpu",
               backbones: dict | None = None, text_encoders: dict | None = None) -> tuple[RetrievalModel, dict]:
    """A trained model (``<run>/model.pt``) in eval mode, and the file's contents (config, seed,
    vocabulary size, best epoch)."""
    device = _device(device, "load_model")
    if backbones is None or text_encoders is None:
        harness = harness_config()
        backbones = harness["backbones"] if backbones is None else backbones
        text_encoders = harness["text_encoders"] if text_encoders is None else text_encoders
    model, info, _ = load_trained_model(path, backbones, device, text_encoders)
    model.vocab_words = info["vocab_size"] - extra_tokens(info["config"]["training"], info["config"]["model"].get("text"))
    return model, info


def _device(device: str | torch.device | None, where: str, model: RetrievalModel | None = None) -> torch.device:
    """``device`` as a torch device (None: the model's), refused in one line where it cannot run."""
    if device is None:
        return model.device
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise HarnessError(f"{where}: device {device!r} is not a device ({exc}); use 'cpu' or 'cuda'") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise HarnessError(f"{where}: device '{device}' was asked for, but no GPU is visible "
                           f"(torch.cuda.is_available() is False); use device='cpu'")
    return device


def _check_features(model: RetrievalModel, shape: tuple[int, ...]) -> None:
    """Image features of ``shape`` fit what ``model`` was built to read: (N, C) pooled or
    (N, R, C) regions, C its feature width."""
    want = model.image_shape
    if not want or "dim" not in want:
        return  # a grid model's scales, or a model built outside build_model
    form = "(N, R, C)" if "regions" in want else "(N, C)"
    if len(shape) != (3 if "regions" in want else 2) or shape[-1] != want["dim"]:
        raise HarnessError(f"encode_images: image features of shape {tuple(shape)}, but the model reads {form} "
                           f"with C = {want['dim']} (its image shape {want})")


def encode_images(model: RetrievalModel, features: Any = None, images: ImageFiles | None = None,
                  batch_size: int = 128, device: str | torch.device | None = None, amp: bool = False) -> Any:
    """Encode images from features of the model's image input (an array or tensor of any floating
    dtype, a ``CachedImageFeatures``, or a dict scale -> array for grid models) or from image files."""
    device = _device(device, "encode_images", model)
    if images is not None:
        if len(images) == 0:
            raise HarnessError("encode_images: no images given")
        return encode_image_batches(model, len(images), device, batch_size, images=images, amp=amp)
    if features is None:
        raise HarnessError("encode_images: give features=... or images=...")
    if isinstance(features, dict):
        features = CachedGridFeatures({k: v.detach().cpu().numpy() if torch.is_tensor(v) else np.asarray(v)
                                       for k, v in features.items()})
    elif not isinstance(features, (CachedImageFeatures, CachedGridFeatures)):
        array = features.detach().cpu().numpy() if torch.is_tensor(features) else np.asarray(features)
        if not np.issubdtype(array.dtype, np.floating):
            raise HarnessError(f"image features must be a floating array, got dtype {array.dtype}")
        features = CachedImageFeatures(array)
    if isinstance(features, CachedImageFeatures):
        _check_features(model, features.array.shape)
    if len(features) == 0:
        raise HarnessError("encode_images: no images given")
    return encode_image_batches(model, len(features), device, batch_size, features=features, amp=amp)


def encode_texts(model: RetrievalModel, texts: Sequence[str] | Sequence[Sequence[int]], vocab: Vocabulary | str | Path | None = None,
                 batch_size: int = 128, device: str | torch.device | None = None, amp: bool = False) -> Any:
    """Encode captions (strings, tokenised with ``vocab``: a Vocabulary or its JSON path) or token-id lists."""
    device = _device(device, "encode_texts", model)
    if isinstance(texts, str):
        raise HarnessError("encode_texts: texts is one string; pass a list of captions (e.g. [caption])")
    if len(texts) == 0:
        raise HarnessError("encode_texts: no texts given")
    if isinstance(texts[0], str):
        if vocab is None:
            raise HarnessError("encode_texts: captions given as strings need the vocabulary (vocab=...)")
        source = vocab if isinstance(vocab, (str, Path)) else "the vocabulary given"
        vocab = vocab if isinstance(vocab, (Vocabulary, WordPieceVocabulary)) else load_vocabulary(vocab)
        if model.vocab_words is not None and len(vocab) != model.vocab_words:
            raise HarnessError(f"encode_texts: {source} has {len(vocab)} words, but the model was trained with a "
                               f"vocabulary of {model.vocab_words}: use the vocabulary of its training run")
        texts = [vocab.encode(t) for t in texts]
    token_lists = [list(t) for t in texts]
    low = min((min(t) for t in token_lists if t), default=0)
    top = max((max(t) for t in token_lists if t), default=0)
    if model.vocab_size is not None and (top >= model.vocab_size or low < 0):
        raise HarnessError(f"encode_texts: token ids must lie in [0, {model.vocab_size}) (the model's vocabulary "
                           f"size); got ids from {low} to {top}")
    return encode_text_batches(model, token_lists, device, batch_size, amp)


def score(model: RetrievalModel, images: Any, texts: Any, amp: bool = False) -> torch.Tensor:
    """(N_img, N_txt) scores (CPU; float32, float64 for a float64 model) of encoded images against encoded texts."""
    return score_matrix(model, images, texts, amp=amp)


def evaluate(scores: Any, protocol: str, relevance: Any = None, texts_per_image: int = 5) -> dict:
    """Metrics of an (N_img, N_txt) score matrix (array or tensor) under a named protocol (e.g.
    ``f30k_1k``, ``coco_1k_5fold``, ``coco_5k``): the result an ``eval_<split>.json`` holds for it.
    Caption protocols read text k as a caption of image k // ``texts_per_image``; protocols of other
    relevance (extended positives, shared labels) need ``relevance``
    (``methods.metrics.evaluation.split_relevances``)."""
    proto = get_protocol(protocol)
    if relevance is None:
        if proto.relevance != "captions_of_image":
            raise HarnessError(f"evaluate: protocol {protocol} needs its {proto.relevance} relevance (relevance=...; "
                               f"methods.metrics.evaluation.split_relevances builds it from a dataset)")
        relevance = CaptionsOfImage(texts_per_image)
    if torch.is_tensor(scores):
        scores = scores.detach().cpu()
    return evaluate_protocol(scores, proto, relevance)
