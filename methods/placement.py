"""Where a snakemake process's jobs run and what they may carry, checked when the DAG is built.

The Snakefile imports this module: it must not import torch (the DAG build of every snakemake
process, a cluster job's included, would pay its import). Whether a GPU is visible is asked of
torch in a child process, only when a local run is about to start jobs that need one.
"""
from __future__ import annotations

import difflib
import subprocess
import sys

from methods.errors import HarnessError


def cuda_visible() -> bool:
    """``torch.cuda.is_available()`` as the jobs of this machine will see it (asked in a child
    process, so that this one never imports torch)."""
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        raise HarnessError(f"could not ask torch whether a GPU is visible ({sys.executable}): "
                           f"{probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else probe.returncode}")
    return probe.stdout.strip() == "True"


def runs_jobs_here(*, main_process: bool, local_executor: bool, dry_run: bool, touch: bool) -> bool:
    """Whether a snakemake process will run its jobs on this machine: not a cluster submit host
    (its jobs run on nodes that have the GPUs), not a job's own snakemake process on a node, not a
    dry run or --touch (nothing runs). Snakemake 9 shows a dry run with its own executor, hiding
    the one the real run would use, so a dry run is never counted as local."""
    return main_process and local_executor and not dry_run and not touch


def check_gpu_for_local_run(device: str, *, runs_here: bool, device_jobs: dict[str, int], gpu_visible: bool) -> None:
    """``device: cuda`` on a machine without a visible GPU fails once the DAG is built, before the
    first job, instead of in the first job that needs the GPU (after the CPU jobs before it).
    ``runs_here``: ``runs_jobs_here``; ``device_jobs``: rule -> number of jobs to run that take ``--device``."""
    if device != "cuda" or not runs_here or not device_jobs or gpu_visible:
        return
    jobs = ", ".join(f"{n} {rule}" for rule, n in sorted(device_jobs.items()))
    raise HarnessError(f"device: cuda (config) but no GPU is visible on this machine (torch.cuda.is_available() is "
                       f"False), and this local run would start jobs that need one ({jobs}); use device: auto or cpu, "
                       f"or run where a GPU is visible or with a cluster profile")


# Resources a job may carry: Snakemake's own, those snakemake-executor-plugin-slurm (2.x) reads,
# and ``gpu`` (the rules' GPU count, the local profile's GPU pool). A misspelled one would be
# carried silently (e.g. ``slurm_partiton``: every job lands on the default partition).
KNOWN_RESOURCES = frozenset({
    "_cores", "_nodes", "threads", "mem", "mem_mb", "mem_mib", "disk", "disk_mb", "disk_mib", "runtime", "tmpdir",
    "slurm_partition", "slurm_account", "slurm_extra", "slurm_cluster", "clusters", "cluster", "constraint", "qos",
    "gres", "gpu", "gpu_model", "cpus_per_task", "cpus_per_gpu", "tasks", "tasks_per_node", "tasks_per_gpu",
    "nodes", "mem_mb_per_cpu", "mpi",
})


def check_resource_names(default_resources, set_resources: dict[str, object]) -> None:
    """When the DAG is built: every resource named by ``--default-resources`` / ``--set-resources``
    (or a profile's ``default-resources`` / ``set-resources``) is one a job can use."""
    named = [(k, "default-resources") for k in default_resources]
    named += [(k, f"set-resources of rule {rule}") for rule, keys in set_resources.items() for k in keys]
    for key, where in named:
        if key not in KNOWN_RESOURCES:
            close = difflib.get_close_matches(key, sorted(KNOWN_RESOURCES), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise HarnessError(f"{where} (workflow profile or command line): unknown resource '{key}'{hint}; "
                               f"known: {', '.join(sorted(k for k in KNOWN_RESOURCES if not k.startswith('_')))}")
