"""What a model family does in one training step: encode both sides of the batch, take the
model's named training outputs, and apply the configured loss terms to them.

The epoch loop (``methods.training.loop``) is the same for every model; the model supplies
``encode_images`` / ``encode_texts`` / ``training_outputs`` (its heads), the loss terms read the
outputs they need. Losses and gradient counts run in fp32 even under fp16 autocast.
"""
from __future__ import annotations

from typing import Any

import torch

from methods.losses.weighted_sum import Loss
from methods.models.base import RetrievalModel
from methods.models.layers import at_least_float32
from methods.runtime import autocast


def at_least_fp32(value: Any) -> Any:
    """Floating tensors of a (nested) output structure in at least float32 (fp16 autocast
    outputs upcast; a float64 model's stay float64)."""
    if torch.is_tensor(value):
        return at_least_float32(value) if value.is_floating_point() else value
    if isinstance(value, dict):
        return {k: at_least_fp32(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(at_least_fp32(v) for v in value)
    return value


def apply_gradients(loss: torch.Tensor, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                    parameters: list, grad_clip: float | None) -> None:
    """One optimizer update from ``loss``: backward through the (AMP) loss scaler, the gradient norm
    of ``parameters`` clipped at ``grad_clip`` (None: not clipped), the step."""
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    if grad_clip:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(parameters, grad_clip)
    scaler.step(optimizer)
    scaler.update()


class TrainingStep:
    def __init__(self, model: RetrievalModel, loss: Loss, device: torch.device, amp: bool):
        self.model, self.loss, self.device, self.amp = model, loss, device, amp

    def __call__(self, batch: dict, epoch: int) -> tuple[torch.Tensor, dict]:
        """(loss, fp32 training outputs) of one batch already on the device."""
        with autocast(self.device, self.amp):
            img = self.model.encode_images(batch)
            txt = self.model.encode_texts(batch)
            outputs = self.model.training_outputs(img, txt)
        outputs = at_least_fp32(outputs)
        return self.loss(outputs, batch, epoch), outputs
