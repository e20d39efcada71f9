"""Learning rate of a stage epoch, a pure function so resuming needs no scheduler state."""
from __future__ import annotations

import math


def lr_at(stage: dict, epoch: float) -> float:
    """lr for 0-based ``epoch`` of ``stage`` (step: x gamma at each decay epoch; cosine: to 0 over the
    stage; a fractional epoch, ``epoch + step / steps``, for a cosine advanced every step)."""
    sched, base = stage["schedule"], stage["lr"]
    warmup = sched.get("warmup_epochs", 0)
    if epoch < warmup:
        return base * (epoch + 1) / (warmup + 1)
    if sched["kind"] == "constant":
        return base
    if sched["kind"] == "step":
        n_decays = sum(epoch >= d for d in sched.get("decay_epochs", []))
        return base * sched.get("gamma", 0.1) ** n_decays
    progress = (epoch - warmup) / max(1, stage["epochs"] - warmup)
    return base * 0.5 * (1 + math.cos(math.pi * progress))
