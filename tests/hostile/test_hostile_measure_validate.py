"""Hostile input to ``posbias measure`` and ``posbias validate`` on Hugging Face checkpoints, and
to ``demo --out`` (issue 17: items 3, 7, 14, 28, 29, 30 and the output sets).

Every row of the tables ends in one of two ways, as in tests/hostile/test_hostile_cli.py:

* refused: exit code 2, exactly one line on stderr (what, where, what was expected), no
  traceback, no Python warning, and nothing written: the output folder is absent afterwards
  when it was absent before, byte for byte unchanged when it held an earlier run's set, and
  nothing else appears in the working folder;
* a correct result: exit code 0 and numbers checked against an independent route
  (transformers' own tensors in the fixtures' expected.npz, a dense NumPy rollout, the
  safetensors file listing), with the output folder holding one run's complete set.

The checkpoints are the committed fixtures in tests/fixtures/hf/, copied into the test's
folder and damaged there. Rows run ``posbias.cli.main`` in-process (refusals take
milliseconds: they come before JAX is imported); peak memory, concurrent writers and the
console script run as real processes. ``hostile_classes()`` counts the rows by class and
ending (README, issue 17).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from posbias.cli import main
from posbias.io.files import STAMP_KEY, set_stamp
from posbias.io.reports import read_report
from tests.hf_folders import FIXTURES, hf_copy
from tests.peak import peak_rss

CONSOLE = Path(sys.executable).with_name("posbias")
HF_SET = {"config.yaml", "kernels.npz", "influence.csv", "lambdas.csv", "report.json", "bias_fit.json"}
VALIDATE_TOP = {"report.json", "report.md", "validate.png", "matrix.png", "profiles", "kernels"}
TOL = 1e-5  # float32 fixture tensors against a float64 measurement (as tests/product/test_hf.py)


# ---------------------------------------------------------------- helpers


def snapshot(folder: Path) -> dict[str, bytes] | None:
    """Every entry under ``folder`` (hidden ones included) with its bytes; None if absent."""
    if not os.path.lexists(folder):
        return None
    out = {}
    for root, dirs, files in os.walk(folder):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), folder) + "/"] = b""
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, folder)] = os.readlink(p).encode() if os.path.islink(p) else open(p, "rb").read()
    return out


def listing(folder: Path, skip: str = "out") -> list[str]:
    """Every path under ``folder`` but those under ``skip``: what a run may not touch."""
    return sorted(
        os.path.relpath(os.path.join(root, n), folder)
        for root, dirs, files in os.walk(folder)
        for n in dirs + files
        if not os.path.relpath(os.path.join(root, n), folder).startswith(skip)
    )


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """main(argv) in-process; Python warnings are errors here (they would be extra stderr lines)."""
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(argv)
    captured = capsys.readouterr()
    assert not [str(w.message) for w in caught], f"Python warnings: {[str(w.message) for w in caught]}"
    return code, captured.out, captured.err


def assert_refused(code: int, err: str, message: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.endswith("\n"), f"expected one stderr line, got {err!r}"
    assert err.startswith("posbias"), err
    assert message in err, f"{message!r} not in {err!r}"


def fixture_text(family: str = "bloom") -> str:
    return str(np.load(FIXTURES / family / "expected.npz")["text"])


def existing_validate_set(out: Path) -> None:
    """An earlier run's files in ``out`` (a refused run must leave them byte for byte)."""
    (out / "profiles" / "12").mkdir(parents=True)
    (out / "profiles" / "12" / "a.csv").write_text("token_position,probability\n0,1.0\n")
    (out / "report.json").write_text('{"old": true}\n')
    (out / "kernels.npz").write_bytes(b"PK old")
    (out / "notes.txt").write_text("the user's own file\n")


# ---------------------------------------------------------------- setups (tmp -> argv after the command)


def checkpoint(family: str = "bloom", *flags: str, **copy):
    def setup(tmp: Path) -> list[str]:
        return [str(hf_copy(tmp, family, **copy)), *flags]

    return setup


def fixture(family: str, *flags: str):
    """The committed fixture itself (read only)."""
    return lambda tmp: [str(FIXTURES / family), *flags]


def as_validate(setup):
    def wrapped(tmp: Path) -> list[str]:
        argv = setup(tmp)
        return ["--checkpoint", argv[0], *argv[1:]]

    return wrapped


def file_named(name: str, data: bytes | str = b""):
    def setup(tmp: Path) -> list[str]:
        path = tmp / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        return [str(path)]

    return setup


def trained_config_only(tmp: Path) -> list[str]:
    """A posbias train run folder whose checkpoint.npz is missing (its config.json left behind)."""
    folder = tmp / "run"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"format": "posbias-lm-checkpoint/1", "model": {}}))
    return [str(folder)]


def npz_not_checkpoint(tmp: Path) -> list[str]:
    np.savez(tmp / "x.npz", a=np.zeros(3))
    return [str(tmp / "x.npz")]


def data_file(text: str, *flags: str, family: str = "gpt2", suffix: str = ".txt"):
    def setup(tmp: Path) -> list[str]:
        (tmp / f"d{suffix}").write_text(text)
        return [str(FIXTURES / family), "--data", str(tmp / f"d{suffix}"), *flags]

    return setup


def out_is_a_file(inner):
    def setup(tmp: Path) -> list[str]:
        (tmp / "plain").write_text("x")
        return [*inner(tmp), "--out", "plain"]

    return setup


def member_is_a_folder(inner, name: str):
    def setup(tmp: Path) -> list[str]:
        (tmp / "out" / name).mkdir(parents=True)
        return inner(tmp)

    return setup


SMALL_YAML = (Path(__file__).resolve().parents[2] / "examples" / "small.yaml").read_text()
SLOPES_SWEEP = """\
name: two slopes for eight heads
base: {heads: 8, tokens: 8, slopes: [0.5, 0.25], schedule: "constant:0.5", mask: causal}
axes:
  layers: [1, 2]
"""


def sweep_spec(tmp: Path) -> list[str]:
    (tmp / "s.yaml").write_text(SLOPES_SWEEP)
    return ["s.yaml"]


def _config_folder(tmp: Path) -> list[str]:
    folder = hf_copy(tmp, drop=("config.json",))
    (folder / "config.json").mkdir()
    return [str(folder)]


def _truncated_weights(tmp: Path) -> list[str]:
    folder = hf_copy(tmp)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:8] + data[8:40])
    return [str(folder)]


def _latin1(tmp: Path) -> list[str]:
    (tmp / "d.txt").write_bytes("café ".encode("latin-1") * 50)
    return [str(FIXTURES / "gpt2"), "--data", str(tmp / "d.txt")]


# ---------------------------------------------------------------- the refusal table


@dataclass(frozen=True)
class Refused:
    id: str
    cls: str  # checkpoint | memory | output | arguments | model
    command: str
    setup: Callable[[Path], list[str]]
    message: str  # a substring of the one stderr line
    forbidden: tuple = ()  # substrings the line must not hold (a misleading message)
    env: tuple = ()  # (name, value) environment settings
    check_existing: bool = True  # also run into a folder holding an earlier run's files


TRAINED_ADVICE = ("posbias train", "allow_pickle", "checkpoint.npz: no such")
M, V = "measure", "validate"

MEASURE_REFUSED = [
    # ---- item 28: the folder is a Hugging Face checkpoint; config.json is named, not checkpoint.npz
    Refused(
        "garbage config.json",
        "checkpoint",
        M,
        checkpoint(config="{garbage"),
        "ck/config.json: not valid JSON",
        TRAINED_ADVICE,
    ),
    Refused(
        "empty config.json", "checkpoint", M, checkpoint(config=""), "ck/config.json: not valid JSON", TRAINED_ADVICE
    ),
    Refused(
        "list config.json",
        "checkpoint",
        M,
        checkpoint(config=[1, 2]),
        "ck/config.json: expected a JSON object, got a list",
        TRAINED_ADVICE,
    ),
    Refused(
        "null config.json",
        "checkpoint",
        M,
        checkpoint(config="null"),
        "ck/config.json: expected a JSON object, got null",
        TRAINED_ADVICE,
    ),
    Refused(
        "string config.json",
        "checkpoint",
        M,
        checkpoint(config='"bloom"'),
        "ck/config.json: expected a JSON object, got a string",
        TRAINED_ADVICE,
    ),
    Refused(
        "config.json without model_type",
        "checkpoint",
        M,
        checkpoint(edit={"model_type": None}),
        "ck/config.json: no model_type key",
        TRAINED_ADVICE,
    ),
    Refused(
        "config.json missing",
        "checkpoint",
        M,
        checkpoint(drop=("config.json",)),
        "ck: config.json is missing",
        TRAINED_ADVICE,
    ),
    Refused(
        "config.json a folder",
        "checkpoint",
        M,
        lambda tmp: _config_folder(tmp),
        "ck/config.json: not a regular file",
        TRAINED_ADVICE,
    ),
    Refused(
        "unknown model_type",
        "checkpoint",
        M,
        checkpoint(edit={"model_type": "no_such_family"}),
        "model_type 'no_such_family' is not supported",
        TRAINED_ADVICE,
    ),
    Refused("a .gguf file", "checkpoint", M, file_named("m.gguf"), "m.gguf", TRAINED_ADVICE),
    Refused("a .GGUF file", "checkpoint", M, file_named("M.GGUF", b"GGUF\x03\x00\x00\x00"), "M.GGUF", TRAINED_ADVICE),
    Refused(
        "posbias train folder without checkpoint",
        "checkpoint",
        M,
        trained_config_only,
        "run/checkpoint.npz: no such checkpoint",
    ),
    Refused(
        "npz that is no checkpoint",
        "checkpoint",
        M,
        npz_not_checkpoint,
        "x.npz: not a posbias train checkpoint (no 'meta' entry)",
    ),
    # ---- item 29: a file that is no checkpoint at all: what measure accepts, in one line
    Refused(
        "a YAML config",
        "checkpoint",
        M,
        file_named("small.yaml", SMALL_YAML),
        "small.yaml: a YAML file; expected a posbias train run folder or its checkpoint.npz, a Hugging Face "
        "checkpoint folder",
        ("allow_pickle",),
    ),
    Refused("a YAML config named .yml", "checkpoint", M, file_named("c.yml", "a: 1\n"), "c.yml: a YAML file"),
    Refused(
        "a CSV file",
        "checkpoint",
        M,
        file_named("p.csv", "token_position,probability\n0,1\n"),
        "p.csv: a CSV file; expected",
        ("allow_pickle",),
    ),
    Refused(
        "a binary blob",
        "checkpoint",
        M,
        file_named("blob.bin", bytes(range(256))),
        "blob.bin: not a checkpoint; expected",
        ("allow_pickle",),
    ),
    # ---- item 7: files and config.json disagree on the layers
    Refused(
        "n_layer 1 over a 2-layer file",
        "checkpoint",
        M,
        checkpoint(edit={"n_layer": 1}),
        "tensor transformer.h.1.input_layernorm.bias belongs to layer 1, but config.json gives 1 layer: the "
        "files hold a 2-layer model",
    ),
    Refused(
        "gpt2 n_layer 1 over 2 layers",
        "checkpoint",
        M,
        checkpoint("gpt2", edit={"n_layer": 1}),
        "belongs to layer 1, but config.json gives 1 layer",
    ),
    Refused(
        "mpt n_layers 1 over 2 layers",
        "checkpoint",
        M,
        checkpoint("mpt", edit={"n_layers": 1}),
        "belongs to layer 1, but config.json gives 1 layer",
    ),
    Refused(
        "n_layer 3 over a 2-layer file", "checkpoint", M, checkpoint(edit={"n_layer": 3}), "tensor transformer.h.2."
    ),
    Refused("hidden_size doubled", "checkpoint", M, checkpoint(edit={"hidden_size": 96}), "expected (320, 96)"),
    Refused(
        "safetensors truncated",
        "checkpoint",
        M,
        lambda tmp: _truncated_weights(tmp),
        "model.safetensors: not a readable safetensors file",
    ),
    # ---- item 14: memory estimated before anything is read
    Refused(
        "bloom --tokens 30000",
        "memory",
        M,
        fixture("bloom", "--tokens", "30000", "--samples", "2"),
        "at N = 30000 needs about",
    ),
    Refused(
        "bloom --tokens 4000 --memory 3G",
        "memory",
        M,
        fixture("bloom", "--tokens", "4000", "--samples", "2", "--memory", "3G"),
        "GiB at one sequence per batch), more than --memory 3.0 GiB: lower the length or raise --memory",
    ),
    Refused(
        "float32 --tokens 4000 --memory 3G",
        "memory",
        M,
        fixture("bloom", "--tokens", "4000", "--precision", "float32", "--memory", "3G"),
        "needs about",
    ),
    Refused(
        "--memory 1K", "memory", M, fixture("bloom", "--tokens", "8", "--memory", "1K"), "more than --memory 1.0 KiB"
    ),
    Refused(
        "--memory above the machine",
        "memory",
        M,
        fixture("bloom", "--tokens", "100000", "--memory", "1000T"),
        "more than the machine's limit",
    ),
    Refused(
        "POSBIAS_MEMORY_LIMIT 1M",
        "memory",
        M,
        fixture("bloom", "--tokens", "64"),
        "more than the machine's limit 1.0 MiB",
        env=(("POSBIAS_MEMORY_LIMIT", "1M"),),
    ),
    Refused(
        "POSBIAS_MEMORY_LIMIT garbage",
        "memory",
        M,
        fixture("bloom", "--tokens", "8"),
        "POSBIAS_MEMORY_LIMIT: expected a size",
        env=(("POSBIAS_MEMORY_LIMIT", "lots"),),
    ),
    Refused("--memory 0", "arguments", M, fixture("bloom", "--memory", "0"), "expected a size such as 512M"),
    Refused("--memory nan", "arguments", M, fixture("bloom", "--memory", "nan"), "expected a size such as 512M"),
    # ---- arguments and data
    Refused("--tokens 0", "arguments", M, fixture("bloom", "--tokens", "0"), "--tokens: expected a positive"),
    Refused("--samples 0", "arguments", M, fixture("bloom", "--samples", "0"), "--samples: expected a positive"),
    Refused("gpt2 --tokens 33", "arguments", M, fixture("gpt2", "--tokens", "33"), "32 learned positions"),
    Refused("--data absent", "arguments", M, fixture("gpt2", "--data", "absent.txt"), "absent.txt: cannot read"),
    Refused(
        "--data too short", "arguments", M, data_file("a few words", "--tokens", "16"), "fewer than --tokens N = 16"
    ),
    Refused("--data not UTF-8", "arguments", M, lambda tmp: _latin1(tmp), "not UTF-8 text"),
    Refused(
        "--data jsonl without text",
        "arguments",
        M,
        data_file('{"body": "x"}\n', suffix=".jsonl"),
        'line 1: expected an object with a string "text"',
    ),
    Refused(
        "--samples beyond the windows",
        "arguments",
        M,
        data_file(fixture_text("gpt2"), "--tokens", "16", "--samples", "1000"),
        "windows of N = 16",
    ),
    # ---- output
    Refused(
        "--out is a file",
        "output",
        M,
        out_is_a_file(fixture("bloom", "--tokens", "8")),
        "--out plain: exists and is not a folder",
    ),
    Refused(
        "--out/report.json a folder",
        "output",
        M,
        member_is_a_folder(fixture("bloom", "--tokens", "8"), "report.json"),
        "report.json exists and is not a regular file",
        check_existing=False,
    ),
]


VALIDATE_REFUSED = [
    Refused(
        "validate: garbage config.json",
        "checkpoint",
        V,
        as_validate(checkpoint(config="{garbage")),
        "ck/config.json: not valid JSON",
        TRAINED_ADVICE,
    ),
    Refused(
        "validate: list config.json",
        "checkpoint",
        V,
        as_validate(checkpoint(config=[])),
        "ck/config.json: expected a JSON object, got a list",
        TRAINED_ADVICE,
    ),
    Refused(
        "validate: no model_type",
        "checkpoint",
        V,
        as_validate(checkpoint(edit={"model_type": None})),
        "ck/config.json: no model_type key",
        TRAINED_ADVICE,
    ),
    Refused(
        "validate: config.json missing",
        "checkpoint",
        V,
        as_validate(checkpoint(drop=("config.json",))),
        "ck: config.json is missing",
        TRAINED_ADVICE,
    ),
    Refused("validate: a .gguf file", "checkpoint", V, as_validate(file_named("m.gguf")), "m.gguf", TRAINED_ADVICE),
    Refused(
        "validate: a YAML config",
        "checkpoint",
        V,
        as_validate(file_named("small.yaml", SMALL_YAML)),
        "--checkpoint",
        ("allow_pickle",),
    ),
    Refused(
        "validate: n_layer 1 over 2 layers",
        "checkpoint",
        V,
        as_validate(checkpoint(edit={"n_layer": 1})),
        "belongs to layer 1, but config.json gives 1 layer",
    ),
    Refused(
        "validate: --lengths 5000",
        "memory",
        V,
        as_validate(fixture("bloom", "--lengths", "5000", "--samples", "2")),
        "at N = 5000 needs about",
    ),
    Refused(
        "validate: --lengths 16,4000 --memory 3G",
        "memory",
        V,
        as_validate(fixture("bloom", "--lengths", "16,4000", "--samples", "2", "--memory", "3G")),
        "at N = 4000 needs about",
    ),
    Refused(
        "validate: --memory 1K",
        "memory",
        V,
        as_validate(fixture("bloom", "--lengths", "8", "--memory", "1K")),
        "more than --memory 1.0 KiB",
    ),
    Refused(
        "validate: gpt2 --lengths 16,64",
        "arguments",
        V,
        as_validate(fixture("gpt2", "--lengths", "16,64")),
        "N = 64 is longer than the model's 32 learned positions",
    ),
    Refused(
        "validate: --lengths 1", "arguments", V, as_validate(fixture("gpt2", "--lengths", "1")), "expected lengths >= 2"
    ),
    Refused(
        "validate: --lengths 4,x",
        "arguments",
        V,
        as_validate(fixture("gpt2", "--lengths", "4,x")),
        "expected comma-separated integers",
    ),
    Refused(
        "validate: --samples 0",
        "arguments",
        V,
        as_validate(fixture("gpt2", "--samples", "0")),
        "--samples: expected a positive integer",
    ),
    Refused(
        "validate: --out is a file",
        "output",
        V,
        out_is_a_file(as_validate(fixture("gpt2", "--lengths", "8"))),
        "--out plain: exists and is not a folder",
    ),
    Refused(
        "validate: --out/report.md a folder",
        "output",
        V,
        member_is_a_folder(as_validate(fixture("gpt2", "--lengths", "8")), "report.md"),
        "report.md exists and is not a regular file",
        check_existing=False,
    ),
]

OTHER_REFUSED = [
    # ---- item 30: the message names the slopes and the head count
    Refused(
        "sweep: two slopes, heads 8",
        "model",
        "sweep",
        sweep_spec,
        "slopes: 2 explicit values [0.5, 0.25] (shape (2,)) for heads = 8: expected one slope per head, 8 values",
        ("diagonal",),
    ),
    Refused(
        "demo: --out is a file",
        "output",
        "demo",
        out_is_a_file(lambda tmp: []),
        "--out plain: exists and is not a folder",
    ),
    Refused(
        "demo: --out/profiles.png a folder",
        "output",
        "demo",
        member_is_a_folder(lambda tmp: [], "profiles.png"),
        "profiles.png exists and is not a regular file",
        check_existing=False,
    ),
]

REFUSED = MEASURE_REFUSED + VALIDATE_REFUSED + OTHER_REFUSED


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _argv(case: Refused, tmp: Path) -> list[str]:
    argv = [case.command, *case.setup(tmp)]
    return argv if "--out" in argv else [*argv, "--out", "out"]


@pytest.mark.parametrize("case", REFUSED, ids=[c.id for c in REFUSED])
def test_refused(case: Refused, in_tmp, capsys, monkeypatch):
    for name, value in case.env:
        monkeypatch.setenv(name, value)
    argv = _argv(case, in_tmp)
    out = in_tmp / argv[argv.index("--out") + 1]
    before, others = snapshot(out), listing(in_tmp, out.name)
    code, _, err = run_cli(argv, capsys)
    assert_refused(code, err, case.message)
    assert not any(bad in err for bad in case.forbidden), err
    assert snapshot(out) == before, f"{out} changed"
    assert listing(in_tmp, out.name) == others  # nothing written anywhere else either
    if case.check_existing and out.name == "out":  # again, into a folder holding an earlier run's files
        shutil.rmtree(out, ignore_errors=True)
        existing_validate_set(out)
        before = snapshot(out)
        code, _, err = run_cli(argv, capsys)
        assert_refused(code, err, case.message)
        assert snapshot(out) == before


# ---------------------------------------------------------------- correct results


def read_profile(path: Path) -> np.ndarray:
    table = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    assert np.array_equal(table[:, 0], np.arange(len(table)))
    return table[:, 1]


def causal_mask_rollout(n: int, layers: int) -> np.ndarray:
    """(a) of a model without ALiBi: e_{N-1}^T A^T, A the uniform causal kernel, dense NumPy."""
    kernel = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    row = np.eye(n)[-1]
    for _ in range(layers):
        row = row @ kernel
    return row


def assert_transformers_tensors(out: Path, family: str) -> None:
    """kernels.npz and lambdas of a measurement of the fixture's own 16 ids (S = 1) against the
    attention probabilities and hidden states transformers recorded in expected.npz."""
    expected = np.load(FIXTURES / family / "expected.npz")
    with np.load(out / "kernels.npz") as k:
        kernels, lambdas, per_head = k["kernels"], k["lambdas"], k["per_head"]
    np.testing.assert_allclose(per_head, expected["attentions"], atol=TOL)
    np.testing.assert_allclose(kernels, expected["attentions"].astype(np.float64).mean(axis=1), atol=TOL)
    assert np.abs(kernels.sum(axis=-1) - 1).max() < 1e-12
    a = expected["attention_outputs"].astype(np.float64)
    x = expected["hidden_states"][:-1].astype(np.float64)
    an, xn = np.linalg.norm(a, axis=-1), np.linalg.norm(x, axis=-1)
    np.testing.assert_allclose(lambdas, (an / (xn + an)).mean(axis=-1), rtol=1e-5)
    influence = read_profile(out / "influence.csv")
    assert np.all(np.isfinite(influence)) and abs(influence.sum() - 1) < 1e-12


def fixture_ids_data(tmp: Path, family: str = "bloom") -> list[str]:
    (tmp / "text.txt").write_text(fixture_text(family))
    return ["--data", str(tmp / "text.txt"), "--tokens", "16", "--samples", "1", "--quiet"]


def lm_measure_set(out: Path) -> None:
    """The files a posbias train measurement leaves (sharing kernels.npz and influence.csv with a
    Hugging Face measurement's set)."""
    out.mkdir()
    for name in (
        "rollout.yaml",
        "attention.npz",
        "lambda.csv",
        "content.csv",
        "measure.json",
        "lambda.png",
        "kernels.npz",
        "influence.csv",
    ):
        (out / name).write_bytes(b"earlier run\n")
    (out / "notes.txt").write_text("mine\n")


@dataclass(frozen=True)
class Correct:
    id: str
    cls: str
    command: str
    setup: Callable[[Path], list[str]]
    check: Callable[[Path, str], None]  # (tmp, stderr)


def _measure_tensors(tmp: Path) -> list[str]:
    return [str(FIXTURES / "bloom"), *fixture_ids_data(tmp)]


def _check_tensors(tmp: Path, err: str) -> None:
    assert err == ""
    assert set(os.listdir(tmp / "out")) == HF_SET
    assert_transformers_tensors(tmp / "out", "bloom")


def _over_lm_set(tmp: Path) -> list[str]:
    lm_measure_set(tmp / "out")
    return _measure_tensors(tmp)


def _check_over_lm_set(tmp: Path, err: str) -> None:
    assert set(os.listdir(tmp / "out")) == HF_SET | {"notes.txt"}  # the earlier set is gone, the user's file kept
    assert_transformers_tensors(tmp / "out", "bloom")


def _bert_pooler(tmp: Path) -> list[str]:
    (tmp / "text.txt").write_text(fixture_text("bert"))
    return [str(FIXTURES / "bert"), "--data", str(tmp / "text.txt"), "--tokens", "16", "--samples", "1", "--quiet"]


def _check_bert_pooler(tmp: Path, err: str) -> None:
    """Item 7, extra tensors: stated on stderr and in report.json, naming the first unused one of the
    file's own listing (the pooler: BERT's measured output is the final hidden state)."""
    from safetensors import safe_open

    with safe_open(str(FIXTURES / "bert" / "model.safetensors"), framework="numpy") as f:
        pooler = sorted(n for n in f.keys() if "pooler" in n)
    assert pooler == ["pooler.dense.bias", "pooler.dense.weight"]
    assert err.count("\n") == 1 and "warning: 2 tensors" in err and pooler[0] in err
    notes = json.loads((tmp / "out" / "report.json").read_text())["notes"]
    assert any(pooler[0] in note and "not used" in note for note in notes)
    assert_transformers_tensors(tmp / "out", "bert")


def _bloom_then_gpt2(tmp: Path) -> list[str]:
    """Item 3: BLOOM at 12 and 16 first, then (the row's run) GPT-2 at 16 into the same folder."""
    assert (
        main(
            [
                "validate",
                "--checkpoint",
                str(FIXTURES / "bloom"),
                "--lengths",
                "12,16",
                "--samples",
                "2",
                "--out",
                "out",
                "--json",
            ]
        )
        == 0
    )
    assert (tmp / "out" / "profiles" / "12" / "a.csv").is_file()
    (tmp / "out" / "notes.txt").write_text("mine\n")
    return ["--checkpoint", str(FIXTURES / "gpt2"), "--lengths", "16", "--samples", "2", "--json"]


def assert_validate_set(out: Path, lengths: tuple[int, ...], layers: int = 2) -> dict:
    """The folder holds one validate run: profiles/<N> and kernels/<N>.npz for exactly ``lengths``,
    report.json over the same lengths, validate.png stamped with the set's files; every profile
    (panels (a)-(e) at least) sums to 1."""
    from PIL import Image

    assert {p.name for p in (out / "profiles").iterdir()} == {str(n) for n in lengths}
    assert sorted(os.listdir(out / "kernels")) == sorted(f"{n}.npz" for n in lengths)
    report = read_report(out / "report.json", note=pytest.fail)["lengths"]
    assert sorted(report) == sorted(str(n) for n in lengths)
    files = {"report.json": (out / "report.json").read_text(), "report.md": (out / "report.md").read_text()}
    for n in lengths:
        names = sorted(os.listdir(out / "profiles" / str(n)))
        assert {f"{k}.csv" for k in "abcde"} <= set(names)
        for name in names:
            files[f"profiles/{n}/{name}"] = (out / "profiles" / str(n) / name).read_text()
            p = read_profile(out / "profiles" / str(n) / name)
            assert p.size == n and abs(p.sum() - 1) < 1e-12
        files[f"kernels/{n}.npz"] = (out / "kernels" / f"{n}.npz").read_bytes()
    assert Image.open(out / "validate.png").text[STAMP_KEY] == set_stamp(files)
    return report


def _check_gpt2_only(tmp: Path, err: str) -> None:
    out = tmp / "out"
    assert set(os.listdir(out)) == VALIDATE_TOP | {"notes.txt"}
    assert_validate_set(out, (16,))
    assert "gpt2" in (out / "report.md").read_text().splitlines()[2]
    # (a) of GPT-2: no ALiBi, lambda = 1: the rollout of the causal mask alone, dense NumPy
    assert np.max(np.abs(read_profile(out / "profiles" / "16" / "a.csv") - causal_mask_rollout(16, 2))) < 1e-12


def _measure_cwd_clean(tmp: Path) -> list[str]:
    return [str(FIXTURES / "gpt2"), "--tokens", "8", "--samples", "2", "--quiet"]


def _check_cwd_clean(tmp: Path, err: str) -> None:
    assert set(os.listdir(tmp)) == {"out"}  # nothing outside --out (no cache, no staging, no default folder)
    assert set(os.listdir(tmp / "out")) == HF_SET
    with np.load(tmp / "out" / "kernels.npz") as k:
        assert k["kernels"].shape == (2, 8, 8) and np.abs(k["kernels"].sum(axis=-1) - 1).max() < 1e-12
        assert np.all(k["slopes"] == 0)  # learned positions: no ALiBi term


CORRECT = [
    Correct("measure: transformers' tensors", "checkpoint", M, _measure_tensors, _check_tensors),
    Correct("measure: over a posbias train set", "output", M, _over_lm_set, _check_over_lm_set),
    Correct("measure: unused pooler stated", "checkpoint", M, _bert_pooler, _check_bert_pooler),
    Correct("measure: writes only its --out", "output", M, _measure_cwd_clean, _check_cwd_clean),
    Correct("validate: gpt2 after bloom", "output", V, _bloom_then_gpt2, _check_gpt2_only),
]


@pytest.mark.parametrize("case", CORRECT, ids=[c.id for c in CORRECT])
def test_correct(case: Correct, in_tmp, capsys):
    argv = [case.command, *case.setup(in_tmp), "--out", "out"]
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    assert "Traceback" not in err and "error" not in err
    case.check(in_tmp, err)


# ---------------------------------------------------------------- real processes


def _env() -> dict:
    env = dict(os.environ)
    env.pop("POSBIAS_MEMORY_LIMIT", None)
    return env


def peak_run(tmp: Path, *argv: str) -> tuple[int, int, str]:
    """(exit code, peak resident bytes, stderr) of ``posbias ARGV`` in a fresh process."""
    code, err, rss = peak_rss(
        [sys.executable, "-c", "import sys; from posbias.cli import main; sys.exit(main(sys.argv[1:]))", *argv],
        cwd=tmp,
        env=_env(),
    )
    return code, rss, err


def test_memory_refused_before_allocating_and_estimate_bounds_the_peak(tmp_path):
    """Item 14 with the process's own peak RSS: a refused 18.9 GiB run stays near the interpreter's
    size; an accepted run grows (over the same command at N = 16) by no more than the estimate."""
    from posbias.hf import checkpoint
    from posbias.hf.memory import plan

    bloom = str(FIXTURES / "bloom")
    code, peak, err = peak_run(tmp_path, "measure", bloom, "--tokens", "4000", "--memory", "3G", "--out", "big")
    assert code == 2 and "needs about" in err and err.count("\n") == 1
    assert peak < 400 * 2**20 and not (tmp_path / "big").exists()
    code, base, err = peak_run(tmp_path, "measure", bloom, "--tokens", "16", "--samples", "2", "--out", "s", "--quiet")
    assert code == 0, err
    n = 500
    code, peak, err = peak_run(
        tmp_path, "measure", bloom, "--tokens", str(n), "--samples", "2", "--out", "l", "--quiet"
    )
    assert code == 0, err
    ck = checkpoint.load(bloom)
    estimate = plan(ck.spec, n, 2, 8, checkpoint.stored_bytes(ck), (2**50, "")).total
    stacked = 8 * ck.spec.layers * ck.spec.heads * n * n  # one float64 (T, H, N, N) array
    assert stacked < peak - base <= estimate, (peak - base, estimate)
    report = json.loads((tmp_path / "l" / "report.json").read_text())
    assert report["memory_estimate"]["host"] + report["memory_estimate"]["device"] == estimate


CONCURRENT = {
    "measure": [
        ["measure", str(FIXTURES / "bloom"), "--tokens", "10", "--samples", "2", "--quiet"],
        ["measure", str(FIXTURES / "gpt2"), "--tokens", "12", "--samples", "2", "--quiet"],
    ],
    "validate": [
        ["validate", "--checkpoint", str(FIXTURES / "bloom"), "--lengths", "12,16", "--samples", "2", "--json"],
        ["validate", "--checkpoint", str(FIXTURES / "gpt2"), "--lengths", "16", "--samples", "2", "--json"],
    ],
    "demo": [["demo"], ["demo"]],
}


def assert_measure_set(out: Path) -> int:
    """One measurement's complete set: config.yaml, report.json and kernels.npz of the same run."""
    assert set(os.listdir(out)) == HF_SET
    report = json.loads((out / "report.json").read_text())
    with np.load(out / "kernels.npz") as k:
        assert k["slopes"].tolist() == report["slopes"]
        assert k["kernels"].shape == (report["layers"], report["num_tokens"], report["num_tokens"])
    assert (
        f"measured by posbias measure from {report['source']}: N = {report['num_tokens']}"
        in (out / "config.yaml").read_text()
    )
    assert len(read_profile(out / "influence.csv")) == report["num_tokens"]
    return report["num_tokens"]


def assert_demo_set(out: Path) -> None:
    from PIL import Image

    assert set(os.listdir(out)) == {"profiles.png", "summaries.md", "summaries.json"}
    texts = {n: (out / n).read_text() for n in ("summaries.md", "summaries.json")}
    assert Image.open(out / "profiles.png").text[STAMP_KEY] == set_stamp(texts)


@pytest.mark.parametrize("command", sorted(CONCURRENT))
def test_concurrent_writers_leave_one_complete_set(tmp_path, command):
    """Two processes write different runs into one --out at once: the folder holds one run's
    complete set (the later commit's), never a mix, and nothing is left beside it."""
    procs = [
        subprocess.Popen(
            [str(CONSOLE), *argv, "--out", "out"],
            cwd=tmp_path,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for argv in CONCURRENT[command]
    ]
    errs = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    out = tmp_path / "out"
    if command == "measure":
        assert assert_measure_set(out) in (10, 12)
    elif command == "validate":
        lengths = read_report(out / "report.json", note=pytest.fail)["lengths"]
        report = assert_validate_set(out, (12, 16) if "12" in lengths else (16,))
        assert sorted(report) in (["12", "16"], ["16"])
    else:
        assert_demo_set(out)
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_console_script_refusals_one_line_no_traceback(tmp_path):
    """The installed command itself: a YAML file and a garbage config.json."""
    (tmp_path / "small.yaml").write_text(SMALL_YAML)
    folder = hf_copy(tmp_path, config="{garbage")
    for argv, message in (
        (["measure", "small.yaml"], "small.yaml: a YAML file; expected"),
        (["validate", "--checkpoint", str(folder)], "ck/config.json: not valid JSON"),
    ):
        r = subprocess.run(
            [str(CONSOLE), *argv, "--out", "out"], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300
        )
        assert_refused(r.returncode, r.stderr, message)
        assert r.stdout == "" and not (tmp_path / "out").exists()


# ---------------------------------------------------------------- fuzz: near the edges of validity

FLAG_MEMORY = st.sampled_from([None, None, "1K", "64M", "3G", "1000T"])
FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def quiet_main(argv: list[str]) -> tuple[int, str]:
    """(exit code, stderr) of main(argv), stdout discarded (hypothesis examples cannot use capsys)."""
    from contextlib import redirect_stderr, redirect_stdout
    from io import StringIO

    err = StringIO()
    with warnings.catch_warnings(), redirect_stdout(StringIO()), redirect_stderr(err):
        warnings.simplefilter("ignore")
        code = main(argv)
    return code, err.getvalue()


def assert_clean(code: int, err: str, out: Path) -> None:
    """Exit 0, or exit 2 with one stderr line and no output folder; never a traceback."""
    assert code in (0, 2), err
    assert "Traceback" not in err
    if code == 2:
        assert err.count("\n") == 1 and err.startswith("posbias"), err
        assert not out.exists()


def test_fuzz_measure(tmp_path_factory):
    """A config.json key set to an edge value (or deleted) and edge flags: exit 0 with one complete
    measurement set (kernels stochastic, influence a distribution, N as asked), or a clean refusal
    with nothing written. Both endings occur among the examples."""
    endings = []

    @settings(max_examples=8, **FUZZ)
    @given(
        family=st.sampled_from(["bloom", "gpt2"]),
        edit=st.dictionaries(
            st.sampled_from(["n_layer", "n_head", "hidden_size", "vocab_size", "model_type", "n_positions"]),
            st.sampled_from([0, 1, 2, 3, -1, 2.5, "2", None, True, 10**20]),
            max_size=1,
        ),
        tokens=st.sampled_from(["0", "1", "2", "31", "32", "33", "4000", "100000"]),
        samples=st.sampled_from(["0", "1", "2", "2", "100000"]),
        memory=FLAG_MEMORY,
    )
    @example(family="bloom", edit={}, tokens="1", samples="1", memory=None)  # the shortest valid run
    @example(family="gpt2", edit={}, tokens="32", samples="2", memory="64M")  # every learned position
    @example(family="gpt2", edit={"n_positions": 31}, tokens="31", samples="1", memory=None)
    def one(family, edit, tokens, samples, memory):
        tmp = tmp_path_factory.mktemp("fuzz-measure")
        folder, out = hf_copy(tmp, family, edit=edit), tmp / "out"
        argv = ["measure", str(folder), "--tokens", tokens, "--samples", samples, "--out", str(out), "--quiet"]
        code, err = quiet_main(argv + (["--memory", memory] if memory else []))
        assert_clean(code, err, out)
        if code == 0:
            assert assert_measure_set(out) == int(tokens)
            assert abs(read_profile(out / "influence.csv").sum() - 1) < 1e-12
        endings.append(code)

    one()
    assert set(endings) == {0, 2}, endings


def test_fuzz_validate(tmp_path_factory):
    """Edge --lengths, --samples, --memory and config.json texts: one validate set over exactly the
    lengths asked (each profile a distribution, the figure stamped with the set), or a clean refusal
    with nothing written. Both endings occur among the examples."""
    endings = []

    @settings(max_examples=6, **FUZZ)
    @given(
        family=st.sampled_from(["bloom", "gpt2"]),
        lengths=st.lists(st.sampled_from([2, 3, 31, 32, 33, 5000]), min_size=1, max_size=2),
        samples=st.sampled_from(["0", "1", "2", "100000"]),
        memory=FLAG_MEMORY,
        config=st.sampled_from([None, None, None, "{", "[]", "{}", '{"model_type": "bloom"}']),
    )
    @example(family="gpt2", lengths=[2, 32], samples="1", memory=None, config=None)  # both ends of the context
    @example(family="bloom", lengths=[3, 3], samples="2", memory="64M", config=None)  # a length twice
    def one(family, lengths, samples, memory, config):
        tmp = tmp_path_factory.mktemp("fuzz-validate")
        folder, out = hf_copy(tmp, family, config=config), tmp / "out"
        argv = [
            "validate",
            "--checkpoint",
            str(folder),
            "--lengths",
            ",".join(map(str, lengths)),
            "--samples",
            samples,
            "--out",
            str(out),
            "--json",
        ]
        code, err = quiet_main(argv + (["--memory", memory] if memory else []))
        assert_clean(code, err, out)
        if code == 0:
            assert_validate_set(out, tuple(dict.fromkeys(lengths)))
        endings.append(code)

    one()
    assert set(endings) == {0, 2}, endings


# ---------------------------------------------------------------- the count (README, issue 17)

PROCESS_CASES = {  # class -> (refused, correct) tested with real processes above
    "memory": (1, 1),
    "output": (0, 3),
    "checkpoint": (2, 0),
}


def hostile_classes() -> dict[str, dict[str, int]]:
    """{class: {"refused": n, "correct result": m}} over every table row and process case."""
    counts: dict[str, dict[str, int]] = {}
    for case in REFUSED:
        counts.setdefault(case.cls, {"refused": 0, "correct result": 0})["refused"] += 1
    for case in CORRECT:
        counts.setdefault(case.cls, {"refused": 0, "correct result": 0})["correct result"] += 1
    for cls, (refused, correct) in PROCESS_CASES.items():
        row = counts.setdefault(cls, {"refused": 0, "correct result": 0})
        row["refused"] += refused
        row["correct result"] += correct
    return counts


def test_table_size():
    assert len(REFUSED) + len(CORRECT) >= 60
    assert set(hostile_classes()) == {"checkpoint", "memory", "output", "arguments", "model"}


if __name__ == "__main__":
    for cls, c in hostile_classes().items():
        print(f"{cls:10s} refused {c['refused']:3d}   correct result {c['correct result']:3d}")
