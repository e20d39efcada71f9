"""Digests of what a DAG run computed on the built-in synthetic data: the generated images, the
pre-trained backbone, the cached CNN features and RoIAlign regions, and every run's kept weights
and test score matrix. ``tests/test_golden.py`` holds the tiny DAG's digests against the ones
committed for the host's CPU vendor (``tests/data/golden_portable.json``: Intel;
``golden_portable_amd.json``: AMD; the two differ from the backbone pre-training on). After a
change that is meant to move numbers, write each vendor's file anew from a tiny DAG's work folder on
a host of that vendor:

    python -m tests.golden <work folder of the tiny DAG> > tests/data/golden_portable.json
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import torch


def tensor_digest(state: dict) -> str:
    """sha256 over every tensor of a state dict, in key order: name, dtype, shape and bytes."""
    digest = hashlib.sha256()
    for name in sorted(state):
        value = state[name]
        if torch.is_tensor(value):
            digest.update(f"{name}|{value.dtype}|{tuple(value.shape)}|".encode())
            digest.update(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def array_digest(path: Path) -> str:
    array = np.load(path, mmap_mode="r")
    digest = hashlib.sha256(f"{array.dtype}|{array.shape}|".encode())
    digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def digests(work: Path) -> dict:
    """{what: sha256} of a DAG work folder's synthetic results (relative paths as keys)."""
    results = work / "results"
    out: dict[str, str] = {}
    synthetic = results / "synthetic"
    images = sorted((synthetic / "data" / "images").iterdir())
    digest = hashlib.sha256()
    for image in images:
        digest.update(image.name.encode() + b"|" + image.read_bytes())
    out["synthetic/data/images"] = digest.hexdigest()
    for path in sorted((synthetic / "backbones").glob("*.pt")):
        out[str(path.relative_to(results))] = tensor_digest(torch.load(path, map_location="cpu", weights_only=True))
    for path in sorted([*synthetic.glob("features/*/*.npy"), *synthetic.glob("precomp/*_ims.npy")]):
        out[str(path.relative_to(results))] = array_digest(path)
    for run in sorted(p.parent for p in results.glob("*/runs/*/seed*/model.pt")):
        key = str(run.relative_to(results))
        out[f"{key}/model.pt"] = tensor_digest(torch.load(run / "model.pt", map_location="cpu",
                                                          weights_only=True)["state_dict"])
        for sims in sorted(run.glob("sims_*.npy")):
            out[f"{key}/{sims.name}"] = array_digest(sims)
    return out


if __name__ == "__main__":
    print(json.dumps(digests(Path(sys.argv[1])), indent=1, sort_keys=True))
