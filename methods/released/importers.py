"""The importers of released files, by the project's model kind they fill: the code base each
reads (torch-free, for the DAG build) and its module under ``methods.released``, imported when a
job imports a checkpoint (it needs torch, which the DAG build never imports)."""
from __future__ import annotations

import importlib

from methods.errors import HarnessError

# model kind -> (the public code whose released files its importer reads, its module in methods.released)
RELEASED: dict[str, tuple[str, str]] = {
    "sgraf": ("Paranioar/SGRAF", "sgraf"),
    "vsepp": ("fartashf/vsepp", "vsepp"),
    "vsrn": ("KunpengLi1994/VSRN", "vsrn"),
    "set_embedding_grid": ("yalesong/pvse", "pvse"),
    "vse_infinity": ("woodfrog/vse_infty", "vse_infinity"),
    "vse_infinity_grid": ("woodfrog/vse_infty", "vse_infinity_grid"),
    "pcme": ("naver-ai/pcme", "pcme"),
    "naaf": ("CrossmodalGroup/NAAF", "naaf"),
}
# what a released row of a kind says beside its files: how the authors' files differ from what the
# harness builds for its retrained rows
RELEASED_NOTES: dict[str, str] = {
    "vsepp": "its vocabulary also holds the test captions' words (fartashf/vsepp#29)",
}


def released_code(kind: str, where: str) -> str:
    """The code base whose checkpoints fill model kind ``kind``; one line if none has an importer."""
    if kind not in RELEASED:
        raise HarnessError(f"{where}: no importer of released checkpoints for model kind '{kind}' "
                           f"(importers: {', '.join(sorted(RELEASED))})")
    return RELEASED[kind][0]


def get_importer(kind: str, where: str):
    """The ``Importer`` of model kind ``kind`` (``methods.released.record``)."""
    released_code(kind, where)
    return importlib.import_module(f"methods.released.{RELEASED[kind][1]}").IMPORTER
