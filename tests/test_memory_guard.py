"""The memory guard (tests/memory_guard.py) against planted allocations, in child pytest runs.

Each child run collects a test file of its own from a temporary folder, with the guard as its only
plugin and limits of 0.25 GB, and one test that takes 0.4 GB: after the test (held by the module),
during it (the test then sleeps, and would write a marker if it were not ended), or in a process it
starts. The run must end with the guard's one line, naming the test and the figure, and exit status 3,
before any later test runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.memory_guard import EXIT_STATUS

REPO = Path(__file__).resolve().parents[1]
PLANTED = """
import os, subprocess, sys, time
from pathlib import Path

MARK = Path(os.environ["PLANT_MARK"])
SECONDS = float(os.environ["PLANT_SECONDS"])  # how long the planted allocation is held
SIZE = 400 * 2**20
HELD = []


def touched(size):
    b = bytearray(size)
    b[::4096] = b"x" * len(range(0, size, 4096))  # resident, not only reserved
    return b


def test_first():
    pass


def test_planted():
    plant = os.environ["PLANT"]
    if plant == "after":
        HELD.append(touched(SIZE))
    elif plant == "during":
        b = touched(SIZE)
        time.sleep(SECONDS)
        MARK.write_text("the planted test finished")
    elif plant == "subprocess":
        code = "import time; b = bytearray(%d); b[::4096] = b'x' * len(range(0, %d, 4096)); time.sleep(%r)"
        subprocess.run([sys.executable, "-c", code % (SIZE, SIZE, SECONDS)])
        MARK.write_text("the planted test finished")


def test_later():
    MARK.write_text("a later test ran")
"""


def run_planted(tmp_path: Path, plant: str, *args: str, **limits: str) -> tuple[subprocess.CompletedProcess, Path]:
    (tmp_path / "test_planted.py").write_text(PLANTED)
    mark = tmp_path / "mark"
    env = {
        **os.environ,
        "PLANT": plant,
        "PLANT_MARK": str(mark),
        "PLANT_SECONDS": "60",  # ended long before, by the guard
        "POSBIAS_TEST_MAX_GB": "0.25",
        "POSBIAS_TEST_SUBPROCESS_MAX_GB": "0.25",
        "PYTHONPATH": str(REPO),
        **limits,
    }
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("POSBIAS_MEMORY_GUARD_DIR", None)
    env.pop("PYTEST_ADDOPTS", None)  # the outer run's options (e.g. -q, which hides the counts read below)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.memory_guard"]
    argv += ["--rootdir", str(tmp_path), *args, str(tmp_path / "test_planted.py")]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return done, mark


def guard_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "posbias memory guard:" in line]


@pytest.mark.parametrize(
    "plant, what",
    [
        ("after", "took the pytest process to"),
        ("during", "took the pytest process to"),
        ("subprocess", "started a process that reached"),
    ],
)
def test_a_planted_allocation_ends_the_run_with_one_line(tmp_path, plant, what):
    done, mark = run_planted(tmp_path, plant)
    assert done.returncode == EXIT_STATUS, done.stdout + done.stderr
    lines = guard_lines(done.stdout + done.stderr)
    assert len(lines) == 1, done.stdout + done.stderr
    assert lines[0].startswith(f"posbias memory guard: test_planted.py::test_planted {what} ")
    figure = float(lines[0].split(what, 1)[1].split()[0])
    assert 0.25 < figure < 2, lines[0]
    assert "Traceback" not in done.stdout + done.stderr
    assert not mark.exists(), mark.read_text()  # ended inside the test, before any later test


def test_under_xdist_the_controller_ends_the_whole_run(tmp_path):
    done, mark = run_planted(tmp_path, "during", "-n", "1")
    assert done.returncode == EXIT_STATUS, done.stdout + done.stderr
    lines = guard_lines(done.stdout + done.stderr)
    assert len(lines) == 1 and "test_planted.py::test_planted took the pytest process to" in lines[0], lines
    assert not mark.exists(), mark.read_text()  # no replacement worker ran test_later


def test_switched_off_the_planted_run_passes(tmp_path):
    done, mark = run_planted(tmp_path, "after", POSBIAS_TEST_MAX_GB="off")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout and mark.read_text() == "a later test ran"


def test_below_the_limits_nothing_is_ended(tmp_path):
    limits = {"POSBIAS_TEST_MAX_GB": "2", "POSBIAS_TEST_SUBPROCESS_MAX_GB": "2", "PLANT_SECONDS": "1"}
    done, mark = run_planted(tmp_path, "subprocess", **limits)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not guard_lines(done.stdout + done.stderr)


@pytest.mark.parametrize("value", ["-1", "0", "six", "nan", "inf"])
def test_a_bad_limit_is_refused_in_one_line(tmp_path, value):
    done, mark = run_planted(tmp_path, "after", POSBIAS_TEST_MAX_GB=value)
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error
    assert f"POSBIAS_TEST_MAX_GB={value!r}: expected a number of GB above 0, or 'off'" in done.stderr
    assert "Traceback" not in done.stderr
