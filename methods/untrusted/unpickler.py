"""An unpickler that builds plain data only: objects of allowed classes become ``PickledObject``
(the class's dotted name and its state), nothing of theirs is called, and any other global (a
function, a class, ``os.system``) is refused by name before anything runs; a numpy scalar is the
number it holds (``numpy_scalars``). It runs in the reader's
child process (``methods.untrusted.reader``), after ``pickle_scan`` has read every opcode.
"""
from __future__ import annotations

import io
import pickle
from typing import Any, Iterable

from methods.untrusted import numpy_scalars
from methods.untrusted.pickle_scan import dotted_global


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


class StandIn:
    """A function pickle may name, as an object without attributes to set: BUILD on it fails
    instead of changing it for the rest of the process."""

    __slots__ = ("_call", "_name")

    def __init__(self, call, name: str):
        object.__setattr__(self, "_call", call)
        object.__setattr__(self, "_name", name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise pickle.UnpicklingError(f"the pickle sets attribute {name!r} of {self._name}")

    def __call__(self, *args: Any) -> Any:
        return self._call(*args)


def is_allowed_class(cls: Any) -> bool:
    return isinstance(cls, _Sealed) and issubclass(cls, PickledObject)


def _new_object(cls: Any, *args: Any) -> PickledObject:   # copyreg.__newobj__ (protocol 2+ via REDUCE)
    if not is_allowed_class(cls):
        raise pickle.UnpicklingError(f"__newobj__ of {cls!r}")
    return cls(*args)


def _reconstructor(cls: Any, base: Any, state: Any) -> PickledObject:   # copyreg._reconstructor (protocols 0, 1)
    if not is_allowed_class(cls) or base is not object or state is not None:
        raise pickle.UnpicklingError(f"_reconstructor of {cls!r} on {base!r}")
    return cls()


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles plain data and objects of ``allowed`` classes (dotted names, e.g.
    ``vocab.Vocabulary``) as ``PickledObject``; ``extra`` maps more dotted names to stand-ins of
    the caller's (a checkpoint's tensor rebuilders); any other global is refused with its name."""

    SAFE = {"copyreg._reconstructor": StandIn(_reconstructor, "copyreg._reconstructor"),
            "copyreg.__newobj__": StandIn(_new_object, "copyreg.__newobj__"),
            "builtins.object": object,
            # numpy scalars as the Python numbers they hold (methods.untrusted.numpy_scalars)
            **{name: StandIn(call, name) for name, call in numpy_scalars.GLOBALS.items()}}

    def __init__(self, file: io.BufferedIOBase, allowed: Iterable[str], extra: dict[str, Any] | None = None):
        # Python 2 pickles: str was bytes (UTF-8 text in these vocabularies); module names are mapped
        super().__init__(file, fix_imports=True, encoding="utf-8")
        self.allowed = frozenset(allowed)
        self.extra = dict(extra or {})
        self._classes: dict[str, type] = {}

    def find_class(self, module: str, name: str) -> Any:
        dotted = dotted_global(module, name)
        if dotted in self.SAFE:
            return self.SAFE[dotted]
        if dotted in self.extra:
            return self.extra[dotted]
        if dotted in self.allowed:
            if dotted not in self._classes:
                self._classes[dotted] = _Sealed(name, (PickledObject,), {"cls": dotted})
            return self._classes[dotted]
        raise RefusedPickle(f"refused global {dotted}")

    def persistent_load(self, pid: Any) -> Any:   # refused by the opcode scan first; refused all the same
        raise RefusedPickle("refused persistent id")

    def known_global(self, dotted: str) -> bool:
        """Whether ``find_class`` resolves ``dotted`` (the opcode scan's allow-list)."""
        return dotted in self.SAFE or dotted in self.extra or dotted in self.allowed
