"""The child process that reads one untrusted file (run by ``methods.untrusted.safe_load`` through
``methods.untrusted.sandbox``, within its bounds): ``python -m methods.untrusted.reader KIND PATH
OUT [ALLOWED...]``.

KIND is ``pickle`` (a vocabulary pickle: opcodes scanned, then ``RestrictedUnpickler``), ``json``
(a vocabulary JSON) or ``checkpoint`` (a ``torch.save`` file: ``torch_format``); ALLOWED are the
dotted names of the classes the file may hold. It writes ``OUT/result.json``, the file's content
as plain values (``plain.encode``), or ``OUT/status.json`` saying why it refused the file or could
not read it, and then exits with ``sandbox.EXIT_REPORTED``. It imports neither torch nor numpy:
nothing of what it reads can reach them.
"""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from methods.untrusted.numpy_scalars import Refused as ScalarRefused
from methods.untrusted.pickle_scan import PickleRefused, scan_pickle
from methods.untrusted.plain import encode
from methods.untrusted.sandbox import EXIT_REPORTED
from methods.untrusted.torch_format import read_torch_file
from methods.untrusted.unpickler import RefusedPickle, RestrictedUnpickler

KINDS = {"pickle": "a vocabulary", "json": "a vocabulary", "checkpoint": "a checkpoint"}


def read_pickle(path: Path, allowed: list[str]):
    data = path.read_bytes()
    unpickler = RestrictedUnpickler(io.BytesIO(data), allowed)
    scan_pickle(data, unpickler.known_global)
    return unpickler.load()


def read_json(path: Path, allowed: list[str]):
    try:
        return json.loads(path.read_bytes())
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except ValueError as exc:   # the interpreter's limit on an integer's digits
        raise PickleRefused(f"an integer too long to read ({str(exc).split(';')[0]})") from None


READERS = {"pickle": read_pickle, "json": read_json, "checkpoint": read_torch_file}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300]}" if text else type(exc).__name__


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    kind, path, out, allowed = argv[0], Path(argv[1]), Path(argv[2]), argv[3:]
    try:
        content = READERS[kind](path, allowed)
        doc = encode(content, KINDS[kind])
    except (PickleRefused, RefusedPickle, ScalarRefused) as exc:
        status = {"refused": str(exc)}
    except RecursionError:
        status = {"refused": "containers nested deeper than the interpreter's recursion limit"}
    except MemoryError:
        raise   # the sandbox's exit status says it
    except Exception as exc:   # truncated, malformed: all the same to the reader
        status = {"unreadable": _first_line(exc)}
    else:
        (out / "result.json").write_text(json.dumps(doc, allow_nan=True), encoding="utf-8")
        return
    (out / "status.json").write_text(json.dumps(status), encoding="utf-8")
    sys.exit(EXIT_REPORTED)


if __name__ == "__main__":
    main()
