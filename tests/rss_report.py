"""Opt-in pytest plugin: which tests raise the pytest process's peak resident memory.

``pytest -p tests.rss_report`` prints, at the end of the run, every test after which the process's
high-water mark (``getrusage(RUSAGE_SELF).ru_maxrss``) rose by more than 256 MiB, largest first.
The suite's in-process tests share one interpreter, so one test that allocates a lot sets the
baseline every later subprocess inherits (see tests/peak.py); this finds it. It asserts nothing.
"""

from __future__ import annotations

import resource

THRESHOLD = 256 * 2**20
_rises: list[tuple[int, int, str]] = []
_last = [0]


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def pytest_sessionstart(session):
    _last[0] = _peak()


def pytest_runtest_logreport(report):
    if report.when != "teardown":
        return
    now = _peak()
    if now - _last[0] > THRESHOLD:
        _rises.append((now - _last[0], now, report.nodeid))
    _last[0] = now


def pytest_terminal_summary(terminalreporter):
    terminalreporter.section("peak resident memory rises over 256 MiB")
    for rise, peak, nodeid in sorted(_rises, reverse=True):
        terminalreporter.write_line(f"+{rise / 2**30:6.2f} GiB -> {peak / 2**30:6.2f} GiB  {nodeid}")
    if not _rises:
        terminalreporter.write_line("none")
