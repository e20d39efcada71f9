"""Reading and writing the harness's files.

Writes are atomic (temp file + rename: every output appears whole or not at all) and get the
permissions any new file of the user gets (umask, or the folder's default ACL), so collaborators
sharing a results folder can read them. A failed read or write is one HarnessError naming the file.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from methods.errors import HarnessError, Stopped, first_line, run_cli

# A new file's mode before the umask (what open() and the shell use); the kernel applies the umask
# and default ACLs to it. tempfile.mkstemp's fixed 0600 would survive the rename onto the output.
NEW_FILE_MODE = 0o666
NPY_MAGIC = b"\x93NUMPY"
# Below this much free space a write that failed without an errno (numpy's and torch's writers
# report short writes that way) is taken for a full disk.
FULL_DISK_BYTES = 1 << 20


def _new_temp(path: Path, suffix: str, create) -> Path:
    """A new name beside ``path`` (never one that existed), made by ``create(name)``, which fails
    with FileExistsError on a name taken meanwhile."""
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp{suffix}"
        try:
            create(tmp)
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary name", str(path))


def _new_temp_file(path: Path, suffix: str) -> Path:
    """An empty, new file beside ``path``, created with ``NEW_FILE_MODE``."""
    return _new_temp(path, suffix, lambda tmp: os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                                                                NEW_FILE_MODE)))


def new_temp_folder(path: str | Path) -> Path:
    """An empty, new folder beside ``path``, to be renamed onto it once filled; created with mode
    0o777 before the umask and default ACLs, as a folder made by the shell (tempfile.mkdtemp's
    fixed 0700 would survive the rename)."""
    return _new_temp(Path(path), "", lambda tmp: os.mkdir(tmp, 0o777))


def _disk_full(folder: Path) -> bool:
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < FULL_DISK_BYTES


def write_failure(path: Path, exc: BaseException) -> str:
    """The one line for a failed write of ``path``: a full disk, a quota, a read-only folder."""
    code = getattr(exc, "errno", None)
    if code == errno.ENOSPC or (code is None and _disk_full(path.parent)):
        return f"no space left on device while writing {path}"
    if code == errno.EDQUOT:
        return f"disk quota exceeded while writing {path}"
    if code in (errno.EACCES, errno.EPERM):
        return f"permission denied writing {path} (is its folder read-only?)"
    if code == errno.EROFS:
        return f"read-only file system: cannot write {path}"
    reason = getattr(exc, "strerror", None) or first_line(exc)
    return f"could not write {path}: {reason}" + ("" if code else " (a full disk or an exhausted quota?)")


def _is_write_error(exc: BaseException, tmp: Path) -> bool:
    """An error of the write itself, not of whatever else the block does (a feature extraction
    reading images inside ``open_npy_for_writing``)."""
    if not isinstance(exc, OSError):
        return False
    return exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS) or exc.filename in (str(tmp), tmp)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` only if the block succeeds.

    ``suffix`` keeps an extension some writers insist on (numpy appends ``.npy``).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _new_temp_file(path, suffix)
    except OSError as exc:
        raise HarnessError(write_failure(path, exc)) from None
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as exc:
        # judged before the partial file is removed: its bytes are what filled the disk
        message = write_failure(path, exc) if _is_write_error(exc, tmp) else None
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(exc, Stopped):
            exc.unfinished.append(str(path))
        if message:
            raise HarnessError(message) from None
        raise


@contextlib.contextmanager
def _writing(path: str | os.PathLike, suffix: str = "", library_errors: tuple = ()) -> Iterator[Path]:
    """``atomic_path`` around one writer call: any OSError of it (or ``library_errors``, torch's
    writer reports a full disk as a RuntimeError) is a failed write of ``path``."""
    with atomic_path(path, suffix) as tmp:
        try:
            yield tmp
        except (OSError, *library_errors) as exc:
            raise HarnessError(write_failure(Path(path), exc)) from None


def write_text(path: str | os.PathLike, text: str) -> None:
    with _writing(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def save_npy(path: str | os.PathLike, array: np.ndarray) -> None:
    with _writing(path, suffix=".npy") as tmp:
        np.save(tmp, array)


@contextlib.contextmanager
def open_npy_for_writing(path: str | os.PathLike, shape: tuple[int, ...], dtype: str) -> Iterator[np.memmap]:
    """A memory-mapped ``.npy`` filled incrementally (arrays larger than RAM), renamed into place when done.

    Its disk space is reserved first: a memory-mapped write to a full disk kills the process with
    SIGBUS, no message, possibly hours into a feature extraction.
    """
    with atomic_path(path, suffix=".npy") as tmp:
        try:
            array = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape)
            _reserve(tmp)
        except OSError as exc:
            raise HarnessError(write_failure(Path(path), exc)) from None
        yield array
        array.flush()
        del array


def _reserve(file: Path) -> None:
    fd = os.open(file, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):  # file systems without it
            raise
    finally:
        os.close(fd)


def torch_save(path: str | os.PathLike, obj: Any) -> None:
    import torch  # not at module level: the light jobs (dataset.json, tables) never need torch

    with _writing(path, library_errors=(RuntimeError,)) as tmp:
        torch.save(obj, tmp)


def read_json(path: str | os.PathLike, expected: str = "") -> Any:
    """A JSON document; a missing or malformed file is one HarnessError naming it (and the line and
    column of a syntax error). ``expected``: what the file should hold, for the message."""
    path = Path(path)
    hint = f"; expected {expected}" if expected else ""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise HarnessError(f"file not found: {path}{hint}") from None
    except json.JSONDecodeError as exc:
        raise HarnessError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg}){hint}") from None
    except UnicodeDecodeError:
        raise HarnessError(f"{path}: not a UTF-8 text file, so not JSON{hint}") from None
    except RecursionError:
        raise HarnessError(f"{path}: nested too deeply to read as JSON{hint}") from None
    except ValueError as exc:   # an integer beyond the interpreter's limit on digits
        raise HarnessError(f"{path}: not readable JSON ({first_line(exc).split(';')[0]}){hint}") from None
    except OSError as exc:
        raise HarnessError(f"{path}: cannot read ({(exc.strerror or first_line(exc)).lower()})") from None


def read_lines(path: str | os.PathLike) -> list[str]:
    """The lines of a UTF-8 text file, without their line ends; undecodable bytes are named by line."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise HarnessError(f"file not found: {path}") from None
    except OSError as exc:
        raise HarnessError(f"{path}: cannot read ({(exc.strerror or first_line(exc)).lower()})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise HarnessError(f"{path}:{line}: not UTF-8 text (byte {data[exc.start]:#04x}); "
                           f"expected a text file") from None
    lines = text.split("\n")  # not splitlines(): a caption may hold a form feed or U+2028
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def load_npy(path: str | os.PathLike) -> np.ndarray:
    """A ``.npy`` array, memory-mapped (never read whole: COCO's region features are ~33 GB)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            magic = f.read(len(NPY_MAGIC))
        if not magic:
            raise HarnessError(f"{path}: an empty file (0 bytes); expected an array written by numpy.save "
                               f"(an interrupted copy?)")
        if magic != NPY_MAGIC:
            raise HarnessError(f"{path}: not a .npy file (no NumPy header); expected an array written by numpy.save")
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError:
        raise HarnessError(f"file not found: {path}") from None
    except (ValueError, EOFError, OSError) as exc:
        if "mmap length" in str(exc):
            raise HarnessError(f"{path}: shorter than its .npy header says (a partial copy?)") from None
        raise HarnessError(f"{path}: not a readable .npy array ({first_line(exc)})") from None


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def main(argv: list[str] | None = None) -> None:
    """``python -m methods.io --out F --json '{...}'``: write a config the Snakefile resolved, atomically."""
    import argparse

    parser = argparse.ArgumentParser(description="write a JSON document atomically")
    parser.add_argument("--out", required=True)
    parser.add_argument("--json", required=True)
    args = parser.parse_args(argv)
    run_cli(lambda: write_json(args.out, json.loads(args.json)))


if __name__ == "__main__":
    main()
