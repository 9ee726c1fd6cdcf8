"""Running the scripts under benchmarks/ from tests: as a whole process, or imported as a module."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run_for_json(script: str, *args: str, cwd: Path) -> dict:
    """``python benchmarks/SCRIPT ARGS --out cwd/SCRIPT.json`` in ``cwd``; asserts exit code 0 and returns
    the JSON it wrote."""
    out = cwd / f"{Path(script).stem}.json"
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text())


def load(script: str) -> ModuleType:
    """benchmarks/SCRIPT imported as a module (the scripts import their neighbour common.py by name)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(Path(script).stem, BENCHMARKS / script)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module
