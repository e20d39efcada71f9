"""One exception type for every user-facing error, and the one line an entry point prints for it."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
from typing import Callable, Iterable, Iterator

from methods.retries import NOT_RETRIED, earlier_failure, failure_record, record_failure

# A message is read on a console: a repr of a whole file (a Karpathy JSON, a state dict) is no message.
MAX_MESSAGE_CHARS = 1000


def shorten(text: str, limit: int = 200) -> str:
    """``text`` cut in the middle to at most ``limit`` characters; both ends usually say the most."""
    if len(text) <= limit:
        return text
    keep = (limit - 5) // 2
    return f"{text[:keep]} ... {text[-keep:]}"


# control characters (C0, DEL, C1) and the invisible format characters that reorder or hide text
# (zero-width, bidirectional overrides and isolates, BOM): what a file's names or values could use
# to rewrite the terminal or disguise a message
UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


def printable(text: str) -> str:
    """``text`` with every unprintable character written as its escape (``\\x1b``, ``\\u202e``)."""
    return UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def one_line(text: str) -> str:
    """``text``'s non-empty lines joined ('; ' between statements, ' ' after a colon), its
    unprintable characters escaped, shortened to ``MAX_MESSAGE_CHARS``."""
    joined = ""
    for line in (line.strip() for line in str(text).splitlines()):
        if line:
            joined += ("" if not joined else " " if joined.endswith(":") else "; ") + line
    return shorten(printable(joined), MAX_MESSAGE_CHARS)


class HarnessError(Exception):
    """A problem with the user's config, data or files; the message says what and where, in one line
    (a multi-line or overlong message is joined and shortened here, so no caller can print a wall)."""

    # False: the same inputs fail the same way again, so a Snakemake retry must not compute
    # (methods.retries); True for a stop a re-run gets past (preemption after a checkpoint).
    transient = False

    def __init__(self, message: str):
        super().__init__(one_line(message))


class Stopped(HarnessError):
    """A job stopped by SIGTERM (a SLURM time limit, preemption) or SIGINT (Ctrl-C), raised where the
    job was: every atomic write it had open (``methods.io``) removes its temporary file on the way
    out and adds its output to ``unfinished``. Training checkpoints on SIGTERM instead
    (``methods.training.loop``)."""

    transient = True  # a re-run computes it again (methods.retries)

    def __init__(self, signum: int, doing: str):
        super().__init__(f"received {signal.Signals(signum).name} while running {doing}")
        self.unfinished: list[str] = []

    def __str__(self) -> str:
        if not self.unfinished:
            return f"{super().__str__()}: stopped, nothing written"
        return one_line(f"{super().__str__()}: stopped; removed the unfinished {', '.join(self.unfinished)} "
                        f"(a re-run starts it again)")


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stop_signals_raise(doing: str) -> Iterator[None]:
    """While the block runs, SIGTERM and SIGINT raise ``Stopped`` (the default SIGTERM kills the
    process at once and leaves its temporary files behind); a second signal during the clean-up is
    ignored."""
    job = os.getpid()

    def stop(signum, frame):
        if os.getpid() != job:  # a forked worker (a DataLoader's) dies as it did before
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        raise Stopped(signum, doing)

    with signal_handlers(STOP_SIGNALS, stop):
        yield


@contextlib.contextmanager
def signal_handlers(signals: Iterable[int], handler: Callable) -> Iterator[None]:
    """``handler`` for ``signals`` while the block runs, the previous handlers again after it. Only
    the main thread can set handlers: elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def job_name() -> str:
    """The running entry point, as typed (``methods.features.extract``), for messages."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) or (sys.argv[0] if sys.argv and sys.argv[0] else "this command")


def first_line(exc: BaseException) -> str:
    """Library errors (torch.load) can span many lines; a message needs the first."""
    text = str(exc).strip()
    return shorten(text.splitlines()[0]) if text else type(exc).__name__


def os_error_line(exc: OSError) -> str:
    """``<file>: <what went wrong>`` for an OSError nothing more specific caught (a file unreadable,
    vanished, or a folder where a file was expected)."""
    reason = (exc.strerror or first_line(exc)).lower()
    return f"{exc.filename}: {reason}" if exc.filename else reason


def run_cli(fn: Callable[[], None]) -> None:
    """Run an entry point: a HarnessError, or an OSError from a file it touched, prints
    ``error: <one line>`` on stderr and exits 2, never a traceback. Under Snakemake, such a failure
    is recorded, and a retry of the job stops at once with the same line (methods.retries).
    SIGTERM and SIGINT stop it the same way (``Stopped``), its temporary files removed."""
    record = failure_record(sys.argv)
    if (earlier := earlier_failure(record)) is not None:
        print(f"error: {earlier} ({NOT_RETRIED})", file=sys.stderr)
        sys.exit(2)
    try:
        with stop_signals_raise(job_name()):
            fn()
    except HarnessError as exc:
        message = str(exc)
        if not exc.transient:
            record_failure(record, message)
    except OSError as exc:
        message = os_error_line(exc)
        record_failure(record, message)
    else:
        return
    print(f"error: {printable(message)}", file=sys.stderr)
    sys.exit(2)
