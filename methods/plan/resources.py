"""What a rule's jobs ask of the machine, from the validated config: threads, memory, run time and
GPUs per rule (config ``resources``), a dataset's overrides (``datasets.<name>.resources``), and the
environment a dataset's numerics mode sets before a job's command (``datasets.<name>.numerics``).
"""
from __future__ import annotations

from methods.numerics import shell_prefix


def rule_resource(cfg: dict, rule: str, key: str):
    return cfg["resources"][rule][key]


def dataset_resource(cfg: dict, dataset: str, rule: str, key: str):
    """A resource of a rule's jobs on one dataset: the dataset's override where it sets one, else the rule's."""
    return cfg["datasets"][dataset].get("resources", {}).get(rule, {}).get(key, cfg["resources"][rule][key])


def dataset_gpus(cfg: dict, dataset: str, rule: str) -> int:
    """GPUs a rule's jobs on ``dataset`` ask for: none for a dataset of portable numerics, whose
    jobs run on the CPU whatever the node has (methods.runtime.resolve_device), so they go to the
    CPU partition; else the dataset's override, else the rule's."""
    if cfg["datasets"][dataset]["numerics"] == "portable":
        return 0
    return dataset_resource(cfg, dataset, rule, "gpus")


def job_resources(cfg: dict, dataset: str, rule: str) -> dict:
    """The Snakemake resources of a rule's jobs on one dataset: memory, run time and GPUs."""
    return {"mem_mb": dataset_resource(cfg, dataset, rule, "mem_mb"),
            "runtime": dataset_resource(cfg, dataset, rule, "runtime"), "gpu": dataset_gpus(cfg, dataset, rule)}


def numerics_prefix(cfg: dict, dataset: str, threads: int) -> str:
    """What a job of ``dataset`` writes before ``python -m``: its numerics mode's environment
    (portable: fixed kernels and ``threads``, the rule's configured count, whatever --cores gives
    it; methods/numerics.py), empty for native."""
    return shell_prefix(cfg["datasets"][dataset]["numerics"], threads)
