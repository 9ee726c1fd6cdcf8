"""A verification run's files as one output set: ``preflight`` checks the folder can be
written before any search runs; ``write_set`` writes every counterexample file of the run
with ``posbias.io.files.write_run``: all or none, under the folder's lock, and the files of an
earlier verify set that this one does not rewrite are removed under the same lock, so the
folder holds one run's set, never a mix.

The set describes itself: every counterexample JSON carries ``set`` (a SHA-256 over the
whole set's contents, ``posbias.io.files.set_stamp``) and ``digests`` (the SHA-256 of each
model file it names). An earlier set is recognised by content (JSON files of format
``posbias-counterexample/1`` and the files they name), never by a name pattern, so the
user's own files in the folder are left alone. ``check_member`` is the reader's side.

Files are written only where the caller names a folder (``verify(out=...)``, default None:
no file; the command's ``--out``, default ./posbias-verify); nothing else is written (hypothesis's caches go to a
private temporary folder, ``posbias.verify.runner.private_hypothesis_home``).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from posbias.io import files as pf
from posbias.verify.types import FORMAT

_MEMBER = re.compile(r"[a-z0-9][a-z0-9-]*\.(json|yaml|npz)")  # slug(name) + suffix: no folders, no dot files
_READ_MAX = 64 * 2**20  # a counterexample JSON larger than this is not one of ours


def preflight(out) -> None:
    """Raise UserError (one line, naming --out) unless ``out`` can receive the run's files;
    leaves the folder as it was."""
    pf.check_writable(Path(out))


def digest(content: str | bytes) -> str:
    """SHA-256 (hex) of a member's bytes (text as UTF-8)."""
    return hashlib.sha256(content.encode("utf-8") if isinstance(content, str) else content).hexdigest()


def _read_payload(path: Path) -> dict | None:
    """A counterexample JSON's content, or None if ``path`` is not one."""
    try:
        if not path.is_file() or path.stat().st_size > _READ_MAX:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None


def _named(payload: dict) -> list[str]:
    parts = payload.get("files")
    return [n for n in parts.values() if isinstance(n, str) and _MEMBER.fullmatch(n)] if isinstance(parts, dict) else []


def earlier_set(out: Path) -> list[str]:
    """The files of an earlier verify set in ``out``: its counterexample JSONs and the model files
    they name (only plain counterexample file names)."""
    names: list[str] = []
    for path in sorted(Path(out).glob("*.json")):
        payload = _read_payload(path) if _MEMBER.fullmatch(path.name) else None
        if payload is not None:
            names += [path.name, *_named(payload)]
    return names


def write_set(out, contents: dict[str, dict | str | bytes]) -> list[Path]:
    """Write ``contents`` into ``out`` as one set: name -> a counterexample payload (dict, written as
    JSON with ``set`` and ``digests`` added), text or bytes. Returns the paths in the order given.
    Raises UserError (one line), leaving ``out`` as it was."""
    out = Path(out)
    plain = {n: (json.dumps(c, sort_keys=True) if isinstance(c, dict) else c) for n, c in contents.items()}
    stamp = pf.set_stamp(plain)
    texts, binaries = {}, {}
    for name, content in contents.items():
        if isinstance(content, dict):
            payload = {
                **content,
                "set": stamp,
                "digests": {n: digest(contents[n]) for n in _named(content) if n in contents},
            }
            texts[name] = json.dumps(payload, indent=1) + "\n"
        elif isinstance(content, str):
            texts[name] = content
        else:
            binaries[name] = content
    written = pf.write_run(out, texts, binaries=binaries, retire=earlier_set)
    order = list(contents)
    return sorted(written, key=lambda p: order.index(p.name))


def check_member(path, payload: dict) -> None:
    """Raise ValueError unless the counterexample JSON at ``path`` (content ``payload``) and the files
    beside it belong together: the model files it names have the digests it states, and every
    other counterexample JSON in its folder carries the same ``set`` stamp."""
    path = Path(path)
    for name, want in (payload.get("digests") or {}).items():
        member = path.parent / str(name)
        try:
            got = digest(member.read_bytes())
        except OSError:
            raise ValueError(f"{path}: names {name}, which is missing beside it") from None
        if got != want:
            raise ValueError(f"{path}: {name} beside it is not the file this counterexample wrote (another run's file)")
    stamp = payload.get("set")
    if stamp is None:
        return
    for other in sorted(path.parent.glob("*.json")):
        data = _read_payload(other) if other != path and _MEMBER.fullmatch(other.name) else None
        if data is not None and data.get("set") != stamp:
            raise ValueError(f"{path}: {other.name} beside it belongs to another verify run (a mixed folder)")
