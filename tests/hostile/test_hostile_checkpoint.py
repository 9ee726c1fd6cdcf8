"""Hostile Hugging Face checkpoint folders through ``posbias measure`` (issue 29): every case ends in a
clean refusal (exit 2, one line, no traceback, no output folder) within a stated memory bound, through
posbias's JAX forward and, where the input reaches it, ``--backend transformers``.

The folders are copies of the Llama fixture, then damaged: safetensors files cut short, empty, with a
corrupt header or offsets beyond the file, config.json missing or not an object, counts missing, zero,
mistyped or contradicting the tensors, an index naming a missing shard, tensors missing, of the wrong
shape, stored as integers, NaN or infinite, a file where a folder is expected and the reverse. Before
this table the transformers backend crashed with a traceback on five of them and measured three
(a missing tensor, a missing layer count, another family's config) with weights transformers had
initialised at random, exit 0. A hypothesis test flips and cuts bytes of the weights file and
config.json at random and requires a refusal or finite numbers.
"""

from __future__ import annotations

import json
import math
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hf_folders import hf_copy
from tests.peak import peak_rss

CONSOLE = str(Path(sys.executable).with_name("posbias"))
PEAK_LIMIT = 2.5 * 2**30  # every refusal and the small model's measurement stay far below it
WEIGHTS = "model.safetensors"
Q = "model.layers.0.self_attn.q_proj.weight"


def _copy(path: Path) -> Path:
    return hf_copy(path.parent, "llama", path.name)


def _config(**changes) -> Callable[[Path], Path]:
    """config.json with keys changed (None: removed)."""
    return lambda path: hf_copy(path.parent, "llama", path.name, edit=changes)


def _file(name: str, transform: Callable[[bytes], bytes]) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        folder = _copy(path)
        (folder / name).write_bytes(transform((folder / name).read_bytes()))
        return folder

    return make


def _tensors(change: Callable[[dict], None]) -> Callable[[Path], Path]:
    from safetensors.numpy import load_file, save_file

    def make(path: Path) -> Path:
        folder = _copy(path)
        tensors = load_file(str(folder / WEIGHTS))
        change(tensors)
        save_file(tensors, str(folder / WEIGHTS))
        return folder

    return make


def _set(value: float, where=(0, 0)) -> Callable[[dict], None]:
    def change(tensors: dict) -> None:
        tensors[Q] = tensors[Q].copy()
        tensors[Q][where] = value

    return change


def _offset_beyond(raw: bytes) -> bytes:
    """Q's declared end moved 1 MB past the file's end (the header rewritten, padded to 8 bytes)."""
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + size])
    header[Q]["data_offsets"][1] += 10**6
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + raw[8 + size :]


def _replace_with_folder(name: str) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        folder = _copy(path)
        (folder / name).unlink()
        (folder / name).mkdir()
        return folder

    return make


def _extra_file(name: str, text: str) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        folder = _copy(path)
        (folder / name).write_text(text)
        return folder

    return make


def _without(name: str) -> Callable[[Path], Path]:
    return lambda path: hf_copy(path.parent, "llama", path.name, drop=(name,))


def _a_file(path: Path) -> Path:
    """config.json itself, where the checkpoint folder is expected."""
    return _copy(path) / "config.json"


@dataclass(frozen=True)
class Case:
    id: str
    make: Callable[[Path], Path]
    message: str  # in the refusal's one line, on the JAX route
    transformers: str | None = None  # in the transformers backend's, when that route is run too


YARN = {"rope_type": "yarn", "rope_theta": 500.0, "factor": 2.0}
INDEX = "model.safetensors.index.json"
MISSING = "missing from the checkpoint"
CASES = [
    Case("weights cut in half", _file(WEIGHTS, lambda b: b[: len(b) // 2]), "not a readable safetensors file", "="),
    Case("empty weights file", _file(WEIGHTS, lambda b: b""), "header too small", "="),
    Case("header size 10^12", _file(WEIGHTS, lambda b: struct.pack("<Q", 10**12) + b[8:]), "header too large", "="),
    Case("header not JSON", _file(WEIGHTS, lambda b: b[:8] + b"{nonsense" + b[17:]), "invalid JSON in header", "="),
    Case("offsets beyond the file", _file(WEIGHTS, _offset_beyond), "invalid shape, data type, or offset", "="),
    Case("weights file is a folder", _replace_with_folder(WEIGHTS), "safetensors: not a regular file", "="),
    Case("no config.json", _without("config.json"), "config.json is missing", "with config.json"),
    Case("config.json not JSON", _file("config.json", lambda b: b"{oops"), "not valid JSON", "="),
    Case("config.json a list", _file("config.json", lambda b: b"[1, 2]"), "expected a JSON object, got a list", "="),
    Case("another family's config", _config(model_type="gemma2"), "'gemma2' is not supported", MISSING),
    Case(
        "no layer count", _config(num_hidden_layers=None), "num_hidden_layers must be a positive", "269 more " + MISSING
    ),
    Case("10^9 layers", _config(num_hidden_layers=10**9), "TiB", "TiB"),
    Case("kv heads do not divide heads", _config(num_key_value_heads=3), "not a multiple of", "size mismatch"),
    Case("zero kv heads", _config(num_key_value_heads=0), "num_key_value_heads must be a positive integer", "="),
    Case("width as a string", _config(hidden_size="32"), "hidden_size must be a positive integer, got '32'", "="),
    Case("negative epsilon", _config(rms_norm_eps=-1.0), "rms_norm_eps must be a positive number, got -1.0", "="),
    Case("yarn rope scaling", _config(rope_parameters=YARN), "'yarn' is not supported"),
    Case(
        "index names a missing shard",
        _extra_file(INDEX, json.dumps({"weight_map": {Q: "x.safetensors"}})),
        "x.safetensors",
        "=",
    ),
    Case("index not JSON", _extra_file(INDEX, "nope"), "index.json: not valid JSON", "="),
    Case("a tensor missing", _tensors(lambda t: t.pop(Q)), f"tensor {Q} is missing", f"tensor {Q} {MISSING}"),
    Case(
        "q of the wrong shape", _tensors(lambda t: t.__setitem__(Q, t[Q][:, :-1].copy())), "(32, 31)", "size mismatch"
    ),
    Case("integer weights", _tensors(lambda t: t.__setitem__(Q, t[Q].astype(np.int32))), "stored as I32", "="),
    Case("a NaN weight", _tensors(_set(np.nan)), "has non-finite values", "="),
    Case("an infinite weight", _tensors(_set(-np.inf, (3, 5))), "has non-finite values", "="),
    Case("tokenizer.json is a folder", _replace_with_folder("tokenizer.json"), "tokenizer.json is missing", "="),
    Case("tokenizer.json without a model", _file("tokenizer.json", lambda b: b"{}"), "not a readable tokenizer", "="),
    Case("a file for the folder", _a_file, "a JSON file; expected a posbias train run folder", "="),
]

RUNS = [(c, "jax") for c in CASES] + [(c, "transformers") for c in CASES if c.transformers is not None]


def _measure(path: Path, cwd: Path, backend: str, samples: int = 1) -> tuple[int, str, int]:
    """``posbias measure`` on 8 tokens; S = 2 where the measurement is read (a standard error needs two)."""
    argv = [CONSOLE, "measure", str(path), "--tokens", "8", "--samples", str(samples), "--quiet", "--out", "out"]
    return peak_rss([*argv, "--backend", backend], cwd=cwd)


def _assert_refused(code: int, err: str, peak: int, cwd: Path, message: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("posbias measure: error: ") and message in err, (message, err)
    assert not (cwd / "out").exists()
    assert peak < PEAK_LIMIT, peak


@pytest.mark.parametrize("case, backend", RUNS, ids=[f"{c.id}-{b}" for c, b in RUNS])
def test_refused(tmp_path, case, backend):
    path = case.make(tmp_path / "ckpt")
    code, err, peak = _measure(path, tmp_path, backend)
    message = case.message if backend == "jax" or case.transformers == "=" else case.transformers
    assert message is not None
    _assert_refused(code, err, peak, tmp_path, message)


def test_yarn_rope_scaling_is_measured_by_transformers_own_forward(tmp_path):
    """The one difference between the routes: transformers implements YaRN (posbias's forward refuses it);
    its measurement is finite and sums to 1."""
    path = _config(rope_parameters=YARN)(tmp_path / "ckpt")
    code, err, peak = _measure(path, tmp_path, "transformers", samples=2)
    assert code == 0, err
    assert peak < PEAK_LIMIT, peak
    _assert_finite(tmp_path / "out")


def _assert_finite(out: Path) -> None:
    report = json.loads((out / "report.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in report"))
    assert all(math.isfinite(v) for v in report["lambdas"]), report["lambdas"]
    influence = np.loadtxt(out / "influence.csv", delimiter=",", skiprows=1, ndmin=2)
    assert np.all(np.isfinite(influence)), influence
    assert abs(influence[:, 1].sum() - 1) < 1e-12 and np.all(influence[:, 1] >= 0)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from([WEIGHTS, "config.json"]),
    cut=st.one_of(st.none(), st.floats(0.0, 1.0)),
    flip_at=st.floats(0.0, 1.0),
    flips=st.binary(min_size=0, max_size=16),
)
def test_fuzzed_folders_are_refused_or_measured_to_finite_numbers(tmp_path_factory, name, cut, flip_at, flips):
    """A random run of XORed bytes and a random cut of the weights file or config.json: the JAX route
    refuses in one line or measures finite numbers (a flipped weight may be any float32, NaN included)."""

    def damage(raw: bytes) -> bytes:
        data = bytearray(raw)
        start = int(flip_at * (len(data) - 1))
        for k, byte in enumerate(flips):
            if start + k < len(data):
                data[start + k] ^= byte
        return bytes(data if cut is None else data[: int(cut * len(data))])

    folder = tmp_path_factory.mktemp("fuzz")
    path = _file(name, damage)(folder / "ckpt")
    code, err, peak = _measure(path, folder, "jax", samples=2)
    assert "Traceback" not in err, err
    assert peak < PEAK_LIMIT, peak
    if code == 0:
        _assert_finite(folder / "out")
    else:
        _assert_refused(code, err, peak, folder, "posbias measure: error: ")
