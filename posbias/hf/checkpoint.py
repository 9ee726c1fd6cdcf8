"""A local Hugging Face checkpoint folder: config.json, *.safetensors, tokenizer.json. No network, no hub.

Weights are read with the ``safetensors`` package (``safe_open(..., framework="numpy")``:
the file is memory-mapped and a tensor is copied out only when asked for; bfloat16 comes
back as ``ml_dtypes.bfloat16`` and is cast to the compute dtype by the caller). A sharded
checkpoint is read through its ``model.safetensors.index.json`` (``weight_map``: tensor
name -> file); without an index every ``*.safetensors`` file of the folder is read.
Tensor names are looked up with the family's base prefix (``transformer.`` for a
``*ForCausalLM`` save, none for a base-model save), found once from the embedding's name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from posbias.errors import UserError
from posbias.hf.families import Family, Spec, family_of, spec_of

INDEX = "model.safetensors.index.json"


class CheckpointError(UserError):
    """An unreadable or incomplete checkpoint folder: one line."""


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data


def is_checkpoint(folder) -> bool:
    """True for a folder with a config.json naming a model_type (what ``posbias measure`` dispatches on)."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return False
    try:
        return "model_type" in json.loads(path.read_text())
    except (OSError, ValueError):
        return False


def _weight_map(folder: Path) -> dict:
    """tensor name -> safetensors file (via the index, or by listing every file's keys)."""
    from safetensors import safe_open

    index = folder / INDEX
    if index.is_file():
        mapping = _read_json(index).get("weight_map")
        if not isinstance(mapping, dict) or not mapping:
            raise CheckpointError(f"{index}: expected a non-empty weight_map object")
        out = {}
        for name, file in mapping.items():
            path = folder / str(file)
            if not path.is_file():
                raise CheckpointError(f"{index}: shard {file} of tensor {name} is missing from {folder}")
            out[name] = path
        return out
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{folder}: no *.safetensors file (pytorch_model.bin is not read: convert it "
                              f"to safetensors)")
    out = {}
    for path in files:
        try:
            with safe_open(str(path), framework="numpy") as f:
                out.update({name: path for name in f.keys()})
        except Exception as exc:  # safetensors raises its own error types for corrupt headers
            raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from None
    return out


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint folder: its parsed config, ``Spec``, ``Family`` and where each tensor lives."""

    folder: Path
    config: dict
    spec: Spec
    family: Family
    files: dict                   # tensor name -> Path
    prefix: str

    def has(self, name: str) -> bool:
        return self.prefix + name in self.files

    def tensor(self, name: str) -> np.ndarray:
        """The tensor ``name`` (relative to the base prefix) as stored (float32, float16 or bfloat16)."""
        from safetensors import safe_open

        full = self.prefix + name
        if full not in self.files:
            raise CheckpointError(f"{self.folder}: tensor {full} is missing (a {self.spec.model_type} checkpoint "
                                  f"should have it)")
        with safe_open(str(self.files[full]), framework="numpy") as f:
            return f.get_tensor(full)

    def tokenizer(self):
        """The folder's tokenizer.json as a ``tokenizers.Tokenizer``."""
        from tokenizers import Tokenizer

        path = self.folder / "tokenizer.json"
        if not path.is_file():
            raise CheckpointError(f"{self.folder}: tokenizer.json is missing (needed to tokenize --data text)")
        try:
            return Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception on a malformed file
            raise CheckpointError(f"{path}: not a readable tokenizer ({exc})") from None


def load(folder) -> Checkpoint:
    """Read a checkpoint folder's config and safetensors index (no tensor is read yet)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a folder (expected a Hugging Face checkpoint folder)")
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{folder}: config.json is missing (expected a Hugging Face checkpoint folder)")
    config = _read_json(config_path)
    family = family_of(config.get("model_type"), str(config_path))
    spec = spec_of(config, str(config_path))
    files = _weight_map(folder)
    prefix = next((p for p in family.base_prefixes if p + family.embed in files), None)
    if prefix is None:
        raise CheckpointError(f"{folder}: no {family.embed} tensor (with or without a 'transformer.' prefix): "
                              f"not a {family.model_type} checkpoint")
    return Checkpoint(folder, config, spec, family, files, prefix)
