"""A fake MS-COCO of the real size, laid out as docs/real-data.md describes, for the size test and the
benchmark of docs/benchmarks.md ("Full-size COCO"):
Karpathy's dataset_coco.json (123,287 images: 82,783 train, 30,504 restval, 5,000 val, 5,000 test;
five captions each, a few with six or seven as in the real file), every image file it names (a few
bytes each), BUTD region files ``{train,dev,testall}_ims.npy`` of (113,287 | 5,000 | 5,000) x 36 x
2048 float32 as sparse files (34 GB of address space, a few MB on disk), their captions files, a
300-d GloVe file, ResNet weights that load into their architecture, and a Punkt model: ~700 MB
written, most of it the image files' blocks.

The captions are random words with COCO's length distribution (mean ~10.5 words, a long tail to
~50), so that a vocabulary, a tokenizer and a length-dependent batch meet the real sizes. The test
images carry the COCO ids of the 5K test set in eccv_caption's order (protocol coco_5k_eccv
checks them). ``python -m tests.fullsize_coco DEST`` makes one (``--config FILE``: its config
block, for ``--configfile=``); ``--measure`` makes one and measures what a new user does first
(``measure``; tests/test_size.py asserts its memory figures)."""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from methods import api
from methods.training.loop import load_checkpoint
from methods.benchmarks.pmrp import fake_instances
from tests.conftest import (SNAKEMAKE, coco_test_image_ids, copy_workflow, fitting_weights, glove_file,
                            local_snakemake_env, planted_punkt)

# Karpathy's COCO split sizes (dataset_coco.json)
KARPATHY_SIZES = {"train": 82_783, "restval": 30_504, "val": 5_000, "test": 5_000}
HARNESS_SPLITS = {"train": ["train", "restval"], "dev": ["val"], "testall": ["test"]}
N_REGIONS, FEATURE_DIM = 36, 2048
VOCABULARY = 12_000   # distinct words in the captions (COCO's training captions have ~25k, ~10k seen 4+ times)
EXTRA_CAPTIONS = 787  # images with a sixth or seventh caption (617,631 sentences; the real file has 616,767)


def caption_lengths(rng: np.random.Generator, n: int) -> np.ndarray:
    """Words per caption: COCO's are 8-15 for most, mean ~10.5, a few up to ~50."""
    lengths = np.clip(np.round(rng.gamma(9.0, 1.17, n)), 6, 49).astype(int)
    long_tail = rng.random(n) < 0.001
    lengths[long_tail] = rng.integers(25, 50, int(long_tail.sum()))
    return lengths


def captions(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` captions of Zipf-distributed words (w0 the most frequent), one sentence each."""
    lengths = caption_lengths(rng, n)
    ranks = np.minimum(rng.zipf(1.3, int(lengths.sum())) - 1, VOCABULARY - 1)
    words = np.array([f"w{i}" for i in range(VOCABULARY)])[ranks]
    ends = np.cumsum(lengths)
    return [" ".join(words[end - length:end]) + "." for end, length in zip(ends, lengths)]


def karpathy_entries(rng: np.random.Generator) -> list[dict]:
    """The 'images' list, in Karpathy's order of splits (test and val first in the real file; the
    order within a harness split is what the feature rows follow)."""
    test_ids = coco_test_image_ids()
    order = ["test", "val", "train", "restval"]
    n_images = sum(KARPATHY_SIZES.values())
    per_image = np.full(n_images, 5)
    per_image[rng.choice(n_images, EXTRA_CAPTIONS, replace=False)] += rng.integers(1, 3, EXTRA_CAPTIONS)
    texts = captions(rng, int(per_image.sum()))
    entries, imgid, sentid, taken = [], 0, 0, set(test_ids)
    other_ids = (i for i in range(1, 10**7) if i not in taken)
    for split in order:
        for k in range(KARPATHY_SIZES[split]):
            folder = "train2014" if split == "train" else "val2014"
            cocoid = test_ids[k] if split == "test" else next(other_ids)
            n = int(per_image[imgid])
            sentences = [{"tokens": texts[sentid + j][:-1].split(), "raw": texts[sentid + j], "imgid": imgid,
                          "sentid": sentid + j} for j in range(n)]
            entries.append({"filepath": folder, "sentids": list(range(sentid, sentid + n)),
                            "filename": f"COCO_{folder}_{cocoid:012d}.jpg", "imgid": imgid, "split": split,
                            "sentences": sentences, "cocoid": cocoid})
            imgid, sentid = imgid + 1, sentid + n
    return entries


def sparse_regions(path: Path, n_images: int, rng: np.random.Generator) -> None:
    """A float32 (n_images, 36, 2048) .npy file whose data is a hole except its first and last image
    (random values: two splits' files of one size differ at both ends, as real ones do)."""
    array = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n_images, N_REGIONS, FEATURE_DIM))
    for row in (0, n_images - 1):   # open_memmap sizes the file with a seek: the rest stays a hole
        array[row] = rng.random((N_REGIONS, FEATURE_DIM), dtype=np.float32)
    array.flush()
    del array


def make_coco(dest: Path, seed: int = 0) -> dict:
    """Write the fake COCO under ``dest``; returns its ``datasets.coco`` config block and the
    ``backbones`` block (ResNet-152 and ResNet-50 weights of zeros)."""
    rng = np.random.default_rng(seed)
    dest.mkdir(parents=True, exist_ok=True)
    entries = karpathy_entries(rng)
    karpathy = dest / "dataset_coco.json"
    karpathy.write_text(json.dumps({"images": entries, "dataset": "coco"}))
    for folder in ("train2014", "val2014"):
        (dest / folder).mkdir(exist_ok=True)
    for e in entries:
        (dest / e["filepath"] / e["filename"]).write_bytes(b"\xff\xd8\xff")   # non-empty: the DAG checks size only
    precomp = dest / "coco_precomp"
    precomp.mkdir(exist_ok=True)
    for harness_split, karpathy_splits in HARNESS_SPLITS.items():
        chosen = [e for e in entries if e["split"] in karpathy_splits]
        sparse_regions(precomp / f"{harness_split}_ims.npy", len(chosen), rng)
        with open(precomp / f"{harness_split}_caps.txt", "w") as f:
            f.writelines(s["raw"] + "\n" for e in chosen for s in e["sentences"][:5])
    # the instance annotations of val2014 at their real size (every val2014 image of the file)
    (dest / "annotations").mkdir(exist_ok=True)
    val2014 = [e["cocoid"] for e in entries if e["filepath"] == "val2014"]
    (dest / "annotations" / "instances_val2014.json").write_text(json.dumps(fake_instances(val2014, rng)))
    weights = {arch: str(fitting_weights(dest / f"{arch}-zeros.pth", arch)) for arch in ("resnet152", "resnet50")}
    dataset = {"karpathy_json": str(karpathy), "images_dir": str(dest), "precomp_dir": str(precomp),
               "instance_annotations": str(dest / "annotations"),
               "glove": str(glove_file(dest / "glove_300d.txt", words=1000)),
               "nltk_data": str(planted_punkt(dest / "nltk_data"))}
    return {"datasets": {"coco": dataset},
            "backbones": {"resnet152": {"arch": "resnet152", "weights": weights["resnet152"]},
                          "resnet50": {"arch": "resnet50", "weights": weights["resnet50"]}}}


# Runs a command with its output in a log file and prints, as JSON, its exit status, wall seconds,
# peak resident memory (the largest process of its tree: RUSAGE_CHILDREN's ru_maxrss, KiB on Linux;
# memory-mapped file pages included) and peak anonymous memory, sampled every 0.2 s from
# /proc/<pid>/smaps_rollup: its largest process's, and its whole tree's at one time (proportional:
# pages that forked loader workers share with their parent count once). Linux only.
PROBE = """
import json, os, resource, subprocess, sys, time
log, pid_file, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]

def children():
    out = {}
    for entry in os.listdir('/proc'):
        try:
            with open(f'/proc/{entry}/stat') as f:
                fields = f.read().rsplit(')', 1)[1].split()
            out.setdefault(int(fields[1]), []).append(int(entry))
        except (OSError, ValueError, IndexError):
            pass
    return out

def anon_kib(pid, key):
    try:
        with open(f'/proc/{pid}/smaps_rollup') as f:
            return next(int(line.split()[1]) for line in f if line.startswith(key + ':'))
    except (OSError, StopIteration):
        return 0

start = time.perf_counter()
peak_process = peak_tree = 0
with open(log, 'w') as out:
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    with open(pid_file, 'w') as f:
        f.write(str(proc.pid))
    while proc.poll() is None:
        kids, tree, todo = children(), [], [proc.pid]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(kids.get(pid, []))
        peak_process = max(peak_process, max(anon_kib(pid, 'Anonymous') for pid in tree))
        peak_tree = max(peak_tree, sum(anon_kib(pid, 'Pss_Anon') for pid in tree))
        time.sleep(0.2)
print(json.dumps({'rc': proc.returncode, 'seconds': time.perf_counter() - start,
                  'peak_rss_bytes': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
                  'peak_anon_bytes': peak_process * 1024, 'peak_anon_tree_bytes': peak_tree * 1024}))
"""


@dataclass
class Measured:
    rc: int
    seconds: float
    peak_rss_bytes: int
    peak_anon_bytes: int        # the largest process's anonymous memory
    peak_anon_tree_bytes: int   # the process tree's (proportional), at one time
    log: str


def measured(cmd: list[str], cwd: Path, log: Path, env: dict | None = None,
             while_running: Callable[[int, Path, Callable[[], bool]], None] | None = None) -> Measured:
    """``cmd`` run in a fresh process (so its peak memory is its own); ``while_running(pid, log,
    running)`` is called once it has started (e.g. to stop it; ``running()``: it has not ended)."""
    pid_file = log.with_suffix(".pid")
    pid_file.unlink(missing_ok=True)
    probe = subprocess.Popen([sys.executable, "-c", PROBE, str(log), str(pid_file), *cmd], cwd=cwd, env=env,
                             stdout=subprocess.PIPE, text=True)
    if while_running is not None:
        while probe.poll() is None and (not pid_file.is_file() or not pid_file.read_text()):
            time.sleep(0.2)
        if probe.poll() is None:
            while_running(int(pid_file.read_text()), log, lambda: probe.poll() is None)
    out, _ = probe.communicate(timeout=3600)
    return Measured(**json.loads(out.strip().splitlines()[-1]), log=log.read_text())


def snakemake_cmd(*args: str) -> list[str]:
    return [*SNAKEMAKE, *args]


def small_sgraf(harness: dict) -> dict:
    """SGRAF (SAF) as the COCO preset configures it, at small widths (the memory under test is the
    data's: features, captions, batches of 128 pairs), two loader workers."""
    return api.experiment_config("sgraf", "coco", variants=["saf"], overrides={
        "model.embed_dim": 64, "model.sim_dim": 16, "model.text.word_dim": 32, "model.text.hidden_dim": 64,
        "training.num_workers": 2}, harness=harness)


def training_steps(work: Path, experiment: dict, steps_seconds: float = 20.0) -> tuple[Measured, int]:
    """A training job on the full training split, stopped with SIGTERM once it has trained for
    ``steps_seconds`` (it checkpoints after the step it is in); returns its measurement and the
    number of steps it made."""
    run = work / "size_run"
    run.mkdir(exist_ok=True)
    (run / "experiment.json").write_text(json.dumps(experiment))
    results = work / "results" / "coco"
    precomp = json.loads((results / "dataset.json").read_text())["paths"]["precomp_dir"]
    cmd = [sys.executable, "-m", "methods.train", "--dataset-config", str(results / "dataset.json"),
           "--experiment", str(run / "experiment.json"), "--seed", "0", "--run-dir", str(run / "seed0"),
           "--features-dir", precomp, "--vocab", str(results / "vocab.json"), "--device", "cpu", "--threads", "2"]

    def stop_after_some_steps(pid: int, log: Path, running: Callable[[], bool]) -> None:
        while running() and "train 1/" not in log.read_text():   # the epoch's progress bar: steps begin
            time.sleep(0.5)
        time.sleep(steps_seconds)
        if running():
            os.kill(pid, signal.SIGTERM)

    result = measured(cmd, work, run / "train.log", while_running=stop_after_some_steps)
    last = run / "seed0" / "checkpoints" / "last.pt"
    return result, int(load_checkpoint(last)["step"]) if last.is_file() else 0   # 0: it stopped before a step


def measure(root: Path) -> dict:
    """Every step a new user takes on COCO, measured on a fake COCO of the real size under ``root``:
    the data generated, a dry run of table1_coco first and with its input checks cached, the data
    jobs (dataset config, vocabulary), and a few training steps of small-width SGRAF at batch 128
    (``steps``: how many). Values: ``Measured``, or numbers."""
    start = time.perf_counter()
    block = make_coco(root / "data")
    generated = time.perf_counter() - start
    (root / "work").mkdir()
    work = copy_workflow(root / "work")
    (work / "coco.yaml").write_text(json.dumps(block))
    env = local_snakemake_env()
    plan = snakemake_cmd("-n", "tables/table1_coco.csv", "--configfile=coco.yaml")
    out = {"generate_seconds": generated, "dry_run_first": measured(plan, work, root / "dry_run_first.log", env),
           "dry_run_cached": measured(plan, work, root / "dry_run_cached.log", env),
           "data_jobs": measured(snakemake_cmd("--configfile=coco.yaml", "results/coco/vocab.json"), work,
                                 root / "data_jobs.log", env),
           # the val2014 instance annotations parsed once, then PMRP of a random 5K score matrix
           "instance_categories": measured(snakemake_cmd("--configfile=coco.yaml",
                                                         "results/coco/data/instance_categories.npz"),
                                           work, root / "instance_categories.log", env)}
    out["pmrp"] = measured([sys.executable, "-m", "methods.benchmarks.pmrp", "--dataset-config",
                            "results/coco/dataset.json"], work, root / "pmrp.log", env)
    harness = api.harness_config(work / "config" / "config.yaml", block)
    out["training_steps"], out["steps"] = training_steps(work, small_sgraf(harness))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dest", type=Path, help="an empty folder (about 700 MB written, 34 GB of sparse files)")
    parser.add_argument("--config", type=Path, help="write the config block there (YAML), for --configfile=")
    parser.add_argument("--measure", action="store_true",
                        help="instead: generate it and measure the dry runs, data jobs and training steps")
    args = parser.parse_args()
    if args.measure:
        for step, m in measure(args.dest).items():
            if isinstance(m, Measured):
                print(f"{step:>15}: exit {m.rc}, {m.seconds:6.1f} s, peak RSS {m.peak_rss_bytes / 2**30:.2f} GiB, "
                      f"anonymous {m.peak_anon_bytes / 2**30:.2f} GiB "
                      f"(process tree {m.peak_anon_tree_bytes / 2**30:.2f})")
            else:
                print(f"{step:>15}: {m}")
        return
    block = make_coco(args.dest)
    if args.config:
        args.config.write_text(json.dumps(block, indent=1))   # JSON is YAML
    print(json.dumps(block, indent=1))


if __name__ == "__main__":
    main()
