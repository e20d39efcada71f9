"""Numpy scalars in a pickle (a ``np.mean`` saved among a checkpoint's scores) read as the Python
numbers they hold, without numpy: numpy pickles one as ``numpy.core.multiarray.scalar(dtype, raw
bytes)`` (``numpy._core`` since numpy 2), its dtype as ``numpy.dtype(code, False, True)`` with
BUILD state ``(3, byte order, None, None, None, -1, -1, 0)``, and, at pickle protocol 2 (what
``torch.save`` writes), its bytes as ``_codecs.encode(text, 'latin1')``. Only numbers of the
plain dtypes below are built; a structured dtype, an object or string dtype, bytes of another
length or another codec is refused by name."""
from __future__ import annotations

import pickle
import struct
from typing import Any

# numpy's dtype codes of plain numbers -> struct's format letters
FORMATS = {"b1": "?", "i1": "b", "u1": "B", "i2": "h", "u2": "H", "i4": "i", "u4": "I", "i8": "q", "u8": "Q",
           "f2": "e", "f4": "f", "f8": "d"}
BYTE_ORDERS = {"<": "<", ">": ">", "|": "<", "=": "="}   # '|': not applicable (one byte)
LATIN1 = ("latin1", "latin-1", "iso-8859-1")


class Refused(pickle.UnpicklingError):
    """What a numpy scalar of plain numbers never holds."""


class NumpyDType:
    """``numpy.dtype(code, align, copy)`` of a pickled scalar, as data: its code and byte order."""

    __slots__ = ("code", "order")

    def __init__(self, code: Any, align: Any = False, copy: Any = True):
        if not isinstance(code, str) or code not in FORMATS:
            raise Refused(f"refused numpy dtype {code!r} (numbers of dtypes {', '.join(FORMATS)} only)")
        object.__setattr__(self, "code", code)
        object.__setattr__(self, "order", "=")

    def __setstate__(self, state: Any) -> None:   # pickle's BUILD
        if (not isinstance(state, tuple) or len(state) < 5 or state[1] not in BYTE_ORDERS
                or any(part is not None for part in state[2:5])):
            raise Refused(f"refused numpy dtype state {state!r:.80} (a structured or sub-array dtype)")
        object.__setattr__(self, "order", state[1])

    def __setattr__(self, name: str, value: Any) -> None:
        raise pickle.UnpicklingError(f"the pickle sets attribute {name!r} of a numpy dtype")


def dtype(code: Any, align: Any = False, copy: Any = True) -> NumpyDType:
    return NumpyDType(code, align, copy)


def scalar(kind: Any, data: Any = None) -> bool | int | float:
    """``numpy.core.multiarray.scalar(dtype, raw bytes)`` as the Python number it holds."""
    if not isinstance(kind, NumpyDType) or not isinstance(data, bytes):
        raise Refused(f"refused numpy scalar of {type(kind).__name__} and {type(data).__name__} "
                      f"(a dtype of numbers and their bytes only)")
    form = BYTE_ORDERS[kind.order] + FORMATS[kind.code]
    if len(data) != struct.calcsize(form):
        raise Refused(f"refused numpy scalar of dtype {kind.code} with {len(data)} bytes")
    return struct.unpack(form, data)[0]


def latin1_bytes(text: Any, encoding: Any = "utf-8") -> bytes:
    """``_codecs.encode(text, 'latin1')``: how protocol 2 pickles bytes (a scalar's)."""
    if not isinstance(text, str) or encoding not in LATIN1:
        raise Refused(f"refused _codecs.encode of {type(text).__name__} to {encoding!r} (latin1 text only)")
    return text.encode("latin1")


GLOBALS = {"numpy.dtype": dtype, "numpy.core.multiarray.scalar": scalar, "numpy._core.multiarray.scalar": scalar,
           "_codecs.encode": latin1_bytes}
