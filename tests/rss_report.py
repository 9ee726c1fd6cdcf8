"""Opt-in pytest plugin: which tests raise the pytest process's memory, at its peak and for good.

``pytest -p tests.rss_report`` prints, at the end of the run, two lists, largest first:

* every test after which the process's high-water mark (``getrusage(RUSAGE_SELF).ru_maxrss``) rose
  by more than 256 MiB: what the test allocated at once;
* every test after which the resident memory the process still holds (``/proc/self/statm``) rose by
  more than 256 MiB: what the test left behind (caches, module-level arrays, wide fixtures), which
  every later test and every subprocess forked from pytest then carries (see tests/peak.py);
* the ten test files whose tests together left the most behind (many small rises add up too).

Under pytest-xdist each worker keeps its own lists and prints them to its stderr at the end. It
asserts nothing; the guard that does is tests/memory_guard.py.
"""

from __future__ import annotations

import os
import resource
import sys

THRESHOLD = 256 * 2**20
_PAGE = os.sysconf("SC_PAGE_SIZE")
_peak_rises: list[tuple[int, int, str]] = []
_held_rises: list[tuple[int, int, str]] = []
_last = [0, 0]
_held_by_file: dict[str, int] = {}


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _held() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def pytest_sessionstart(session):
    _last[:] = [_peak(), _held()]


def pytest_runtest_logreport(report):
    if report.when != "teardown" or hasattr(report, "node"):  # under xdist the controller sees workers' reports
        return
    peak, held = _peak(), _held()
    if peak - _last[0] > THRESHOLD:
        _peak_rises.append((peak - _last[0], peak, report.nodeid))
    if held - _last[1] > THRESHOLD:
        _held_rises.append((held - _last[1], held, report.nodeid))
    path = report.nodeid.split("::", 1)[0]
    _held_by_file[path] = _held_by_file.get(path, 0) + held - _last[1]
    _last[:] = [peak, held]


def _lines() -> list[str]:
    lines = []
    for title, rises in (("peak resident memory", _peak_rises), ("resident memory held after the test", _held_rises)):
        lines.append(f"--- {title}: rises over 256 MiB ---")
        lines += [
            f"+{rise / 2**30:6.2f} GiB -> {to / 2**30:6.2f} GiB  {nodeid}"
            for rise, to, nodeid in sorted(rises, reverse=True)
        ]
        if not rises:
            lines.append("none")
    lines.append("--- resident memory held after the test, added up per file: the ten largest ---")
    top = sorted(((rise, path) for path, rise in _held_by_file.items()), reverse=True)[:10]
    lines += [f"{rise / 2**30:+7.2f} GiB  {path}" for rise, path in top]
    return lines


def pytest_sessionfinish(session):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        sys.stderr.write("".join(f"[{worker}] {line}\n" for line in _lines()))


def pytest_terminal_summary(terminalreporter):
    if os.environ.get("PYTEST_XDIST_WORKER") is None and (_peak_rises or _held_rises or _last[0]):
        terminalreporter.section("memory rises (tests.rss_report)")
        for line in _lines():
            terminalreporter.write_line(line)
