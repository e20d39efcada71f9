"""What the reader's child process hands its parent: plain data as JSON, nothing that runs.

The child encodes what it read (``encode``) and the parent decodes it (``decode``), checking every
value again: the parent trusts no structure it did not check, not even its own child's, which
parsed a hostile file. Values are ``None``, booleans, integers of at most 64 bits, floats, strings,
lists, tuples, dicts whose keys are strings or integers, ``PickledObject``s (an allowed class's
dotted name and state) and ``TensorView``s: a tensor as it is stored in the file (dtype, shape,
strides, the byte offset and element count of its storage), whose bytes the parent reads from the
file itself once the view is checked (``check_view``). Nothing else is encoded: a bytearray, a set,
a complex number, a structure that contains itself or nests deeper than ``MAX_NESTING`` are
refused by name.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from methods.untrusted.pickle_scan import MAX_NESTING, PickleRefused
from methods.untrusted.unpickler import PickledObject

# more values than any legitimate file holds (a 100,000-word vocabulary has about 400,000)
MAX_VALUES = 5_000_000
MAX_DIMS = 16
INT_BITS = 64
# the dtypes a storage of a torch.save file may have, by their torch names, with element sizes
ELEMENT_SIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
                "int8": 1, "uint8": 1, "bool": 1}


@dataclass(frozen=True)
class TensorView:
    """A dense tensor as a torch.save file stores it: ``numel`` elements of ``dtype`` at byte
    ``file_offset`` of the file (its storage), viewed from element ``offset`` with ``shape`` and
    ``stride`` (in elements)."""

    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    file_offset: int
    numel: int

    @property
    def span(self) -> int:
        """The stored elements from its first element to its last (what reading it reads); 0 for an
        empty tensor."""
        if math.prod(self.shape) == 0:
            return 0
        return sum((size - 1) * stride for size, stride in zip(self.shape, self.stride)) + 1


def _is_int(x: Any) -> bool:
    return type(x) is int


def check_view(view: TensorView, file_size: int, name: str) -> None:
    """The view is of a known dtype, its storage lies inside the file, and its elements are
    distinct elements of its storage (no stride-0 or overlapping view, which a copy would multiply
    beyond the file), all before any byte is read. ``name`` says which tensor, for the message."""
    if view.dtype not in ELEMENT_SIZE:
        raise PickleRefused(f"tensor {name} has dtype {view.dtype}, not a real dtype of a model's weights")
    ints = (view.offset, view.file_offset, view.numel, *view.shape, *view.stride)
    if not all(_is_int(x) and x >= 0 for x in ints) or len(view.shape) != len(view.stride):
        raise PickleRefused(f"tensor {name} has a malformed view (shape {view.shape}, stride {view.stride}, "
                            f"offset {view.offset})")
    if len(view.shape) > MAX_DIMS:
        raise PickleRefused(f"tensor {name} has {len(view.shape)} dimensions")
    if view.file_offset + view.numel * ELEMENT_SIZE[view.dtype] > file_size:
        raise PickleRefused(f"tensor {name}'s storage ({view.numel} elements at byte {view.file_offset}) ends "
                            f"beyond the file ({file_size} bytes)")
    if view.span == 0:
        return
    reach = 0   # the largest element offset the dimensions sorted so far reach
    for size, stride in sorted(((s, t) for s, t in zip(view.shape, view.stride) if s > 1), key=lambda d: d[1]):
        if stride <= reach:
            raise PickleRefused(f"tensor {name} is an overlapping view (shape {view.shape}, stride {view.stride}): "
                                f"its elements repeat stored ones, so a copy would hold more than the file")
        reach += (size - 1) * stride
    if view.offset + view.span > view.numel:
        raise PickleRefused(f"tensor {name} (shape {view.shape}, stride {view.stride}, offset {view.offset}) "
                            f"reaches beyond its storage of {view.numel} elements")


class _Encoder:
    def __init__(self, kinds: str):
        self.kinds = kinds   # what the file is, for the message ("a vocabulary", "a checkpoint")
        self.values = 0
        self.open: set[int] = set()   # the containers being encoded: one met again contains itself

    def refuse(self, what: str) -> None:
        raise PickleRefused(f"it holds {what}, which {self.kinds} never holds")

    def encode(self, obj: Any, depth: int) -> Any:
        self.values += 1
        if self.values > MAX_VALUES:
            raise PickleRefused(f"it holds more than {MAX_VALUES:,} values")
        if depth > MAX_NESTING:
            raise PickleRefused(f"containers nested deeper than {MAX_NESTING} levels")
        if obj is None or type(obj) in (bool, str):
            return obj
        if type(obj) is int:
            if obj.bit_length() >= INT_BITS:
                self.refuse(f"an integer of {obj.bit_length()} bits")
            return obj
        if type(obj) is float:
            return obj
        if isinstance(obj, TensorView):
            return {"$tensor": [obj.dtype, list(obj.shape), list(obj.stride), obj.offset, obj.file_offset,
                                obj.numel]}
        if not isinstance(obj, (list, tuple, dict, PickledObject)):
            name = type(obj).__name__
            self.refuse(f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}")
        if id(obj) in self.open:
            raise PickleRefused("it holds a structure that contains itself")
        self.open.add(id(obj))
        try:
            if isinstance(obj, PickledObject):
                return {"$object": obj.cls, "state": self.encode(obj.state, depth + 1),
                        "args": self.encode(tuple(obj.args), depth + 1)}
            if isinstance(obj, dict):
                pairs = []
                for key, value in obj.items():
                    if type(key) not in (str, int):
                        self.refuse(f"a dict key of type {type(key).__name__}")
                    pairs.append([self.encode(key, depth + 1), self.encode(value, depth + 1)])
                return {"$dict": pairs}
            items = [self.encode(item, depth + 1) for item in obj]
            return items if type(obj) is list else {"$tuple": items}
        finally:
            self.open.discard(id(obj))


def encode(obj: Any, kinds: str) -> Any:
    """``obj`` as a JSON document of plain values; ``kinds`` (e.g. "a vocabulary") for the message
    of a value no such file holds."""
    return _Encoder(kinds).encode(obj, 0)


class MalformedResult(Exception):
    """The reader's child handed back something its encoder never writes."""


def decode(doc: Any, depth: int = 0) -> Any:
    """The values ``encode`` wrote, each checked again; ``TensorView``s stay views (unchecked
    against the file: ``check_view``)."""
    if depth > MAX_NESTING + 2:
        raise MalformedResult("nested too deeply")
    if doc is None or type(doc) in (bool, str, float):
        return doc
    if type(doc) is int:
        if doc.bit_length() >= INT_BITS:
            raise MalformedResult("an integer beyond 64 bits")
        return doc
    if type(doc) is list:
        return [decode(item, depth + 1) for item in doc]
    if type(doc) is not dict or len(doc) not in (1, 3):
        raise MalformedResult(f"a {type(doc).__name__} where a value was expected")
    if set(doc) == {"$tuple"} and type(doc["$tuple"]) is list:
        return tuple(decode(item, depth + 1) for item in doc["$tuple"])
    if set(doc) == {"$dict"} and type(doc["$dict"]) is list:
        out = {}
        for pair in doc["$dict"]:
            if type(pair) is not list or len(pair) != 2 or type(pair[0]) not in (str, int):
                raise MalformedResult("a dict entry that is not a (str or int key, value) pair")
            out[pair[0]] = decode(pair[1], depth + 1)
        return out
    if set(doc) == {"$tensor"} and type(doc["$tensor"]) is list and len(doc["$tensor"]) == 6:
        dtype, shape, stride, offset, file_offset, numel = doc["$tensor"]
        if type(dtype) is not str or type(shape) is not list or type(stride) is not list:
            raise MalformedResult("a tensor view of malformed fields")
        return TensorView(dtype, tuple(shape), tuple(stride), offset, file_offset, numel)
    if set(doc) == {"$object", "state", "args"} and type(doc["$object"]) is str:
        args = decode(doc["args"], depth + 1)
        if type(args) is not tuple:
            raise MalformedResult("an object whose arguments are not a tuple")
        obj = PickledObject(*args)
        obj.cls, obj.state = doc["$object"], decode(doc["state"], depth + 1)
        return obj
    raise MalformedResult(f"an object with keys {sorted(doc)[:3]}")
