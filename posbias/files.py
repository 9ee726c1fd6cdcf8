"""How posbias writes a run's files: all of them or none, with the user's permissions.

``write_run(out_dir, texts, figures)`` renders every file into a fresh temporary
folder beside ``out_dir`` first; only when all are complete does it move them into
``out_dir`` (each by an atomic rename), so an error or a kill while rendering leaves
``out_dir`` as it was and no temporary file inside it. Files get the permissions
the user's umask gives a new file (not mkstemp's 0600).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from posbias.errors import UserError


class OutputError(UserError):
    """The output folder cannot be written; one line naming it."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _prepare(out_dir: Path) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError(f"--out {out_dir}: exists and is not a folder")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"--out {out_dir}: cannot create the folder ({exc.strerror or exc})") from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise OutputError(f"--out {out_dir}: the folder is not writable")


def write_run(out_dir: Path, texts: dict[str, str], figures: dict | None = None) -> list[Path]:
    """Write ``texts`` (name -> text) and ``figures`` (name -> matplotlib Figure, PNG) into
    ``out_dir`` as one set; returns the written paths in order."""
    out_dir = Path(out_dir)
    figures = figures or {}
    for name in [*texts, *figures]:
        target = out_dir / name
        if target.exists() and not target.is_file():
            raise OutputError(f"--out {out_dir}: {name} exists and is not a regular file")
    _prepare(out_dir)
    mode = 0o666 & ~_umask()
    try:
        staging = Path(tempfile.mkdtemp(prefix=".posbias-run-", dir=out_dir))
    except OSError as exc:
        raise OutputError(f"--out {out_dir}: cannot write ({exc.strerror or exc})") from None
    try:
        for name, text in texts.items():
            (staging / name).write_text(text, encoding="utf-8")
        for name, fig in figures.items():
            fig.savefig(staging / name, dpi=150, bbox_inches="tight", format="png")
        for name in [*texts, *figures]:
            os.chmod(staging / name, mode)
        written = []
        for name in [*texts, *figures]:
            os.replace(staging / name, out_dir / name)
            written.append(out_dir / name)
        return written
    except OSError as exc:
        raise OutputError(f"--out {out_dir}: cannot write ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
