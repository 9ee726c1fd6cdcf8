"""pytest plugin, on by default (tests/conftest.py): end the run before a test takes the machine's memory.

The machines have 24 GB and no swap: a test run that fills memory does not fail, it freezes the
machine. This guard watches, after each test and every 0.25 s while one runs (a sampling thread):

* the resident memory of the pytest process that runs the tests (each pytest-xdist worker is one),
  against ``POSBIAS_TEST_MAX_GB`` (default 6);
* each process a test starts (the CLI helpers, the tests/peak.py launcher, ...) with all of its own
  descendants, against ``POSBIAS_TEST_SUBPROCESS_MAX_GB`` (default 4).

Past a limit it kills the processes the test started and ends the run with one line that names the
test and the figure, exit status 3. The process exits with ``os._exit``: the test may be inside one
large allocation, where no Python exception reaches it. Under pytest-xdist the worker leaves its line
in a folder the controller named (``POSBIAS_MEMORY_GUARD_DIR``), and the controller, told that the
worker went down, ends the whole run with that line.

``POSBIAS_TEST_MAX_GB=off`` (or ``pytest -p no:tests.memory_guard``) switches the guard off. Resident
memory is read from /proc (Linux); elsewhere the guard does nothing. The whole process tree (pytest,
workers, subprocesses together) is measured from outside by ``../shared/tools/memcap``.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
from argparse import ArgumentTypeError
from pathlib import Path

import pytest

from posbias.cli.argtypes import positive_float  # standard library only

GB = 1024**3
PERIOD_S = 0.25
EXIT_STATUS = 3
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_REPORT_DIR = "POSBIAS_MEMORY_GUARD_DIR"


class SettingError(ValueError):
    pass


def _limit(name: str, default: float) -> float | None:
    """The limit in GB from the environment; None where the guard is switched off."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if text.lower() == "off":
        return None
    try:
        return positive_float(text)
    except ArgumentTypeError:
        raise SettingError(f"{name}={text!r}: expected a number of GB above 0, or 'off'") from None


def resident_bytes(pid: int | str = "self") -> int:
    """Resident memory of one process (0 where it has gone)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def children(pid: int | str = "self") -> list[int]:
    """The direct children of a process, from every one of its threads' children lists."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return found


def descendants(pid: int) -> list[int]:
    """pid and every process below it."""
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        out.append(p)
        stack += children(p)
    return out


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
    except OSError:
        return f"pid {pid}"


class Guard:
    """The two limits and the test running now; ``check`` returns the line that ends the run, if any."""

    def __init__(self, own_limit: float, subprocess_limit: float) -> None:
        self.own_limit = own_limit
        self.subprocess_limit = subprocess_limit
        self.test = "(between tests)"
        self.ended = threading.Lock()
        # the terminal's stderr, taken while pytest's capture is suspended: during a test fd 2 is captured
        self.stderr = os.dup(2)

    def check(self) -> str | None:
        own = resident_bytes()
        if own > self.own_limit * GB:
            return (
                f"posbias memory guard: {self.test} took the pytest process to {own / GB:.2f} GB "
                f"(limit {self.own_limit:g} GB, POSBIAS_TEST_MAX_GB)"
            )
        for child in children():
            used = sum(resident_bytes(p) for p in descendants(child))
            if used > self.subprocess_limit * GB:
                return (
                    f"posbias memory guard: {self.test} started a process that reached {used / GB:.2f} GB "
                    f"(limit {self.subprocess_limit:g} GB, POSBIAS_TEST_SUBPROCESS_MAX_GB): {_command(child)}"
                )
        return None

    def end_run(self, line: str) -> None:
        """Kill what the tests started, leave the line where it is read, exit (once, from any thread)."""
        if not self.ended.acquire(blocking=False):
            threading.Event().wait()  # the other thread is ending the process: no further test may start
        for child in children():
            for pid in descendants(child):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        folder = os.environ.get(_REPORT_DIR)
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        if folder and worker:
            (Path(folder) / worker).write_text(line)
        else:
            os.write(self.stderr, f"\n{line}\n".encode())
        os._exit(EXIT_STATUS)

    def watch(self) -> None:
        while True:
            line = self.check()
            if line:
                self.end_run(line)
            threading.Event().wait(PERIOD_S)


_guard: Guard | None = None
_controller_dir: Path | None = None  # the xdist controller's folder for the workers' lines


def _is_xdist_controller(config) -> bool:
    return os.environ.get("PYTEST_XDIST_WORKER") is None and bool(getattr(config.option, "numprocesses", None))


def pytest_configure(config):
    global _guard, _controller_dir
    if not Path("/proc/self/statm").exists():
        return
    try:
        own = _limit("POSBIAS_TEST_MAX_GB", 6.0)
        sub = _limit("POSBIAS_TEST_SUBPROCESS_MAX_GB", 4.0)
    except SettingError as err:
        raise pytest.UsageError(str(err)) from None
    if own is None:
        return
    if _is_xdist_controller(config):
        # the workers start after this hook and inherit the folder they leave their line in
        _controller_dir = Path(tempfile.mkdtemp(prefix="posbias-memory-guard-"))
        os.environ[_REPORT_DIR] = str(_controller_dir)
        return
    _guard = Guard(own, sub if sub is not None else float("inf"))
    threading.Thread(target=_guard.watch, name="posbias-memory-guard", daemon=True).start()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if _guard is None:
        return (yield)
    _guard.test = item.nodeid
    try:
        return (yield)
    finally:
        line = _guard.check()
        if line:
            _guard.end_run(line)
        _guard.test = "(between tests)"


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist controller: a worker went down; if the guard ended it, end the run with the guard's line."""
    if _controller_dir is None or error is None:
        return
    report = _controller_dir / node.gateway.id
    if report.exists():
        pytest.exit(report.read_text(), returncode=EXIT_STATUS)


def pytest_unconfigure(config):
    if _controller_dir is not None:
        for f in _controller_dir.iterdir():
            f.unlink()
        _controller_dir.rmdir()
