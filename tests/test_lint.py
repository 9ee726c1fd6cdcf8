"""The linters' configurations (pyproject.toml [tool.ruff], [tool.pyright]) hold: zero findings.

ruff (lint, and its formatter changing nothing) on the whole repository;
pyright (basic mode) on the library's numerics/ and theorem/ folders,
resolved as the installed posbias.numerics / posbias.theorem through the .pyright symlink tree.
"""

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


def _pyright_errors(folder: str) -> str:
    """pyright's errors on one folder ("" when none), with this interpreter's packages (not whatever .venv
    holds); every source file of the folder analysed (an unresolved import is an error too)."""
    done = subprocess.run(
        [str(_tool("pyright")), "--outputjson", "--pythonpath", sys.executable, folder],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(done.stdout)
    errors = [
        f"{d['file']}:{d['range']['start']['line'] + 1}: {d['message']}"
        for d in report["generalDiagnostics"]
        if d["severity"] == "error"
    ]
    assert report["summary"]["filesAnalyzed"] == len(list((REPO / folder).rglob("*.py"))), report["summary"]
    assert report["summary"]["errorCount"] == len(errors)
    return "\n".join(errors)[:6000]


def test_pyright_numerics():
    assert _pyright_errors("numerics") == ""


def test_pyright_theorem():
    assert _pyright_errors("theorem") == ""
