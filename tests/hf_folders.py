"""Copies of the Hugging Face fixture folders (tests/fixtures/hf), edited for hostile-input tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"


def hf_copy(
    tmp: Path, family: str = "bloom", name: str = "ck", *, config=None, edit: dict | None = None, drop: tuple = ()
) -> Path:
    """A copy of a fixture folder at ``tmp / name``: ``config`` replaces config.json's text (or JSON value),
    ``edit`` updates its keys (None deletes one), ``drop`` removes files."""
    folder = tmp / name
    shutil.copytree(FIXTURES / family, folder)
    if edit is not None:
        cfg = json.loads((folder / "config.json").read_text())
        for key, value in edit.items():
            if value is None:
                cfg.pop(key, None)
            else:
                cfg[key] = value
        (folder / "config.json").write_text(json.dumps(cfg))
    if config is not None:
        (folder / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    for file in drop:
        (folder / file).unlink()
    return folder


def measure_command(argv: list[str]) -> int:
    """``posbias measure ARGV`` in this process (what ``python -m posbias.hf.cli ARGV`` ran before issue 30)."""
    from posbias.cli import main

    return main(["measure", *argv])
