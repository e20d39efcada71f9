"""One training loop for every method: stages (frozen backbone, then fine-tune), Adam/AdamW,
step or cosine schedule, gradient clipping, hardest-negative warm-up, AMP on CUDA, seeds,
an atomic checkpoint every epoch, exact resume, and best-epoch selection on a validation metric
(RSUM, VSRN's R@1+R@5 sum, or the label-wise NDCG@500 sum). Each epoch also records how many
negatives give each query a gradient (``methods.losses.gradient_count``).

Resuming: the checkpoint holds model, optimizer, AMP scaler and every RNG state at the end of
the last finished epoch; each epoch's batches (random, or length buckets:
``methods.training.batch_order``) come from a generator seeded by (seed, stage, epoch). A run
killed at any point and re-run therefore repeats the unfinished epoch exactly and ends with the
same weights as an uninterrupted run (same device, same seed).

Preemption: SIGTERM (SLURM's time limit, scancel, preemption) and SIGUSR1 (``sbatch
--signal=USR1@<s>``, sent ahead of the limit) make the loop finish the current step, write a
mid-epoch checkpoint (weights, optimizer, RNG, the batches done and the epoch's running sums)
and stop with ``Preempted``; a re-run skips the batches already done and carries on exactly.
"""
from __future__ import annotations

import random
import signal
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from methods.data.inputs import SplitData
from methods.data.text import Vocabulary
from methods.errors import HarnessError, first_line, signal_handlers
from methods.features.image_transforms import evaluation_images, training_images
from methods.features.images import ImageFiles
from methods.io import torch_save
from methods.losses.gradient_count import count_negatives_with_gradient
from methods.losses.terms import OneDirection
from methods.losses.weighted_sum import Loss
from methods.metrics.declarations import METRICS, value_from
from methods.metrics.evaluation import evaluate_split
from methods.metrics.protocols import selected_metric, validation_protocols
from methods.metrics.relevance_builders import ItemsInOrder, build_relevances
from methods.models.base import RetrievalModel
from methods.paths import checkpoints_dir
from methods.runtime import seed_worker, to_device
from methods.scoring import encode_split, score_matrix
from methods.training.batch_order import training_epoch_batches
from methods.training.data import CaptionPairs, training_batches
from methods.training.schedule import lr_at
from methods.training.step import TrainingStep, apply_gradients

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
    progress: bool = True
    loader_workers: int = 0    # DataLoader worker processes: training.num_workers, at most the job's threads


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

    transient = True  # a Snakemake retry resumes it (methods.retries)


@contextmanager
def preemption_signals():
    """While training, SIGTERM/SIGUSR1 only set a flag (the list holds the signals received):
    the loop checkpoints at the next step boundary instead of dying mid-write."""
    received: list[int] = []
    with signal_handlers(PREEMPTION_SIGNALS, lambda signum, frame: received.append(signum)):
        yield received


def optimizer_class(name: str) -> tuple[type[torch.optim.Optimizer], dict]:
    """``training.optimizer``: torch's Adam (``adam_amsgrad``: with amsgrad, as PVSE's train.py) or
    AdamW, or AdamP (Heo et al., ICLR 2021; the ``adamp`` package PCME trains with, at its defaults
    delta 0.1, wd_ratio 0.1, no Nesterov); with the keywords the name adds."""
    if name == "adamp":
        from adamp import AdamP   # only runs that name it need the package imported

        return AdamP, {}
    if name == "adam_amsgrad":
        return torch.optim.Adam, {"amsgrad": True}
    return (torch.optim.AdamW if name == "adamw" else torch.optim.Adam), {}


def lists_a_parameter_twice(params: list) -> bool:
    """Whether a parameter list holds some parameter more than once (VSRN's ``listed_twice``)."""
    return len({id(p) for p in params}) != len(params)


def make_optimizer(name: str, groups: list, lr: float, weight_decay: float,
                   betas: list[float] | None = None) -> torch.optim.Optimizer:
    """``groups``: (parameters, lr scale) pairs (``model.parameter_groups()``); each group keeps its
    scale and gets lr x scale whenever the rate is set (``_set_lr``). ``betas``: the moment decays
    (``training.betas``; None: the optimizer's defaults, (0.9, 0.999)). A parameter a model lists twice
    (VSRN's caption generator, as its source's optimizer holds it) is stepped twice in a row, each
    step on the moments the first left, as the source's PyTorch 0.4 did: torch's per-parameter loop
    (foreach off) does that, and its warning about the duplicates is expected."""
    cls, keywords = optimizer_class(name)
    if betas is not None:
        keywords = {**keywords, "betas": tuple(betas)}
    with warnings.catch_warnings():
        if lists_a_parameter_twice([p for params, _ in groups for p in params]):
            keywords = {**keywords, "foreach": False}
            warnings.filterwarnings("ignore", message="optimizer contains a parameter group with duplicate parameters")
        return cls([{"params": params, "lr": lr * scale, "lr_scale": scale} for params, scale in groups if params],
                   lr=lr, weight_decay=weight_decay, **keywords)


def _set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)


def selection_metric(training: dict):
    """The metric validation computes for model selection (``selected_metric``)."""
    return METRICS.get(selected_metric(training["selection_metric"]))


def selection_value(metrics: dict, name: str) -> float:
    """The validation value that picks the kept epoch (a registered metric, e.g. RSUM)."""
    return value_from(metrics, name)


def validate(model: RetrievalModel, inp: TrainInputs, amp: bool) -> dict:
    """The metrics of every validation protocol that runs for the model and its selection metric
    (``methods.metrics.protocols.validation_protocols``), on the dev split's first images."""
    n = min(inp.val_max_images, len(inp.dev))
    pairs = CaptionPairs(inp.dev.captions, inp.vocab, inp.dev.texts_per_image, max_images=n)
    images = (ImageFiles(inp.images_dir, inp.dev.filenames[:n],
                         evaluation_images(inp.config["training"], inp.resize, inp.crop)) if model.finetune else None)
    img, cap = encode_split(model, pairs.tokens, n, inp.device, inp.config["training"]["eval_batch_size"],
                            features=inp.dev.features, images=images, amp=amp)
    scores = score_matrix(model, img, cap, amp=amp)
    predictions = model.label_predictions(img, cap)
    protocols = validation_protocols(inp.config["training"]["selection_metric"], predictions is not None)
    image_labels = None if inp.dev.labels is None else inp.dev.labels[:n]
    try:
        relevances = build_relevances(protocols, ItemsInOrder(inp.dev.texts_per_image, image_labels))
    except HarnessError as e:
        raise HarnessError(f"validation on the dev split: {e}") from None
    metrics = {}
    for result in evaluate_split(scores, protocols, "dev", relevances, predictions=predictions):
        metrics.update(result["metrics"])
    return metrics


class GradientCounter:
    """Per-epoch statistics of the negatives that give each query a gradient, per direction.

    Sums stay on the scores' device (no host sync per step); ``summary`` reads them once.
    """

    KEYS = ("contributing", "nonzero", "negatives")

    def __init__(self, relative_threshold: float):
        self.relative_threshold = relative_threshold
        self.queries: dict[str, int] = {}
        self.sums: dict[str, torch.Tensor] = {}  # direction -> (len(KEYS), 2): sum and sum of squares

    def add(self, loss_one_direction: OneDirection, scores: torch.Tensor, positives: torch.Tensor) -> None:
        counts = count_negatives_with_gradient(loss_one_direction, scores, positives, self.relative_threshold)
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


@dataclass
class EpochProgress:
    """An epoch's running sums: samples seen, summed loss, single-image batches skipped and the
    gradient counts; a mid-epoch checkpoint holds them (``state_dict``) and a re-run resumes them."""

    seen: int
    total: float
    skipped: int
    counter: GradientCounter

    @classmethod
    def resumed(cls, partial: dict | None, relative_threshold: float, device: torch.device) -> "EpochProgress":
        """A new epoch's (``partial`` None) or a preempted one's sums."""
        counter = GradientCounter(relative_threshold)
        if not partial:
            return cls(0, 0.0, 0, counter)
        counter.load_state_dict(partial["counter"], device)
        return cls(partial["seen"], partial["total"], partial["skipped"], counter)

    def state_dict(self) -> dict:
        return {"seen": self.seen, "total": self.total, "skipped": self.skipped, "counter": self.counter.state_dict()}


class Checkpoints:
    """``last.pt`` (where a re-run starts: model, optimizer, AMP scaler, RNG states, best so far,
    history, and for a mid-epoch stop the batches done) and ``best.pt`` (the kept epoch)."""

    def __init__(self, inp: TrainInputs):
        self.inp = inp
        folder = Path(checkpoints_dir(inp.run_dir))
        self.last, self.best = folder / "last.pt", folder / "best.pt"

    def resume_state(self) -> dict | None:
        if not self.last.exists():
            return None
        state = load_checkpoint(self.last)
        if state["config_hash"] != self.inp.config_hash or state["seed"] != self.inp.seed:
            raise HarnessError(f"{self.last} belongs to another config or seed "
                               f"({state['config_hash']}/{state['seed']} vs {self.inp.config_hash}/{self.inp.seed}); "
                               f"delete it")
        within = f" after step {state['step']}" if state.get("step") else ""
        print(f"resuming from {self.last}: stage {state['stage']} epoch {state['epoch']}{within}", flush=True)
        return state

    def save_last(self, model, scaler, best: dict, history: list, stage_idx: int, epoch: int, step: int,
                  optimizer, partial: dict | None) -> None:
        """(stage, epoch, step) is where a re-run starts; optimizer None: a new stage starts there."""
        torch_save(self.last, {
            "format": CHECKPOINT_FORMAT, "config_hash": self.inp.config_hash, "seed": self.inp.seed,
            "stage": stage_idx, "epoch": epoch, "step": step, "partial": partial, "model": model.state_dict(),
            "optimizer": optimizer.state_dict() if optimizer is not None else None, "scaler": scaler.state_dict(),
            "rng": _rng_state(), "best": best, "history": history})

    def save_best(self, model, best: dict) -> None:
        torch_save(self.best, {"format": CHECKPOINT_FORMAT, "model": model.state_dict(), "best": best})


def train(model: RetrievalModel, inp: TrainInputs) -> dict:
    with preemption_signals() as received:
        return Trainer(model, inp, received).run()


class Trainer:
    """The epoch loop shared by every model: stages, optimizer and schedule, checkpoints and
    resume, preemption, validation and best-epoch selection, gradient counts. What happens in
    one step is the ``TrainingStep`` (the model's forward and the loss terms)."""

    def __init__(self, model: RetrievalModel, inp: TrainInputs, received: list[int]):
        self.model, self.inp, self.received = model, inp, received
        self.tr = inp.config["training"]
        self.device = inp.device
        self.amp = self.tr["amp"] and inp.device.type == "cuda"
        self.loss = Loss(inp.config["loss"])
        self.step_fn = TrainingStep(model, self.loss, self.device, self.amp)
        self.checkpoints = Checkpoints(inp)
        self.keep_last = self.tr["selection_metric"] == "last"
        self.selection = selection_metric(self.tr)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp)

    def stop(self, where: str) -> Preempted:
        names = ", ".join(signal.Signals(sig).name for sig in dict.fromkeys(self.received))
        return Preempted(f"received {names}: checkpoint written {where} ({self.checkpoints.last}); "
                         f"re-run the same target to resume")

    def run(self) -> dict:
        tr, model = self.tr, self.model
        model.to(self.device)
        state = self.checkpoints.resume_state()
        self.history = state["history"] if state else []
        self.best = state["best"] if state else {"metric": self.selection.name, "value": None, "rsum": None,
                                                 "stage": None, "epoch": None}
        start_stage, start_epoch = (state["stage"], state["epoch"]) if state else (0, 0)
        self.global_epoch = sum(s["epochs"] for s in tr["stages"][:start_stage]) + start_epoch
        t_start = time.perf_counter()
        for stage_idx, stage in enumerate(tr["stages"]):
            if stage_idx < start_stage:
                continue
            self.run_stage(stage_idx, stage, state if stage_idx == start_stage else None)
            state = None
        return {"history": self.history, "best": self.best, "best_path": self.checkpoints.best,
                "train_seconds": time.perf_counter() - t_start,
                "precision": "fp16 autocast" if self.amp else "fp32"}  # training.amp is CUDA-only

    def run_stage(self, stage_idx: int, stage: dict, state: dict | None) -> None:
        tr, model, inp = self.tr, self.model, self.inp
        model.set_finetune(stage["finetune_backbone"])
        optimizer = make_optimizer(tr["optimizer"], model.parameter_groups(), stage["lr"], tr["weight_decay"],
                                   tr.get("betas"))
        if self.amp and lists_a_parameter_twice([p for group in optimizer.param_groups for p in group["params"]]):
            # the gradient scaler would unscale a twice-listed parameter's gradient twice
            raise HarnessError("training.amp: the model lists some parameters twice for its optimizer (VSRN's "
                               "caption_decoder.listed_twice, as its fp32 source); train it with training.amp false")
        first_epoch, first_step, partial = 0, 0, None
        if state is not None:
            model.load_state_dict(state["model"])
            if state["optimizer"] is not None:  # None: the previous stage just ended, new optimizer
                optimizer.load_state_dict(state["optimizer"])
            self.scaler.load_state_dict(state["scaler"])
            _set_rng_state(state["rng"])
            first_epoch, first_step, partial = state["epoch"], state.get("step", 0), state.get("partial")
        augment = training_images(tr, inp.resize, inp.crop)
        images = ImageFiles(inp.images_dir, inp.train.filenames, augment) if stage["finetune_backbone"] else None
        dataset, collate = training_batches(tr, inp.train, inp.vocab, images)
        for epoch in range(first_epoch, stage["epochs"]):
            skip = first_step if epoch == first_epoch else 0  # batches a preempted run already did
            self.run_epoch(stage_idx, stage, epoch, optimizer, dataset, collate, skip, partial if skip else None)

    def run_epoch(self, stage_idx: int, stage: dict, epoch: int, optimizer, dataset, collate, skip: int,
                  partial: dict | None) -> None:
        tr, model, inp, device = self.tr, self.model, self.inp, self.device
        # a plateau schedule steps on the stage's earlier validation RSUMs (pvse train.py: val_metric rsum)
        lr = lr_at(stage, epoch, [r["val"]["rsum"] for r in self.history if r["stage_index"] == stage_idx])
        _set_lr(optimizer, lr)
        per_step = stage["schedule"].get("per_step", False)   # DivE: the cosine advances every iteration
        epoch_seed = inp.seed * 1_000_003 + stage_idx * 10_007 + epoch
        shuffle = torch.Generator().manual_seed(epoch_seed)
        batches = training_epoch_batches(dataset, tr, shuffle)
        # each item's random draws from its own seed (methods.training.data): the same with any number
        # of workers. generator=shuffle: the loader draws its worker base seed from it, not from the
        # global RNG, so creating it mid-epoch on resume leaves the dropout RNG stream where it was
        loader = DataLoader(dataset.for_epoch(epoch_seed), batch_sampler=batches[skip:], collate_fn=collate,
                            num_workers=inp.loader_workers, generator=shuffle, worker_init_fn=seed_worker)
        count_every = tr["gradient_count"]["every_n_steps"]
        count_loss = self.loss.one_direction_at(self.global_epoch)
        progress = EpochProgress.resumed(partial, tr["gradient_count"]["relative_threshold"], device)
        model.at_epoch(self.global_epoch)
        ramp_steps = len(dataset) // tr["batch_size"] + 1   # train.py's num_loader_iter, the loss_scale ramp's length
        model.train()
        seen_before = progress.seen  # samples of this epoch before a resumed checkpoint: not this process's speed
        t0 = time.perf_counter()
        bar = tqdm(loader, desc=f"{stage['name']} {epoch + 1}/{stage['epochs']}", disable=not inp.progress,
                   mininterval=2.0, initial=skip, total=skip + len(loader))
        step = skip - 1
        for step, batch in enumerate(bar, start=skip):
            if batch["positives"].shape[0] < 2:  # one image: no negatives to rank against (and BN needs 2)
                progress.skipped += 1
                continue
            if per_step:
                _set_lr(optimizer, lr_at(stage, epoch + step / (skip + len(loader))))
            batch = to_device(batch, device)
            loss, outputs = self.step_fn(batch, self.global_epoch)
            if count_every and count_loss is not None and step % count_every == 0:
                for scores in outputs["scores"]:
                    progress.counter.add(count_loss, scores, batch["positives"])
            if not torch.isfinite(loss):
                raise HarnessError(f"loss is {loss.item()} at stage '{stage['name']}' epoch {epoch + 1} "
                                   f"step {step + 1}; stopping (last good checkpoint: {self.checkpoints.last})")
            scale = model.loss_scale(self.global_epoch, step, ramp_steps)
            apply_gradients(loss * scale if scale != 1.0 else loss, optimizer, self.scaler,
                            model.clipped_parameters(), tr["grad_clip"])
            progress.seen += batch["tokens"].shape[0]
            progress.total += loss.item()
            bar.set_postfix(loss=f"{loss.item():.3f}",
                            samples_per_s=f"{(progress.seen - seen_before) / (time.perf_counter() - t0):.0f}",
                            refresh=False)
            if self.received and step + 1 < skip + len(loader):
                self.checkpoints.save_last(model, self.scaler, self.best, self.history, stage_idx, epoch, step + 1,
                                           optimizer, progress.state_dict())
                raise self.stop(f"at stage '{stage['name']}' epoch {epoch + 1} after step {step + 1}")
        record = {"stage": stage["name"], "stage_index": stage_idx, "epoch": epoch + 1, "lr": lr,
                  "batches": skip + len(loader), "loss_kind": self.loss.kind_at(self.global_epoch),
                  "train_loss": progress.total / max(1, step + 1 - progress.skipped),
                  "val": validate(model, inp, self.amp), "gradient_counts": progress.counter.summary(),
                  "skipped_single_image_batches": progress.skipped, "seconds": time.perf_counter() - t0}
        self.end_epoch(stage_idx, stage, epoch, optimizer, record)

    def end_epoch(self, stage_idx: int, stage: dict, epoch: int, optimizer, record: dict) -> None:
        """After an epoch's validation: its record in the history, the kept epoch updated (its
        weights in ``best.pt``), and the checkpoint a re-run starts from."""
        model, val = self.model, record["val"]
        self.history.append(record)
        value = selection_value(val, self.selection.name)
        print(f"[{stage['name']} {epoch + 1}/{stage['epochs']}] loss {record['train_loss']:.4f} "
              f"val {self.selection.name} {value:.2f} ({record['seconds']:.1f}s)", flush=True)
        if self.keep_last or self.best["value"] is None or self.selection.better(value, self.best["value"]):
            self.best = {"metric": "last" if self.keep_last else self.selection.name, "value": value, "rsum": val["rsum"], "stage": stage_idx,
                         "epoch": epoch + 1, "finetuned": stage["finetune_backbone"]}
            self.checkpoints.save_best(model, self.best)
        self.global_epoch += 1
        next_stage, next_epoch = (stage_idx, epoch + 1) if epoch + 1 < stage["epochs"] else (stage_idx + 1, 0)
        self.checkpoints.save_last(model, self.scaler, self.best, self.history, next_stage, next_epoch, 0,
                                   optimizer if next_stage == stage_idx else None, None)
        if self.received:
            raise self.stop(f"at the end of stage '{stage['name']}' epoch {epoch + 1}")
