"""scripts/test_totals.py: the closing line of scripts/test adds up its two pytest runs' JUnit reports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "test_totals.py"


def _report(path: Path, tests: int, failures: int, errors: int, skipped: int) -> str:
    path.write_text(
        f'<testsuites><testsuite name="pytest" tests="{tests}" failures="{failures}" errors="{errors}" '
        f'skipped="{skipped}"></testsuite></testsuites>'
    )
    return str(path)


def _run(*paths: str) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), *paths], capture_output=True, text=True, check=True)
    return done.stdout


def test_two_reports_add_up(tmp_path):
    a = _report(tmp_path / "a.xml", tests=100, failures=2, errors=1, skipped=3)
    b = _report(tmp_path / "b.xml", tests=10, failures=0, errors=0, skipped=1)
    assert _run(a, b).splitlines() == ["total: 103 passed, 3 failed, 4 skipped"]


def test_a_missing_report_is_named_and_counts_as_failed(tmp_path):
    a = _report(tmp_path / "a.xml", tests=5, failures=0, errors=0, skipped=0)
    lines = _run(a, str(tmp_path / "alone.xml")).splitlines()
    assert lines == [
        "scripts/test: no report from one run (alone.xml): it ended before writing it",
        "total: 5 passed, 1 failed, 0 skipped",
    ]
