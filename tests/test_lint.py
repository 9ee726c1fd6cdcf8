"""The linter's configuration (pyproject.toml [tool.ruff]) holds on the whole repository: zero findings."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    ruff = Path(sys.executable).parent / "ruff"
    assert ruff.exists(), f"{ruff} missing: install the test extra (pip install -e '.[test]')"
    done = subprocess.run([str(ruff), "check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
