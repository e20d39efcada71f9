"""Files from the internet, loaded without executing code.

A checkpoint is read by ``torch.load(weights_only=True)``, whose unpickler builds tensors and
plain containers only; the few other classes a code base's checkpoint holds (its options as an
``argparse.Namespace``, a numpy scalar) must be named in an allow-list by the importer. A pickled
vocabulary is read by ``RestrictedUnpickler``: the objects of the allowed classes become plain
data (``PickledObject``: the class's dotted name and its state), nothing of theirs is called, and
any other global (a function, a class, ``os.system``) is refused by name before anything runs.
Opcodes that reach objects without naming a global (EXT*, PERSID) are refused before unpickling,
and the result is checked to hold plain data only.
"""
from __future__ import annotations

import _compat_pickle
import io
import pickle
import pickletools
import re
from pathlib import Path
from typing import Any, Iterable

import torch

from methods.errors import HarnessError, first_line

REFUSED_GLOBAL = re.compile(r"GLOBAL (\S+)")
WEIGHTS_UNPICKLER_CAUSE = re.compile(r"WeightsUnpickler error:[ \t]*([^\n]+)")


def load_checkpoint(path: str | Path, allowed_globals: Iterable[Any] = ()) -> Any:
    """A ``torch.save`` file (zip or legacy format) of tensors, plain containers and the
    ``allowed_globals`` (classes or functions the file may name); anything else is refused."""
    path = Path(path)
    if not path.is_file():
        raise HarnessError(f"released checkpoint not found: {path}")
    try:
        with torch.serialization.safe_globals(list(allowed_globals)):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        refused = REFUSED_GLOBAL.search(str(exc))
        if refused:
            raise HarnessError(f"{path}: refused to load: it names {refused.group(1)}, which a checkpoint of this "
                               f"kind never holds; nothing in it was run") from None
        cause = WEIGHTS_UNPICKLER_CAUSE.search(str(exc))   # torch wraps the cause in a page of advice
        raise HarnessError(f"{path}: not a readable PyTorch checkpoint "
                           f"({cause.group(1).strip() if cause else first_line(exc)})") from None
    except Exception as exc:   # truncated, not a zip, a tensor storage that is not one: one line all the same
        raise HarnessError(f"{path}: not a readable PyTorch checkpoint ({type(exc).__name__}: {first_line(exc)})") from None


class PickledObject:
    """An object of an allowed class from a pickle, as plain data: ``cls`` (its dotted name),
    ``state`` (what its ``__dict__`` held, or the state the pickle gave it) and ``args`` (what its
    constructor would have been called with). Each allowed class is a subclass made by
    ``RestrictedUnpickler.find_class``: pickle's NEWOBJ, REDUCE and BUILD then run only this code."""

    cls = ""
    state: Any = None
    args: tuple = ()

    def __init__(self, *args: Any):
        self.args = args

    def __setstate__(self, state: Any) -> None:   # pickle's BUILD
        self.state = state

    def __repr__(self) -> str:
        return f"PickledObject({self.cls}, state={self.state!r}, args={self.args!r})"


class RefusedPickle(pickle.UnpicklingError):
    """The pickle names something a file of plain data never needs: a global off the allow-list,
    an extension code or a persistent id (both resolve objects outside ``find_class``)."""


class _Sealed(type):
    """The type of the classes ``find_class`` makes: BUILD on the class itself cannot rewrite it."""

    def __setattr__(cls, name: str, value: Any) -> None:
        raise pickle.UnpicklingError(f"the pickle sets attribute {name!r} of class {cls.cls}")


class _StandIn:
    """A function pickle may name (copyreg's helpers), as an object without attributes to set:
    BUILD on it fails instead of changing it for the rest of the process."""

    __slots__ = ("_call", "_name")

    def __init__(self, call, name: str):
        object.__setattr__(self, "_call", call)
        object.__setattr__(self, "_name", name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise pickle.UnpicklingError(f"the pickle sets attribute {name!r} of {self._name}")

    def __call__(self, *args: Any) -> Any:
        return self._call(*args)


def _is_allowed_class(cls: Any) -> bool:
    return isinstance(cls, _Sealed) and issubclass(cls, PickledObject)


def _new_object(cls: Any, *args: Any) -> PickledObject:   # copyreg.__newobj__ (protocol 2+ via REDUCE)
    if not _is_allowed_class(cls):
        raise pickle.UnpicklingError(f"__newobj__ of {cls!r}")
    return cls(*args)


def _reconstructor(cls: Any, base: Any, state: Any) -> PickledObject:   # copyreg._reconstructor (protocols 0, 1)
    if not _is_allowed_class(cls) or base is not object or state is not None:
        raise pickle.UnpicklingError(f"_reconstructor of {cls!r} on {base!r}")
    return cls()


# opcodes that fetch an object without find_class: EXT* from copyreg's process-wide extension
# cache (filled by whatever else the process registered), *PERSID from persistent_load
REFUSED_OPCODES = frozenset({"EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID"})
PLAIN_TYPES = (type(None), bool, int, float, complex, str, bytes, bytearray, PickledObject)
CONTAINERS = (list, tuple, set, frozenset)


def check_opcodes(data: bytes) -> None:
    """Every opcode of the pickle read without running it; one that resolves an object outside
    ``find_class`` is refused by name."""
    for opcode, _, pos in pickletools.genops(data):
        if opcode.name in REFUSED_OPCODES:
            raise RefusedPickle(f"refused opcode {opcode.name} at byte {pos}")


def check_plain(obj: Any) -> None:
    """The unpickled result holds plain data and ``PickledObject``s only (a stand-in callable or a
    class left in the result would be code the caller might call)."""
    seen, todo = set(), [obj]
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, CONTAINERS):
            todo.extend(item)
        elif isinstance(item, PickledObject):
            todo.extend((item.state, item.args))
        elif not isinstance(item, PLAIN_TYPES) or isinstance(item, type):
            raise RefusedPickle(f"refused result: it holds {type(item).__name__} {item!r:.60}")


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles plain data and objects of ``allowed`` classes (dotted names, e.g.
    ``vocab.Vocabulary``) as ``PickledObject``; any other global is refused with its name."""

    SAFE = {("copyreg", "_reconstructor"): _StandIn(_reconstructor, "copyreg._reconstructor"),
            ("copyreg", "__newobj__"): _StandIn(_new_object, "copyreg.__newobj__"),
            ("builtins", "object"): object}

    def __init__(self, file: io.BufferedIOBase, allowed: Iterable[str]):
        # Python 2 pickles: str was bytes (UTF-8 text in these vocabularies); module names are mapped
        super().__init__(file, fix_imports=True, encoding="utf-8")
        self.allowed = frozenset(allowed)
        self._classes: dict[str, type] = {}

    def find_class(self, module: str, name: str) -> Any:
        # Python 2 names (copy_reg, __builtin__), as pickle's own find_class maps them
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        if (module, name) in self.SAFE:
            return self.SAFE[(module, name)]
        dotted = f"{module}.{name}"
        if dotted in self.allowed:
            if dotted not in self._classes:
                self._classes[dotted] = _Sealed(name, (PickledObject,), {"cls": dotted})
            return self._classes[dotted]
        raise RefusedPickle(f"refused global {dotted}")

    def persistent_load(self, pid: Any) -> Any:   # unreachable after check_opcodes; refused all the same
        raise RefusedPickle("refused persistent id")


def load_pickle(path: str | Path, allowed: Iterable[str]) -> Any:
    """A pickle file read with ``RestrictedUnpickler``; a refused global, opcode or result is one
    line naming it, any other failure one line saying the file is not a readable pickle."""
    path, allowed = Path(path), frozenset(allowed)
    if not path.is_file():
        raise HarnessError(f"released vocabulary not found: {path}")
    try:
        data = path.read_bytes()
        check_opcodes(data)
        loaded = RestrictedUnpickler(io.BytesIO(data), allowed).load()
        check_plain(loaded)
        return loaded
    except RefusedPickle as exc:
        raise HarnessError(f"{path}: refused to load ({first_line(exc)}; allowed: "
                           f"{', '.join(sorted(allowed)) or 'plain data only'}); nothing in it was run") from None
    except Exception as exc:   # truncated, malformed, too deep, too large: all the same to the reader
        raise HarnessError(f"{path}: not a readable pickle ({type(exc).__name__}: {first_line(exc)})") from None
