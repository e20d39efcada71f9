"""Learning rate of a stage epoch, a pure function so resuming needs no scheduler state: a plateau
schedule replays the stage's validation values, which the checkpoint's history keeps."""
from __future__ import annotations

import math
from collections.abc import Sequence

# torch.optim.lr_scheduler.ReduceLROnPlateau's defaults, which yalesong/pvse's train.py keeps
# (it passes factor 0.5 and min_lr 1e-10 only)
PLATEAU_DEFAULTS = {"mode": "min", "factor": 0.1, "patience": 10, "threshold": 1e-4, "cooldown": 0, "min_lr": 0.0}
PLATEAU_EPS = 1e-8   # ReduceLROnPlateau's eps: a decrease smaller than this is not applied


def plateau_lr(base: float, sched: dict, values: Sequence[float]) -> float:
    """The rate after ReduceLROnPlateau(threshold_mode 'rel') has stepped on ``values`` in order,
    starting from ``base``. ``mode: min`` counts a value as better when it is below the best so far
    by the relative threshold, ``max`` when above it."""
    s = {**PLATEAU_DEFAULTS, **{k: v for k, v in sched.items() if k in PLATEAU_DEFAULTS}}
    lr, bad, cooldown = base, 0, 0
    best = math.inf if s["mode"] == "min" else -math.inf
    for value in values:
        better = (value < best * (1 - s["threshold"]) if s["mode"] == "min"
                  else value > best * (1 + s["threshold"]))
        if better:
            best, bad = value, 0
        else:
            bad += 1
        if cooldown > 0:
            cooldown, bad = cooldown - 1, 0
        if bad > s["patience"]:
            new = max(lr * s["factor"], s["min_lr"])
            if lr - new > PLATEAU_EPS:
                lr = new
            cooldown, bad = s["cooldown"], 0
    return lr


def lr_at(stage: dict, epoch: float, values: Sequence[float] = ()) -> float:
    """lr for 0-based ``epoch`` of ``stage`` (step: x gamma at each decay epoch; cosine: to 0 over the
    stage; a fractional epoch, ``epoch + step / steps``, for a cosine advanced every step; plateau:
    ``values`` are the validation values of the stage's epochs before ``epoch``, in order)."""
    sched, base = stage["schedule"], stage["lr"]
    warmup = sched.get("warmup_epochs", 0)
    if epoch < warmup:
        return base * (epoch + 1) / (warmup + 1)
    if sched["kind"] == "constant":
        return base
    if sched["kind"] == "step":
        n_decays = sum(epoch >= d for d in sched.get("decay_epochs", []))
        return base * sched.get("gamma", 0.1) ** n_decays
    if sched["kind"] == "plateau":
        if len(values) != int(epoch):
            raise ValueError(f"a plateau schedule at epoch {epoch} needs its {int(epoch)} earlier validation values, "
                             f"not {len(values)}")
        return plateau_lr(base, sched, values)
    progress = (epoch - warmup) / max(1, stage["epochs"] - warmup)
    return base * 0.5 * (1 + math.cos(math.pi * progress))
