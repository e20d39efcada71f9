"""What a table costs to run on a GPU, estimated before it runs: its runs' training items,
validations and test evaluations, priced with per-item and per-pair costs measured on a GPU with
each run's own configuration (``config/measured_costs.yaml``, written by
``python -m methods.benchmarks.run_cost``). A run configuration with no measurement on the
device is named, never guessed; ``snakemake -n`` prints the estimate of each table of a real
dataset it plans.

A measurement holds for a ``cost_key``: the resolved run config less what cannot change the cost
of a step or of scoring a pair (learning rates, schedules and epoch counts, loader workers, model
selection), plus the dataset's shapes (regions, crop, texts per image). Any other difference gets
a key, and a measurement, of its own, even where it would cost the same (e.g. SCAN's lambdas).
Not counted: evaluation-view jobs and ensembles (a few minutes at most, ensembles on CPUs).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from methods.config import REPO_ROOT, config_hash, load_yaml, validate
from methods.plan import Plan, test_splits

COSTS_FILE = REPO_ROOT / "config" / "measured_costs.yaml"
STAGE_KINDS = ("frozen", "finetune")   # image input from cached features, or the CNN trained on images
BENCHMARK = "python -m methods.benchmarks.run_cost"


def cost_key(cfg: dict, dataset_cfg: dict) -> str:
    """The cost class of a resolved run config on a dataset (``datasets.<name>``): ``<method>-<hash>``."""
    training = {k: v for k, v in cfg["training"].items() if k not in ("stages", "num_workers", "selection_metric")}
    training["stages"] = sorted({stage_kind(s) for s in cfg["training"]["stages"]})
    return f"{cfg['method']}-{config_hash({**cfg, 'training': training, 'dataset': dataset_shape(dataset_cfg)})}"


def dataset_shape(ds: dict) -> dict:
    """What of a dataset changes a step's cost: its image shapes and texts per image."""
    return {"precomp": ds.get("precomp"), "crop": ds["features"]["crop"], "region": ds["features"].get("region"),
            "texts_per_image": ds["texts_per_image"]}


def stage_kind(stage: dict) -> str:
    return "finetune" if stage["finetune_backbone"] else "frozen"


@dataclass(frozen=True)
class RunWork:
    """What one training job does (a run: experiment and seed): training items per stage kind
    (captions, or images for image batches, over all epochs), validations per stage kind (each
    of ``val_images`` images and their texts), and the test splits it scores (images each)."""

    exp: str
    seed: int
    method: str
    key: str
    train_items: dict[str, int]
    validations: dict[str, int]
    val_images: int
    test_images: tuple[int, ...]
    texts_per_image: int

    @property
    def final_kind(self) -> str:
        return "finetune" if self.train_items.get("finetune") else "frozen"


def table_work(plan: Plan, table: str, dataset: str, split_images: dict[str, int]) -> list[RunWork]:
    """The runs of a table's rows on ``dataset`` (each once), from the images of each harness
    split (``split_images``: as the dataset's input checks counted them)."""
    ds = plan.cfg["datasets"][dataset]
    tpi = ds["texts_per_image"]
    tests = tuple(split_images[s] for s in test_splits(plan.cfg, dataset))
    val_images = min(ds["val_max_images"], split_images["dev"])
    runs: dict[tuple[str, int], RunWork] = {}
    for row in plan.table(table, dataset).rows:
        for seed in row.seeds:
            for i, exp_id in enumerate(row.members):
                run_seed = row.member_seed(seed, i)
                if (exp_id, run_seed) in runs:
                    continue
                cfg = plan.experiment(dataset, exp_id).config
                per_epoch = split_images["train"] * (1 if cfg["training"]["batching"] == "images" else tpi)
                items = {k: 0 for k in STAGE_KINDS}
                validations = {k: 0 for k in STAGE_KINDS}
                for stage in cfg["training"]["stages"]:
                    items[stage_kind(stage)] += stage["epochs"] * per_epoch
                    validations[stage_kind(stage)] += stage["epochs"]
                runs[(exp_id, run_seed)] = RunWork(exp_id, run_seed, cfg["method"], cost_key(cfg, ds),
                                                   {k: v for k, v in items.items() if v},
                                                   {k: v for k, v in validations.items() if v},
                                                   val_images, tests, tpi)
    return list(runs.values())


def load_costs(path: str | Path = COSTS_FILE) -> list[dict]:
    """The measurements of a costs file, validated."""
    return validate(load_yaml(path), "measured_costs", str(path))["measurements"]


def eval_seconds(stage_cost: dict, images: int, texts_per_image: int) -> float:
    """Encoding ``images`` images and their texts, then scoring every pair."""
    return (images * stage_cost["encode_s_per_image"]
            + images * images * texts_per_image / 1e6 * stage_cost["score_s_per_mpair"])


def run_seconds(work: RunWork, cost: dict) -> dict[str, float] | None:
    """Seconds of training, validation and test evaluation of one run from its cost entry
    (None when the entry lacks a stage kind the run has)."""
    stages = cost["stages"]
    if any(kind not in stages for kind in (*work.train_items, *work.validations)):
        return None
    return {"training": sum(n * stages[k]["train_s_per_item"] for k, n in work.train_items.items()),
            "validation": sum(n * eval_seconds(stages[k], work.val_images, work.texts_per_image)
                              for k, n in work.validations.items()),
            "test": sum(eval_seconds(stages[work.final_kind], n, work.texts_per_image) for n in work.test_images)}


@dataclass(frozen=True)
class TableEstimate:
    device: str | None                 # the GPU the priced runs were measured on
    measured: tuple[dict, ...]         # the measurements used (date, commit, torch)
    seconds: dict[str, float]          # training / validation / test, summed over the priced runs
    priced: int                        # runs priced
    unmeasured: dict[str, int]         # method -> runs without a measurement on that device
    runs: int
    train_items: int

    def lines(self, target: str, command: str) -> list[str]:
        head = (f"GPU time of {target} (estimate): {self.runs} training jobs, "
                f"{self.train_items / 1e6:,.1f} M training items in all (captions; images for image batches)")
        out = [head]
        if self.priced:
            dates = sorted({m["date"] for m in self.measured})
            total = sum(self.seconds.values()) / 3600
            parts = ", ".join(f"{k} {v / 3600:,.1f}" for k, v in self.seconds.items())
            out.append(f"  {total:,.1f} GPU-hours for {self.priced} of them ({parts}), from costs measured on "
                       f"{self.device} ({', '.join(dates)}; {COSTS_FILE.name})")
        if self.unmeasured:
            which = ", ".join(f"{m} ({n})" for m, n in sorted(self.unmeasured.items()))
            where = f"on {self.device}" if self.device else "on any GPU"
            out.append(f"  not measured {where}, so not estimated: {which} training jobs; measure with "
                       f"`{command}`")
        return out


def estimate(work: list[RunWork], costs: list[dict]) -> TableEstimate:
    """Prices ``work`` on the GPU whose measurements cover the most of its runs."""
    devices = list(dict.fromkeys(c["device"] for c in costs))
    best = None
    for device in devices:
        by_key = {c["key"]: c for c in costs if c["device"] == device}
        priced = [(w, run_seconds(w, by_key[w.key])) for w in work if w.key in by_key]
        priced = [(w, s) for w, s in priced if s is not None]
        if best is None or len(priced) > len(best[1]):
            best = (device, priced, by_key)
    device, priced, by_key = best if best else (None, [], {})
    seconds = {k: sum(s[k] for _, s in priced) for k in ("training", "validation", "test")}
    done = {(w.exp, w.seed) for w, _ in priced}
    unmeasured: dict[str, int] = {}
    for w in work:
        if (w.exp, w.seed) not in done:
            unmeasured[w.method] = unmeasured.get(w.method, 0) + 1
    used = tuple({id(by_key[w.key]): by_key[w.key] for w, _ in priced}.values())
    return TableEstimate(device if priced else None, used, seconds, len(priced), unmeasured, len(work),
                         sum(sum(w.train_items.values()) for w in work))
