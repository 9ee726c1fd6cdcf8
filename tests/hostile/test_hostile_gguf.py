"""Hostile GGUF files and text inputs through ``posbias measure`` (issue 29): every case ends in a clean
refusal (exit 2, one line, no traceback, no output folder) or a correct result, through both backends
(posbias's JAX forward and ``--backend transformers``), within a stated memory bound.

The files are the Llama fixture converted by tests/gguf_files.py and then damaged: cut short, a wrong
magic, metadata missing or contradicting the tensors, tensors of the wrong shape, NaN or infinite
weights, a rope scaling posbias does not implement, 10^9 declared layers. A hypothesis test damages
the file at random (a cut, a run of flipped bytes) and requires a refusal or finite numbers.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from gguf import RopeScalingType
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import gguf_files
from tests.peak import peak_rss

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
LLAMA = FIXTURES / "llama"
CONSOLE = str(Path(sys.executable).with_name("posbias"))
PEAK_LIMIT = 2.5 * 2**30  # every refusal and the small model's measurement stay far below it
BACKENDS = ("jax", "transformers")
Q = "model.layers.0.self_attn.q_proj.weight"
EMBED = "model.embed_tokens.weight"


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return gguf_files.write(LLAMA, tmp_path_factory.mktemp("gguf") / "good.gguf")


def _tensor(name: str) -> np.ndarray:
    from safetensors.numpy import load_file

    return load_file(str(LLAMA / "model.safetensors"))[name]


def _with(value: float, where=(0, 0)) -> np.ndarray:
    q = _tensor(Q).copy()
    q[where] = value
    return q


def _bytes(transform):
    def make(good: Path, path: Path) -> Path:
        path.write_bytes(transform(good.read_bytes()))
        return path

    return make


def _written(**kwargs):
    def make(good: Path, path: Path) -> Path:
        return gguf_files.write(LLAMA, path, **kwargs)

    return make


def _folder(good: Path, path: Path) -> Path:
    path.mkdir()
    return path


@dataclass(frozen=True)
class Case:
    id: str
    make: object  # (good file, path) -> the hostile input
    message: str  # in the one line of the refusal
    transformers_message: str | None = None  # where --backend transformers says it otherwise
    both: bool = False  # also through --backend transformers (where its own loading is reached)


CASES = [
    Case("empty file", _bytes(lambda b: b""), "not a readable GGUF file"),
    Case("header only", _bytes(lambda b: b[:100]), "not a readable GGUF file"),
    Case("cut in half", _bytes(lambda b: b[: len(b) // 2]), "not a readable GGUF file", both=True),
    Case("last byte missing", _bytes(lambda b: b[:-1]), "not a readable GGUF file"),
    Case("wrong magic", _bytes(lambda b: b"GGUX" + b[4:]), "GGUF magic invalid", both=True),
    Case("unsupported architecture", _written(arch="gemma2"), "general.architecture 'gemma2' is not supported"),
    Case("SentencePiece vocabulary", _written(tokenizer_model="llama"), "tokenizer.ggml.model"),
    Case("no block_count", _written(omit=("block_count",)), "metadata key llama.block_count is missing"),
    Case("no context_length", _written(omit=("context_length",)), "llama.context_length is missing"),
    Case("no embedding_length", _written(omit=("embedding_length",)), "llama.embedding_length is missing"),
    Case("no head_count", _written(omit=("head_count",)), "llama.attention.head_count is missing"),
    Case("no rms epsilon", _written(omit=("layer_norm_rms_eps",)), "layer_norm_rms_epsilon is missing"),
    Case("no token list", _written(omit=("token_list",)), "needs tokenizer.ggml.tokens"),
    Case("kv heads do not divide heads", _written(metadata={"head_count_kv": 3}), "not a multiple of", both=True),
    Case("zero kv heads", _written(metadata={"head_count_kv": 0}), "num_key_value_heads must be a positive"),
    Case(
        "no kv head count, k of 2 heads",
        _written(omit=("head_count_kv",)),
        "self_attn.k_proj.weight",
        "size mismatch - ckpt: torch.Size([16, 32])",
        both=True,
    ),
    Case(
        "yarn rope scaling", _written(metadata={"rope_scaling_type": RopeScalingType.YARN}), "'yarn' is not supported"
    ),
    Case("10^9 layers", _written(metadata={"block_count": 10**9}), "TiB", both=True),
    Case("q of the wrong shape", _written(replace={Q: _tensor(Q)[:, :-1]}), "q_proj.weight", both=True),
    Case(
        "embedding of the wrong shape", _written(replace={EMBED: _tensor(EMBED)[:-3]}), "embed_tokens.weight", both=True
    ),
    Case("a NaN weight", _written(replace={Q: _with(np.nan)}), "q_proj.weight has non-finite values", both=True),
    Case(
        "an infinite weight",
        _written(replace={Q: _with(-np.inf, (3, 5))}),
        "q_proj.weight has non-finite values",
        both=True,
    ),
    Case(
        "a folder named .gguf",
        _folder,
        "no such checkpoint",
        "applies to Hugging Face checkpoints and .gguf files",
        True,
    ),
]


def _measure(path: Path, cwd: Path, backend: str, *extra: str) -> tuple[int, str, int]:
    argv = [CONSOLE, "measure", str(path), "--tokens", "8", "--samples", "1", "--quiet", "--out", "out"]
    return peak_rss([*argv, "--backend", backend, *extra], cwd=cwd)


def _assert_refused(code: int, err: str, peak: int, cwd: Path, message: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert message in err, (message, err)
    assert not (cwd / "out").exists()
    assert peak < PEAK_LIMIT, peak


RUNS = [(c, b) for c in CASES for b in BACKENDS if b == "jax" or c.both]


@pytest.mark.parametrize("case, backend", RUNS, ids=[f"{c.id}-{b}" for c, b in RUNS])
def test_refused(good, tmp_path, case, backend):
    path = case.make(good, tmp_path / "hostile.gguf")
    code, err, peak = _measure(path, tmp_path, backend)
    message = case.transformers_message if backend == "transformers" and case.transformers_message else case.message
    _assert_refused(code, err, peak, tmp_path, message)


TEXTS = [
    ("empty.txt", b"", "0 tokens, fewer than --tokens N = 8"),
    ("binary.txt", bytes(range(256)) * 8, "not UTF-8 text (byte 128)"),
    ("invalid.txt", b"some words \xff\xfe more words", "not UTF-8 text (byte 11)"),
    ("short.txt", b"tiny", "fewer than --tokens N = 8"),
    ("missing.jsonl", b'{"title": "no text"}\n', 'line 1: expected an object with a string "text"'),
    ("number.jsonl", b'{"text": 5}\n', 'line 1: expected an object with a string "text"'),
    ("broken.jsonl", b"not json\n", "line 1 is not JSON"),
]


TEXT_RUNS = [(*t, b) for t in TEXTS for b in BACKENDS if b == "jax" or t[0] in ("empty.txt", "invalid.txt")]


@pytest.mark.parametrize("name, content, message, backend", TEXT_RUNS, ids=[f"{t[0]}-{t[3]}" for t in TEXT_RUNS])
def test_bad_text_is_refused_before_any_weight_is_read(good, tmp_path, name, content, message, backend):
    (tmp_path / name).write_bytes(content)
    code, err, peak = _measure(good, tmp_path, backend, "--data", name, "--samples", "2")
    _assert_refused(code, err, peak, tmp_path, message)


def _finite_report(out: Path) -> dict:
    report = json.loads((out / "report.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in report"))
    influence = np.loadtxt(out / "influence.csv", delimiter=",", skiprows=1, ndmin=2)
    assert np.all(np.isfinite(influence)), influence
    p = influence[:, 1]
    assert abs(p.sum() - 1) < 1e-12 and np.all(p >= 0)
    return report


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_huge_line_of_text_is_measured(good, tmp_path, backend):
    (tmp_path / "huge.txt").write_text("word " * 200_000)  # one line of a megabyte
    code, err, peak = _measure(good, tmp_path, backend, "--data", "huge.txt", "--samples", "2")
    assert code == 0, err
    assert peak < PEAK_LIMIT, peak
    _finite_report(tmp_path / "out")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cut=st.one_of(st.none(), st.floats(0.0, 1.0)),
    flip_at=st.floats(0.0, 1.0),
    flips=st.binary(min_size=0, max_size=16),
)
def test_fuzzed_files_are_refused_or_measured_to_finite_numbers(good, tmp_path_factory, cut, flip_at, flips):
    """A random cut and a run of XORed bytes anywhere (header, metadata, tensor data): the JAX route
    refuses in one line or measures finite numbers (a flipped weight may be any float32, NaN included:
    refused by the finiteness check)."""
    data = bytearray(good.read_bytes())
    start = int(flip_at * (len(data) - 1))
    for k, byte in enumerate(flips):
        if start + k < len(data):
            data[start + k] ^= byte
    if cut is not None:
        data = data[: int(cut * len(data))]
    folder = tmp_path_factory.mktemp("fuzz")
    (folder / "f.gguf").write_bytes(bytes(data))
    code, err, peak = _measure(folder / "f.gguf", folder, "jax", "--samples", "2")  # S = 2: a standard error
    assert "Traceback" not in err, err
    assert peak < PEAK_LIMIT, peak
    if code == 0:
        report = _finite_report(folder / "out")
        assert all(math.isfinite(v) for v in report["lambdas"]), report["lambdas"]
    else:
        _assert_refused(code, err, peak, folder, "posbias measure: error: ")
