"""What a dataset's config tells the plan: the splits its protocols test, what kind of data its
tables say it is, the real dataset and protocols a synthetic one stands in for, and the smoke run
of each real dataset (``<name>-smoke``)."""
from __future__ import annotations

import copy
import re

from methods.errors import HarnessError
from methods.metrics.protocols import STATISTICS_PROTOCOL, get_protocol

SMOKE_SUFFIX = "-smoke"
# a smoke run asks every job's slot for the configured minutes (smoke.runtime)
SMOKE_RESOURCE_RULES = ("generate", "vocab", "features", "regions", "train", "evaluate")
# where a real dataset's own files are configured: a smoke run of it can be planned
CONFIGURED_BY = {"karpathy": "karpathy_json", "multilabel": "source_dir"}


def smoke_dataset(cfg: dict, name: str) -> dict:
    """The config of ``<name>-smoke``: dataset ``name``'s, on the first ``smoke.train_images`` /
    ``eval_images`` images of its splits (``methods.data.datasets.smoke_limit``), each training stage
    at most ``smoke.epochs`` epochs of at most ``batches_per_epoch`` batches, each job asking for
    ``smoke.runtime`` minutes. Its protocols are the dataset's, each on the sub-sampled split,
    without those defined on a fixed set of images (ECCV Caption / CxC: the 5,000 COCO ids)."""
    ds, settings = copy.deepcopy(cfg["datasets"][name]), cfg["smoke"]
    ds["smoke"] = {"of": name, **{k: settings[k] for k in ("train_images", "eval_images", "batches_per_epoch",
                                                          "epochs")}}
    ds["protocols"] = [p for p in ds["protocols"] if get_protocol(p).relevance != "coco_ids"]
    for protocol in ds["protocols"]:
        folds = get_protocol(protocol).n_folds
        if settings["eval_images"] % folds:
            raise HarnessError(f"smoke.eval_images: {settings['eval_images']} images do not split into the {folds} "
                               f"folds of protocol {protocol} ({name}); give a multiple of {folds}")
    overrides = ds.get("resources", {})
    ds["resources"] = {rule: {**overrides.get(rule, {}), "runtime": settings["runtime"]}
                       for rule in SMOKE_RESOURCE_RULES}
    return ds


def with_smoke_datasets(cfg: dict) -> dict:
    """``cfg`` with ``<name>-smoke`` beside every real dataset whose files are configured (a
    Karpathy file, or a multi-label source folder): the target that names it is the smoke switch."""
    added = {f"{name}{SMOKE_SUFFIX}": smoke_dataset(cfg, name) for name, ds in cfg["datasets"].items()
             if "smoke" not in ds and "generated_from" not in ds and ds.get(CONFIGURED_BY.get(ds["kind"], ""))
             and f"{name}{SMOKE_SUFFIX}" not in cfg["datasets"]}
    return {**cfg, "datasets": {**cfg["datasets"], **added}} if added else cfg


def unconfigured_smoke(cfg: dict, dataset: str) -> str | None:
    """Why ``dataset``, named like a smoke run, has none: its real dataset's files are not configured."""
    name = dataset.removesuffix(SMOKE_SUFFIX)
    if dataset.endswith(SMOKE_SUFFIX) and name in cfg["datasets"] and dataset not in cfg["datasets"]:
        ds = cfg["datasets"][name]
        key = CONFIGURED_BY.get(ds["kind"])
        if key is None or "generated_from" in ds:
            return f"'{dataset}': {name} is built-in data; a smoke run checks a real dataset's own files"
        return f"'{dataset}' is the smoke run of {name}'s own files, but datasets.{name}.{key} is not set"
    return None


SMOKE_KEY = re.compile(rf"\bdatasets\.([a-z0-9]+){SMOKE_SUFFIX}\.")


def as_configured(message: str) -> str:
    """A message naming keys of a smoke run's config, which is derived from its dataset's: each key
    under ``datasets.<name>-smoke`` named as the ``datasets.<name>`` key a user sets."""
    return SMOKE_KEY.sub(r"datasets.\1.", message)


def source_dataset(dataset: str, ds_cfg: dict) -> str:
    """The dataset whose method presets and paper tables a dataset uses: a smoke run's, or itself."""
    return ds_cfg["smoke"]["of"] if "smoke" in ds_cfg else dataset


def test_splits(cfg: dict, dataset: str) -> list[str]:
    """Harness splits evaluated for a dataset (one metrics file each), in protocol order."""
    out: list[str] = []
    for name in cfg["datasets"][dataset]["protocols"]:
        split = get_protocol(name).split
        if split not in cfg["datasets"][dataset]["splits"]:
            raise HarnessError(f"dataset {dataset}: protocol {name} needs split '{split}', "
                               f"which datasets.{dataset}.splits does not define")
        if split not in out:
            out.append(split)
    return out


def data_kind(ds_cfg: dict) -> str:
    """What tables and figures say of a dataset's data: ``synthetic`` for the built-in dataset and
    for datasets the DAG generates from it (synthetic tags), ``smoke`` for a smoke run, else its kind
    (``methods.report.wording.INCOMPARABLE_DATA``: the kinds whose cells are not comparable)."""
    if "smoke" in ds_cfg:
        return "smoke"
    return "synthetic" if ds_cfg["kind"] == "synthetic" or "generated_from" in ds_cfg else ds_cfg["kind"]


def reported_dataset(dataset: str, ds_cfg: dict) -> str:
    """The dataset whose reported numbers a dataset's tables show: the one it stands in for, the one
    a smoke run samples, or itself."""
    return ds_cfg.get("stands_in_for", {}).get("dataset", source_dataset(dataset, ds_cfg))


def stand_in_protocols(ds_cfg: dict) -> list[str]:
    """The protocols of the real dataset a synthetic one stands in for (``stands_in_for.protocol``:
    one name, or a list when its tables report under several, e.g. retrieval and label prediction)."""
    if "stands_in_for" not in ds_cfg:
        return []
    protocol = ds_cfg["stands_in_for"]["protocol"]
    return [protocol] if isinstance(protocol, str) else list(protocol)


def reported_shown(by_protocol: dict, ds_cfg: dict) -> dict:
    """Reported numbers keyed by this dataset's protocols; a synthetic dataset shows those of the
    protocol it stands in for (its verdicts are then 'not comparable') under each of its
    protocols that reports one of those metrics (not under extended-positive ones)."""
    if "stands_in_for" not in ds_cfg:
        return by_protocol
    statistics = {p: v for p, v in by_protocol.items() if p == STATISTICS_PROTOCOL}  # not tied to a dataset
    shown = {}
    for stood_in in stand_in_protocols(ds_cfg):
        source = by_protocol.get(stood_in)
        if source:
            shown.update({p: source for p in ds_cfg["protocols"]
                          if p not in shown and set(source["metrics"]) & set(get_protocol(p).metrics)})
    return {**shown, **statistics}
