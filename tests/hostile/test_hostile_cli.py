"""Hostile input to ``posbias rollout`` (issue 8, CLI half of the reliability audit).

Every row of the tables below ends in one of two ways:

* refused: exit code 2, exactly one line on stderr naming the file (or flag), the key
  and what was expected, no traceback, no Python warning, and nothing written: the
  output folder is absent afterwards when it was absent before, and unchanged byte for
  byte (same names, same contents) when it existed;
* a correct result: exit code 0 and a profile checked against an independent answer.

Most rows call ``posbias.cli.main`` in-process (milliseconds each); kill -9, a full disk
(RLIMIT_FSIZE), concurrent writers and the console script itself run as real processes.
``HOSTILE_CLASSES`` counts the rows by class and ending (README, issue 8).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import warnings
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from posbias.cli import main
from posbias.io.files import STAMP_KEY, set_stamp
from tests.product.test_cli import GOOD  # the same small valid config as the CLI tests

CONSOLE = Path(sys.executable).with_name("posbias")


def edit(old: str, new: str, text: str = GOOD) -> str:
    assert old in text, old
    return text.replace(old, new)


def causal_uniform(n: int, t: int = 2, dtype=np.float64) -> np.ndarray:
    """(t, n, n) kernels: token i reads tokens 0..i uniformly."""
    return np.stack([np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]] * t).astype(dtype)


def npy_header(shape, descr: str = "<f8") -> bytes:
    """A version 1.0 .npy header declaring ``shape`` (written by hand: it may lie)."""
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple(shape)!r}, }}"
    pad = (64 - (10 + len(text) + 1) % 64) % 64
    text = text + " " * pad + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1")


# ---------------------------------------------------------------- setups
# Each setup runs in the test's temporary folder (the cwd) and returns the argv after
# "rollout"; the runner adds "--out out" unless the argv names --out itself.


def config(text: str, *flags: str, name: str = "c.yaml"):
    def setup(tmp: Path) -> list[str]:
        (tmp / name).write_text(text)
        return [name, *flags]

    return setup


def good(*flags: str):
    return config(GOOD, *flags)


def kernels_npz(*flags: str, name: str = "k.npz", **arrays):
    def setup(tmp: Path) -> list[str]:
        with open(tmp / name, "wb") as f:
            np.savez(f, **{k: (v() if callable(v) else v) for k, v in arrays.items()})
        return ["--kernels", name, *flags]

    return setup


def kernels_npy(array, *flags: str, name: str = "k.npy"):
    def setup(tmp: Path) -> list[str]:
        np.save(tmp / name, array() if callable(array) else array)
        return ["--kernels", name, "--schedule", "constant:0.5", *flags]

    return setup


def kernels_bytes(data: Callable[[], bytes] | bytes, *flags: str, name: str = "k.npz"):
    def setup(tmp: Path) -> list[str]:
        (tmp / name).write_bytes(data() if callable(data) else data)
        return ["--kernels", name, "--schedule", "constant:0.5", *flags]

    return setup


def deep_block(levels: int) -> str:
    return "".join("  " * i + f"k{i}:\n" for i in range(levels)) + "  " * levels + "x: 1\n"


def alias_bomb_320k() -> str:
    """~320 KB: a list of 1000 numbers referenced 100,000 times (10^8 nodes once expanded)."""
    return GOOD + "x: &x [" + ",".join(["0"] * 1000) + "]\ny: [" + ",".join(["*x"] * 100_000) + "]\n"


def billion_laughs() -> str:
    lines = ["a0: &a0 [0,0,0,0,0,0,0,0,0,0]"]
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    return GOOD + "\n".join(lines) + "\n"


def sparse_file(size: int, head: str = "x: [", name: str = "c.yaml"):
    """A file of ``size`` bytes (sparse: costs no disk) starting like a flow list."""

    def setup(tmp: Path) -> list[str]:
        with open(tmp / name, "w") as f:
            f.write(head)
            f.truncate(size)
        return [name]

    return setup


def flow_list(count: int):
    """A flow list of ``count`` numbers (under the byte limit, over the node limit)."""

    def setup(tmp: Path) -> list[str]:
        (tmp / "c.yaml").write_text(GOOD + "x: [" + "0," * count + "0]\n")
        return ["c.yaml"]

    return setup


@functools.lru_cache(maxsize=1)
def zip_bomb() -> bytes:
    """~1 MB .npz whose kernels.npy declares (1, 200000, 200000) float64 (320 GB) and inflates
    to 1 GiB of zeros: must be refused from the header, before decompressing. Built by hand in
    a few milliseconds: after a full flush, deflate encodes every further MiB of zeros as the
    same ~1 KB block, so the stream is that block repeated."""
    header = npy_header((1, 200_000, 200_000))
    zeros = b"\0" * (1 << 20)
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = co.compress(header) + co.flush(zlib.Z_FULL_FLUSH)
    block = co.compress(zeros) + co.flush(zlib.Z_FULL_FLUSH)
    body = head + block * 1024 + co.flush()
    crc = zlib.crc32(header)
    for _ in range(1024):
        crc = zlib.crc32(zeros, crc)
    size, name = len(header) + 1024 * len(zeros), b"kernels.npy"
    local = struct.pack("<4s5H3I2H", b"PK\x03\x04", 20, 0, 8, 0, 0, crc, len(body), size, len(name), 0) + name
    central = (
        struct.pack("<4s6H3I5H2I", b"PK\x01\x02", 20, 20, 0, 8, 0, 0, crc, len(body), size, len(name), 0, 0, 0, 0, 0, 0)
        + name
    )
    end = struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, 1, 1, len(central), len(local) + len(body), 0)
    data = local + body + central + end
    assert len(data) < 2 * 2**20
    return data


def corrupt_crc() -> bytes:
    import io

    good_npy = io.BytesIO()
    np.save(good_npy, causal_uniform(6))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("kernels.npy", good_npy.getvalue())
    data = bytearray(buf.getvalue())
    data[data.find(b"\x93NUMPY") + 200] ^= 0xFF
    return bytes(data)


def truncated(fraction: float, *, npz: bool) -> Callable[[], bytes]:
    def make() -> bytes:
        import io

        buf = io.BytesIO()
        if npz:
            np.savez(buf, kernels=causal_uniform(6))
        else:
            np.save(buf, causal_uniform(6))
        data = buf.getvalue()
        return data[: int(len(data) * fraction)]

    return make


def modified(change: Callable[[np.ndarray], None], n: int = 6, dtype=np.float64):
    def make():
        k = causal_uniform(n, dtype=np.float64)
        change(k)
        return k.astype(dtype)

    return make


def _set(index, value):
    def change(k):
        k[index] = value

    return change


def _move(t, i, j_from, j_to, amount):
    def change(k):
        k[t, i, j_from] -= amount
        k[t, i, j_to] += amount

    return change


def _row_scale(factor):
    def change(k):
        k[1, 3] *= factor

    return change


def under_a_file(tmp: Path) -> list[str]:
    (tmp / "plain").write_text("x")
    return [*good()(tmp), "--out", "plain/sub"]


def out_is_a_file(tmp: Path) -> list[str]:
    (tmp / "plain").write_text("x")
    return [*good()(tmp), "--out", "plain"]


def png_is_a_folder(tmp: Path) -> list[str]:
    (tmp / "out" / "profile.png").mkdir(parents=True)
    (tmp / "out" / "profile.csv").write_text("old\n")
    return good()(tmp)


def read_only_folder(tmp: Path) -> list[str]:
    """A folder writes to it fail in: chmod 555 for a normal user; root ignores modes, so
    as root a path inside /proc (where nobody can create anything) stands in."""
    if os.geteuid() != 0:
        (tmp / "out").mkdir()
        (tmp / "out" / "profile.csv").write_text("old\n")
        (tmp / "out").chmod(0o555)
        return good()(tmp)
    return [*good()(tmp), "--out", "/proc/self/posbias-out"]


def name_too_long(tmp: Path) -> list[str]:
    return [*good()(tmp), "--out", "x" * 300]


# ---------------------------------------------------------------- the tables


@dataclass(frozen=True)
class Refused:
    id: str
    cls: str  # config | engine | kernels | output
    setup: Callable[[Path], list[str]]
    message: str  # a substring of the one stderr line (file, key, what was expected)
    check_existing: bool = True  # also run into an existing output folder and compare bytes
    add_out: bool = True  # run with "--out out" unless the argv names --out (False: the config's save_dir)


N_2_40 = "1099511627776"

# d/tau = -650 with m/tau = 650: the self logit ties with the neighbour's, p = (1/2, 1/2); the
# linear recurrences clip d to -600 and would say (2e-22, 1) (a wrong result with exit 0 before
# posbias/run.py routed such stacks to an exact engine).
CLIP_HAZARD = """\
sequence_length: 2
num_layers: 1
attention_config: {num_heads: 1, alibi_slopes: [[0.65]], softmax_temperature: 0.001}
content_config: {diagonal_scores: [[-0.65]]}
lambda_schedule_config: {schedule_type: constant, lambda_const: 1.0}
"""

# The log-space engine returns log p(0) = +1e300 here (true p = (1e-300, 1)).
LOG_BREAKS = """\
sequence_length: 2
num_layers: 1
attention_config: {num_heads: 1, alibi_slopes: [[1e-09]], softmax_temperature: 1e-300}
content_config: {diagonal_scores: [[-1.0]]}
lambda_schedule_config: {schedule_type: constant, lambda_const: 1e-300}
"""
BIG = "1" + "0" * 400

REFUSED = [
    # ---- configs: size, nesting and alias limits (checked before anything is built)
    Refused(
        "deep flow nesting",
        "config",
        config("a: " + "[" * 5000 + "]" * 5000 + "\n"),
        "c.yaml: line 1: nested more than 100 levels deep",
    ),
    Refused("deep block nesting", "config", config(deep_block(300)), "c.yaml: line 202: nested more than 100"),
    Refused("alias bomb 320 KB", "config", config(alias_bomb_320k()), "c.yaml: line 8: aliases expand the document"),
    Refused("billion laughs", "config", config(billion_laughs()), "aliases expand the document by more than"),
    Refused("recursive alias", "config", config(GOOD + "x: &a [*a]\n"), "c.yaml: line 7: recursive alias"),
    Refused("200 MB file", "config", sparse_file(200 * 2**20), "c.yaml: 209715200 bytes, larger than the 64 MB limit"),
    Refused("8 MB flow list", "config", flow_list(4_000_000), "more than the 1000000 a config file may hold"),
    Refused("unbounded device", "config", lambda tmp: ["/dev/zero"], "/dev/zero: larger than the 64 MB limit"),
    # ---- configs: sizes
    Refused(
        "sequence_length 1e12",
        "config",
        config(edit("sequence_length: 16", "sequence_length: 1e12")),
        "N = 1000000000000 needs about",
    ),
    Refused(
        "sequence_length 2^40",
        "config",
        config(edit("sequence_length: 16", f"sequence_length: {N_2_40}")),
        f"N = {N_2_40} needs about",
    ),
    Refused("--tokens 2^40", "config", good("--tokens", N_2_40), f"N = {N_2_40} needs about"),
    Refused("--tokens 2^40 float32", "config", good("--tokens", N_2_40, "--precision", "float32"), "needs about"),
    Refused(
        "sequence_length 10^400",
        "config",
        config(edit("sequence_length: 16", f"sequence_length: {BIG}")),
        "c.yaml: sequence_length: input should be less than or equal to 9007199254740992, got 1000",
    ),
    Refused(
        "sequence_length 1e400",
        "config",
        config(edit("sequence_length: 16", "sequence_length: 1e400")),
        "c.yaml: sequence_length: input should be a finite number",
    ),
    Refused("--tokens 10^400 with config", "config", good("--tokens", BIG), "c.yaml: --tokens: 1000"),
    Refused(
        "--tokens 10^400 from flags",
        "config",
        lambda tmp: ["--layers", "2", "--heads", "2", "--tokens", BIG, "--schedule", "constant:0.5"],
        "--tokens: N = a 401-digit number is too large",
    ),
    Refused(
        "num_layers 1e9",
        "config",
        config(edit("num_layers: 3", "num_layers: 1000000000")),
        "c.yaml: a stack of T = 1000000000 layers and H = 2 heads needs about 119.2 GiB",
    ),
    Refused(
        "num_heads 1e9",
        "config",
        config(edit("num_heads: 2, alibi_slopes: [[0.5, 0.125]]", "num_heads: 1e9, alibi_slopes: [[0.5]]")),
        "c.yaml: a stack of T = 3 layers and H = 1000000000 heads needs about",
    ),
    Refused(
        "--layers 10^30",
        "config",
        good("--layers", "1" + "0" * 30),
        "c.yaml: --layers: 1" + "0" * 30 + " is too large, expected at most 2^53",
    ),
    Refused(
        "num_layers 2.5",
        "config",
        config(edit("num_layers: 3", "num_layers: 2.5")),
        "c.yaml: num_layers: input should be a valid integer",
    ),
    Refused(
        "sequence_length 0",
        "config",
        config(edit("sequence_length: 16", "sequence_length: 0")),
        "c.yaml: sequence_length: input should be greater than 0",
    ),
    Refused(
        "sequence_length text",
        "config",
        config(edit("sequence_length: 16", "sequence_length: many")),
        "c.yaml: sequence_length: input should be a valid integer",
    ),
    # ---- configs: booleans are not numbers
    Refused(
        "sequence_length true",
        "config",
        config(edit("sequence_length: 16", "sequence_length: true")),
        "c.yaml: sequence_length: expected a number, got the boolean true",
    ),
    Refused(
        "num_layers false",
        "config",
        config(edit("num_layers: 3", "num_layers: false")),
        "c.yaml: num_layers: expected a number, got the boolean false",
    ),
    Refused(
        "window_size true",
        "config",
        config(edit("mask_type: causal, window_size: null", "mask_type: sliding_window, window_size: true")),
        "c.yaml: mask_config.window_size: expected a number, got the boolean true",
    ),
    Refused(
        "slope true",
        "config",
        config(edit("[[0.5, 0.125]]", "[[true, 0.125]]")),
        "c.yaml: attention_config.alibi_slopes[0][0]: expected a number, got the boolean true",
    ),
    Refused(
        "lambdas_custom booleans",
        "config",
        config(
            edit(
                "{schedule_type: power_decay, lambda_0: 0.8, beta: 1.0}",
                "{schedule_type: custom, lambdas_custom: [true, false, true]}",
            )
        ),
        "c.yaml: lambda_schedule_config.lambdas_custom[0]: expected a number, got the boolean true",
    ),
    # ---- configs: keys, values, lengths
    Refused("unknown key", "config", config(GOOD + "bogus: 1\n"), "c.yaml: bogus: unknown key"),
    Refused(
        "unknown nested key",
        "config",
        config(edit("softmax_temperature: 1.0", "softmax_temperature: 1.0, tau: 2")),
        "c.yaml: attention_config.tau: unknown key",
    ),
    Refused(
        "NaN slope",
        "config",
        config(edit("[[0.5, 0.125]]", "[[.nan, 0.125]]")),
        "c.yaml: attention_config.alibi_slopes[0][0]: input should be a finite number",
    ),
    Refused(
        "inf diagonal",
        "config",
        config(edit("diagonal_scores: [[1.0]]", "diagonal_scores: [[.inf]]")),
        "c.yaml: content_config.diagonal_scores[0][0]: input should be a finite number",
    ),
    Refused(
        "-inf temperature",
        "config",
        config(edit("softmax_temperature: 1.0", "softmax_temperature: -.inf")),
        "c.yaml: attention_config.softmax_temperature: input should be a finite number",
    ),
    Refused(
        "NaN lambda",
        "config",
        config(edit("lambda_0: 0.8", "lambda_0: .nan")),
        "c.yaml: lambda_schedule_config.lambda_0: input should be a finite number",
    ),
    Refused(
        "slope 10^400",
        "config",
        config(edit("[[0.5, 0.125]]", f"[[{BIG}, 0.125]]")),
        "c.yaml: attention_config.alibi_slopes[0][0]: input should be a valid number, got 1000",
    ),
    Refused(
        "outer list length",
        "config",
        config(edit("[[0.5, 0.125]]", "[[0.5], [0.1]]")),
        "c.yaml: attention_config.alibi_slopes: outer list has length 2, expected 1 or num_layers = 3",
    ),
    Refused(
        "inner list length",
        "config",
        config(edit("[[0.5, 0.125]]", "[[0.5, 0.125, 0.1]]")),
        "c.yaml: attention_config.alibi_slopes[0]: has length 3, expected 1 or num_heads = 2",
    ),
    Refused(
        "empty slope list",
        "config",
        config(edit("[[0.5, 0.125]]", "[]")),
        "c.yaml: attention_config.alibi_slopes: outer list has length 0",
    ),
    Refused(
        "head_weights length",
        "config",
        config(edit("head_weights: null", "head_weights: [[1, 1, 1]]")),
        "c.yaml: attention_config.head_weights[0]: has length 3, expected 1 or num_heads = 2",
    ),
    Refused(
        "base_scores length",
        "config",
        config(edit("base_scores: [[0.0]]", "base_scores: [[0, 1, 2]]")),
        "c.yaml: content_config.base_scores[0]: has length 3",
    ),
    Refused(
        "lambdas_custom length",
        "config",
        config(
            edit(
                "{schedule_type: power_decay, lambda_0: 0.8, beta: 1.0}",
                "{schedule_type: custom, lambdas_custom: [0.1, 0.2]}",
            )
        ),
        "c.yaml: lambda_schedule_config.lambdas_custom: has 2 values, expected num_layers = 3",
    ),
    Refused(
        "negative slope",
        "config",
        config(edit("[[0.5, 0.125]]", "[[0.5, -0.1]]")),
        "c.yaml: attention_config.alibi_slopes[0][1]: input should be greater than or equal to 0",
    ),
    Refused(
        "negative head weight",
        "config",
        config(edit("head_weights: null", "head_weights: [[1, -1]]")),
        "c.yaml: attention_config.head_weights[0][1]: input should be greater than or equal to 0",
    ),
    Refused(
        "zero head weights in a layer",
        "config",
        config(edit("head_weights: null", "head_weights: [[1, 1], [0, 0], [1, 0]]")),
        "c.yaml: head_weights: layer 1 has no positive weight, expected at least one",
    ),
    Refused(
        "temperature 0",
        "config",
        config(edit("softmax_temperature: 1.0", "softmax_temperature: 0")),
        "c.yaml: attention_config.softmax_temperature: input should be greater than 0",
    ),
    Refused(
        "temperature overflows slopes",
        "config",
        config(edit("softmax_temperature: 1.0", "softmax_temperature: 1e-320")),
        "c.yaml: temperature: 1e-320 is too small for the slopes or diagonal (overflow)",
    ),
    Refused(
        "temperature overflows diagonal",
        "config",
        config(edit("softmax_temperature: 1.0", "softmax_temperature: 1e-300").replace("[[1.0]]", "[[1e10]]")),
        "c.yaml: temperature: 1e-300 is too small",
    ),
    Refused(
        "schedule overflows",
        "config",
        config(edit("beta: 1.0", "beta: -1000")),
        "c.yaml: schedule: schedule power_decay:0.8,-1000: produced a non-finite lambda",
    ),
    Refused(
        "schedule type",
        "config",
        config(edit("schedule_type: power_decay", "schedule_type: linear")),
        "c.yaml: lambda_schedule_config.schedule_type: expected constant, power_decay or custom",
    ),
    Refused(
        "prefix_length -1",
        "config",
        config(edit("mask_type: causal, window_size: null", "mask_type: prefix, prefix_length: -1")),
        "c.yaml: mask_config.prefix_length: input should be greater than or equal to 0",
    ),
    Refused(
        "window missing",
        "config",
        config(edit("mask_type: causal", "mask_type: sliding_window")),
        "window_size: required for mask_type sliding_window",
    ),
    Refused(
        "mask type",
        "config",
        config(edit("mask_type: causal", "mask_type: diagonal")),
        "c.yaml: mask_config.mask_type: input should be 'causal', 'full', 'sliding_window' or 'prefix'",
    ),
    Refused(
        "save_dir list", "config", config(GOOD + "save_dir: [1]\n"), "c.yaml: save_dir: input should be a valid string"
    ),
    Refused(
        "missing key",
        "config",
        config(GOOD.replace("num_layers: 3\n", "")),
        "c.yaml: num_layers: required key is missing",
    ),
    # ---- configs: not a config
    Refused(
        "not UTF-8",
        "config",
        lambda tmp: (tmp.joinpath("c.yaml").write_bytes(GOOD.encode() + b"# \xff\n"), ["c.yaml"])[1],
        "c.yaml: line 7: byte 0xff is not UTF-8, expected UTF-8 text",
    ),
    Refused("NUL byte", "config", config(GOOD + "\x00"), "c.yaml: line 7: not valid YAML"),
    Refused("duplicate key", "config", config(GOOD + "num_layers: 3\n"), "found duplicate key 'num_layers'"),
    Refused("two documents", "config", config(GOOD + "---\n" + GOOD), "expected a single document"),
    Refused(
        "python tag",
        "config",
        config(GOOD + "x: !!python/object/apply:os.system ['true']\n"),
        "could not determine a constructor for the tag",
    ),
    Refused("not a mapping", "config", config("- 1\n- 2\n"), "c.yaml: expected a mapping of configuration keys"),
    Refused(
        "empty file",
        "config",
        config(""),
        "c.yaml: expected a mapping of configuration keys at the top level, got an empty file",
    ),
    Refused("missing file", "config", lambda tmp: ["absent.yaml"], "absent.yaml: no such file"),
    Refused(
        "folder as config",
        "config",
        lambda tmp: (tmp.joinpath("d").mkdir(), ["d"])[1],
        "d: cannot read: is a directory",
    ),
    # ---- engines and options
    Refused(
        "fft with a full mask",
        "engine",
        good("--engine", "fft", "--mask", "full"),
        "--engine fft: handles causal and sliding-window masks only (mask full reads later tokens)",
    ),
    Refused(
        "fft with a prefix mask",
        "engine",
        good("--engine", "fft", "--mask", "prefix:4"),
        "--engine fft: handles causal and sliding-window masks only (mask prefix reads later tokens)",
    ),
    Refused(
        "fft with a full-mask config",
        "engine",
        config(edit("mask_type: causal", "mask_type: full"), "--engine", "fft"),
        "--engine fft: handles causal",
    ),
    Refused(
        "log with a sliding window",
        "engine",
        good("--engine", "log", "--mask", "window:4"),
        "--engine log: sliding-window masks need subtraction",
    ),
    Refused(
        "log with a sliding-window config",
        "engine",
        config(
            edit("mask_type: causal, window_size: null", "mask_type: sliding_window, window_size: 3"), "--engine", "log"
        ),
        "--engine log: sliding-window masks",
    ),
    Refused(
        "dense at N = 8193",
        "engine",
        good("--engine", "dense", "--tokens", "8193"),
        "--engine dense: N = 8193 is too large for dense N x N products (at most 8192)",
    ),
    Refused(
        "--full at N = 9000",
        "engine",
        good("--full", "--tokens", "9000"),
        "--full: N = 9000 is too large for dense N x N products",
    ),
    Refused(
        "--diagonal with a full mask",
        "engine",
        good("--diagonal", "--mask", "full"),
        "--diagonal: the identity P_ii = prod_t (1 - lambda_t (1 - A_ii)) needs lower-triangular kernels",
    ),
    Refused("--mask window:0", "engine", good("--mask", "window:0"), "c.yaml: mask: mask 'window:0': expected"),
    Refused("--schedule constant:nan", "engine", good("--schedule", "constant:nan"), "parameters must be finite"),
    Refused(
        "--schedule custom length",
        "engine",
        good("--schedule", "custom:0.1,0.2"),
        "custom schedule has 2 values, expected num_layers = 3",
    ),
    Refused(
        "--content-diagonal inf", "engine", good("--content-diagonal", "inf"), "diagonal: entry (0, 0) is not finite"
    ),
    Refused("--tokens 0", "engine", good("--tokens", "0"), "argument --tokens: expected a positive integer, got '0'"),
    Refused("--engine unknown", "engine", good("--engine", "magic"), "argument --engine: invalid choice: 'magic'"),
    Refused("--causal without --kernels", "engine", good("--causal"), "--causal applies to --kernels only"),
    Refused(
        "--kernels with a config",
        "engine",
        lambda tmp: [*good()(tmp), *kernels_npy(causal_uniform(4))(tmp)],
        "give either CONFIG or --kernels",
    ),
    Refused(
        "--kernels with --engine fft",
        "engine",
        kernels_npy(causal_uniform(4), "--engine", "fft"),
        "--engine fft: measured kernels run on the measured engine",
    ),
    Refused(
        "--kernels with --tokens",
        "engine",
        kernels_npy(causal_uniform(4), "--tokens", "8"),
        "--tokens describes an ALiBi model",
    ),
    Refused("model flags missing", "engine", lambda tmp: ["--layers", "2"], "missing CONFIG"),
    # ---- kernel files
    Refused(
        "object array",
        "kernels",
        kernels_npz(kernels=lambda: np.array([causal_uniform(4)[0], None], dtype=object), lambdas=[0.5, 0.5]),
        "k.npz: kernels: expected floating-point values, got dtype object",
    ),
    Refused(
        "object dtype in the header",
        "kernels",
        kernels_bytes(npy_header((2, 3, 3), "|O") + b"\0" * 64, name="k.npy"),
        "k.npy: kernels: expected floating-point values, got dtype object",
    ),
    Refused(
        "string lambdas",
        "kernels",
        kernels_npz(kernels=causal_uniform(4), lambdas=np.array(["a", "b"])),
        "k.npz: lambdas: expected floating-point values, got dtype <U1",
    ),
    Refused(
        "boolean lambdas",
        "kernels",
        kernels_npz(kernels=causal_uniform(4), lambdas=np.array([True, False])),
        "k.npz: lambdas: expected floating-point values, got dtype bool",
    ),
    Refused(
        "boolean kernels",
        "kernels",
        kernels_npz(kernels=causal_uniform(4) > 0, lambdas=[0.5, 0.5]),
        "k.npz: kernels: expected floating-point values, got dtype bool",
    ),
    Refused(
        "complex kernels",
        "kernels",
        kernels_npz(kernels=causal_uniform(4).astype(complex), lambdas=[0.5, 0.5]),
        "k.npz: kernels: expected floating-point values, got dtype complex128",
    ),
    Refused("empty file", "kernels", kernels_bytes(b""), "k.npz: not a .npy/.npz array file (the file is empty)"),
    Refused("text file", "kernels", kernels_bytes(b"hello"), "k.npz: not a .npy/.npz array file"),
    Refused("truncated .npz", "kernels", kernels_bytes(truncated(0.5, npz=True)), "k.npz: not a .npy/.npz array file"),
    Refused(
        "truncated .npy data",
        "kernels",
        kernels_bytes(truncated(0.9, npz=False), name="k.npy"),
        "k.npy: unreadable array (Failed to read all data",
    ),
    Refused(
        "truncated .npy header",
        "kernels",
        kernels_bytes(truncated(0.05, npz=False), name="k.npy"),
        "k.npy: not a .npy/.npz array file (EOF: reading array header",
    ),
    Refused(
        "malformed .npy header",
        "kernels",
        kernels_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", 20) + b"{'descr': garbage}  \n", name="k.npy"),
        "k.npy: not a .npy/.npz array file (malformed .npy header",
    ),
    Refused(
        "negative declared shape",
        "kernels",
        kernels_bytes(npy_header((2, -3, -3)), name="k.npy"),
        "k.npy: not a .npy/.npz array file (header declares a negative dimension",
    ),
    Refused(
        "zip bomb (1 MB declaring 320 GB)",
        "kernels",
        kernels_bytes(zip_bomb),
        "k.npz: kernels of shape (1, 200000, 200000) needs about 894.1 GiB",
    ),
    Refused(
        "huge declared .npy shape",
        "kernels",
        kernels_bytes(npy_header((3, 10**6, 10**6)), name="k.npy"),
        "k.npy: kernels of shape (3, 1000000, 1000000) needs about",
    ),
    Refused("corrupt zip CRC", "kernels", kernels_bytes(corrupt_crc), "k.npz: not a .npy/.npz array file (Bad CRC-32"),
    Refused(
        "no 'kernels' array",
        "kernels",
        kernels_npz(weights=np.ones(3)),
        "k.npz: expected an array named 'kernels' in the .npz (found ['weights'])",
    ),
    Refused(
        "lambda 2 in the file",
        "kernels",
        kernels_npz(kernels=causal_uniform(4), lambdas=[0.5, 2.0]),
        "k.npz: lambdas[1] = 2, expected a value in [0, 1]",
    ),
    Refused(
        "lambda -0.1 in the file",
        "kernels",
        kernels_npz(kernels=causal_uniform(4), lambdas=[-0.1, 0.5]),
        "k.npz: lambdas[0] = -0.1, expected a value in [0, 1]",
    ),
    Refused(
        "lambda NaN in the file",
        "kernels",
        kernels_npz(kernels=causal_uniform(4), lambdas=[0.5, np.nan]),
        "k.npz: lambdas[1] = nan, expected a value in [0, 1]",
    ),
    Refused(
        "lambda count",
        "kernels",
        kernels_npz(kernels=causal_uniform(4), lambdas=[0.5, 0.5, 0.5]),
        "k.npz: lambdas: expected 2 finite values in [0, 1] (one per layer of kernels (2, 4, 4)), got shape (3,)",
    ),
    Refused(
        "no lambdas, no --schedule",
        "kernels",
        kernels_npz(kernels=causal_uniform(4)),
        "k.npz: no 'lambdas' array in the file; give --schedule SPEC",
    ),
    Refused(
        "bad --schedule",
        "kernels",
        kernels_npz("--schedule", "constant:x", kernels=causal_uniform(4)),
        "--schedule: schedule 'constant:x'",
    ),
    Refused(
        "non-square",
        "kernels",
        kernels_npy(np.full((2, 3, 4), 0.25)),
        "k.npy: kernels must have shape (T, N, N) with T, N >= 1, got (2, 3, 4)",
    ),
    Refused(
        "two dimensions",
        "kernels",
        kernels_npy(np.full((4, 4), 0.25)),
        "k.npy: kernels must have shape (T, N, N), got (4, 4)",
    ),
    Refused("T = 0", "kernels", kernels_npy(np.zeros((0, 4, 4))), "got (0, 4, 4)"),
    Refused("N = 0", "kernels", kernels_npy(np.zeros((2, 0, 0))), "got (2, 0, 0)"),
    Refused(
        "negative entry",
        "kernels",
        kernels_npy(modified(_move(0, 3, 0, 1, 0.5))),
        "k.npy: layer 0 row 3: entry 0 = -0.25 is negative",
    ),
    Refused(
        "NaN entry",
        "kernels",
        kernels_npy(modified(_set((1, 2, 1), np.nan))),
        "k.npy: layer 1 row 2: entry 1 is not finite",
    ),
    Refused(
        "inf entry",
        "kernels",
        kernels_npy(modified(_set((0, 0, 0), np.inf))),
        "k.npy: layer 0 row 0: entry 0 is not finite",
    ),
    Refused(
        "row sums to 1.01",
        "kernels",
        kernels_npy(modified(_row_scale(1.01))),
        "k.npy: layer 1 row 3: sums to 1.01, expected 1 within 1e-09",
    ),
    Refused(
        "float32 row sums to 1.01",
        "kernels",
        kernels_npy(modified(_row_scale(1.01), dtype=np.float32)),
        "k.npy: layer 1 row 3: sums to 1.0",
    ),
    Refused(
        "float16 row sums to 1.3",
        "kernels",
        kernels_npy(modified(_row_scale(1.3), dtype=np.float16)),
        "k.npy: layer 1 row 3: sums to 1.2",
    ),
    Refused(
        "non-causal declared --causal",
        "kernels",
        kernels_npy(np.full((2, 4, 4), 0.25), "--causal"),
        "k.npy: layer 0 row 0: reads later token 1 (0.25) but kernels were declared causal",
    ),
    Refused(
        "--diagonal with non-causal kernels",
        "kernels",
        kernels_npy(np.full((2, 4, 4), 0.25), "--diagonal"),
        "--diagonal: the identity",
    ),
    Refused(
        "device as kernel file",
        "kernels",
        lambda tmp: ["--kernels", "/dev/zero", "--schedule", "constant:0.5"],
        "/dev/zero: is not a regular file, expected a .npy or .npz file",
    ),
    Refused("missing kernel file", "kernels", lambda tmp: ["--kernels", "absent.npz"], "absent.npz: no such file"),
    Refused(
        "folder as kernel file",
        "kernels",
        lambda tmp: (tmp.joinpath("d").mkdir(), ["--kernels", "d"])[1],
        "d: is a folder, expected a .npy or .npz file",
    ),
    # ---- outputs
    Refused(
        "--out names a file", "output", out_is_a_file, "--out plain: exists and is not a folder", check_existing=False
    ),
    Refused(
        "--out below a file",
        "output",
        under_a_file,
        "--out plain/sub: cannot create the folder (Not a directory)",
        check_existing=False,
    ),
    Refused(
        "profile.png is a folder",
        "output",
        png_is_a_folder,
        "--out out: profile.png exists and is not a regular file",
        check_existing=False,
    ),
    Refused("read-only folder", "output", read_only_folder, "--out ", check_existing=False),
    Refused("--out name too long", "output", name_too_long, "(File name too long)", check_existing=False),
    Refused(
        "save_dir names a file",
        "output",
        lambda tmp: (tmp.joinpath("plain").write_text("x"), config(GOOD + "save_dir: plain\n")(tmp))[1],
        "c.yaml: save_dir plain: exists and is not a folder",  # the config's save_dir, named as such
        check_existing=False,
        add_out=False,
    ),
]


@dataclass(frozen=True)
class Correct:
    id: str
    cls: str
    setup: Callable[[Path], list[str]]
    expected: Callable[[Path], np.ndarray]  # the profile it must equal (independently computed)
    tol: float = 1e-12
    warning: str | None = None  # a warning line that must appear (else stderr must be empty)


def numpy_rollout(kernels: np.ndarray, lambdas) -> np.ndarray:
    """p = e_{N-1}^T R^(T-1) ... R^(0), R^(t) = (1 - lambda_t) I + lambda_t A^(t): plain NumPy."""
    kernels = np.asarray(kernels, dtype=np.float64)
    n = kernels.shape[1]
    v = np.zeros(n)
    v[-1] = 1.0
    for t in range(kernels.shape[0] - 1, -1, -1):
        v = (1 - lambdas[t]) * v + lambdas[t] * (v @ kernels[t])
    return v


def alibi_kernel(n, slopes, diag, weights, tau=1.0, mask="causal", window=None, prefix=0):
    """One head-averaged ALiBi layer kernel by a direct masked softmax in NumPy (log-sum-exp)."""
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    if mask == "causal":
        ok = j <= i
    elif mask == "full":
        ok = np.ones((n, n), bool)
    elif mask == "window":
        ok = (j <= i) & (i - j < window)
    else:  # prefix
        ok = (j <= i) | ((i < prefix) & (j < prefix))
    w = np.asarray(weights, float)
    w = w / w.max()
    w = w / w.sum()
    out = np.zeros((n, n))
    for m, d, wh in zip(slopes, diag, w):
        with np.errstate(over="ignore", invalid="ignore"):
            logits = np.where(ok, (d * (i == j)) / tau - (m / tau) * np.abs(i - j), -np.inf)
        logits = logits - logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        out += wh * e / e.sum(axis=1, keepdims=True)
    return out


def good_profile(**kw) -> np.ndarray:
    """The GOOD model (power_decay 0.8 / (t+1), slopes 0.5 / 0.125, d = 1) with changes."""
    n = kw.pop("n", 16)
    lambdas = kw.pop("lambdas", [0.8 / (t + 1) for t in range(3)])
    slopes = kw.pop("slopes", [0.5, 0.125])
    diag = kw.pop("diag", [1.0, 1.0])
    weights = kw.pop("weights", [1.0, 1.0])
    k = alibi_kernel(n, slopes, diag, weights, **kw)
    return numpy_rollout(np.stack([k] * len(lambdas)), lambdas)


def read_profile(out: Path) -> np.ndarray:
    return np.loadtxt(out / "profile.csv", delimiter=",", skiprows=1, ndmin=2)[:, 1]


def float32_near_one(sign: float):
    """float32 kernels whose rows sum to 1 +- 3e-8 (beyond float64's 1e-9, inside float32 rounding)."""

    def make():
        k = causal_uniform(12, 3).astype(np.float32)
        k[:, :, 0] += np.float32(sign * 3e-8)
        return k

    return make


def float32_expected(sign: float):
    def expected(tmp):
        k = float32_near_one(sign)().astype(np.float64)
        k /= k.sum(axis=2, keepdims=True)
        return numpy_rollout(k, [0.5, 0.5, 0.5])

    return expected


CORRECT = [
    Correct(
        "head weights 1e308 equal uniform",
        "config",
        config(edit("head_weights: null", "head_weights: [[1e308, 1e308]]")),
        lambda tmp: good_profile(),
        1e-15,
    ),
    Correct(
        "head weights 1e308 and 1e-300",
        "config",
        config(edit("head_weights: null", "head_weights: [[1e308, 1e-300]]")),
        lambda tmp: good_profile(weights=[1.0, 0.0]),
    ),
    Correct(
        "head weight zero for one head",
        "config",
        config(edit("head_weights: null", "head_weights: [[0, 2]]")),
        lambda tmp: good_profile(weights=[0.0, 1.0]),
    ),
    Correct(
        "sequence_length '16' (lenient)",
        "config",
        config(edit("sequence_length: 16", "sequence_length: '16'")),
        lambda tmp: good_profile(),
    ),
    Correct(
        "sequence_length 1.6e1",
        "config",
        config(edit("sequence_length: 16", "sequence_length: 1.6e1")),
        lambda tmp: good_profile(),
    ),
    Correct(
        "lambda_0 2 is clipped",
        "config",
        config(edit("lambda_0: 0.8, beta: 1.0", "lambda_0: 2, beta: 0")),
        lambda tmp: good_profile(lambdas=[1.0] * 3),
        warning="lambda clipped to [0, 1] in layer(s) 0, 1, 2",
    ),
    Correct(
        "--schedule constant:2 is clipped",
        "config",
        good("--schedule", "constant:2"),
        lambda tmp: good_profile(lambdas=[1.0] * 3),
        warning="lambda clipped to [0, 1] in layer(s) 0, 1, 2",
    ),
    Correct(
        "temperature 1e308 (uniform heads)",
        "config",
        config(edit("softmax_temperature: 1.0", "softmax_temperature: 1e308")),
        lambda tmp: good_profile(slopes=[0.0, 0.0], diag=[0.0, 0.0]),
    ),
    Correct(
        "window_size 2^40 (= causal)",
        "config",
        config(edit("mask_type: causal, window_size: null", f"mask_type: sliding_window, window_size: {N_2_40}")),
        lambda tmp: good_profile(),
    ),
    Correct(
        "window_size 1 (identity)",
        "config",
        config(edit("mask_type: causal, window_size: null", "mask_type: sliding_window, window_size: 1")),
        lambda tmp: np.eye(16)[-1],
    ),
    Correct(
        "prefix_length 2^40 (= full)",
        "config",
        config(edit("mask_type: causal, window_size: null", f"mask_type: prefix, prefix_length: {N_2_40}")),
        lambda tmp: good_profile(mask="full"),
    ),
    Correct(
        "prefix_length 0 (= causal)",
        "config",
        config(edit("mask_type: causal, window_size: null", "mask_type: prefix, prefix_length: 0")),
        lambda tmp: good_profile(),
    ),
    Correct(
        "diagonal 1e308 (identity)",
        "config",
        config(edit("diagonal_scores: [[1.0]]", "diagonal_scores: [[1e308]]")),
        lambda tmp: np.eye(16)[-1],
    ),
    Correct(
        "diagonal -1e308 (self excluded)",
        "config",
        config(edit("diagonal_scores: [[1.0]]", "diagonal_scores: [[-1e308]]")),
        lambda tmp: good_profile(diag=[-2000.0, -2000.0]),
    ),
    Correct(
        "slope 1e308 (identity on that head)",
        "config",
        config(edit("[[0.5, 0.125]]", "[[1e308, 1e308]]")),
        lambda tmp: np.eye(16)[-1],
    ),
    Correct(
        "temperature 1e-306 (argmax attention)",
        "config",
        config(edit("softmax_temperature: 1.0", "softmax_temperature: 1e-306")),
        lambda tmp: np.eye(16)[-1],
    ),
    Correct(
        "d/tau = -650 with m/tau = 650 (clipping would be inexact)",
        "engine",
        config(CLIP_HAZARD),
        lambda tmp: np.array([0.5, 0.5]),
        1e-13,
    ),
    Correct(
        "d/tau = -650 with m/tau = 650, --engine log",
        "engine",
        config(CLIP_HAZARD, "--engine", "log"),
        lambda tmp: np.array([0.5, 0.5]),
        1e-13,
    ),
    Correct("extreme slope and temperature: auto", "engine", config(LOG_BREAKS), lambda tmp: np.array([1e-300, 1.0])),
    Correct(
        "d/tau = -650 with m/tau = 650, --engine structured (no clip: exp(log S - d))",
        "engine",
        config(CLIP_HAZARD, "--engine", "structured"),
        lambda tmp: np.array([0.5, 0.5]),
        1e-13,
    ),
    Correct(
        "d/tau = -650 with m/tau = 650, --engine fft",
        "engine",
        config(CLIP_HAZARD, "--engine", "fft"),
        lambda tmp: np.array([0.5, 0.5]),
        1e-13,
    ),
    Correct(
        "extreme slope and temperature, --engine log (log S in log space)",
        "engine",
        config(LOG_BREAKS, "--engine", "log"),
        lambda tmp: np.array([1e-300, 1.0]),
    ),
    Correct(
        "float32 kernels, rows 1 + 3e-8",
        "kernels",
        kernels_npz(kernels=float32_near_one(+1), lambdas=np.float32([0.5] * 3)),
        float32_expected(+1),
    ),
    Correct(
        "float32 kernels, rows 1 - 3e-8",
        "kernels",
        kernels_npz(kernels=float32_near_one(-1), lambdas=[0.5] * 3),
        float32_expected(-1),
    ),
    Correct(
        "float64 kernel entry -1e-12",
        "kernels",
        kernels_npy(modified(_move(0, 3, 3, 0, 1e-12 + 0.25)), "--schedule", "constant:0.5"),
        lambda tmp: numpy_rollout(modified(_move(0, 3, 3, 0, 1e-12 + 0.25))(), [0.5, 0.5]),
        1e-11,
    ),
    Correct(
        "long double kernels",
        "kernels",
        kernels_npz(kernels=causal_uniform(5).astype(np.longdouble), lambdas=[0.5, 0.5]),
        lambda tmp: numpy_rollout(causal_uniform(5), [0.5, 0.5]),
    ),
    Correct(
        "--schedule constant:2 with kernels is clipped",
        "kernels",
        kernels_npz("--schedule", "constant:2", kernels=causal_uniform(5)),
        lambda tmp: numpy_rollout(causal_uniform(5), [1.0, 1.0]),
        warning="lambda clipped to [0, 1] in layer(s) 0, 1",
    ),
    Correct(
        "integer lambdas in the file",
        "kernels",
        kernels_npz(kernels=causal_uniform(5), lambdas=np.array([0, 1])),
        lambda tmp: numpy_rollout(causal_uniform(5), [0.0, 1.0]),
    ),
    Correct(
        "Fortran-order kernels",
        "kernels",
        kernels_npy(np.asfortranarray(causal_uniform(5)), "--causal"),
        lambda tmp: numpy_rollout(causal_uniform(5), [0.5, 0.5]),
    ),
]


def _symlinked_csv(tmp: Path) -> list[str]:
    (tmp / "target.txt").write_text("keep me\n")
    (tmp / "out").mkdir()
    (tmp / "out" / "profile.csv").symlink_to(tmp / "target.txt")
    return good()(tmp)


# ---------------------------------------------------------------- runner


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


def listing(folder: Path) -> list[tuple[str, int]]:
    """Names and sizes of everything under ``folder`` (cheap: the 200 MB sparse file is not read)."""
    return sorted(
        (os.path.relpath(os.path.join(root, n), folder), os.lstat(os.path.join(root, n)).st_size)
        for root, dirs, files in os.walk(folder)
        for n in dirs + files
    )


def existing_output(out: Path) -> None:
    out.mkdir()
    (out / "profile.csv").write_text("token_position,probability\n0,1.0\n")
    (out / "summary.json").write_text('{"old": true}\n')
    (out / "profile.png").write_bytes(b"\x89PNG old")
    (out / "notes.txt").write_text("the user's own file\n")


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """main(argv) in-process; Python warnings are errors here (they would be extra stderr lines)."""
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(argv)
    captured = capsys.readouterr()
    assert not [str(w.message) for w in caught], f"Python warnings: {[str(w.message) for w in caught]}"
    return code, captured.out, captured.err


def with_out(argv: list[str]) -> list[str]:
    return argv if "--out" in argv else [*argv, "--out", "out"]


def assert_refused(code: int, err: str, message: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.endswith("\n"), f"expected one stderr line, got {err!r}"
    assert err.startswith("posbias"), err
    assert message in err, f"{message!r} not in {err!r}"


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("case", REFUSED, ids=[c.id for c in REFUSED])
def test_refused(case: Refused, in_tmp, capsys):
    argv = ["rollout", *case.setup(in_tmp)]
    argv = with_out(argv) if case.add_out else argv
    outs = [in_tmp / (argv[argv.index("--out") + 1] if "--out" in argv else "out")]
    before = {o: snapshot(o) for o in outs}
    others = listing(in_tmp)
    try:
        code, _, err = run_cli(argv, capsys)
    finally:
        if (in_tmp / "out").exists():
            (in_tmp / "out").chmod(0o755)
    assert_refused(code, err, case.message)
    for o in outs:
        assert snapshot(o) == before[o], f"{o} changed"
    assert listing(in_tmp) == others  # nothing written anywhere else either (posbias-out, save_dir)
    if case.check_existing:  # again, into an existing output folder with files of an earlier run
        shutil.rmtree(outs[0], ignore_errors=True)
        existing_output(outs[0])
        before = snapshot(outs[0])
        code, _, err = run_cli(argv, capsys)
        assert_refused(code, err, case.message)
        assert snapshot(outs[0]) == before


@pytest.mark.parametrize("case", CORRECT, ids=[c.id for c in CORRECT])
def test_correct(case: Correct, in_tmp, capsys):
    argv = with_out(["rollout", *case.setup(in_tmp)])
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    assert "Traceback" not in err and "error" not in err
    if case.warning:
        assert case.warning in err
    else:  # the "unresolved" note is allowed where the exact profile has zeros
        assert all("not determined" in line for line in err.splitlines()), err
    p = read_profile(in_tmp / "out")
    assert abs(p.sum() - 1.0) <= 1e-12
    expected = case.expected(in_tmp)
    assert np.max(np.abs(p - expected)) <= case.tol, np.max(np.abs(p - expected))
    summary = json.loads((in_tmp / "out" / "summary.json").read_text())
    assert summary["num_tokens"] == p.size


def test_symlinked_output_file_is_replaced_not_followed(in_tmp, capsys):
    argv = with_out(["rollout", *_symlinked_csv(in_tmp)])
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    assert (in_tmp / "target.txt").read_text() == "keep me\n"
    assert not (in_tmp / "out" / "profile.csv").is_symlink()


def test_stale_files_of_an_earlier_run_are_removed(in_tmp, capsys):
    good()(in_tmp)
    assert run_cli(["rollout", "c.yaml", "--diagonal", "--out", "out"], capsys)[0] == 0
    assert (in_tmp / "out" / "diagonal.csv").exists()
    (in_tmp / "out" / "notes.txt").write_text("mine\n")
    assert run_cli(["rollout", "c.yaml", "--out", "out"], capsys)[0] == 0
    names = sorted(os.listdir(in_tmp / "out"))
    assert names == ["notes.txt", "profile.csv", "profile.png", "summary.json"]
    assert_consistent(in_tmp / "out")


def test_umask_permissions_kept_on_overwrite(in_tmp, capsys):
    good()(in_tmp)
    old = os.umask(0o027)
    try:
        for _ in range(2):  # create, then overwrite
            assert run_cli(["rollout", "c.yaml", "--out", "out"], capsys)[0] == 0
            modes = {p.name: p.stat().st_mode & 0o777 for p in (in_tmp / "out").iterdir()}
            assert modes == {"profile.csv": 0o640, "summary.json": 0o640, "profile.png": 0o640}
    finally:
        os.umask(old)
    assert run_cli(["rollout", "c.yaml", "--out", "out"], capsys)[0] == 0
    assert {p.stat().st_mode & 0o777 for p in (in_tmp / "out").iterdir()} == {0o666 & ~old}


# ---------------------------------------------------------------- real processes


def png_stamp(path: Path) -> str | None:
    """The posbias-set tEXt chunk of a PNG (files.py stamps each figure with its run's texts)."""
    data = path.read_bytes()
    pos = 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"tEXt" and body.startswith(STAMP_KEY.encode() + b"\0"):
            return body.split(b"\0", 1)[1].decode("latin1")
        if kind == b"zTXt" and body.startswith(STAMP_KEY.encode() + b"\0"):
            return zlib.decompress(body.split(b"\0", 1)[1][1:]).decode("latin1")
        pos += 12 + length
    return None


def assert_consistent(out: Path) -> dict:
    """profile.csv, summary.json and profile.png are one run's files."""
    texts = {name: (out / name).read_text() for name in ("profile.csv", "summary.json")}
    extra = [n for n in ("diagonal.csv", "log_profile.csv", "matrix.csv") if (out / n).exists()]
    texts.update({n: (out / n).read_text() for n in extra})
    summary = json.loads(texts["summary.json"])
    p = read_profile(out)
    assert summary["num_tokens"] == p.size
    assert summary["p_first"] == p[0] and summary["p_last"] == p[-1]
    assert png_stamp(out / "profile.png") == set_stamp(texts)
    assert not [n for n in os.listdir(out) if n.startswith(".posbias-run-")]
    return summary


def _env():
    env = dict(os.environ)
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


def test_full_disk_leaves_nothing(in_tmp):
    """RLIMIT_FSIZE: writes past the limit fail with EFBIG (Python ignores SIGXFSZ)."""
    good()(in_tmp)

    # the limit is set in a small launcher that execs the console script (a preexec_fn would fork
    # this multithreaded JAX process); 2000 bytes: the CSV fits, the PNG does not
    limited = [
        sys.executable,
        "-c",
        "import os, resource, sys; "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000)); os.execv(sys.argv[1], sys.argv[1:])",
        str(CONSOLE),
    ]
    fresh = subprocess.run(
        [*limited, "rollout", "c.yaml", "--out", "new/deeper"],
        cwd=in_tmp,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert_refused(fresh.returncode, fresh.stderr, "--out new/deeper: cannot write (File too large)")
    assert not (in_tmp / "new").exists()  # the folders it created are gone again
    existing_output(in_tmp / "out")
    before = snapshot(in_tmp / "out")
    full = subprocess.run(
        [*limited, "rollout", "c.yaml", "--out", "out"],
        cwd=in_tmp,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert_refused(full.returncode, full.stderr, "--out out: cannot write (File too large)")
    assert snapshot(in_tmp / "out") == before


KILL_WHILE_STAGED = """
import sys, time
from matplotlib.figure import Figure
save = Figure.savefig
def slow_savefig(self, *args, **kwargs):
    save(self, *args, **kwargs)
    print("STAGED", flush=True)
    time.sleep(600)
Figure.savefig = slow_savefig
from posbias.cli import main
main(sys.argv[1:])
"""


def test_kill_9_leaves_the_old_set(in_tmp, capsys):
    """kill -9 while the new files are being staged, and once mid-computation: the old set is
    untouched, and the next run removes the dead run's staging folder."""
    good()(in_tmp)
    assert run_cli(["rollout", "c.yaml", "--out", "out"], capsys)[0] == 0
    before = snapshot(in_tmp / "out")
    proc = subprocess.Popen(
        [sys.executable, "-c", KILL_WHILE_STAGED, "rollout", "c.yaml", "--tokens", "24", "--out", "out"],
        cwd=in_tmp,
        env=_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "STAGED"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert [n for n in os.listdir(in_tmp / "out") if n.startswith(".posbias-run-")]  # it was killed mid-write
    visible = {k: v for k, v in snapshot(in_tmp / "out").items() if not k.startswith(".posbias-run-")}
    assert visible == before

    # the console script itself, killed 2 s in (importing, compiling or computing)
    big = subprocess.Popen(
        [str(CONSOLE), "rollout", "c.yaml", "--tokens", "3000", "--engine", "dense", "--out", "out"],
        cwd=in_tmp,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(2.0)
    finished = big.poll() is not None  # a very fast machine may have finished: then its set is complete
    big.send_signal(signal.SIGKILL)
    big.wait()
    visible = {k: v for k, v in snapshot(in_tmp / "out").items() if not k.startswith(".posbias-run-")}
    if finished:
        assert assert_consistent(in_tmp / "out")["num_tokens"] == 3000
    else:
        assert visible == before

    assert run_cli(["rollout", "c.yaml", "--tokens", "20", "--out", "out"], capsys)[0] == 0
    assert assert_consistent(in_tmp / "out")["num_tokens"] == 20  # and no staging folder is left


CONCURRENT_WORKER = """
import contextlib, io, sys
from posbias.cli import main
for line in sys.stdin:
    if line.strip() != "go":
        break
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(sys.argv[1:])
    print(code, flush=True)
"""


def test_concurrent_runs_leave_one_complete_set(in_tmp):
    """Two processes write different models into one folder at the same moment, round after
    round; after every round the folder holds one run's complete, consistent set."""
    (in_tmp / "a.yaml").write_text(GOOD)
    (in_tmp / "b.yaml").write_text(edit("sequence_length: 16", "sequence_length: 29"))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CONCURRENT_WORKER, "rollout", name, *flags, "--json", "--out", "out"],
            cwd=in_tmp,
            env=_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name, flags in (("a.yaml", ["--diagonal"]), ("b.yaml", []))
    ]
    seen = set()
    try:
        for _ in range(12):
            for p in procs:
                p.stdin.write("go\n")
                p.stdin.flush()
            assert [p.stdout.readline().strip() for p in procs] == ["0", "0"]
            summary = assert_consistent(in_tmp / "out")
            seen.add(summary["num_tokens"])
            names = set(os.listdir(in_tmp / "out"))
            expected = {"profile.csv", "summary.json", "profile.png"}
            assert names == (expected | {"diagonal.csv"} if summary["num_tokens"] == 16 else expected)
    finally:
        for p in procs:
            p.stdin.close()
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
    assert seen <= {16, 29}


def test_console_script_one_line_no_traceback(in_tmp):
    """The installed command itself (not main()): a hostile config and a hostile kernel file."""
    (in_tmp / "c.yaml").write_text("a: " + "[" * 3000 + "]" * 3000 + "\n")
    (in_tmp / "k.npz").write_bytes(zip_bomb())
    for argv, message in (
        (["c.yaml"], "c.yaml: line 1: nested more than 100 levels deep"),
        (["--kernels", "k.npz", "--schedule", "constant:0.5"], "k.npz: kernels of shape"),
    ):
        r = subprocess.run(
            [str(CONSOLE), "rollout", *argv, "--out", "out"],
            cwd=in_tmp,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert_refused(r.returncode, r.stderr, message)
        assert r.stdout == "" and not (in_tmp / "out").exists()


# ---------------------------------------------------------------- the count (README, issue 8)

SUBPROCESS_CASES = {  # class -> cases tested with real processes above (all end refused / consistent)
    "output": [
        "full disk, new folder",
        "full disk, existing folder",
        "kill -9 while staging",
        "kill -9 of the console script",
        "concurrent writers",
    ],
}


def hostile_classes() -> dict[str, dict[str, int]]:
    """{class: {"refused": n, "correct result": m}} over every table row and process case."""
    counts: dict[str, dict[str, int]] = {}
    for case in REFUSED:
        counts.setdefault(case.cls, {"refused": 0, "correct result": 0})["refused"] += 1
    for case in CORRECT:
        counts.setdefault(case.cls, {"refused": 0, "correct result": 0})["correct result"] += 1
    out = counts.setdefault("output", {"refused": 0, "correct result": 0})
    out["refused"] += 2  # full disk
    out["correct result"] += 3 + 3  # kills, concurrency; symlink, stale files, umask
    return counts


def test_table_size():
    assert len(REFUSED) + len(CORRECT) >= 60
    counts = hostile_classes()
    assert set(counts) == {"config", "engine", "kernels", "output"}


if __name__ == "__main__":
    for cls, c in hostile_classes().items():
        print(f"{cls:8s} refused {c['refused']:3d}   correct result {c['correct result']:3d}")
