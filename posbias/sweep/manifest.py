"""The sweep manifest: what was asked (spec, digest, plan), with what (versions, devices) and
who computed what (per-process parts), written atomically.

``DIR/manifest.json`` is written once before any work by process 0 and completed at the
end (merged with every ``DIR/manifest-process-I.json``, under an exclusive lock on the
folder); each process keeps its own part up to date after every batch, so a killed and
resumed sweep still records which process, device and engine computed each batch.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import socket
from contextlib import contextmanager
from pathlib import Path

from posbias.errors import UserError

FORMAT = "posbias-sweep/1"
MAIN = "manifest.json"


class ManifestError(UserError):
    """The output folder holds a different sweep (or none where one is expected); one line."""


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
    from posbias.files import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda handle: handle.write(json.dumps(data, indent=1, default=str) + "\n"), binary=False)


def read(out_dir: Path) -> dict | None:
    path = Path(out_dir) / MAIN
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ManifestError(f"{path}: unreadable manifest (not JSON)") from None


def host() -> str:
    return socket.gethostname()


@contextmanager
def locked(out_dir: Path):
    """An exclusive flock on the output folder (the merge of the per-process parts)."""
    fd = os.open(out_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def merge(out_dir: Path, main: dict, total_batches: int, finished: set[int]) -> dict:
    """manifest.json completed with every process part present: batches, devices, timings."""
    out = dict(main)
    batches, processes = {}, []
    for path in sorted(Path(out_dir).glob("manifest-process-*.json")):
        try:
            part = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        batches.update(part.get("batches", {}))
        processes.append({k: v for k, v in part.items() if k != "batches"})
    out["batches"] = {k: batches[k] for k in sorted(batches, key=int)}
    out["process_parts"] = processes
    out["finished_batches"] = len(finished)
    out["complete"] = len(finished) == total_batches
    return out
