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
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from posbias.errors import UserError
from posbias.hf.families import Family, Spec, family_of, spec_of

INDEX = "model.safetensors.index.json"


class CheckpointError(UserError):
    """An unreadable or incomplete checkpoint folder: one line."""


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {_json_kind(data)}")
    return data


def _json_kind(value) -> str:
    kinds = {list: "a list", str: "a string", bool: "true or false", int: "a number", float: "a number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def is_checkpoint(folder) -> bool:
    """True for a folder with a config.json naming a model_type."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return False
    try:
        return "model_type" in json.loads(path.read_text())
    except (OSError, ValueError):
        return False


ACCEPTS = (
    "a posbias train run folder or its checkpoint.npz, a Hugging Face checkpoint folder (config.json, "
    "*.safetensors, tokenizer.json) or a .gguf file"
)
"""What ``posbias measure`` and ``validate --checkpoint`` read, for the refusal of anything else."""

TRAINED_FORMAT = "posbias-lm-checkpoint/"
HF_MARKERS = ("*.safetensors", INDEX, "tokenizer.json")


def route(path) -> str:
    """Which reader a ``measure`` / ``validate --checkpoint`` path goes to, from names alone:

    * ``"gguf"``: a file named ``*.gguf``;
    * ``"trained"``: a folder with posbias train's checkpoint.npz or its config.json (format
      ``posbias-lm-checkpoint/...``: a run folder whose checkpoint is missing), a folder with no
      Hugging Face file at all, or a zip archive (a checkpoint.npz under any name);
    * ``"hf"``: any other folder with a config.json (garbage, a list or no model_type are then
      refused by ``load`` naming config.json) or with *.safetensors, the safetensors index or
      tokenizer.json but no config.json;
    * ``"other"``: any other file (a YAML config, a CSV): refused with ``ACCEPTS``."""
    import zipfile

    path = Path(path)
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            return "gguf"
        return "trained" if zipfile.is_zipfile(path) else "other"
    if not path.is_dir():
        return "trained"  # absent: posbias.lm.checkpoint names the path
    if (path / "checkpoint.npz").exists():
        return "trained"
    config = path / "config.json"
    if config.is_file():
        try:
            data = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return "hf"
        trained = isinstance(data, dict) and str(data.get("format", "")).startswith(TRAINED_FORMAT)
        return "trained" if trained else "hf"
    return "hf" if any(next(path.glob(marker), None) is not None for marker in HF_MARKERS) else "trained"


def refuse_other(path, flag: str) -> None:
    """The one line for a path ``route`` calls ``"other"`` (``flag``: the argument that named it)."""
    kind = {
        ".yaml": "a YAML file",
        ".yml": "a YAML file",
        ".json": "a JSON file",
        ".csv": "a CSV file",
        ".npy": "a .npy array",
    }.get(Path(path).suffix.lower(), "not a checkpoint")
    raise CheckpointError(f"{flag} {path}: {kind}; expected {ACCEPTS}")


FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")  # safetensors' names of the dtypes a weight may have


def safetensors_dtypes(path: Path) -> dict[str, str]:
    """tensor name -> stored dtype ("F32", "I32", ...) from a safetensors file's header (no tensor is read);
    a file safetensors cannot open (cut short, a corrupt header, offsets beyond its end) is refused."""
    from safetensors import safe_open

    if not path.is_file():
        raise CheckpointError(f"{path}: not a regular file (expected a safetensors file of weights)")
    try:
        with safe_open(str(path), framework="numpy") as f:
            return {name: f.get_slice(name).get_dtype() for name in f.keys()}
    except Exception as exc:  # safetensors raises its own error types for corrupt headers
        raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from None


def weight_dtypes(folder: Path) -> dict[str, tuple[Path, str]]:
    """tensor name -> (safetensors file, stored dtype): through ``model.safetensors.index.json`` when the
    folder has one (every shard it names must exist and hold the tensors the index puts there), else
    every ``*.safetensors`` file of the folder. Every file's header is read, none of its tensors."""
    index = folder / INDEX
    if index.is_file():
        mapping = read_json(index).get("weight_map")
        if not isinstance(mapping, dict) or not mapping:
            raise CheckpointError(f"{index}: expected a non-empty weight_map object")
        headers: dict[Path, dict[str, str]] = {}
        out = {}
        for name, file in mapping.items():
            path = folder / str(file)
            if not path.is_file():
                raise CheckpointError(f"{index}: shard {file} of tensor {name} is missing from {folder}")
            if path not in headers:
                headers[path] = safetensors_dtypes(path)
            if name not in headers[path]:
                raise CheckpointError(f"{index}: tensor {name} is not in its shard {file}")
            out[name] = (path, headers[path][name])
        return out
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(
            f"{folder}: no *.safetensors file (pytorch_model.bin is not read: convert it to safetensors)"
        )
    return {name: (path, dtype) for path in files for name, dtype in safetensors_dtypes(path).items()}


def _weight_map(folder: Path) -> dict:
    """tensor name -> safetensors file (``weight_dtypes`` without the dtypes)."""
    return {name: path for name, (path, _) in weight_dtypes(folder).items()}


def read_tensor(path: Path, name: str, where) -> np.ndarray:
    """The tensor ``name`` of the safetensors file ``path`` as stored, refused unless stored as floating point
    (``require_float``)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        require_float(name, f.get_slice(name).get_dtype(), where)
        return f.get_tensor(name)


def require_float(name: str, dtype: str, where) -> None:
    """A weight stored as integers (a quantised checkpoint's packed values) would be read as numbers."""
    if dtype not in FLOAT_DTYPES:
        raise CheckpointError(
            f"{where}: tensor {name} is stored as {dtype}; expected floating-point weights "
            f"({', '.join(FLOAT_DTYPES)}): quantised checkpoints are not read"
        )


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint folder: its parsed config, ``Spec``, ``Family`` and where each tensor lives."""

    folder: Path
    config: dict
    spec: Spec
    family: Family
    files: dict  # tensor name -> Path
    prefix: str
    read: set = field(default_factory=set, compare=False, repr=False)  # full names ``tensor`` returned

    def has(self, name: str) -> bool:
        return self.prefix + name in self.files

    def tensor(self, name: str) -> np.ndarray:
        """The tensor ``name`` (relative to the base prefix) as stored (float32, float16 or bfloat16)."""
        full = self.prefix + name
        if full not in self.files:
            raise CheckpointError(
                f"{self.folder}: tensor {full} is missing (a {self.spec.model_type} checkpoint should have it)"
            )
        value = read_tensor(self.files[full], full, self.folder)
        self.read.add(full)
        return value

    def tokenizer(self):
        """The folder's tokenizer.json (``read_tokenizer``)."""
        return read_tokenizer(self.folder)


def read_tokenizer(folder: Path):
    """``folder``/tokenizer.json as a ``tokenizers.Tokenizer`` with its truncation and padding switched off: posbias
    tokenizes a whole text and cuts its own windows, where a saved ``truncation`` (all-MiniLM-L6-v2's: 128
    tokens) would silently keep only the text's start and a saved ``padding`` would add [PAD] tokens to it."""
    from tokenizers import Tokenizer

    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        raise CheckpointError(f"{folder}: tokenizer.json is missing (needed to tokenize --data text)")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on a malformed file
        raise CheckpointError(f"{path}: not a readable tokenizer ({exc})") from None
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def load(folder) -> Checkpoint:
    """Read a checkpoint folder's config and safetensors index (no tensor is read yet)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a folder (expected a Hugging Face checkpoint folder)")
    config_path = folder / "config.json"
    if config_path.exists() and not config_path.is_file():
        raise CheckpointError(f"{config_path}: not a regular file (expected the checkpoint's JSON config)")
    if not config_path.is_file():
        raise CheckpointError(f"{folder}: config.json is missing (expected a Hugging Face checkpoint folder)")
    config = read_json(config_path)
    if "model_type" not in config:
        from posbias.hf.families import supported_line

        raise CheckpointError(
            f"{config_path}: no model_type key (expected a Hugging Face config.json naming the "
            f"architecture; {supported_line()})"
        )
    family = family_of(config.get("model_type"), str(config_path))
    spec = spec_of(config, str(config_path))
    files = _weight_map(folder)
    prefix = next((p for p in family.base_prefixes if p + family.embed in files), None)
    if prefix is None:
        raise CheckpointError(
            f"{folder}: no {family.embed} tensor (with or without a 'transformer.' prefix): "
            f"not a {family.model_type} checkpoint"
        )
    _check_layers(folder, family, spec, files, prefix)
    return Checkpoint(folder, config, spec, family, files, prefix)


def _check_layers(folder: Path, family: Family, spec: Spec, files: dict, prefix: str) -> None:
    """Refuse files holding layers beyond config.json's count: measuring their first T layers would
    be a truncated model (a missing layer is refused when its tensor is read)."""
    pattern = re.compile(re.escape(prefix + family.layer).replace(re.escape("{i}"), r"(\d+)"))
    beyond = [
        (int(m.group(1)), name) for name in files if (m := pattern.match(name)) and int(m.group(1)) >= spec.layers
    ]
    if beyond:
        top = max(i for i, _ in beyond)
        name = min(n for i, n in beyond if i == top)
        raise CheckpointError(
            f"{folder}: tensor {name} belongs to layer {top}, but config.json gives "
            f"{spec.layers} layer{'s' * (spec.layers != 1)}: the files hold a {top + 1}-layer "
            f"model (refusing to measure a truncated one)"
        )


def stored_bytes(ckpt) -> int:
    """Bytes of the files the tensors are read from (an upper bound of the weights as stored)."""
    import os

    try:
        return sum(os.path.getsize(p) for p in set(ckpt.files.values()))
    except (OSError, TypeError, AttributeError):
        from posbias.hf.memory import params_bytes

        return params_bytes(ckpt.spec, 4)


BUFFERS = (".attn.bias", ".attn.masked_bias", ".position_ids", ".inv_freq")
"""Name endings of buffers some saves keep beside the weights (GPT-2's causal mask, BERT's position
ids, rotary frequencies): not parameters, never reported as unused."""


def unused(ckpt: Checkpoint) -> list[str]:
    """The tensors of the files that reading the canonical parameters (``posbias.hf.weights.params``)
    did not use, less ``BUFFERS``: an untied output head read outside the base prefix counts as
    used. Call after ``params``; transformers ignores such tensors too (with a warning)."""
    head = ckpt.family.lm_head
    tied = ckpt.family.tied(ckpt.config)
    used = set(ckpt.read) | ({head} if head in ckpt.files and not tied else set())
    return sorted(n for n in ckpt.files if n not in used and not n.endswith(BUFFERS))


def unused_note(ckpt: Checkpoint) -> str | None:
    """One line naming the unused tensors (``unused``), or None."""
    names = unused(ckpt)
    if not names:
        return None
    return (
        f"{len(names)} tensor{'s' * (len(names) != 1)} in {ckpt.folder} not used by config.json's model "
        f"(e.g. {names[0]}): not measured"
    )
