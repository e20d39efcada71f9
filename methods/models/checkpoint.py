"""The trained-model file ``<run>/model.pt`` written by training: the resolved config, the
vocabulary size, the image input's shape, the best epoch and the weights. Loaded here into a
model on any device (evaluation, figures, the public API)."""
from __future__ import annotations

from pathlib import Path

import torch

from methods.errors import HarnessError, first_line
from methods.io import torch_save
from methods.models.base import BuildContext, RetrievalModel, build_model

MODEL_FILE_FORMAT = 1
MODEL_FILE_KEYS = ("config", "vocab_size", "best", "state_dict")  # what loading a model reads


def save_trained_model(path: str | Path, config: dict, config_hash: str, seed: int, vocab_size: int,
                       image_shape: dict, best: dict, state_dict: dict) -> None:
    torch_save(path, {"format": MODEL_FILE_FORMAT, "config": config, "config_hash": config_hash, "seed": seed,
                      "vocab_size": vocab_size, "image_shape": image_shape, "best": best, "state_dict": state_dict})


def read_model_file(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise HarnessError(f"model file not found: {path} (written by a training job: model.pt of a run folder)")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise HarnessError(f"model file {path} is corrupt or unreadable ({type(exc).__name__}: {first_line(exc)}); "
                           f"delete it and re-run its training job") from None
    missing = [k for k in MODEL_FILE_KEYS if not isinstance(ckpt, dict) or k not in ckpt]
    if not missing and not (isinstance(ckpt["best"], dict) and "finetuned" in ckpt["best"]):
        missing = ["best.finetuned"]
    if missing:
        raise HarnessError(f"model file {path} has no {', '.join(missing)}; it was not written by this harness's "
                           f"training (format {MODEL_FILE_FORMAT}): delete it and re-run its training job")
    if "image_shape" not in ckpt:  # files written before the image shape was stored whole
        ckpt["image_shape"] = {k: v for k, v in (("dim", ckpt.get("image_dim")), ("regions", ckpt.get("n_regions")))
                               if v is not None}
    return ckpt


def load_trained_model(path: str | Path, backbones: dict, device: torch.device,
                       text_encoders: dict | None = None) -> tuple[RetrievalModel, dict, bool]:
    """(model in eval mode on ``device``, the model file's contents, whether the CNN was fine-tuned).
    ``text_encoders``: config ``text_encoders``, for a model with a BERT (its folder's config.json)."""
    ckpt = read_model_file(path)
    finetuned = ckpt["best"]["finetuned"]
    # The trained weights overwrite whatever the backbone and BERT are built with; never load theirs here.
    backbones = {k: {**v, "weights": "none"} for k, v in backbones.items()}
    text_encoders = {k: {**v, "weights": "none"} for k, v in (text_encoders or {}).items()}
    model = build_model(ckpt["config"]["model"], BuildContext(ckpt["vocab_size"], ckpt["image_shape"], backbones,
                                                              text_encoders=text_encoders, cnn=finetuned))
    try:
        missing, unexpected = model.load_state_dict(ckpt["state_dict"], strict=False)
    except RuntimeError as exc:  # shape mismatches: torch lists every one, over many lines
        raise HarnessError(f"{path}: weights do not fit the model its config builds ({exc})") from None
    if unexpected or any(not k.startswith("backbone.") or finetuned for k in missing):
        raise HarnessError(f"{path}: weights do not match the model (missing {missing[:3]}, unexpected {unexpected[:3]})")
    return model.to(device).eval(), ckpt, finetuned
