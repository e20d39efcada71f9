"""The importers of released files, by the project's model kind they fill: the code base each
reads (torch-free, for the DAG build) and its module ``methods.released.<kind>``, imported when
a job imports a checkpoint (it needs torch, which the DAG build never imports)."""
from __future__ import annotations

import importlib

from methods.errors import HarnessError

# model kind -> the public code whose released files its importer reads
RELEASED_CODE: dict[str, str] = {
    "sgraf": "Paranioar/SGRAF",
    "vsepp": "fartashf/vsepp",
    "vsrn": "KunpengLi1994/VSRN",
}


def released_code(kind: str, where: str) -> str:
    """The code base whose checkpoints fill model kind ``kind``; one line if none has an importer."""
    if kind not in RELEASED_CODE:
        raise HarnessError(f"{where}: no importer of released checkpoints for model kind '{kind}' "
                           f"(importers: {', '.join(sorted(RELEASED_CODE))})")
    return RELEASED_CODE[kind]


def get_importer(kind: str, where: str):
    """The ``Importer`` of model kind ``kind`` (``methods.released.record``)."""
    released_code(kind, where)
    return importlib.import_module(f"methods.released.{kind}").IMPORTER
