"""The linters' configurations (pyproject.toml [tool.ruff], [tool.pyright]) hold: zero findings.

ruff (lint, and its formatter changing nothing) on the whole repository;
pyright (basic mode) on the library's numerics/ and theorem/ folders,
resolved as the installed posbias.numerics / posbias.theorem through the .pyright symlink tree.
"""

import functools
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _tool(name: str) -> Path:
    tool = BIN / name
    assert tool.exists(), f"{tool} missing: install the test extra (pip install -e '.[test]')"
    return tool


def test_ruff_finds_nothing():
    done = subprocess.run([str(_tool("ruff")), "check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_ruff_format_changes_nothing():
    done = subprocess.run(
        [str(_tool("ruff")), "format", "--check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


PYRIGHT_FOLDERS = ("numerics", "theorem")


@functools.cache
def _pyright_report() -> dict:
    """pyright on numerics/ and theorem/ in one run, cached (the start-up and the analysis of shared dependencies
    are half of it), with this interpreter's packages (not whatever .venv holds)."""
    done = subprocess.run(
        [str(_tool("pyright")), "--outputjson", "--pythonpath", sys.executable, *PYRIGHT_FOLDERS],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(done.stdout)
    expected = sum(len(list((REPO / folder).rglob("*.py"))) for folder in PYRIGHT_FOLDERS)
    assert report["summary"]["filesAnalyzed"] == expected, report["summary"]  # every source file analysed
    return report


def _pyright_errors(folder: str) -> str:
    """pyright's errors in one folder ("" when none); an unresolved import is an error too."""
    report = _pyright_report()
    errors = [
        f"{d['file']}:{d['range']['start']['line'] + 1}: {d['message']}"
        for d in report["generalDiagnostics"]
        if d["severity"] == "error" and Path(d["file"]).resolve().is_relative_to(REPO / folder)
    ]
    return "\n".join(errors)[:6000]


def test_pyright_finds_nothing_in_numerics_and_theorem():
    """One pyright run over both folders (one test, so that pytest-xdist never runs it twice)."""
    report = _pyright_report()
    assert report["summary"]["errorCount"] == sum(d["severity"] == "error" for d in report["generalDiagnostics"])
    assert _pyright_errors("numerics") == ""
    assert _pyright_errors("theorem") == ""
