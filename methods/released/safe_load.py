"""Files from the internet, loaded without executing code.

A checkpoint is read by ``torch.load(weights_only=True)``, whose unpickler builds tensors and
plain containers only; the few other classes a code base's checkpoint holds (its options as an
``argparse.Namespace``, a numpy scalar) must be named in an allow-list by the importer. A pickled
vocabulary is read by ``RestrictedUnpickler``: the objects of the allowed classes become plain
data (``PickledObject``: the class's dotted name and its state), nothing is called, and any other
global (a function, a class, ``os.system``) is refused by name before anything runs.
"""
from __future__ import annotations

import _compat_pickle
import io
import pickle
import re
from pathlib import Path
from typing import Any, Iterable

import torch

from methods.errors import HarnessError, first_line

REFUSED_GLOBAL = re.compile(r"GLOBAL (\S+)")
WEIGHTS_UNPICKLER_CAUSE = re.compile(r"WeightsUnpickler error:\s*(.+?)\n\n", re.S)


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
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
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


def _new_object(cls: Any, *args: Any) -> PickledObject:   # copyreg.__newobj__ (protocol 2+ via REDUCE)
    if not (isinstance(cls, type) and issubclass(cls, PickledObject)):
        raise pickle.UnpicklingError(f"__newobj__ of {cls!r}")
    return cls(*args)


def _reconstructor(cls: Any, base: Any, state: Any) -> PickledObject:   # copyreg._reconstructor (protocols 0, 1)
    if not (isinstance(cls, type) and issubclass(cls, PickledObject)) or base is not object or state is not None:
        raise pickle.UnpicklingError(f"_reconstructor of {cls!r} on {base!r}")
    return cls()


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles plain data and objects of ``allowed`` classes (dotted names, e.g.
    ``vocab.Vocabulary``) as ``PickledObject``; any other global is refused with its name."""

    SAFE = {("copyreg", "_reconstructor"): _reconstructor, ("copyreg", "__newobj__"): _new_object,
            ("builtins", "object"): object}

    def __init__(self, file: io.BufferedIOBase, allowed: Iterable[str]):
        # Python 2 pickles: str was bytes (UTF-8 text in these vocabularies); module names are mapped
        super().__init__(file, fix_imports=True, encoding="utf-8")
        self.allowed = set(allowed)

    def find_class(self, module: str, name: str) -> Any:
        # Python 2 names (copy_reg, __builtin__), as pickle's own find_class maps them
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        if (module, name) in self.SAFE:
            return self.SAFE[(module, name)]
        if f"{module}.{name}" in self.allowed:
            return type(name, (PickledObject,), {"cls": f"{module}.{name}"})
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def load_pickle(path: str | Path, allowed: Iterable[str]) -> Any:
    """A pickle file read with ``RestrictedUnpickler``; a refused global is one line naming it."""
    path = Path(path)
    if not path.is_file():
        raise HarnessError(f"released vocabulary not found: {path}")
    try:
        with open(path, "rb") as f:
            return RestrictedUnpickler(f, allowed).load()
    except pickle.UnpicklingError as exc:
        raise HarnessError(f"{path}: refused to load ({first_line(exc)}; allowed: "
                           f"{', '.join(sorted(allowed)) or 'plain data only'}); nothing in it was run") from None
    except (EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError, UnicodeDecodeError) as exc:
        raise HarnessError(f"{path}: not a readable pickle ({type(exc).__name__}: {first_line(exc)})") from None
