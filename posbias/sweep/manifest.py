"""The sweep manifest: what was asked (spec, digest, plan), with what (versions, devices) and
who computed what (per-process parts), written atomically.

``DIR/manifest.json`` is claimed once before any work by process 0: the check that the folder
holds no other sweep and the write happen under one exclusive lock on the folder
(``posbias.io.files.locked``, the lock of every posbias output set), so of two sweeps started
into one folder at once exactly one claims it and the other is refused. It is completed at
the end (merged with every ``DIR/manifest-process-I.json``, under the same lock); each
process keeps its own part up to date after every batch, so a killed and resumed sweep
still records which process, device and engine computed each batch. ``read`` refuses a
manifest that is not one (not JSON, a JSON list, keys missing) with one line.
"""

from __future__ import annotations

import json
import platform
import socket
from pathlib import Path

from posbias.errors import UserError

FORMAT = "posbias-sweep/1"
MAIN = "manifest.json"


def part_name(process: int) -> str:
    return f"manifest-process-{process}.json"


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for name in ("posbias", "jax", "jaxlib", "numpy", "pyarrow"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def write_json(path: Path, data: dict) -> None:
    """Write JSON atomically: a temporary file in the same folder, then a rename."""
    from posbias.io.files import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda handle: handle.write(json.dumps(data, indent=1, default=str) + "\n"), binary=False)


REQUIRED = {"format": str, "digest": str, "points": int, "axes": list, "dims": list, "plan": dict, "complete": bool}
PLAN_REQUIRED = {"memory_budget": int, "batch_cap": int, "batches": int, "groups": list}


def read(out_dir: Path) -> dict | None:
    """The manifest in ``out_dir`` (None if there is none); UserError (one line) if the file is
    not a posbias sweep manifest: not JSON, not an object, or a required key missing or mistyped."""
    path = Path(out_dir) / MAIN
    try:
        if not path.is_file():
            return None
    except OSError:  # a name too long, a folder we may not enter: the writer's checks name it
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UserError(f"{path}: unreadable manifest (not JSON)") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a sweep manifest (a JSON {type(data).__name__}, expected an object)")
    for keys, where in ((REQUIRED, data), (PLAN_REQUIRED, data.get("plan"))):
        for key, kind in keys.items():
            value = where.get(key) if isinstance(where, dict) else None
            if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
                raise UserError(
                    f"{path}: not a sweep manifest ({key!r}: expected {kind.__name__}, got {type(value).__name__})"
                )
    if data["format"] != FORMAT:
        raise UserError(f"{path}: format {data['format']!r}, expected {FORMAT!r}")
    return data


def host() -> str:
    return socket.gethostname()


def merge(out_dir: Path, main: dict, total_batches: int, finished: set[int]) -> dict:
    """manifest.json completed with every process part present: batches, devices, timings."""
    out = dict(main)
    batches, processes = {}, []
    for path in sorted(Path(out_dir).glob("manifest-process-*.json")):
        try:
            part = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(part, dict) or not isinstance(part.get("batches", {}), dict):
            continue  # not a part of ours; the table files, not this record, say what is finished
        batches.update(part.get("batches", {}))
        processes.append({k: v for k, v in part.items() if k != "batches"})
    out["batches"] = {k: batches[k] for k in sorted(batches, key=int)}
    out["process_parts"] = processes
    out["finished_batches"] = len(finished)
    out["complete"] = len(finished) == total_batches
    return out
