"""A ``torch.save`` file read without torch and without running it: its pickle becomes plain data
and every tensor a ``TensorView`` saying where its bytes lie in the file.

Two layouts (torch/serialization.py): the zip archive of PyTorch >= 1.6 (``<archive>/data.pkl``,
one stored record ``<archive>/data/<key>`` per storage, ``<archive>/byteorder``), and the legacy
stream of earlier versions (the magic number, protocol version and system info pickles, the data
pickle, the list of storage keys, then each storage as an int64 element count and its bytes). The
tar layout of PyTorch < 0.1.10 is refused, as ``torch.load(weights_only=True)`` refuses it.

Before anything is unpickled: the zip's records are stored, not compressed (torch writes them
stored; a deflated record would be inflated whole before its size is checked), named inside the
archive folder (no absolute name, no ``..``), each within the file; every pickle is read opcode
by opcode (``pickle_scan``) against the globals a checkpoint may name: the importer's classes
(``argparse.Namespace``), ``collections.OrderedDict``, torch's dense-tensor rebuilders and the
storage and legacy tensor classes of real dtypes. Sparse, quantized, complex, meta and subclassed
tensors, whole pickled modules and any other global are refused by name. The rebuilders are
stand-ins that record a view; a storage is the byte range its record or stream entry holds.
"""
from __future__ import annotations

import io
import os
import pickle
import struct
import tarfile
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterable

from methods.untrusted.pickle_scan import MAX_NESTING, PickleRefused, scan_pickle
from methods.untrusted.plain import ELEMENT_SIZE, TensorView, check_view
from methods.untrusted.unpickler import PickledObject, RestrictedUnpickler, StandIn

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C   # torch.serialization.MAGIC_NUMBER
LEGACY_PROTOCOL = 1001                   # torch.serialization.PROTOCOL_VERSION
ZIP_MAGIC = b"PK\x03\x04"
ZIP_LOCAL_HEADER = 30
# storage and legacy tensor classes by their dtype (torch._storage_classes, torch._tensor_classes)
STORAGE_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
                  "Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8",
                  "Bool": "bool"}


# the longest line a protocol-0 opcode argument may take when scanned from a file
MAX_LINE = 1 << 20


class _Within:
    """A file read no further than its end, for scanning a pickle in place (a legacy stream holds
    the pickle and then the tensors' bytes): an opcode that declares a length the file does not
    hold (a BINUNICODE8 of 800 MB in a 100 KB file) gets what is left, never an allocation of the
    declared length."""

    def __init__(self, f: io.BufferedIOBase, size: int):
        self.f, self.size = f, size

    def left(self) -> int:
        return max(0, self.size - self.f.tell())

    def read(self, n: int = -1) -> bytes:
        return self.f.read(self.left() if n is None or n < 0 else min(n, self.left()))

    def readline(self, limit: int = -1) -> bytes:
        return self.f.readline(min(MAX_LINE, self.left()))

    def tell(self) -> int:
        return self.f.tell()


class StorageRef:
    """A storage the pickle refers to: its dtype, element count and, once known, its file offset
    (a legacy stream gives the offsets after the pickle); ``view`` (element offset, count) for a
    legacy view of a root storage."""

    def __init__(self, key: str, dtype: str, numel: int, view: tuple[int, int] | None = None):
        self.key, self.dtype, self.numel, self.view = key, dtype, numel, view
        self.file_offset: int | None = None
        self.root: StorageRef | None = None


class TensorStub:
    """A tensor the pickle rebuilt, before its storage's file offset is known."""

    def __init__(self, storage: StorageRef, offset: int, shape: tuple, stride: tuple):
        self.storage, self.offset, self.shape, self.stride = storage, offset, shape, stride


class _StorageType:
    """A storage class the pickle names (``torch.FloatStorage``): only its dtype is read."""

    __slots__ = ("dtype",)

    def __init__(self, dtype: str):
        object.__setattr__(self, "dtype", dtype)

    def __setattr__(self, name: str, value: Any) -> None:
        raise pickle.UnpicklingError(f"the pickle sets attribute {name!r} of a storage class")


class _LegacyTensor:
    """A tensor of PyTorch <= 0.3 (``torch.FloatTensor()`` then BUILD with (storage, offset, size,
    stride)): becomes a ``TensorStub`` once its state is set."""

    def __init__(self, dtype: str):
        self.dtype, self.stub = dtype, None

    def __setstate__(self, state: Any) -> None:
        if type(state) is not tuple or len(state) != 4:
            raise pickle.UnpicklingError("a legacy tensor whose state is not (storage, offset, size, stride)")
        self.stub = _stub(*state)
        if self.stub.storage.dtype != self.dtype:
            raise pickle.UnpicklingError(f"a {self.dtype} tensor on a {self.stub.storage.dtype} storage")


class _StateDict(dict):
    """``collections.OrderedDict`` as a plain dict; BUILD's state (a state dict's ``_metadata``:
    module versions) is kept aside and not handed on."""

    def __setstate__(self, state: Any) -> None:
        self.state = state


def _ints(value: Any) -> bool:
    return type(value) is tuple and all(type(x) is int for x in value)


def _stub(storage: Any, offset: Any, shape: Any, stride: Any) -> TensorStub:
    if not isinstance(storage, StorageRef) or type(offset) is not int or not _ints(shape) or not _ints(stride):
        raise pickle.UnpicklingError("a tensor rebuilt from something other than (storage, offset, sizes, strides)")
    return TensorStub(storage, offset, shape, stride)


def _rebuild_tensor(storage, offset, shape, stride) -> TensorStub:   # torch._utils._rebuild_tensor
    return _stub(storage, offset, shape, stride)


def _rebuild_tensor_v2(storage, offset, shape, stride, requires_grad, hooks, metadata=None) -> TensorStub:
    if type(requires_grad) is not bool or (hooks is not None and (not isinstance(hooks, dict) or hooks)) \
            or metadata:
        raise pickle.UnpicklingError("a tensor saved with backward hooks or Python attributes")
    return _stub(storage, offset, shape, stride)


def _rebuild_parameter(data, requires_grad, hooks) -> TensorStub:   # torch._utils._rebuild_parameter
    if not isinstance(data, TensorStub) or type(requires_grad) is not bool or hooks:
        raise pickle.UnpicklingError("a parameter of something other than a tensor, or with backward hooks")
    return data


def _new_state_dict(*args: Any) -> _StateDict:   # collections.OrderedDict(): REDUCE with no arguments
    if args:
        raise pickle.UnpicklingError("an OrderedDict built from arguments")
    return _StateDict()


def _legacy_tensor_class(dtype: str) -> StandIn:
    def new(*args: Any) -> _LegacyTensor:
        if args:
            raise pickle.UnpicklingError("a legacy tensor built from arguments")
        return _LegacyTensor(dtype)
    return StandIn(new, f"a legacy {dtype} tensor class")


def checkpoint_globals() -> dict[str, Any]:
    """The globals a checkpoint of tensors may name, with their stand-ins."""
    out: dict[str, Any] = {
        "collections.OrderedDict": StandIn(_new_state_dict, "collections.OrderedDict"),
        "torch._utils._rebuild_tensor": StandIn(_rebuild_tensor, "torch._utils._rebuild_tensor"),
        "torch._utils._rebuild_tensor_v2": StandIn(_rebuild_tensor_v2, "torch._utils._rebuild_tensor_v2"),
        "torch._utils._rebuild_parameter": StandIn(_rebuild_parameter, "torch._utils._rebuild_parameter"),
    }
    for prefix in ("torch", "torch.cuda"):
        for name, dtype in STORAGE_DTYPES.items():
            out[f"{prefix}.{name}Storage"] = _StorageType(dtype)
            out[f"{prefix}.{name}Tensor"] = _legacy_tensor_class(dtype)
    return out


class _CheckpointUnpickler(RestrictedUnpickler):
    def __init__(self, file, allowed: Iterable[str], storage: Callable[[tuple], StorageRef]):
        super().__init__(file, allowed, checkpoint_globals())
        self._storage = storage

    def persistent_load(self, pid: Any) -> Any:
        if type(pid) is not tuple or not pid:
            raise pickle.UnpicklingError("a persistent id that is not a tuple")
        kind = pid[0].decode("ascii") if isinstance(pid[0], bytes) else pid[0]
        if kind == "module":
            raise PickleRefused("it pickles a whole nn.Module (torch.save(model)), whose class would have to run; "
                                "a checkpoint of this kind holds state dicts")
        if kind != "storage":
            raise pickle.UnpicklingError(f"an unknown persistent id kind {kind!r:.40}")
        return self._storage(pid[1:])


def _unpickle(data: bytes, allowed: Iterable[str], storage) -> Any:
    return _CheckpointUnpickler(io.BytesIO(data), allowed, storage).load()


def _scanned_pickle(f: io.BufferedIOBase, file_size: int, is_allowed, refused_opcodes: frozenset[str]) -> bytes:
    """The bytes of the pickle at ``f``'s position (left after its STOP), once every opcode of it
    has been scanned in place (``_Within``: never past the file's end)."""
    start = f.tell()
    scan_pickle(_Within(f, file_size), is_allowed, refused_opcodes)
    end = f.tell()
    f.seek(start)
    return f.read(end - start)


def _storage_type(value: Any) -> str:
    if not isinstance(value, _StorageType):
        raise pickle.UnpicklingError("a storage whose type is not a storage class of a real dtype")
    return value.dtype


def _check_count(numel: Any) -> int:
    if type(numel) is not int or numel < 0:
        raise pickle.UnpicklingError("a storage whose element count is not a non-negative integer")
    return numel


def _views(obj: Any, file_size: int) -> Any:
    """``obj`` with every ``TensorStub`` (and legacy tensor) replaced by its checked
    ``TensorView``; containers are walked as the encoder walks them (depth is bounded there)."""
    done: dict[int, Any] = {}   # id -> the converted container (a shared one is converted once)

    def convert(item: Any, depth: int) -> Any:
        if isinstance(item, _LegacyTensor):
            if item.stub is None:
                raise pickle.UnpicklingError("a legacy tensor without its state")
            item = item.stub
        if isinstance(item, TensorStub):
            ref = item.storage
            if ref.file_offset is None:
                raise pickle.UnpicklingError(f"storage {ref.key!r:.40} has no data in the file")
            view = TensorView(ref.dtype, item.shape, item.stride, item.offset, ref.file_offset, ref.numel)
            check_view(view, file_size, f"at storage {ref.key!r:.40}")
            return view
        if not isinstance(item, (dict, list, tuple, PickledObject)):
            return item
        if depth > 2 * MAX_NESTING or id(item) in done:   # too deep or cyclic: the encoder refuses it by name
            return done.get(id(item), item)
        done[id(item)] = item
        if isinstance(item, dict):
            out: Any = {k: convert(v, depth + 1) for k, v in item.items()}
        elif isinstance(item, (list, tuple)):
            out = [convert(v, depth + 1) for v in item]
            out = out if type(item) is list else tuple(out)
        else:   # a PickledObject (argparse.Namespace): its state may hold tensors
            item.state, item.args, out = convert(item.state, depth + 1), convert(item.args, depth + 1), item
        done[id(item)] = out
        return out

    return convert(obj, 0)


def _zip_records(f: io.BufferedIOBase, file_size: int) -> tuple[str, dict[str, tuple[int, int]]]:
    """The archive folder and each record's (data offset, size), checked before any is read."""
    try:
        archive = zipfile.ZipFile(f)
        infos = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise ValueError(f"a broken zip archive ({exc})") from None
    if not infos:
        raise ValueError("an empty zip archive")
    folder = infos[0].filename.split("/", 1)[0]
    records: dict[str, tuple[int, int]] = {}
    for info in infos:
        name = info.filename
        if name.startswith(("/", "\\")) or ".." in name.split("/") or "\\" in name or not name.startswith(folder + "/"):
            raise PickleRefused(f"its zip record {name!r:.80} is named outside the archive folder {folder!r:.40}")
        if info.compress_type != zipfile.ZIP_STORED:
            raise PickleRefused(f"its zip record {name!r:.80} is compressed (method {info.compress_type}); "
                                f"torch writes every record stored")
        if info.file_size != info.compress_size or info.header_offset + ZIP_LOCAL_HEADER + info.file_size > file_size:
            raise PickleRefused(f"its zip record {name!r:.80} declares {info.file_size} bytes, beyond the file "
                                f"({file_size} bytes)")
        f.seek(info.header_offset)
        header = f.read(ZIP_LOCAL_HEADER)
        if len(header) != ZIP_LOCAL_HEADER or header[:4] != ZIP_MAGIC:
            raise ValueError(f"zip record {name!r:.80} has no local header")
        start = info.header_offset + ZIP_LOCAL_HEADER + sum(struct.unpack("<HH", header[26:30]))
        if start + info.file_size > file_size:
            raise PickleRefused(f"its zip record {name!r:.80} ends beyond the file")
        records[name[len(folder) + 1:]] = (start, info.file_size)
    return folder, records


def _read_zip(f: io.BufferedIOBase, file_size: int, allowed: frozenset[str], is_allowed) -> Any:
    folder, records = _zip_records(f, file_size)
    if "data.pkl" not in records:
        raise ValueError("a zip archive without a data.pkl record (not a torch.save file)")
    if "byteorder" in records:
        start, size = records["byteorder"]
        f.seek(start)
        if f.read(size) != b"little":
            raise PickleRefused("its tensors are stored big-endian")
    start, size = records["data.pkl"]
    f.seek(start)
    data = f.read(size)
    scan_pickle(data, is_allowed, refused_opcodes=frozenset({"PERSID"}))

    def storage(pid: tuple) -> StorageRef:
        if len(pid) != 4:
            raise pickle.UnpicklingError("a storage id that is not (type, key, location, count)")
        dtype, key, numel = _storage_type(pid[0]), pid[1], _check_count(pid[3])
        if type(key) is not str or f"data/{key}" not in records:
            raise pickle.UnpicklingError(f"storage {key!r:.40} has no record data/{key!s:.40} in the archive")
        offset, nbytes = records[f"data/{key}"]
        if nbytes != numel * ELEMENT_SIZE[dtype]:
            raise PickleRefused(f"storage record data/{key} holds {nbytes} bytes, but the pickle says "
                                f"{numel} {dtype} elements")
        ref = StorageRef(key, dtype, numel)
        ref.file_offset = offset
        return ref

    return _views(_unpickle(data, allowed, storage), file_size)


def _read_legacy(f: io.BufferedIOBase, file_size: int, allowed: frozenset[str], is_allowed) -> Any:
    def plain() -> Any:   # the small pickles around the data: plain values, no global
        data = _scanned_pickle(f, file_size, lambda name: False, frozenset({"PERSID", "BINPERSID"}))
        return RestrictedUnpickler(io.BytesIO(data), ()).load()

    if plain() != LEGACY_MAGIC:
        raise ValueError("neither a zip archive nor a legacy torch.save stream (no magic number)")
    if plain() != LEGACY_PROTOCOL:
        raise ValueError("a legacy torch.save stream of an unknown protocol version")
    info = plain()
    if not isinstance(info, dict) or info.get("little_endian") is not True:
        raise PickleRefused("its tensors are stored big-endian (or its system info is missing)")
    data = _scanned_pickle(f, file_size, is_allowed, frozenset({"PERSID"}))
    roots: dict[str, StorageRef] = {}
    views: list[StorageRef] = []

    def storage(pid: tuple) -> StorageRef:
        if len(pid) != 5:
            raise pickle.UnpicklingError("a storage id that is not (type, key, location, count, view)")
        dtype, key, numel, view = _storage_type(pid[0]), pid[1], _check_count(pid[3]), pid[4]
        if type(key) is not str:
            raise pickle.UnpicklingError("a storage key that is not a string")
        root = roots.setdefault(key, StorageRef(key, dtype, numel))
        if root.dtype != dtype or root.numel != numel:
            raise pickle.UnpicklingError(f"storage {key!r:.40} is declared twice, differently")
        if view is None:
            return root
        if type(view) is not tuple or len(view) != 3 or not all(type(x) is int and x >= 0 for x in view[1:]) \
                or view[1] + view[2] > numel:
            raise pickle.UnpicklingError(f"a view of storage {key!r:.40} outside it")
        ref = StorageRef(f"{key}/{view[0]!s:.20}", dtype, view[2], (view[1], view[2]))
        ref.root = root
        views.append(ref)
        return ref

    result = _unpickle(data, allowed, storage)
    keys = plain()
    if type(keys) is not list or not all(type(k) is str for k in keys) or set(keys) != set(roots):
        raise ValueError("the list of storage keys does not name the pickle's storages")
    for key in keys:   # each storage: an int64 element count, then its bytes
        ref = roots[key]
        count = f.read(8)
        if len(count) != 8 or struct.unpack("<q", count)[0] != ref.numel:
            raise PickleRefused(f"storage {key!r:.40}'s data does not hold the {ref.numel} elements the pickle says")
        ref.file_offset = f.tell()
        end = ref.file_offset + ref.numel * ELEMENT_SIZE[ref.dtype]
        if end > file_size:
            raise PickleRefused(f"storage {key!r:.40}'s data ends beyond the file")
        f.seek(end)
    for ref in views:
        ref.file_offset = ref.root.file_offset + ref.view[0] * ELEMENT_SIZE[ref.dtype]
    return _views(result, file_size)


def read_torch_file(path: str | Path, allowed: Iterable[str]) -> Any:
    """The checkpoint at ``path`` as plain data with ``TensorView``s; ``allowed``: the dotted names
    of the classes it may hold besides tensors (they become ``PickledObject``s). Raises
    ``PickleRefused`` for what it refuses, ``ValueError`` or ``pickle.UnpicklingError`` for a file
    that is not a readable checkpoint."""
    allowed = frozenset(allowed)
    extra = checkpoint_globals()

    def is_allowed(name: str) -> bool:
        return name in allowed or name in extra or name in RestrictedUnpickler.SAFE

    file_size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(0)
        if head == ZIP_MAGIC:
            return _read_zip(f, file_size, allowed, is_allowed)
        try:
            return _read_legacy(f, file_size, allowed, is_allowed)
        except (ValueError, pickle.UnpicklingError, EOFError):
            f.seek(0)
            if tarfile.is_tarfile(path):
                raise PickleRefused("it is in PyTorch's tar layout (before 0.1.10), which torch itself reads "
                                    "only by running its pickles") from None
            raise
