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
from methods.data.inputs import CachedGridFeatures, CachedImageFeatures
from methods.data.text import Vocabulary
from methods.errors import HarnessError
from methods.features.images import ImageFiles
from methods.models.base import BuildContext, RetrievalModel
from methods.models.base import build_model as build_from_context
from methods.models.checkpoint import load_trained_model
from methods.plan import resolve_method_config
from methods.scoring import encode_images as encode_image_batches
from methods.scoring import encode_texts as encode_text_batches
from methods.scoring import score_matrix

DEFAULT_CONFIG = REPO_ROOT / "config" / "config.yaml"

__all__ = ["harness_config", "experiment_config", "row_configs", "build_model", "load_model", "encode_images",
           "encode_texts", "score"]


def harness_config(path: str | Path = DEFAULT_CONFIG, overrides: dict | None = None) -> dict:
    """The validated harness config (``config/config.yaml`` with optional overrides)."""
    return load_harness_config(path, overrides)


def method_file(method: str) -> Path:
    """A method name (``config/methods/<name>.yaml``) or the path of a method file."""
    path = Path(method)
    if path.suffix in (".yaml", ".yml"):
        return path if path.is_absolute() else REPO_ROOT / path
    return REPO_ROOT / "config" / "methods" / f"{method}.yaml"


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
    return [numerics.experiment_config(resolve_method_config(REPO_ROOT / spec["methods"][m["method"]], dataset,
                                                             m.get("overrides", {}), m.get("variants", []),
                                                             harness["backbones"]), harness.get("datasets", {}).get(dataset))
            for m in members]


def build_model(config: dict, vocab_size: int, image_shape: dict, backbones: dict | None = None,
                word_vectors: torch.Tensor | None = None, cnn: bool = True) -> RetrievalModel:
    """A model with random weights from a resolved config (``config["model"]``, or the block itself).
    ``image_shape``: ``{"dim": C}`` (pooled), ``{"dim": C, "regions": R}`` (regions) or
    ``{"scales": {...}}`` (grid); ``backbones``: config ``backbones`` for models with a CNN;
    ``cnn``: False when the model will only read cached features (no stage fine-tunes)."""
    model_cfg = config.get("model", config)
    if backbones is None:
        backbones = harness_config()["backbones"]
    return build_from_context(model_cfg, BuildContext(vocab_size, image_shape, backbones, word_vectors, cnn))


def load_model(path: str | Path, device: str | torch.device = "cpu",
               backbones: dict | None = None) -> tuple[RetrievalModel, dict]:
    """A trained model (``<run>/model.pt``) in eval mode, and the file's contents (config, seed,
    vocabulary size, best epoch)."""
    if backbones is None:
        backbones = harness_config()["backbones"]
    model, info, _ = load_trained_model(path, backbones, torch.device(device))
    return model, info


def encode_images(model: RetrievalModel, features: Any = None, images: ImageFiles | None = None,
                  batch_size: int = 128, device: str | torch.device | None = None, amp: bool = False) -> Any:
    """Encode images from features of the model's image input (an array or tensor of any floating
    dtype, a ``CachedImageFeatures``, or a dict scale -> array for grid models) or from image files."""
    device = torch.device(device) if device is not None else model.device
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
    if len(features) == 0:
        raise HarnessError("encode_images: no images given")
    return encode_image_batches(model, len(features), device, batch_size, features=features, amp=amp)


def encode_texts(model: RetrievalModel, texts: Sequence[str] | Sequence[Sequence[int]], vocab: Vocabulary | str | Path | None = None,
                 batch_size: int = 128, device: str | torch.device | None = None, amp: bool = False) -> Any:
    """Encode captions (strings, tokenised with ``vocab``: a Vocabulary or its JSON path) or token-id lists."""
    device = torch.device(device) if device is not None else model.device
    if len(texts) == 0:
        raise HarnessError("encode_texts: no texts given")
    if isinstance(texts[0], str):
        if vocab is None:
            raise HarnessError("encode_texts: captions given as strings need the vocabulary (vocab=...)")
        vocab = vocab if isinstance(vocab, Vocabulary) else Vocabulary.load(vocab)
        texts = [vocab.encode(t) for t in texts]
    return encode_text_batches(model, [list(t) for t in texts], device, batch_size, amp)


def score(model: RetrievalModel, images: Any, texts: Any, amp: bool = False) -> torch.Tensor:
    """(N_img, N_txt) scores (CPU; float32, float64 for a float64 model) of encoded images against encoded texts."""
    return score_matrix(model, images, texts, amp=amp)
