"""What a dataset's config tells the plan: the splits its protocols test, what kind of data its
tables say it is, and the real dataset and protocols a synthetic one stands in for."""
from __future__ import annotations

from methods.errors import HarnessError
from methods.metrics.protocols import STATISTICS_PROTOCOL, get_protocol


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
    for datasets the DAG generates from it (synthetic tags), else its kind."""
    return "synthetic" if ds_cfg["kind"] == "synthetic" or "generated_from" in ds_cfg else ds_cfg["kind"]


def reported_dataset(dataset: str, ds_cfg: dict) -> str:
    """The dataset whose reported numbers a dataset's tables show: the one it stands in for, or itself."""
    return ds_cfg.get("stands_in_for", {}).get("dataset", dataset)


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
