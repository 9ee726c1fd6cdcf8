"""Ctrl-C on the command line: one line and exit code 130, never a traceback, never half a run.

Python delivers SIGINT as a KeyboardInterrupt at the main thread's next bytecode; when that bytecode
belongs to a garbage-collector callback (JAX installs one), the exception is printed as "ignored" and
the run would go on to write its files and exit 0. ``handling`` records every interrupt, so the
writer of a run's files (``posbias.io.files.write_run``) asks ``check`` before it commits the set."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell's convention
_seen = threading.Event()
_holding = threading.Event()  # inside ``deferred``: record, do not raise


def _on_interrupt(signum, frame) -> None:
    _seen.set()
    if not _holding.is_set():
        raise KeyboardInterrupt


@contextlib.contextmanager
def handling() -> Iterator[None]:
    """Record SIGINT while the block runs (main thread only; the previous handler restored after). An
    interrupt swallowed by a callback is not printed as "Exception ignored ..." (``sys.unraisablehook``):
    the run stops at ``check`` with its one line instead."""
    _seen.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous, previous_hook = signal.signal(signal.SIGINT, _on_interrupt), sys.unraisablehook

    def quiet(unraisable) -> None:
        if not (isinstance(unraisable.exc_type, type) and issubclass(unraisable.exc_type, KeyboardInterrupt)):
            previous_hook(unraisable)

    sys.unraisablehook = quiet
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = previous_hook
        _seen.clear()


def seen() -> bool:
    """Whether an interrupt arrived inside ``handling``: an exception raised after one may be the
    interrupt in another form (a C extension's import turns it into "ImportError: initialization
    failed", ``__set_name__`` into a RuntimeError)."""
    return _seen.is_set()


def check() -> None:
    """Raise KeyboardInterrupt if an interrupt arrived inside ``handling`` (even one swallowed on the way)."""
    if _seen.is_set():
        raise KeyboardInterrupt


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold an interrupt back while the block runs (a run's files being moved into place: all or none)
    and raise it after. The handler of ``handling`` only records it meanwhile: blocking SIGINT with
    pthread_sigmask would not do, since the kernel hands a process's signal to any thread that does
    not block it (JAX and the engines run threads) and Python then raises in the main thread anyway."""
    before = _seen.is_set()
    _holding.set()
    try:
        yield
    finally:
        _holding.clear()
    if _seen.is_set() and not before:
        raise KeyboardInterrupt
