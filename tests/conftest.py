import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def copy_workflow(dest: Path) -> Path:
    """A working copy of the Snakefile, rules and config (the `methods` package is imported from the repo)."""
    shutil.copy(REPO / "Snakefile", dest / "Snakefile")
    shutil.copytree(REPO / "workflow", dest / "workflow")
    shutil.copytree(REPO / "config", dest / "config")
    shutil.copytree(REPO / "envs", dest / "envs")
    return dest


def snakemake(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "--cores", "2", *args]
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=1800)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


@pytest.fixture(scope="session")
def tiny_dag(tmp_path_factory):
    """The whole default DAG run once on the tiny synthetic dataset."""
    work = copy_workflow(tmp_path_factory.mktemp("dag"))
    shutil.copy(REPO / "tests" / "data" / "tiny.yaml", work / "tiny.yaml")
    snakemake(work, "--configfile", "tiny.yaml")
    return work
