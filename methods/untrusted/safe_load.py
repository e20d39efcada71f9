"""Files from the internet (released checkpoints and vocabularies), read without running them and
within bounds.

Each file is read by a child process (``methods.untrusted.reader``) limited in memory and time
(``methods.untrusted.sandbox``, config ``untrusted_files``): a crash, a memory bomb or a hang in a
reader stops the child, and the harness says so in one line naming the file. The child hands back
plain values only (``methods.untrusted.plain``), which this module checks again: a pickle's allowed
classes arrive as ``PickledObject`` (``argparse.Namespace`` as one), a checkpoint's tensors as
views of the file's bytes, which are checked (dtype, a non-overlapping view inside the file, their
bytes together within the file's size) before any byte is read, and then read from the file here.
Neither torch's unpickler nor any class of the file's runs on it.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

from methods.errors import HarnessError
from methods.untrusted.pickle_scan import PickleRefused
from methods.untrusted.plain import ELEMENT_SIZE, MalformedResult, TensorView, check_view, decode
from methods.untrusted.sandbox import BoundExceeded, ReaderLimits, Usage, run_bounded
from methods.untrusted.unpickler import PickledObject

__all__ = ["PickledObject", "ReaderLimits", "UntrustedFileError", "load_checkpoint", "load_json", "load_pickle"]

NOUNS = {"checkpoint": "checkpoint", "pickle": "vocabulary", "json": "vocabulary"}
UNREADABLE = {"checkpoint": "not a readable PyTorch checkpoint", "pickle": "not a readable pickle",
              "json": "not a readable vocabulary JSON"}


class UntrustedFileError(HarnessError):
    """A released file refused, unreadable, or stopped by a bound; ``usage``: what its reader used
    (None when the parent's own checks refused it)."""

    def __init__(self, message: str, usage: Usage | None = None):
        super().__init__(message)
        self.usage = usage


def _dotted(name: str | type) -> str:
    return name if isinstance(name, str) else f"{name.__module__}.{name.__qualname__}"


def _read(kind: str, path: str | Path, allowed: Iterable[str | type], limits: ReaderLimits) -> tuple[Any, Usage]:
    path = Path(path)
    if not path.is_file():
        raise HarnessError(f"released {NOUNS[kind]} not found: {path}")
    allowed = sorted({_dotted(a) for a in allowed})
    with tempfile.TemporaryDirectory(prefix="itr-reader-") as tmp:
        try:
            code, usage = run_bounded("methods.untrusted.reader", [kind, str(path.resolve()), tmp, *allowed],
                                      limits, Path(tmp))
        except BoundExceeded as exc:
            raise UntrustedFileError(f"{path}: reading it stopped: {exc.what}; nothing in it was run",
                                     exc.usage) from None
        status, result = Path(tmp) / "status.json", Path(tmp) / "result.json"
        if code != 0 or not result.is_file():
            try:
                said = json.loads(status.read_text(encoding="utf-8")) if status.is_file() else {}
            except (ValueError, OSError):
                said = {}
            said = said if isinstance(said, dict) else {}
            if "refused" in said:
                raise UntrustedFileError(_refusal(kind, path, str(said["refused"]), allowed), usage)
            raise UntrustedFileError(f"{path}: {UNREADABLE[kind]} ({said.get('unreadable', 'no result')})", usage)
        if result.stat().st_size > limits.memory_mb * (1 << 20):
            raise UntrustedFileError(f"{path}: its reader handed back more than untrusted_files.memory_mb", usage)
        try:
            return decode(json.loads(result.read_text(encoding="utf-8"))), usage
        except (MalformedResult, ValueError, RecursionError) as exc:
            raise UntrustedFileError(f"{path}: its reader handed back malformed data ({exc})", usage) from None


def _refusal(kind: str, path: Path, what: str, allowed: list[str]) -> str:
    if kind == "checkpoint" and what.startswith("refused global "):
        return (f"{path}: refused to load: it names {what.removeprefix('refused global ')}, which a checkpoint of "
                f"this kind never holds; nothing in it was run")
    where = f"; allowed: {', '.join(allowed) or 'plain data only'}" if kind == "pickle" else ""
    return f"{path}: refused to load ({what}{where}); nothing in it was run"


def load_pickle(path: str | Path, allowed: Iterable[str], limits: ReaderLimits) -> Any:
    """A pickle of plain data and objects of the ``allowed`` classes (dotted names), read in a
    bounded child; a refused global, opcode or value, a stop by a bound, or any other failure is
    one line naming the file."""
    return _read("pickle", path, allowed, limits)[0]


def load_json(path: str | Path, limits: ReaderLimits) -> Any:
    """A JSON document from the internet, read in a bounded child (nesting, integer length and size
    bounded); any failure is one line naming the file."""
    return _read("json", path, (), limits)[0]


# the classes a checkpoint may hold besides tensors, as the plain values they become here
RECONSTRUCT = {"argparse.Namespace": argparse.Namespace}


def _views(tree: Any, where: str = "") -> Iterable[tuple[str, TensorView]]:
    """Every tensor view in ``tree`` with its place (``model[0]['fc.weight']``)."""
    if isinstance(tree, TensorView):
        yield where or "(the file)", tree
    elif isinstance(tree, dict):
        for key, value in tree.items():
            yield from _views(value, f"{where}[{key!r}]")
    elif isinstance(tree, (list, tuple)):
        for i, value in enumerate(tree):
            yield from _views(value, f"{where}[{i}]")
    elif isinstance(tree, PickledObject):
        yield from _views(tree.state, f"{where}.{tree.cls}")


def _read_view(f, view: TensorView):
    import torch  # here, not at module level: the DAG build imports the importers' table, never torch

    dtype = getattr(torch, "uint8" if view.dtype == "bool" else view.dtype)
    if view.span == 0:
        return torch.empty(view.shape, dtype=getattr(torch, view.dtype))
    size = ELEMENT_SIZE[view.dtype]
    buffer = bytearray(view.span * size)
    f.seek(view.file_offset + view.offset * size)
    if f.readinto(buffer) != len(buffer):
        raise OSError("the file ended inside a tensor")
    flat = torch.frombuffer(buffer, dtype=dtype)
    tensor = torch.as_strided(flat, view.shape, view.stride).contiguous()
    return tensor.ne(0) if view.dtype == "bool" else tensor


def _materialise(tree: Any, tensors: dict[int, Any]) -> Any:
    if isinstance(tree, TensorView):
        return tensors[id(tree)]
    if isinstance(tree, dict):
        return {k: _materialise(v, tensors) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_materialise(v, tensors) for v in tree]
    if isinstance(tree, tuple):
        return tuple(_materialise(v, tensors) for v in tree)
    if isinstance(tree, PickledObject):
        if not isinstance(tree.state, dict) or not all(type(k) is str for k in tree.state) or tree.args:
            raise PickleRefused(f"its {tree.cls} holds something other than named values")
        obj = RECONSTRUCT[tree.cls]()
        vars(obj).update({k: _materialise(v, tensors) for k, v in tree.state.items()})
        return obj
    return tree


def load_checkpoint(path: str | Path, allowed: Iterable[str | type], limits: ReaderLimits) -> Any:
    """A ``torch.save`` file (zip or legacy layout) of tensors, plain containers and objects of the
    ``allowed`` classes (of ``RECONSTRUCT``), read in a bounded child; its tensors are then read
    from the file, each checked first (real dtype, a view of distinct elements inside the file)
    and all of them together at most the file's size (alike views of one storage read once, given
    as one tensor). Anything else is refused in one line."""
    allowed = {_dotted(a) for a in allowed}
    unknown = sorted(allowed - set(RECONSTRUCT))
    if unknown:
        raise ValueError(f"load_checkpoint cannot give {unknown} as plain values (RECONSTRUCT)")
    tree, usage = _read("checkpoint", path, allowed, limits)
    path = Path(path)
    file_size = os.path.getsize(path)
    views = list(_views(tree))
    try:
        for name, view in views:
            check_view(view, file_size, name)
        # one module saved under two names (VSE-infinity's CNN: resnet.* and base.* / top.*) stores
        # its tensors once and views them twice, alike: such a view is read once and given as one tensor
        distinct = {view: None for _, view in views}
        total = sum(view.span * ELEMENT_SIZE[view.dtype] for view in distinct)
        if total > file_size:
            raise PickleRefused(f"its {len(distinct)} distinct tensors would read {total} bytes, more than the "
                                f"file's {file_size} (views that share their stored bytes)")
        with open(path, "rb") as f:
            read = {view: _read_view(f, view) for view in distinct}
        return _materialise(tree, {id(view): read[view] for _, view in views})
    except PickleRefused as exc:
        raise UntrustedFileError(f"{path}: refused to load ({exc}); nothing in it was run", usage) from None
