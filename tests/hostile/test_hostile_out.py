"""``--out ""`` on every command that takes ``--out`` (issue 17, item 9).

``Path("")`` is ``.``, so an empty ``--out`` used to write into the current folder. Every
command now refuses it at the argument parser: exit 2, one line naming ``--out``, and
nothing written into the working folder.
"""

from __future__ import annotations

import contextlib
import io
import os

import pytest

from posbias.cli import main

COMMANDS = [
    ["rollout", "examples/small.yaml"],
    ["demo"],
    ["sweep", "examples/sweep-ushape.yaml"],
    ["plot", "some-sweep"],
    ["compare", "a.csv", "b.csv"],
    ["fit", "a.csv", "examples/small.yaml"],
    ["train", "--preset", "ci"],
    ["measure", "some-run"],
    ["validate"],
    ["verify", "C1"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_empty_out_is_refused_and_nothing_is_written(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main([*argv, "--out", ""])
        except SystemExit as exc:
            code = exc.code
    assert code == 2
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    assert "--out" in lines[-1] and "empty" in lines[-1], lines
    assert "Traceback" not in err.getvalue()
    assert os.listdir(tmp_path) == []
