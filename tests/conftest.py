import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Set before numpy and torch start their thread pools: every process of the tests gets one compute
# thread, as Snakemake gives each job its own cores. pytest-xdist runs a worker per core beside the
# session DAG's jobs, so more threads per process would oversubscribe the cores, and OpenMP's and
# OpenBLAS's idle threads spin-wait for work (CPU the other processes then lack). A job that sets its
# own thread count (portable numerics, `--threads`) still does.
for _threads_variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_threads_variable, "1")

import numpy as np
import pytest
import torch
import torchvision
from filelock import FileLock

from methods.benchmarks.pmrp import fake_instances
from methods.config import deep_merge, load_harness_config, load_yaml
from methods.data.tokenizers import PUNKT_SUBDIR
from methods.io import torch_save
from methods.metrics.coco_ids import package_caption_ids, package_caption_images

REPO = Path(__file__).resolve().parents[1]


def config_with_every_table(overrides: dict | None = None) -> dict:
    """config/config.yaml with every table of the synthetic datasets built (the default job skips
    some: datasets.<name>.skip_tables), for the tests of those tables' rows."""
    every = load_yaml(REPO / "config" / "synthetic_all_tables.yaml")
    return load_harness_config(REPO / "config" / "config.yaml", deep_merge(every, overrides or {}))


def copy_workflow(dest: Path) -> Path:
    """A working copy of the Snakefile, rules and config (the `methods` package is imported from the repo)."""
    shutil.copy(REPO / "Snakefile", dest / "Snakefile")
    shutil.copytree(REPO / "workflow", dest / "workflow")
    shutil.copytree(REPO / "config", dest / "config")
    shutil.copytree(REPO / "envs", dest / "envs")
    return dest


def local_snakemake_env() -> dict:
    """The environment of a local Snakemake run: a stand-in scontrol that fails at once first on the
    PATH (tests/no_slurm/scontrol says why). The SLURM test keeps the real one."""
    return {**os.environ, "PATH": f"{REPO / 'tests' / 'no_slurm'}{os.pathsep}{os.environ.get('PATH', '')}"}


# A local Snakemake run of the tests, on 2 cores. Snakemake's job-rate limiter (default 100 jobs per
# 1 s) starts a timer at every scheduling round that runs another round when it fires, so the rounds,
# each of which stats every input of every ready job, multiply with the jobs done: the session DAG's
# Snakemake process spent about 7 of its 27 minutes of CI on them. One round per 5 s per timer does
# the same work, at the cost of up to 5 s waited for the last timers at exit (dry runs have none).
SNAKEMAKE = [sys.executable, "-m", "snakemake", "--cores", "2", "--max-jobs-per-timespan", "1000/5s"]


def snakemake(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [*SNAKEMAKE, *args]
    proc = subprocess.run(cmd, cwd=workdir, env=local_snakemake_env(), capture_output=True, text=True, timeout=1800)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


def glove_file(path: Path, dim: int = 300, words: int = 5) -> Path:
    """A GloVe text file (word and ``dim`` values per line) of a few words."""
    path.write_text("".join(f"word{i} " + " ".join(["0.1"] * dim) + "\n" for i in range(words)))
    return path


def planted_punkt(root: Path) -> Path:
    """An nltk_data folder holding a small English Punkt model (a few abbreviations) in the
    punkt_tab layout nltk reads (tokenizer ``nltk`` without a download)."""
    model = root / PUNKT_SUBDIR
    model.mkdir(parents=True)
    (model / "abbrev_types.txt").write_text("mr\ndr\nst\nu.s\na.m\np.m\n")
    (model / "collocations.tab").write_text("")
    (model / "sent_starters.txt").write_text("it\nthey\nnobody\n")
    (model / "ortho_context.tab").write_text("")
    return root


def flickr_layout(data: Path, precomp: Path, dest: Path, test_images: int = 1000, test_split: str = "test") -> dict:
    """Flickr30K's layout under ``dest`` (dataset_flickr30k.json, flickr30k-images/, f30k_precomp/,
    a 300-d GloVe file) filled with a synthetic dataset (``data``: its Karpathy JSON and images;
    ``precomp``: its BUTD-style region files), its test split grown to ``test_images`` by repeating
    its images under new names: protocol f30k_1k is defined on 1,000 test images, COCO's on 5,000
    (their harness split ``testall``: ``test_split`` names the precomputed test files). Returns the
    dataset's config block."""
    dest.mkdir(parents=True)
    images = dest / "flickr30k-images"
    images.mkdir()
    karpathy = json.loads((data / "dataset_synthetic.json").read_text())
    entries = [e for e in karpathy["images"] if e["split"] != "test"]
    test = [e for e in karpathy["images"] if e["split"] == "test"]
    for e in entries:
        (images / e["filename"]).symlink_to(data / "images" / e["filename"])
    next_id = 1 + max(e["imgid"] for e in karpathy["images"])
    # COCO: the test images carry the COCO ids of the 5K test set in eccv_caption's order (the
    # ECCV Caption / CxC protocol checks them when the DAG is built)
    # and in COCO's folder val2014, with instance annotations (PMRP reads their categories)
    cocoids = coco_test_image_ids() if test_split == "testall" else None
    if cocoids is not None:
        (images / "val2014").mkdir()
        (dest / "annotations").mkdir()
        instances = fake_instances(cocoids[:test_images], np.random.default_rng(0))
        (dest / "annotations" / "instances_val2014.json").write_text(json.dumps(instances))
    for i in range(test_images):
        source = test[i % len(test)]
        entry = {**source, "filename": f"test{i:04d}_{source['filename']}", "imgid": next_id + i}
        if cocoids is not None:
            entry.update(cocoid=cocoids[i], filepath="val2014")
        (images / entry.get("filepath", "") / entry["filename"]).symlink_to(data / "images" / source["filename"])
        entries.append(entry)
    (dest / "dataset_flickr30k.json").write_text(json.dumps({**karpathy, "images": entries}))
    regions = dest / "f30k_precomp"
    regions.mkdir()
    for split in ("train", "dev"):
        shutil.copy(precomp / f"{split}_ims.npy", regions)
        shutil.copy(precomp / f"{split}_caps.txt", regions)
    rows = [i % len(test) for i in range(test_images)]
    ims = np.load(precomp / "test_ims.npy")
    np.save(regions / f"{test_split}_ims.npy", ims[rows])
    caps = (precomp / "test_caps.txt").read_text().splitlines()
    (regions / f"{test_split}_caps.txt").write_text("".join(c + "\n" for r in rows for c in caps[5 * r:5 * r + 5]))
    return {"karpathy_json": str(dest / "dataset_flickr30k.json"), "images_dir": str(images),
            "precomp_dir": str(regions), "precomp": {"n_regions": int(ims.shape[1]), "feature_dim": int(ims.shape[2])},
            "glove": str(glove_file(dest / "glove_300d.txt")),   # MVSA rows (table1) initialise words from GloVe
            "nltk_data": str(planted_punkt(dest / "nltk_data")),  # tokenizer nltk, as the sources
            **({"instance_annotations": str(dest / "annotations")} if cocoids is not None else {})}


def coco_test_image_ids() -> list[int]:
    """The COCO ids of the 5,000 COCO 5K test images in eccv_caption's row order."""
    image_of = package_caption_images()
    return [image_of[int(c)] for c in package_caption_ids()[::5]]


def fitting_weights(path: Path, arch: str) -> Path:
    """A weights file that loads into torchvision's ``arch``: every tensor zeros of the right shape
    (the DAG checks keys, shapes and finiteness, not values), stored whole (ResNet-152: 241 MB), as
    the bounded reader of downloaded files refuses broadcast views, whose copies would outgrow the
    file (methods.untrusted.plain.check_view). Written atomically: tests
    on other workers may be reading the same file in the session DAG's folder; and only where it is
    missing: the DAG build checks a weights file it has not seen at its size and mtime in a child
    process (torch and torchvision, ~5 s of CPU), and the session DAG's configs share one file."""
    if path.is_file():
        return path
    with torch.device("meta"):
        shapes = getattr(torchvision.models, arch)(weights=None).state_dict()
    torch_save(path, {k: torch.zeros(v.shape, dtype=v.dtype) for k, v in shapes.items()})
    return path


def usable_cpus(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """The CPUs this process may run on: its affinity mask, within a cgroup v2 CPU quota
    (``cpu.max``: quota and period in microseconds) where one is set."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = cpu_max.read_text().split()
        if quota != "max":
            count = min(count, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return count


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: a worker per usable CPU. pytest-xdist's own answer, with psutil installed (a
    test dependency), is psutil's count of *physical* cores: 1 on a VM whose 2 vCPUs are one core's
    two hyperthreads, which halves the tests' parallelism there; or the host's cores, more than a
    cgroup-limited runner may use. PYTEST_XDIST_AUTO_NUM_WORKERS still decides where it is set."""
    configured = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    return int(configured) if configured and configured.isdigit() else usable_cpus()


TINY_DAG = "tiny_dag"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """The tests of the session DAG run last: the DAG builds in the background meanwhile
    (``tiny_dag_build``), beside the other tests."""
    items.sort(key=lambda item: TINY_DAG in getattr(item, "fixturenames", ()))   # stable: order kept within each part


def shared_temp(tmp_path_factory) -> Path:
    """The session's temporary folder, shared by pytest-xdist's workers (each has a folder of its own
    below it) and the controller."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def dag_build_folder(tmp_path_factory) -> Path:
    return shared_temp(tmp_path_factory) / "dag"


@pytest.fixture(scope="session", autouse=True)
def tiny_dag_build(request, tmp_path_factory):
    """Starts the whole default DAG on the tiny synthetic dataset as the session begins, when a
    collected test needs it: once for all workers (the first to come launches it, detached; it
    writes its exit status to ``rc``). ``tiny_dag`` waits for it."""
    if any(TINY_DAG in getattr(item, "fixturenames", ()) for item in request.session.items):
        work = dag_build_folder(tmp_path_factory)
        with FileLock(str(work) + ".lock"):
            if not work.exists():
                staging = copy_workflow(Path(tempfile.mkdtemp(dir=work.parent, prefix=".dag-")))
                shutil.copy(REPO / "tests" / "data" / "tiny.yaml", staging / "tiny.yaml")
                staging.rename(work)   # complete before it has its name
                cmd = [*SNAKEMAKE, "--configfile", "tiny.yaml"]
                with open(work / "snakemake.out", "w") as out:
                    # rc appears once snakemake has ended, complete (written, then renamed)
                    proc = subprocess.Popen(["sh", "-c", '"$@"; echo $? > rc.tmp && mv rc.tmp rc', "sh", *cmd],
                                            cwd=work, env=local_snakemake_env(), stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)   # its own process group: stopped as one
                (work / "pgid").write_text(str(proc.pid))
        yield
        if not os.environ.get("PYTEST_XDIST_WORKER"):
            stop_dag_build(work)
    else:
        yield


def stop_dag_build(work: Path) -> None:
    """Stops the DAG build launched in ``work`` if it still runs (a session ended early)."""
    if (work / "pgid").exists() and not (work / "rc").exists():
        try:
            os.killpg(int((work / "pgid").read_text()), signal.SIGTERM)
        except ProcessLookupError:
            pass


def pytest_sessionfinish(session, exitstatus):
    """pytest-xdist's controller stops the build once every worker has ended (a run without workers
    stops it when ``tiny_dag_build`` ends)."""
    if getattr(session.config.option, "numprocesses", None) and not os.environ.get("PYTEST_XDIST_WORKER"):
        stop_dag_build(dag_build_folder(session.config._tmp_path_factory))   # the workers' parent folder


@pytest.fixture(scope="session")
def tiny_dag(tiny_dag_build, tmp_path_factory):
    """The whole default DAG run once on the tiny synthetic dataset."""
    work = dag_build_folder(tmp_path_factory)
    rc, deadline = work / "rc", time.monotonic() + 1800
    while not rc.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"the tiny DAG ({work}) did not finish within 1800 s")
        time.sleep(1)
    if rc.read_text().strip() != "0":
        raise AssertionError(f"the tiny DAG failed ({work}):\n{(work / 'snakemake.out').read_text()[-8000:]}")
    return work
