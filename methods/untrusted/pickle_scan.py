"""A pickle's opcodes read without running them, before any unpickler allocates what they ask for.

``scan_pickle`` walks the opcodes (``pickletools.genops``) with a model of the unpickler's stack
that tracks, for every value, how deeply containers nest in it and, for strings, their text. It
refuses, each by name and byte offset:

- a global off the caller's allow-list (``GLOBAL``, ``INST``, and ``STACK_GLOBAL``, whose module
  and name must be strings the pickle itself pushed: a name computed at load time is refused);
- an opcode the caller refuses (``EXT*`` fetch objects from copyreg's process-wide cache, the
  ``PERSID`` opcodes call ``persistent_load``; out-of-band buffers);
- a memo index beyond the number of opcodes read so far: an unpickler sizes its memo by the
  largest index (C pickle: 16 bytes per unit), so a 9-byte ``LONG_BINPUT`` would ask for gigabytes,
  while a pickler numbers its memo entries from 0 in order;
- containers nested deeper than ``MAX_NESTING``: CPython hashes a nested tuple recursively in C,
  so a 200,000-deep tuple used as a dict key crashes the process (no Python exception).

Legitimate files nest about ten levels deep (a checkpoint's tensor inside its rebuild call inside a
state dict inside a list inside a dict), a vocabulary four.
"""
from __future__ import annotations

import _compat_pickle
import pickletools
from dataclasses import dataclass
from typing import IO, Callable

MAX_NESTING = 100


class PickleRefused(Exception):
    """The pickle does something a file of plain data never needs; the message names it."""


@dataclass
class _Value:
    """What the scan knows of one value on the modelled stack: how deep its containers nest, and
    its text if it is a string constant (``STACK_GLOBAL`` reads two). Mutable, and shared between
    the stack and the memo, as the unpickler shares the object: appending to a memoised list
    deepens every reference to it."""

    depth: int = 0
    text: str | None = None


_MARK = object()
# opcodes that push one constant (strings keep their text)
_CONSTANTS = frozenset({
    "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "STRING", "BINSTRING", "SHORT_BINSTRING",
    "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8", "UNICODE", "SHORT_BINUNICODE", "BINUNICODE",
    "BINUNICODE8", "FLOAT", "BINFLOAT", "NONE", "NEWTRUE", "NEWFALSE",
})
_TEXT = frozenset({"UNICODE", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"})
_EMPTY = frozenset({"EMPTY_LIST", "EMPTY_DICT", "EMPTY_TUPLE", "EMPTY_SET"})
_FROM_MARK = frozenset({"LIST", "TUPLE", "DICT", "FROZENSET", "OBJ"})
_INTO_TARGET_FROM_MARK = frozenset({"APPENDS", "SETITEMS", "ADDITEMS"})
_TUPLES = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}
_GETS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_PERSIDS = frozenset({"PERSID", "BINPERSID"})
_NOTHING = frozenset({"PROTO", "FRAME", "READONLY_BUFFER"})
EXTENSION_OPCODES = frozenset({"EXT1", "EXT2", "EXT4"})


def dotted_global(module: str, name: str) -> str:
    """``module.name`` as Python 3 names it (a Python 2 pickle says ``copy_reg``, ``__builtin__``),
    the mapping ``pickle.Unpickler.find_class`` applies with ``fix_imports``."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        module, name = _compat_pickle.NAME_MAPPING[(module, name)]
    module = _compat_pickle.IMPORT_MAPPING.get(module, module)
    return f"{module}.{name}"


class _Machine:
    def __init__(self, allowed: Callable[[str], bool], refused_opcodes: frozenset[str]):
        self.allowed, self.refused_opcodes = allowed, refused_opcodes
        self.stack: list = []
        self.marks: list[int] = []
        self.memo: dict[int, _Value] = {}
        self.opcodes = 0

    def refuse(self, what: str, pos: int) -> None:
        raise PickleRefused(f"{what} at byte {pos}")

    def pop(self, pos: int) -> _Value:
        if not self.stack or (self.marks and self.marks[-1] == len(self.stack)):
            self.refuse("an opcode that pops an empty stack", pos)
        return self.stack.pop()

    def pop_mark(self, pos: int) -> list[_Value]:
        if not self.marks:
            self.refuse("an opcode that needs a MARK without one", pos)
        start = self.marks.pop()
        items, self.stack[start:] = self.stack[start:], []
        return items

    def push(self, value: _Value, pos: int) -> None:
        self.check_depth(value, pos)
        self.stack.append(value)

    def check_depth(self, value: _Value, pos: int) -> None:
        if value.depth > MAX_NESTING:
            self.refuse(f"containers nested deeper than {MAX_NESTING} levels", pos)

    def deepen(self, target: _Value, items: list[_Value], pos: int) -> None:
        target.depth = max(target.depth, 1 + max((i.depth for i in items), default=0))
        self.check_depth(target, pos)

    def top(self, pos: int) -> _Value:
        if not self.stack or (self.marks and self.marks[-1] == len(self.stack)):
            self.refuse("an opcode that needs a value on an empty stack", pos)
        return self.stack[-1]

    def check_global(self, module: str, name: str, pos: int) -> None:
        dotted = dotted_global(module, name)
        if not self.allowed(dotted):
            raise PickleRefused(f"refused global {dotted}")

    def step(self, name: str, arg, pos: int) -> bool:
        """One opcode; True at STOP."""
        self.opcodes += 1
        if name in self.refused_opcodes or name in EXTENSION_OPCODES or name == "NEXT_BUFFER":
            raise PickleRefused(f"refused opcode {name} at byte {pos}")
        if name == "STOP":
            self.pop(pos)
            return True
        if not (self.stack_opcode(name, arg, pos) or self.object_opcode(name, arg, pos)):
            raise PickleRefused(f"refused opcode {name} at byte {pos}")
        return False

    def stack_opcode(self, name: str, arg, pos: int) -> bool:
        """Constants, containers, marks and the stack's own opcodes; False for any other."""
        if name in _CONSTANTS:
            self.push(_Value(0, arg if name in _TEXT else None), pos)
        elif name in _EMPTY:
            self.push(_Value(1), pos)
        elif name == "MARK":
            self.marks.append(len(self.stack))
        elif name in _FROM_MARK:
            items = self.pop_mark(pos)
            self.push(_Value(1 + max((i.depth for i in items), default=0)), pos)
        elif name in _INTO_TARGET_FROM_MARK:
            items = self.pop_mark(pos)
            self.deepen(self.top(pos), items, pos)
        elif name == "APPEND":
            item = self.pop(pos)
            self.deepen(self.top(pos), [item], pos)
        elif name == "SETITEM":
            value, key = self.pop(pos), self.pop(pos)
            self.deepen(self.top(pos), [key, value], pos)
        elif name in _TUPLES:
            items = [self.pop(pos) for _ in range(_TUPLES[name])]
            self.push(_Value(1 + max(i.depth for i in items)), pos)
        elif name == "POP":
            if self.marks and self.marks[-1] == len(self.stack):
                self.marks.pop()   # pickle's POP of an empty frame drops the mark
            else:
                self.pop(pos)
        elif name == "POP_MARK":
            self.pop_mark(pos)
        elif name == "DUP":
            self.push(self.top(pos), pos)
        elif name not in _NOTHING:
            return False
        return True

    def object_opcode(self, name: str, arg, pos: int) -> bool:
        """The memo, globals and the opcodes that build objects from them; False for any other."""
        if name in _GETS:
            if arg not in self.memo:
                self.refuse(f"memo index {arg} read before it is set", pos)
            self.push(self.memo[arg], pos)
        elif name in _PUTS:
            if arg > self.opcodes - 1:
                self.refuse(f"memo index {arg}, beyond the {self.opcodes - 1} opcodes before it (an unpickler "
                            f"would size its memo for it)", pos)
            self.memo[arg] = self.top(pos)
        elif name == "MEMOIZE":
            self.memo[len(self.memo)] = self.top(pos)
        elif name == "GLOBAL":
            module, _, cls = arg.partition(" ")
            self.check_global(module, cls, pos)
            self.push(_Value(0), pos)
        elif name == "INST":
            module, _, cls = arg.partition(" ")
            self.check_global(module, cls, pos)
            items = self.pop_mark(pos)
            self.push(_Value(1 + max((i.depth for i in items), default=0)), pos)
        elif name == "STACK_GLOBAL":
            cls, module = self.pop(pos), self.pop(pos)
            if module.text is None or cls.text is None:
                self.refuse("STACK_GLOBAL of a name computed at load time", pos)
            self.check_global(module.text, cls.text, pos)
            self.push(_Value(0), pos)
        elif name in ("REDUCE", "NEWOBJ"):
            args = self.pop(pos)
            self.pop(pos)
            self.push(_Value(1 + args.depth), pos)
        elif name == "BUILD":
            state = self.pop(pos)
            self.deepen(self.top(pos), [state], pos)
        elif name == "NEWOBJ_EX":
            kwargs, args = self.pop(pos), self.pop(pos)
            self.pop(pos)
            self.push(_Value(1 + max(args.depth, kwargs.depth)), pos)
        elif name in _PERSIDS:   # only when the caller allows them (a checkpoint's storages)
            pid = _Value(0) if name == "PERSID" else self.pop(pos)
            self.push(_Value(1 + pid.depth), pos)
        else:
            return False
        return True


def scan_pickle(source: bytes | IO[bytes], allowed: Callable[[str], bool],
                refused_opcodes: frozenset[str] = frozenset({"PERSID", "BINPERSID"})) -> int:
    """Scan one pickle (``source``: its bytes, or a file positioned at it, left after its STOP);
    ``allowed(dotted_name)`` says which globals it may name. Returns the number of opcodes; raises
    ``PickleRefused`` naming what it refuses, ``ValueError`` for a malformed or truncated pickle."""
    machine = _Machine(allowed, refused_opcodes)
    for opcode, arg, pos in pickletools.genops(source):
        if machine.step(opcode.name, arg, pos if pos is not None else -1):
            return machine.opcodes
    raise ValueError("the pickle ends without STOP")
