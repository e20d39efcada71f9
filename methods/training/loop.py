"""One training loop for every method: stages (frozen backbone, then fine-tune), Adam/AdamW,
step or cosine schedule, gradient clipping, hardest-negative warm-up, AMP on CUDA, seeds,
an atomic checkpoint every epoch, exact resume, and best-epoch selection on a validation metric
(RSUM, or VSRN's R@1+R@5 sum). Each epoch also records how many negatives give each query a
gradient (``methods.losses.gradient_count``).

Resuming: the checkpoint holds model, optimizer, AMP scaler and every RNG state at the end of
the last finished epoch; each epoch's shuffle comes from a generator seeded by (seed, stage,
epoch). A run killed at any point and re-run therefore repeats the unfinished epoch exactly and
ends with the same weights as an uninterrupted run (same device, same seed).

Preemption: SIGTERM (SLURM's time limit, scancel, preemption) and SIGUSR1 (``sbatch
--signal=USR1@<s>``, sent ahead of the limit) make the loop finish the current step, write a
mid-epoch checkpoint (weights, optimizer, RNG, the batches done and the epoch's running sums)
and stop with ``Preempted``; a re-run skips the batches already done and carries on exactly.
"""
from __future__ import annotations

import random
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from methods.data.text import Vocabulary
from methods.errors import HarnessError, first_line
from methods.evaluation import autocast, encode_split, score_matrix
from methods.features.backbone import eval_transform, train_transform
from methods.features.images import ImageFiles
from methods.io import torch_save
from methods.losses import build_loss, loss_kind_at
from methods.losses.gradient_count import count_gradient_negatives
from methods.metrics.retrieval import RECALL_KS, retrieval_metrics
from methods.training.data import CaptionPairs, PairCollator, SplitData, make_train_dataset, to_device
from methods.training.schedule import lr_at

CHECKPOINT_FORMAT = 1


@dataclass
class TrainInputs:
    config: dict               # resolved method config
    config_hash: str
    seed: int
    run_dir: Path
    device: torch.device
    vocab: Vocabulary
    train: SplitData           # captions + cached (memory-mapped) image features
    dev: SplitData
    images_dir: Path | None    # needed by fine-tune stages
    crop: int
    resize: int
    val_max_images: int
    word_vectors: torch.Tensor | None = None
    progress: bool = True
    extra: dict = field(default_factory=dict)


def _rng_state() -> dict:
    np_state = np.random.get_state()
    return {"torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                      "has_gauss": int(np_state[3]), "cached": float(np_state[4])},
            "python": [random.getstate()[0], list(random.getstate()[1]), random.getstate()[2]]}


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))


def load_checkpoint(path: Path) -> dict:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"format {state.get('format')!r}, expected {CHECKPOINT_FORMAT}")
        return state
    except Exception as exc:
        raise HarnessError(f"checkpoint {path} is corrupt or unreadable ({type(exc).__name__}: {first_line(exc)}); "
                           f"delete it to restart this run from scratch") from None


PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class Preempted(HarnessError):
    """Training stopped on a signal after writing a checkpoint; re-running resumes it."""


@contextmanager
def preemption_signals():
    """While training, SIGTERM/SIGUSR1 only set a flag (the list holds the signals received):
    the loop checkpoints at the next step boundary instead of dying mid-write."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():  # handlers can only be set there
        yield received
        return
    previous = {sig: signal.signal(sig, lambda signum, frame: received.append(signum)) for sig in PREEMPTION_SIGNALS}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _make_optimizer(name: str, params, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
    return cls(params, lr=lr, weight_decay=weight_decay)


SELECTION_METRICS = {
    "rsum": tuple(f"{d}_r{k}" for d in ("i2t", "t2i") for k in RECALL_KS),
    "r1_r5_sum": tuple(f"{d}_r{k}" for d in ("i2t", "t2i") for k in (1, 5)),  # VSRN train.py: R@10 left out
}


def selection_value(metrics: dict, name: str) -> float:
    return float(sum(metrics[k] for k in SELECTION_METRICS[name]))


def validate(model, inp: TrainInputs, amp: bool) -> dict:
    n = min(inp.val_max_images, len(inp.dev))
    pairs = CaptionPairs(inp.dev.captions, inp.vocab, max_images=n)
    images = (ImageFiles(inp.images_dir, inp.dev.filenames[:n], eval_transform(inp.resize, inp.crop))
              if getattr(model, "finetune", False) else None)
    img, cap = encode_split(model, pairs.tokens, n, inp.device, inp.config["training"]["eval_batch_size"],
                            features=inp.dev.features, images=images, amp=amp)
    return retrieval_metrics(score_matrix(model, img, cap, amp=amp))


class GradientCounter:
    """Per-epoch statistics of the negatives that give each query a gradient, per direction.

    Sums stay on the scores' device (no host sync per step); ``summary`` reads them once.
    """

    KEYS = ("contributing", "nonzero", "negatives")

    def __init__(self, relative_threshold: float):
        self.relative_threshold = relative_threshold
        self.queries: dict[str, int] = {}
        self.sums: dict[str, torch.Tensor] = {}  # direction -> (len(KEYS), 2): sum and sum of squares

    def add(self, kind: str, loss_cfg: dict, scores: torch.Tensor, positives: torch.Tensor) -> None:
        counts = count_gradient_negatives(kind, loss_cfg, scores, positives, self.relative_threshold)
        for direction, c in counts.items():
            v = torch.stack([c[k] for k in self.KEYS]).double()                  # (keys, queries)
            moments = torch.stack([v.sum(dim=1), (v * v).sum(dim=1)], dim=1)
            self.sums[direction] = self.sums[direction] + moments if direction in self.sums else moments
            self.queries[direction] = self.queries.get(direction, 0) + v.shape[1]

    def state_dict(self) -> dict:
        return {"queries": dict(self.queries), "sums": {d: m.cpu() for d, m in self.sums.items()}}

    def load_state_dict(self, state: dict, device: torch.device) -> None:
        self.queries = dict(state["queries"])
        self.sums = {d: m.to(device) for d, m in state["sums"].items()}

    def summary(self) -> dict:
        out = {}
        for direction, moments in self.sums.items():
            n = max(1, self.queries[direction])
            out[direction] = {"queries": self.queries[direction], "relative_threshold": self.relative_threshold}
            for k, (total, squares) in zip(self.KEYS, moments.cpu().tolist()):
                mean = total / n
                out[direction][f"{k}_mean"] = mean
                out[direction][f"{k}_std"] = max(0.0, squares / n - mean * mean) ** 0.5
        return out


def train(model, inp: TrainInputs) -> dict:
    with preemption_signals() as received:
        return _train(model, inp, received)


def _train(model, inp: TrainInputs, received: list[int]) -> dict:
    cfg, tr = inp.config, inp.config["training"]
    device, amp = inp.device, tr["amp"] and inp.device.type == "cuda"
    ckpt_dir = inp.run_dir / "checkpoints"
    last_path, best_path = ckpt_dir / "last.pt", ckpt_dir / "best.pt"
    model.to(device)
    state = None
    if last_path.exists():
        state = load_checkpoint(last_path)
        if state["config_hash"] != inp.config_hash or state["seed"] != inp.seed:
            raise HarnessError(f"{last_path} belongs to another config or seed "
                               f"({state['config_hash']}/{state['seed']} vs {inp.config_hash}/{inp.seed}); delete it")
        within = f" after step {state['step']}" if state.get("step") else ""
        print(f"resuming from {last_path}: stage {state['stage']} epoch {state['epoch']}{within}", flush=True)
    history = state["history"] if state else []
    selection = tr["selection_metric"]
    best = state["best"] if state else {"metric": selection, "value": -1.0, "rsum": None, "stage": None, "epoch": None}
    start_stage, start_epoch = (state["stage"], state["epoch"]) if state else (0, 0)
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    global_epoch = sum(s["epochs"] for s in tr["stages"][:start_stage]) + start_epoch
    t_start = time.perf_counter()

    def save_last(stage_idx: int, epoch: int, step: int, optimizer, partial: dict | None) -> None:
        """(stage, epoch, step) is where a re-run starts; optimizer None: a new stage starts there."""
        torch_save(last_path, {
            "format": CHECKPOINT_FORMAT, "config_hash": inp.config_hash, "seed": inp.seed,
            "stage": stage_idx, "epoch": epoch, "step": step, "partial": partial, "model": model.state_dict(),
            "optimizer": optimizer.state_dict() if optimizer is not None else None, "scaler": scaler.state_dict(),
            "rng": _rng_state(), "best": best, "history": history})

    def stop(where: str) -> Preempted:
        names = ", ".join(signal.Signals(sig).name for sig in dict.fromkeys(received))
        return Preempted(f"received {names}: checkpoint written {where} ({last_path}); re-run the same target to resume")

    for stage_idx, stage in enumerate(tr["stages"]):
        if stage_idx < start_stage:
            continue
        model.set_finetune(stage["finetune_backbone"])
        optimizer = _make_optimizer(tr["optimizer"], model.trainable_parameters(), stage["lr"], tr["weight_decay"])
        first_epoch, first_step, partial = 0, 0, None
        if state and stage_idx == start_stage:
            model.load_state_dict(state["model"])
            if state["optimizer"] is not None:  # None: the previous stage just ended, new optimizer
                optimizer.load_state_dict(state["optimizer"])
            scaler.load_state_dict(state["scaler"])
            _set_rng_state(state["rng"])
            first_epoch, first_step, partial = start_epoch, state.get("step", 0), state.get("partial")
        augment = (train_transform(inp.crop) if tr["finetune_augment"] == "random_resized_crop_flip"
                   else eval_transform(inp.resize, inp.crop))
        images = ImageFiles(inp.images_dir, inp.train.filenames, augment) if stage["finetune_backbone"] else None
        dataset = make_train_dataset(tr["batching"], inp.train.captions, inp.vocab, images)
        collate = PairCollator(None if images is not None else inp.train.features)
        count_every = tr["gradient_count"]["every_n_steps"]
        for epoch in range(first_epoch, stage["epochs"]):
            lr = lr_at(stage, epoch)
            for group in optimizer.param_groups:
                group["lr"] = lr
            shuffle = torch.Generator().manual_seed(inp.seed * 1_000_003 + stage_idx * 10_007 + epoch)
            order = torch.randperm(len(dataset), generator=shuffle).tolist()
            skip = first_step if epoch == first_epoch else 0  # batches a preempted run already did
            # generator=shuffle: the loader draws its worker base seed from it, not from the global RNG,
            # so creating it mid-epoch on resume leaves the dropout RNG stream where the checkpoint left it
            loader = DataLoader(dataset, batch_size=tr["batch_size"], sampler=order[skip * tr["batch_size"]:],
                                collate_fn=collate, num_workers=tr["num_workers"], generator=shuffle)
            loss_fn = build_loss(cfg["loss"], global_epoch)
            loss_kind = loss_kind_at(cfg["loss"], global_epoch)
            counter = GradientCounter(tr["gradient_count"]["relative_threshold"])
            seen, total, skipped = 0, 0.0, 0
            if skip and partial:
                seen, total, skipped = partial["seen"], partial["total"], partial["skipped"]
                counter.load_state_dict(partial["counter"], device)
            model.train()
            t0 = time.perf_counter()
            bar = tqdm(loader, desc=f"{stage['name']} {epoch + 1}/{stage['epochs']}", disable=not inp.progress,
                       mininterval=2.0, initial=skip, total=skip + len(loader))
            step = skip - 1
            for step, batch in enumerate(bar, start=skip):
                if batch["positives"].shape[0] < 2:  # one image: no negatives to rank against (and BN needs 2)
                    skipped += 1
                    continue
                batch = to_device(batch, device)
                with autocast(device, amp):
                    img = model.encode_images(batch)
                    cap = model.encode_captions(batch)
                    # several heads (SGRAF joint training): the sum of their losses
                    head_scores = (model.training_similarities(img, cap) if hasattr(model, "training_similarities")
                                   else [model.similarity(img, cap)])
                head_scores = [s.float() for s in head_scores]  # losses (and gradient counts) in fp32
                loss = sum(loss_fn(s, batch["positives"]) for s in head_scores)
                if count_every and step % count_every == 0:
                    for scores in head_scores:
                        counter.add(loss_kind, cfg["loss"], scores, batch["positives"])
                if not torch.isfinite(loss):
                    raise HarnessError(f"loss is {loss.item()} at stage '{stage['name']}' epoch {epoch + 1} "
                                       f"step {step + 1}; stopping (last good checkpoint: {last_path})")
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                if tr["grad_clip"]:
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(model.trainable_parameters(), tr["grad_clip"])
                scaler.step(optimizer)
                scaler.update()
                seen += batch["tokens"].shape[0]
                total += loss.item()
                bar.set_postfix(loss=f"{loss.item():.3f}", samples_per_s=f"{seen / (time.perf_counter() - t0):.0f}", refresh=False)
                if received and step + 1 < skip + len(loader):
                    save_last(stage_idx, epoch, step + 1, optimizer, {"seen": seen, "total": total, "skipped": skipped,
                                                                       "counter": counter.state_dict()})
                    raise stop(f"at stage '{stage['name']}' epoch {epoch + 1} after step {step + 1}")
            val = validate(model, inp, amp)
            record = {"stage": stage["name"], "stage_index": stage_idx, "epoch": epoch + 1, "lr": lr,
                      "loss_kind": loss_kind, "train_loss": total / max(1, step + 1 - skipped), "val": val,
                      "gradient_counts": counter.summary(), "skipped_single_image_batches": skipped,
                      "seconds": time.perf_counter() - t0}
            history.append(record)
            print(f"[{stage['name']} {epoch + 1}/{stage['epochs']}] loss {record['train_loss']:.4f} "
                  f"val rsum {val['rsum']:.2f} ({record['seconds']:.1f}s)", flush=True)
            value = selection_value(val, selection)
            if value > best["value"]:
                best = {"metric": selection, "value": value, "rsum": val["rsum"], "stage": stage_idx,
                        "epoch": epoch + 1, "finetuned": stage["finetune_backbone"]}
                torch_save(best_path, {"format": CHECKPOINT_FORMAT, "model": model.state_dict(), "best": best})
            global_epoch += 1
            next_stage, next_epoch = (stage_idx, epoch + 1) if epoch + 1 < stage["epochs"] else (stage_idx + 1, 0)
            save_last(next_stage, next_epoch, 0, optimizer if next_stage == stage_idx else None, None)
            if received:
                raise stop(f"at the end of stage '{stage['name']}' epoch {epoch + 1}")
        state = None
    return {"history": history, "best": best, "best_path": best_path, "train_seconds": time.perf_counter() - t_start}
