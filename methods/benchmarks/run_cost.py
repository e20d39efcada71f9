"""Benchmark (not a test): what the runs of a table cost per training item and per scored pair,
measured with each run's own model, loss, batch, precision and block budget on random inputs of
the dataset's shapes (no data files needed), for ``snakemake -n``'s GPU-time estimate
(``methods/estimate.py``, ``config/measured_costs.yaml``).

    python -m methods.benchmarks.run_cost --dataset coco --tables table1 --device cuda
    python -m methods.benchmarks.run_cost --dataset coco --tables table1 --device cuda --write config/measured_costs.yaml
    python -m methods.benchmarks.run_cost --dataset coco --tables table1 --device cpu --steps 2 --images 100

For each run configuration (``methods.estimate.cost_key``) among the tables' rows, and each stage
kind it has (``frozen``: cached image features; ``finetune``: the CNN trained on images):
- training: ``--steps`` optimizer steps after ``--warmup`` untimed ones, batches as the run
  draws them (the data loader in this process): seconds per training item (a caption with its
  image; an image with its captions for image batches);
- evaluation: ``--images`` images and their texts encoded, then every pair scored, as
  validation does: seconds per image encoded (with its texts) and per million pairs scored.
Random weights (the CNN's too); random features; captions of random words whose lengths spread
as COCO's (mean ~13.9 tokens with start and end, up to 50). The batches are read and collated in
this process, inside the timed steps (as a job with no loader workers; with workers the reading
overlaps the steps). Left out: gradient counting and checkpoint writes. A cost entry holds for
the dataset shapes it was measured with (``methods.estimate.cost_key``).

A BERT text encoder has random weights of its configured folder's architecture (its config.json),
or, where no folder is configured or the folder is not there yet, of bert-base-uncased's
(transformers' BertConfig defaults: 12 layers of 768, 30,522 pieces), each caption word one piece;
a CNN backbone whose weights are not configured (``optional``) is measured with random weights like
every other. Fine-tuning stages see random images at the run's input size (``training.images.size``,
else the dataset's crop).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import math
import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from torch.utils.data import DataLoader

from methods import api
from methods.config import REPO_ROOT, load_yaml, validate
from methods.data.caption_augment import extra_tokens
from methods.data.inputs import CachedGridFeatures, CachedImageFeatures, CachedRegionBoxes, SplitData, region_shape
from methods.data.text import SPECIALS, Vocabulary
from methods.data.wordpiece import SPECIALS as PIECE_SPECIALS
from methods.data.wordpiece import WordPieceVocabulary
from methods.data.tokenizers import Tokenizer
from methods.estimate import STAGE_KINDS, cost_key, stage_kind
from methods.io import write_text
from methods.features.architectures import cached_shape, layer_channels
from methods.losses.weighted_sum import Loss
from methods.model_kinds import image_input_of
from methods.plan import Plan
from methods.runtime import exact_fp32, resolve_device, to_device
from methods.scoring import encode_split, score_matrix, use_block_budget
from methods.training.batch_order import training_epoch_batches
from methods.training.data import training_batches
from methods.training.loop import make_optimizer
from methods.training.step import TrainingStep, apply_gradients

VOCAB_WORDS = 10_000


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def caption_words(n: int, rng: np.random.Generator) -> np.ndarray:
    """Words per caption spread as COCO's: mean ~11.9 words (13.9 tokens), a tail up to 48."""
    return np.clip(np.rint(rng.lognormal(np.log(11.5), 0.27, n)), 5, 48).astype(int)


def fake_vocabulary() -> Vocabulary:
    return Vocabulary([*SPECIALS, *(f"w{i}" for i in range(VOCAB_WORDS))], Tokenizer("nltk_line"))


def stand_in_pieces(vocab_size: int) -> list[str]:
    """A WordPiece vocabulary's ``vocab_size`` pieces: BERT's specials ([PAD] first), then p0, p1, ..."""
    return [*PIECE_SPECIALS, *(f"p{i}" for i in range(vocab_size - len(PIECE_SPECIALS)))]


def fake_pieces(captions: list[str], vocab_size: int, encoder: str, rng: np.random.Generator) -> WordPieceVocabulary:
    """A WordPiece vocabulary of ``vocab_size`` pieces with each caption word tokenised to one random piece."""
    return WordPieceVocabulary(stand_in_pieces(vocab_size), encoder, {c: [[int(rng.integers(len(PIECE_SPECIALS), vocab_size))]
                                                     for _ in c.split()] for c in captions})


def bert_stand_ins(harness: dict, root: Path) -> dict:
    """``text_encoders`` whose folders hold a config.json only (weights: none): the configured
    folder's, else bert-base-uncased's architecture (see the module doc)."""
    from transformers import BertConfig

    out = {}
    for name, enc in (harness.get("text_encoders") or {}).items():
        folder = Path(enc["path"]) if enc.get("path") else None
        config = (json.loads((folder / "config.json").read_text()) if folder and (folder / "config.json").is_file()
                  else BertConfig().to_dict())
        stand_in = root / name
        stand_in.mkdir(parents=True)
        (stand_in / "config.json").write_text(json.dumps(config))
        (stand_in / "vocab.txt").write_text("".join(f"{p}\n" for p in stand_in_pieces(config["vocab_size"])))
        out[name] = {"kind": "bert", "path": str(stand_in), "weights": "none"}
    return out


def fake_captions(n: int, rng: np.random.Generator) -> list[str]:
    return [" ".join(f"w{w}" for w in rng.integers(0, VOCAB_WORDS, k)) for k in caption_words(n, rng)]


def image_shape(cfg: dict, ds: dict, backbones: dict) -> dict:
    """The image input's shape the run's model is built with, from the dataset's config."""
    kind, model = image_input_of(cfg["model"]).name, cfg["model"]
    if kind == "regions":
        n_regions, dim = region_shape(ds)
        if dim is None:   # synthetic RoIAlign regions: the channels of the map they pool
            region = ds["features"]["region"]
            dim = layer_channels(backbones[region["backbone"]]["arch"], region["layer"])
        return {"dim": dim, "regions": n_regions}
    # what the features job caches for the dataset's crop, from the architecture (no CNN built)
    return cached_shape(kind, backbones[model["backbone"]]["arch"], model, ds["features"]["crop"])


class RandomImages:
    """Stands in for image files: a random (3, crop, crop) tensor per index (fine-tuning stages)."""

    def __init__(self, n: int, crop: int):
        self.n, self.crop = n, crop

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.randn(3, self.crop, self.crop, generator=torch.Generator().manual_seed(index))


def fake_split(cfg: dict, shape: dict, n_images: int, texts_per_image: int, rng: np.random.Generator) -> SplitData:
    """``n_images`` images of random features in ``shape`` with random captions (and random labels
    and region classes where the model reads them)."""
    if "scales" in shape:
        features = CachedGridFeatures({k: rng.standard_normal((n_images, *hwc), dtype=np.float32).astype(np.float16)
                                       for k, hwc in shape["scales"].items()})
    else:
        dims = (shape["regions"], shape["dim"]) if "regions" in shape else (shape["dim"],)
        features = CachedImageFeatures(rng.standard_normal((n_images, *dims), dtype=np.float32).astype(np.float16))
        if image_input_of(cfg["model"]).reads_boxes:   # and each region's box (PFAN)
            corner = rng.uniform(0, 0.6, (n_images, shape["regions"], 2))
            boxes = np.concatenate([corner, corner + rng.uniform(0.05, 0.4, corner.shape)], axis=-1)
            features = CachedRegionBoxes(features.array, boxes.astype(np.float32))
    model = cfg["model"]
    labels = (rng.integers(0, 2, (n_images, model["n_classes"])).astype(np.uint8)
              if model.get("n_classes") is not None else None)
    classes = (rng.integers(0, model["n_region_classes"], (n_images, shape["regions"]))
               if model.get("region_classes") else None)
    return SplitData("train", fake_captions(n_images * texts_per_image, rng), features,
                     [f"{i}.jpg" for i in range(n_images)], texts_per_image, labels, classes)


def time_training(model, cfg: dict, split: SplitData, vocab: Vocabulary, images, device: torch.device,
                  steps: int, warmup: int, kind: str = "frozen") -> float:
    """Seconds per training item over ``steps`` optimizer steps after ``warmup`` ones, at the
    learning rate of the run's first stage of this kind (a CNN of random weights fine-tuned at a
    frozen stage's rate diverges within a few steps: MVSA's 5e-4 did). A step that leaves a
    non-finite loss or weight fails the measurement (checked once, after the timed steps), and so
    does a timed step that AMP's gradient scaler skipped (an overflow: no optimizer update, so a
    cheaper step than training runs)."""
    tr = cfg["training"]
    amp = tr["amp"] and device.type == "cuda"
    step = TrainingStep(model, Loss(cfg["loss"]), device, amp)
    lr = next(s["lr"] for s in tr["stages"] if stage_kind(s) == kind)
    optimizer = make_optimizer(tr["optimizer"], model.parameter_groups(), lr, tr["weight_decay"], tr.get("betas"))
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    dataset, collate = training_batches(tr, split, vocab, images)
    batches = training_epoch_batches(dataset, tr, torch.Generator().manual_seed(0))
    batches = [b for b in batches if len(b) == tr["batch_size"]][:warmup + steps]
    if len(batches) < warmup + 1:
        raise ValueError(f"{len(batches)} full batches for {warmup} warm-up and {steps} timed steps")
    model.train()
    items, t0, finite = 0, None, torch.ones((), dtype=torch.bool, device=device)
    for i, batch in enumerate(DataLoader(dataset.for_epoch(0), batch_sampler=batches, collate_fn=collate)):
        if i == warmup:
            synchronize(device)
            t0, scale_at_t0 = time.perf_counter(), scaler.get_scale()
        loss, _ = step(to_device(batch, device), 10 ** 6)   # past any warm-up epochs: the loss trained longest
        finite &= torch.isfinite(loss.detach())             # on the device: no synchronisation per step
        apply_gradients(loss, optimizer, scaler, model.trainable_parameters(), tr["grad_clip"])
        items += len(batches[i]) if i >= warmup else 0
    synchronize(device)
    seconds = (time.perf_counter() - t0) / items
    if amp:   # each skipped step halves the scale; it grows only after 2,000 clean steps
        skipped = round(math.log2(scale_at_t0 / scaler.get_scale()))
        if skipped:
            raise RuntimeError(f"{cfg['method']} ({kind}): AMP's gradient scaler skipped {skipped} of the "
                               f"{len(batches) - warmup} timed steps at lr {lr:g} (overflowing gradients): their time "
                               f"is not a training step's")
    diverged = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    if not bool(finite) or diverged:
        raise RuntimeError(f"{cfg['method']} ({kind}): training diverged on random inputs at lr {lr:g} "
                           f"(non-finite loss or weights{': ' + diverged[0] if diverged else ''})")
    return seconds


def time_evaluation(model, cfg: dict, split: SplitData, vocab: Vocabulary, images, device: torch.device,
                    n_images: int) -> tuple[float, float]:
    """(seconds per image encoded with its texts, seconds per million pairs scored) of ``n_images``."""
    amp = cfg["training"]["amp"] and device.type == "cuda"
    tokens = [vocab.encode(c) for c in split.captions[:n_images * split.texts_per_image]]
    warm = min(n_images, cfg["training"]["eval_batch_size"])   # the first eval-mode pass, untimed
    img, txt = encode_split(model, tokens[:warm * split.texts_per_image], warm, device,
                            cfg["training"]["eval_batch_size"], features=split.features,
                            images=None if images is None else RandomImages(warm, images.crop), amp=amp)
    score_matrix(model, img, txt, amp=amp)
    synchronize(device)
    t0 = time.perf_counter()
    img, txt = encode_split(model, tokens, n_images, device, cfg["training"]["eval_batch_size"],
                            features=None if images is not None else split.features, images=images, amp=amp)
    synchronize(device)
    t1 = time.perf_counter()
    scores = score_matrix(model, img, txt, amp=amp)
    synchronize(device)
    t2 = time.perf_counter()
    if not torch.isfinite(scores).all():
        bad = ~torch.isfinite(scores)
        raise RuntimeError(f"{cfg['method']}: {int(bad.sum()):,} non-finite scores of {scores.numel():,} "
                           f"({int(bad.any(1).sum())} images, {int(bad.any(0).sum())} texts)")
    return (t1 - t0) / n_images, (t2 - t1) / (scores.numel() / 1e6)


def measure(cfg: dict, ds: dict, backbones: dict, device: torch.device, block_elements: dict, steps: int,
            warmup: int, n_images: int, text_encoders: dict | None = None) -> dict:
    """The cost entry's ``stages`` of one run configuration (``text_encoders``: ``bert_stand_ins``)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    tr, tpi = cfg["training"], ds["texts_per_image"]
    shape = image_shape(cfg, ds, backbones)
    per_batch = tr["batch_size"] if tr["batching"] == "images" else -(-tr["batch_size"] // tpi)
    split = fake_split(cfg, shape, max(n_images, per_batch * (steps + warmup)), tpi, rng)
    text = cfg["model"].get("text") or {}
    if text.get("kind") == "bert":
        size = json.loads((Path(text_encoders[text["encoder"]]["path"]) / "config.json").read_text())["vocab_size"]
        vocab = fake_pieces(split.captions, size, text["encoder"], rng)
    else:
        vocab = fake_vocabulary()
    kinds = [k for k in STAGE_KINDS if any(stage_kind(s) == k for s in tr["stages"])]
    random_cnn = {name: {**bb, "weights": "none"} for name, bb in backbones.items()}   # timing needs no weights
    model = api.build_model(cfg, len(vocab) + extra_tokens(tr, text), shape, random_cnn, cnn="finetune" in kinds,
                            text_encoders=text_encoders or {})
    side = tr["images"]["size"] if tr.get("images") else ds["features"]["crop"]   # what the CNN sees
    use_block_budget(model, list(block_elements.items()), device)
    model.to(device)
    out = {}
    for kind in kinds:
        finetune = kind == "finetune"
        model.set_finetune(finetune)
        peak = PeakGpuMemory(device)
        with peak("train"):
            train_s = time_training(model, cfg, split, vocab, RandomImages(len(split), side)
                                    if finetune else None, device, steps, warmup, kind)
        with peak("eval"):   # evaluation encodes every image it is given: exactly the n_images timed
            encode_s, score_s = time_evaluation(model, cfg, split, vocab,
                                                RandomImages(n_images, side) if finetune else None,
                                                device, n_images)
        out[kind] = {"train_s_per_item": float(f"{train_s:.4g}"), "encode_s_per_image": float(f"{encode_s:.4g}"),
                     "score_s_per_mpair": float(f"{score_s:.4g}"),
                     **peak.readings}
    return out


class PeakGpuMemory:
    """The most GPU memory torch held during each ``with`` block, in MiB (2**20 bytes):
    ``<phase>_peak_gpu_mib`` allocated to tensors (the weights, the optimizer state and the step's
    activations for training; the encoded split and one scoring block's work for evaluation) and
    ``<phase>_reserved_gpu_mib`` reserved by torch's caching allocator (what the card must hold).
    Nothing on a CPU."""

    def __init__(self, device: torch.device):
        self.device, self.readings = device, {}

    @contextlib.contextmanager
    def __call__(self, phase: str):
        if self.device.type != "cuda":
            yield
            return
        synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        yield
        synchronize(self.device)
        self.readings[f"{phase}_peak_gpu_mib"] = round(torch.cuda.max_memory_allocated(self.device) / 2 ** 20)
        self.readings[f"{phase}_reserved_gpu_mib"] = round(torch.cuda.max_memory_reserved(self.device) / 2 ** 20)


def run_configs(plan: Plan, dataset: str, tables: list[str]) -> dict[str, tuple[dict, list[str]]]:
    """cost key -> (a run config of that key, the experiments sharing it) over the tables' rows."""
    out: dict[str, tuple[dict, list[str]]] = {}
    for table in tables:
        for row in plan.table(table, dataset).rows:
            for exp_id in row.members:
                cfg = plan.experiment(dataset, exp_id).config
                entry = out.setdefault(cost_key(cfg, plan.cfg["datasets"][dataset]), (cfg, []))
                if exp_id not in entry[1]:
                    entry[1].append(exp_id)
    return out


def commit() -> str:
    """The checkout's commit, ``-dirty`` when tracked files differ from it (the code that ran is not that commit's)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout.strip()
    try:
        return git("rev-parse", "--short", "HEAD") + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write(path: str, entries: list[dict]) -> None:
    """Adds ``entries`` to a costs file, replacing those of the same key and device (atomically:
    a measurement stopped mid-write leaves the file as it was)."""
    doc = load_yaml(path)
    new = {(e["key"], e["device"]) for e in entries}
    doc["measurements"] = [m for m in doc["measurements"] if (m["key"], m["device"]) not in new] + entries
    validate(doc, "measured_costs", path)
    header = "".join(line for line in open(path) if line.startswith("#"))
    write_text(path, header + yaml.safe_dump(doc, sort_keys=False, width=120))


def measured_keys(path: str, device: str) -> set[str]:
    """The cost keys a costs file holds a measurement of on ``device``."""
    return {m["key"] for m in validate(load_yaml(path), "measured_costs", path)["measurements"]
            if m["device"] == device}


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be at least 1")
    return value


def arguments() -> argparse.ArgumentParser:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, help="a configured dataset (its shapes; its files are not read)")
    parser.add_argument("--tables", nargs="+", required=True)
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    parser.add_argument("--steps", type=positive, default=10, help="timed optimizer steps per run configuration")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--images", type=positive, default=1000, help="images evaluated (and their texts)")
    parser.add_argument("--config", default=str(REPO_ROOT / "config" / "config.yaml"))
    parser.add_argument("--write", metavar="COSTS_YAML",
                        help="add each entry to this costs file as it is measured (GPU only)")
    parser.add_argument("--missing-only", action="store_true",
                        help="skip the run configurations the --write file holds a measurement of on this device")
    return parser


def print_stages(key: str, stages: dict, exps: list[str]) -> None:
    """One line per stage kind of a measured run configuration: its costs and peak GPU memory."""
    for kind, c in stages.items():
        peaks = "".join(f", {p} peak {c[f'{p}_peak_gpu_mib']:,} MiB" for p in ("train", "eval")
                        if f"{p}_peak_gpu_mib" in c)
        print(f"{key:>28} {kind:>8}: train {c['train_s_per_item'] * 1e3:8.3f} ms/item, "
              f"encode {c['encode_s_per_image'] * 1e3:7.3f} ms/image, score {c['score_s_per_mpair']:7.3f} s/M pairs"
              f"{peaks} ({', '.join(exps)})", flush=True)


def cost_entry(args, key: str, cfg: dict, exps: list[str], device_name: str, stages: dict) -> dict:
    """A costs file's entry of one measured run configuration: what ran, where, when, at which commit."""
    return {"key": key, "method": cfg["method"],
            "runs": f"{args.dataset} {', '.join(args.tables)}: {', '.join(exps)}", "device": device_name,
            "torch": str(torch.__version__),   # a TorchVersion, which YAML cannot write
            "date": datetime.date.today().isoformat(), "commit": commit(),
            "stages": stages}


def main(argv: list[str] | None = None) -> None:
    parser = arguments()
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    if args.write and device.type != "cuda":
        parser.error("--write takes GPU measurements only (the estimate is of GPU time)")
    if args.missing_only and not args.write:
        parser.error("--missing-only needs --write (the file whose measurements it skips)")
    exact_fp32()
    if args.threads:
        torch.set_num_threads(args.threads)
    harness = api.harness_config(args.config)
    stand_ins = bert_stand_ins(harness, Path(tempfile.mkdtemp(prefix="run_cost_bert_")))
    # random weights for every model: the rows an unset BERT folder or optional CNN leaves out are measured too
    plan = Plan({**harness, "text_encoders": stand_ins,
                 "backbones": {k: {**bb, "weights": bb.get("weights") or "none"} for k, bb in harness["backbones"].items()}})
    ds = harness["datasets"][args.dataset]
    blocks = {d: n for d, n in harness["scoring"]["block_elements"].items()}
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"device: {name}; torch {torch.__version__}; {args.dataset} {' '.join(args.tables)}; "
          f"{args.steps} steps after {args.warmup}; evaluation of {args.images} images", flush=True)
    configs = run_configs(plan, args.dataset, args.tables)
    if args.missing_only:
        done = measured_keys(args.write, name)
        print(f"{len(done & set(configs))} of {len(configs)} run configurations already measured on {name}: skipped")
        configs = {k: v for k, v in configs.items() if k not in done}
    failed = []
    for key, (cfg, exps) in configs.items():
        try:
            stages = measure(cfg, ds, harness["backbones"], device, blocks, args.steps, args.warmup, args.images,
                             stand_ins)
        except RuntimeError as exc:   # non-finite scores, out of memory: named, not written; the others go on
            failed.append(key)
            print(f"{key:>28} FAILED: {str(exc).splitlines()[0]} ({', '.join(exps)})", flush=True)
            continue
        finally:
            if device.type == "cuda":   # the next configuration starts from an empty cache
                torch.cuda.empty_cache()
        print_stages(key, stages, exps)
        entry = cost_entry(args, key, cfg, exps, name, stages)
        if args.write:   # each entry as it is measured: a job stopped at its time limit keeps what it measured
            write(args.write, [entry])
    if args.write:
        print(f"wrote {len(configs) - len(failed)} entries to {args.write}")
    if failed:
        raise SystemExit(f"{len(failed)} run configurations failed, nothing written for them: {', '.join(failed)}")


if __name__ == "__main__":
    main()
