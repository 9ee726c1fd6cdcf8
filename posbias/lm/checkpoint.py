"""Checkpoints of a language-model run: one ``.npz`` file, written atomically, self-describing.

``checkpoint.npz`` holds ``meta`` (a JSON string: format, model and training configs,
corpus fingerprint, step, evaluation history), ``params/<name>`` (float32 arrays, names as
``posbias.lm.model.flatten`` gives them) and ``opt/<k>`` (the optimiser state's leaves in
tree order). It is written to a temporary file in the same folder, flushed to disk and
renamed over the old one, so a kill -9 at any moment leaves either the previous
checkpoint or the new one, never a partial file. ``config.json`` beside it is a readable
copy of the configs (written the same way).
"""

from __future__ import annotations

import json
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pydantic

from posbias.errors import UserError
from posbias.io.schema import first_error
from posbias.lm.config import ModelConfig, TrainConfig

FORMAT = "posbias-lm-checkpoint/1"
CHECKPOINT = "checkpoint.npz"
CONFIG = "config.json"


class CheckpointError(UserError):
    """A checkpoint cannot be read or does not describe a model; one line naming the file."""


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: configs, step reached, flat float32 params, optimiser leaves, meta."""

    model: ModelConfig
    train: TrainConfig
    step: int
    params: dict
    opt_leaves: tuple
    meta: dict

    @property
    def complete(self) -> bool:
        return self.step >= self.train.steps


def atomic_write_bytes(path: Path, write) -> None:
    """Call ``write(file)`` on a temporary file beside ``path``, fsync it, rename it over ``path``."""
    from posbias.io.files import atomic_write

    atomic_write(path, write)


def save(folder: Path, meta: dict, params_flat: dict, opt_leaves) -> Path:
    """Write ``folder/checkpoint.npz`` atomically (see the module docstring)."""
    arrays = {"meta": np.array(json.dumps({"format": FORMAT, **meta}, sort_keys=True))}
    arrays.update({f"params/{k}": np.asarray(v) for k, v in params_flat.items()})
    arrays.update({f"opt/{i:04d}": np.asarray(v) for i, v in enumerate(opt_leaves)})
    target = Path(folder) / CHECKPOINT
    atomic_write_bytes(target, lambda f: np.savez(f, **arrays))
    return target


def save_config(folder: Path, meta: dict) -> Path:
    target = Path(folder) / CONFIG
    text = json.dumps({"format": FORMAT, **meta}, indent=1, sort_keys=True) + "\n"
    atomic_write_bytes(target, lambda f: f.write(text.encode("utf-8")))
    return target


def resolve(path: Path) -> Path:
    """A run folder or a checkpoint file -> the checkpoint file (CheckpointError if absent)."""
    path = Path(path)
    if path.is_dir():
        path = path / CHECKPOINT
    if not path.exists():
        raise CheckpointError(
            f"{path}: no such checkpoint (expected a run folder of posbias train or its {CHECKPOINT})"
        )
    if not path.is_file():
        raise CheckpointError(f"{path}: is not a regular file, expected a {CHECKPOINT}")
    return path


def load(path: Path) -> Checkpoint:
    """Read and check a checkpoint: readable archive, known format, params of the config's shapes."""
    from posbias.lm.model import param_shapes

    path = resolve(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            names = list(z.files)
            if "meta" not in names:
                raise CheckpointError(f"{path}: not a posbias train checkpoint (no 'meta' entry)")
            meta = json.loads(str(z["meta"][()]))
            params = {n[len("params/") :]: z[n] for n in names if n.startswith("params/")}
            opt = tuple(z[n] for n in sorted(n for n in names if n.startswith("opt/")))
    except CheckpointError:
        raise
    except (OSError, ValueError, EOFError, KeyError, TypeError, zipfile.BadZipFile, zlib.error) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise CheckpointError(f"{path}: unreadable or corrupt checkpoint ({reason})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(
            f"{path}: unknown checkpoint format "
            f"{meta.get('format') if isinstance(meta, dict) else meta!r}, "
            f"expected {FORMAT}"
        )
    try:
        fields = {
            kind: {name: meta[part][name] for name in kind.model_fields}
            for kind, part in ((ModelConfig, "model"), (TrainConfig, "train"))
        }
        step = int(meta["step"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: checkpoint metadata incomplete ({exc})") from None
    try:
        model, train = (kind(**given) for kind, given in fields.items())
    except pydantic.ValidationError as err:
        raise CheckpointError(f"{path}: checkpoint describes no valid model ({first_error(err)})") from None
    expected = param_shapes(model)
    if set(expected) != set(params):
        missing = sorted(set(expected) ^ set(params))[0]
        raise CheckpointError(f"{path}: parameter set does not match the config (first difference: {missing})")
    for name, shape in expected.items():
        value = params[name]
        if value.shape != shape or not np.issubdtype(value.dtype, np.floating):
            raise CheckpointError(f"{path}: params/{name}: shape {value.shape} {value.dtype}, expected {shape} float")
        if not np.all(np.isfinite(value)):
            raise CheckpointError(f"{path}: params/{name}: non-finite values")
    return Checkpoint(model, train, step, params, opt, meta)
