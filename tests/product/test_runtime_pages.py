"""``posbias.runtime.pages``: the console script turns NumPy's huge-page advice off before NumPy is imported,
unless the user chose (``NUMPY_MADVISE_HUGEPAGE``); a program importing posbias keeps NumPy's own setting."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ENTRY_CHILD = """
import json, os, sys
sys.argv = ["posbias", "rollout", "no-such-config.yaml"]  # refused (exit 2): main returns
from posbias.entry import main
code = main()
numpy_loaded = "numpy" in sys.modules  # imported by the command itself, after the switch was set
from numpy._core.multiarray import _get_madvise_hugepage
print(json.dumps({"code": code, "numpy_loaded": numpy_loaded, "switch": os.environ.get("NUMPY_MADVISE_HUGEPAGE"),
                  "advice": bool(_get_madvise_hugepage())}))
"""

LIBRARY_CHILD = """
import json, os
import posbias
posbias.build_model(layers=2, heads=2, tokens=8, schedule="constant:0.5").profile()
import posbias.hf.measure
from numpy._core.multiarray import _get_madvise_hugepage
print(json.dumps({"switch": os.environ.get("NUMPY_MADVISE_HUGEPAGE"), "advice": bool(_get_madvise_hugepage())}))
"""


def _child(code: str, switch: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if switch is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = switch
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_console_script_turns_the_advice_off_before_numpy_is_imported():
    got = _child(ENTRY_CHILD, None)
    assert got == {"code": 2, "numpy_loaded": True, "switch": "0", "advice": False}


@pytest.mark.parametrize("switch, advice", [("1", True), ("0", False)])
def test_the_users_own_switch_is_kept(switch, advice):
    got = _child(ENTRY_CHILD, switch)
    assert got == {"code": 2, "numpy_loaded": True, "switch": switch, "advice": advice}


def test_a_program_importing_posbias_keeps_numpys_setting():
    # NumPy advises huge pages by default on Linux (kernel 4.6 or later), as on this project's machines
    assert _child(LIBRARY_CHILD, None) == {"switch": None, "advice": True}
