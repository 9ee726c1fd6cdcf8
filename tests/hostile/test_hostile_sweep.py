"""Hostile input to ``posbias sweep`` and ``posbias plot`` (issue 17, sweep half).

Every row of the tables below ends in one of two ways:

* refused: exit code 2, exactly one line on stderr saying what was wrong, no traceback, no
  Python warning, and nothing written: the whole test folder (specs, earlier sweeps, the
  output folder) is byte for byte what it was before the command;
* a correct result: exit code 0 and numbers checked against an independent route (plain
  NumPy rollouts, closed forms, exact rationals), with the one-line notes the case expects.

Rows call ``posbias.cli.main`` in-process; two sweeps racing for one folder, a full disk
(RLIMIT_FSIZE) and the peak memory of a ``diagonal: true`` sweep run as real processes.
``hostile_classes()`` counts the rows by class and ending (README, issue 17).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import posbias
from posbias.cli import main
from posbias.sweep import read_table
from tests.hostile.test_hostile_cli import CONSOLE, alibi_kernel, assert_refused, numpy_rollout, snapshot
from tests.peak import peak_rss

BASE = "base: {layers: 2, heads: 2, tokens: 8, schedule: 'constant:0.5'}\n"
SMALL = BASE + "axes: {lambda: [0.2, 0.5, 0.9], slope_scale: [0.5, 2.0]}\nprofiles: true\n"
OTHER = BASE + "axes: {lambda: [0.3, 0.6, 0.8], slope_scale: [0.5, 2.0]}\nprofiles: true\n"
ENV = {"POSBIAS_MEMORY_LIMIT": "3G"}  # the budget of the machine, whatever this one has


def spec(text: str, *flags: str, name: str = "s.yaml", command: str = "sweep", out: str | None = "out"):
    def setup(tmp: Path) -> list[str]:
        (tmp / name).write_text(text)
        return [command, name, *flags, *(["--out", out] if out else [])]

    return setup


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """main(argv) in-process; Python warnings are errors here (they would be extra stderr lines)."""
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert not [str(w.message) for w in caught], [str(w.message) for w in caught]
    return code, captured.out, captured.err


def quiet(argv: list[str]) -> int:
    """Run a setup command (its output is not the test's business); it must succeed."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = main([str(a) for a in argv])
    assert code == 0, err.getvalue()
    return code


def swept(text: str = SMALL, folder: str = "out", name: str = "s.yaml", *flags: str) -> Callable[[Path], None]:
    def make(tmp: Path) -> None:
        (tmp / name).write_text(text)
        quiet(["sweep", name, "--out", folder, "--quiet", *flags])

    return make


def then(make: Callable[[Path], None], *steps: Callable[[Path], None], argv: list[str]):
    def setup(tmp: Path) -> list[str]:
        make(tmp)
        for step in steps:
            step(tmp)
        return argv

    return setup


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- damage to finished sweeps


def truncate_part(tmp: Path, folder: str = "out", index: int = 0) -> None:
    part = tmp / folder / "table" / f"part-{index:06d}.parquet"
    data = part.read_bytes()
    part.write_bytes(data[: len(data) // 2])


def manifest_edit(change: Callable[[dict], object]):
    def step(tmp: Path) -> None:
        path = tmp / "out" / "manifest.json"
        data = json.loads(path.read_text())
        path.write_text(json.dumps(change(data)))

    return step


def manifest_text(text: str):
    def step(tmp: Path) -> None:
        (tmp / "out" / "manifest.json").write_text(text)

    return step


def foreign_part(tmp: Path) -> None:
    """Part 0 of another spec's sweep (same shape, same batch plan) copied into out/."""
    swept(OTHER, "other", "o.yaml", "--batch-size", "2")(tmp)
    shutil.copy(tmp / "other" / "table" / "part-000000.parquet", tmp / "out" / "table" / "part-000000.parquet")
    shutil.rmtree(tmp / "other")


def extra_part(tmp: Path) -> None:
    shutil.copy(tmp / "out" / "table" / "part-000000.parquet", tmp / "out" / "table" / "part-000099.parquet")


def missing_part(tmp: Path) -> None:
    (tmp / "out" / "table" / "part-000001.parquet").unlink()


def delete_manifest(tmp: Path) -> None:
    (tmp / "out" / "manifest.json").unlink()


def a_file(tmp: Path) -> None:
    (tmp / "plain").write_text("x")


# ---------------------------------------------------------------- the tables


@dataclass(frozen=True)
class Refused:
    id: str
    cls: str  # spec | flags | output | mixed | plot
    setup: Callable[[Path], list[str]]
    message: str  # a substring of the one stderr line


def range_axis(axis: str, args: str) -> str:
    return BASE + f"axes: {{{axis}: {{range: {args}}}}}\n"


REFUSED = [
    # ---- ranges and values near the edges of validity (items 6, 22)
    Refused(
        "range step 1e-320",
        "spec",
        spec(range_axis("lambda", "[0, 1, 1e-320]")),
        "axes.lambda: range: too many to count values",
    ),
    Refused(
        "range [0, 1e308, 1e-10]",
        "spec",
        spec(range_axis("slope_scale", "[0, 1e308, 1e-10]")),
        "axes.slope_scale: range: too many to count values",
    ),
    Refused(
        "range ends 2e308 apart",
        "spec",
        spec(range_axis("content_diagonal", "[-1e308, 1e308, 1e300]")),
        "range: too many to count values",
    ),
    Refused("range of 1e9 values", "spec", spec(range_axis("lambda", "[0, 1, 1e-9]")), "expected at most 10,000,000"),
    Refused("range step 0", "spec", spec(range_axis("lambda", "[0, 1, 0]")), "range: step must not be 0"),
    Refused("range backwards", "spec", spec(range_axis("lambda", "[1, 0, 0.1]")), "axes.lambda: empty axis"),
    Refused("range stop = start", "spec", spec(range_axis("lambda", "[0.5, 0.5, 0.1]")), "axes.lambda: empty axis"),
    Refused("range nan step", "spec", spec(range_axis("lambda", "[0, 1, .nan]")), "expected a finite number"),
    Refused("range inf stop", "spec", spec(range_axis("slope_scale", "[0, .inf, 1]")), "expected a finite number"),
    Refused("range two values", "spec", spec(range_axis("lambda", "[0, 1]")), "expected a list [start, stop, step]"),
    Refused(
        "range past lambda 1",
        "spec",
        spec(range_axis("lambda", "[0.5, 1.6, 0.5]")),
        "axes.lambda[2]: lambda = 1.5, expected a value in [0, 1]",
    ),
    Refused("range of layers rounds to duplicates", "spec", spec(range_axis("layers", "[1, 3, 0.4]")), "appears twice"),
    Refused(
        "logspace overflows",
        "spec",
        spec(BASE + "axes: {slope_scale: {logspace: [0, 400, 3]}}\n"),
        "expected a finite number",
    ),
    Refused(
        "linspace count 0",
        "spec",
        spec(BASE + "axes: {lambda: {linspace: [0, 1, 0]}}\n"),
        "expected a count between 1 and 10000000",
    ),
    Refused(
        "geomspace through 0",
        "spec",
        spec(BASE + "axes: {slope_scale: {geomspace: [0, 1, 3]}}\n"),
        "geomspace: expected positive end points",
    ),
    Refused("lambda nan value", "spec", spec(BASE + "axes: {lambda: [0.5, .nan]}\n"), "expected a finite number"),
    Refused("slopes with a negative", "spec", spec(BASE + "axes: {slopes: [[0.5, -1]]}\n"), "expected a value >= 0"),
    Refused(
        "grid above 10^6 without --force",
        "spec",
        spec(BASE + "axes: {lambda: {linspace: [0, 1, 1001]}, slope_scale: {linspace: [0, 1, 1001]}}\n"),
        "(use --force to run it anyway)",
    ),
    # ---- flags: memory, devices, distribution (items 12, 16, 20)
    Refused(
        "--force 10^8 points",
        "flags",
        spec(BASE + "axes: {lambda: {linspace: [0, 1, 10000]}, slope_scale: {linspace: [0, 1, 10000]}}\n", "--force"),
        "for its bookkeeping alone, more than the memory limit of 3.0 GiB",
    ),
    Refused(
        "--force 10^12 points",
        "flags",
        spec(
            "base: {heads: 2, tokens: 8, schedule: 'power_decay:0.5,1'}\n"
            "axes: {lambda0: {linspace: [0, 1, 1000]}, beta: {linspace: [0, 1, 1000]}, "
            "slope_scale: {linspace: [0, 1, 1000]}, layers: {range: [1, 1001, 1]}}\n",
            "--force",
        ),
        "1,000,000,000,000 points needs about",
    ),
    Refused(
        "--memory-budget 1e30",
        "flags",
        spec(SMALL, "--memory-budget", "1e30"),
        "more than the posbias memory limit of 3.0 GiB",
    ),
    Refused(
        "--memory-budget 4G above the limit",
        "flags",
        spec(SMALL, "--memory-budget", "4G"),
        "--memory-budget 4.0 GiB: more than the posbias memory limit",
    ),
    Refused("--memory-budget inf", "flags", spec(SMALL, "--memory-budget", "inf"), "expected a size such as 512M"),
    Refused("--memory-budget nan", "flags", spec(SMALL, "--memory-budget", "nan"), "expected a size such as 512M"),
    Refused("--memory-budget -1G", "flags", spec(SMALL, "--memory-budget=-1G"), "expected a size such as 512M"),
    Refused("--memory-budget 1K", "flags", spec(SMALL, "--memory-budget", "1K"), "more than the memory budget of"),
    Refused(
        "diagonal beyond the budget",
        "flags",
        spec(
            "base: {layers: 64, heads: 32, tokens: 2048, schedule: 'constant:0.5'}\naxes: {lambda: [0.5]}\n"
            "diagonal: true\n",
            "--memory-budget",
            "50M",
        ),
        "(with its diagonal, 67.0 MiB)",
    ),
    Refused("--batch-size 0", "flags", spec(SMALL, "--batch-size", "0"), "expected a positive integer"),
    Refused("--devices 1000", "flags", spec(SMALL, "--devices", "1000"), "--devices 1000: only"),
    Refused("--devices 0", "flags", spec(SMALL, "--devices", "0"), "expected a positive integer"),
    Refused(
        "--coordinator unreachable",
        "flags",
        lambda tmp: spec(
            SMALL,
            "--coordinator",
            f"127.0.0.1:{free_port()}",
            "--num-processes",
            "2",
            "--process-id",
            "1",
            "--connect-timeout",
            "1",
        )(tmp),
        "process 0 not reachable within 1 s",
    ),
    Refused(
        "--coordinator without a port",
        "flags",
        spec(SMALL, "--coordinator", "localhost", "--num-processes", "2", "--process-id", "1"),
        "expected HOST:PORT",
    ),
    Refused(
        "--coordinator port 70000",
        "flags",
        spec(SMALL, "--coordinator", "localhost:70000", "--num-processes", "2", "--process-id", "1"),
        "is not a TCP port",
    ),
    Refused(
        "--connect-timeout nan", "flags", spec(SMALL, "--connect-timeout", "nan"), "expected a number of seconds > 0"
    ),
    Refused(
        "--process-id 2 of 2",
        "flags",
        spec(SMALL, "--coordinator", "localhost:1234", "--num-processes", "2", "--process-id", "2"),
        "--process-id 2: expected 0..1",
    ),
    Refused("--process-id without coordinator", "flags", spec(SMALL, "--process-id", "1"), "needs --coordinator"),
    # ---- output faults (item 23; the full disk runs as a process below)
    Refused(
        "out is a file",
        "output",
        lambda tmp: (a_file(tmp), spec(SMALL, out="plain")(tmp))[1],
        "--out plain: exists and is not a folder",
    ),
    Refused(
        "out under a file",
        "output",
        lambda tmp: (a_file(tmp), spec(SMALL, out="plain/sub")(tmp))[1],
        "--out plain/sub: cannot create the folder",
    ),
    Refused(
        "out read-only",
        "output",
        lambda tmp: (
            spec(SMALL, out="/proc/self/posbias-sweep")(tmp)
            if os.geteuid() == 0
            else (os.mkdir(tmp / "ro"), os.chmod(tmp / "ro", 0o555), spec(SMALL, out="ro/out")(tmp))[2]
        ),
        "--out ",
    ),
    Refused("out name of 300 characters", "output", spec(SMALL, out="x" * 300), "(File name too long)"),
    Refused(
        "out empty string",
        "output",
        lambda tmp: [*spec(SMALL, out=None)(tmp), "--out", ""],
        "expected a file or folder name, got an empty string",
    ),
    # ---- mixed, foreign, unfinished or damaged sets (items 1, 2, 24)
    Refused(
        "refused sweep leaves no manifest",
        "mixed",
        then(
            swept(SMALL, "out", "s.yaml", "--batch-size", "2"),
            delete_manifest,
            lambda tmp: (tmp / "o.yaml").write_text(OTHER),
            argv=["sweep", "o.yaml", "--out", "out", "--batch-size", "2", "--quiet"],
        ),
        "belongs to another sweep",
    ),
    Refused(
        "sweep into another spec's folder",
        "mixed",
        then(swept(), lambda tmp: (tmp / "o.yaml").write_text(OTHER), argv=["sweep", "o.yaml", "--out", "out"]),
        "holds a sweep of another spec",
    ),
    Refused(
        "resume another spec",
        "mixed",
        then(
            swept(),
            lambda tmp: (tmp / "o.yaml").write_text(OTHER),
            argv=["sweep", "o.yaml", "--out", "out", "--resume"],
        ),
        "holds a sweep of another spec",
    ),
    Refused(
        "sweep again without --resume",
        "mixed",
        then(swept(), argv=["sweep", "s.yaml", "--out", "out"]),
        "holds this sweep already",
    ),
    Refused(
        "plot a foreign part",
        "mixed",
        then(swept(SMALL, "out", "s.yaml", "--batch-size", "2"), foreign_part, argv=["plot", "out"]),
        "belongs to another sweep",
    ),
    Refused(
        "resume over a foreign part",
        "mixed",
        then(
            swept(SMALL, "out", "s.yaml", "--batch-size", "2"),
            foreign_part,
            argv=["sweep", "s.yaml", "--out", "out", "--resume"],
        ),
        "belongs to another sweep",
    ),
    Refused(
        "plot an extra part",
        "mixed",
        then(swept(), extra_part, argv=["plot", "out"]),
        "file(s) of no batch of this plan (part-000099.parquet)",
    ),
    Refused(
        "plot a missing part",
        "mixed",
        then(swept(SMALL, "out", "s.yaml", "--batch-size", "2"), missing_part, argv=["plot", "out"]),
        "1 batch file(s) missing (part-000001.parquet)",
    ),
    Refused(
        "plot a truncated part",
        "mixed",
        then(swept(), truncate_part, argv=["plot", "out"]),
        "unreadable batch file (truncated or not Parquet)",
    ),
    Refused(
        "plot an unfinished sweep",
        "mixed",
        then(swept(), manifest_edit(lambda m: {**m, "complete": False}), argv=["plot", "out"]),
        "the sweep is unfinished",
    ),
    Refused(
        "plot a manifest of another digest",
        "mixed",
        then(swept(), manifest_edit(lambda m: {**m, "digest": "0" * 64}), argv=["plot", "out"]),
        "belongs to another sweep",
    ),
    Refused(
        "plot a manifest holding a list",
        "mixed",
        then(swept(), manifest_text("[1, 2]"), argv=["plot", "out"]),
        "not a sweep manifest (a JSON list, expected an object)",
    ),
    Refused(
        "resume a manifest holding a list",
        "mixed",
        then(swept(), manifest_text("[1, 2]"), argv=["sweep", "s.yaml", "--out", "out", "--resume"]),
        "not a sweep manifest (a JSON list",
    ),
    Refused(
        "plot a manifest that is not JSON",
        "mixed",
        then(swept(), manifest_text("{oops"), argv=["plot", "out"]),
        "unreadable manifest (not JSON)",
    ),
    Refused(
        "plot a manifest without a plan",
        "mixed",
        then(swept(), manifest_edit(lambda m: {k: v for k, v in m.items() if k != "plan"}), argv=["plot", "out"]),
        "not a sweep manifest ('plan': expected dict",
    ),
    Refused(
        "resume a manifest with bad groups",
        "mixed",
        then(
            swept(),
            manifest_edit(lambda m: {**m, "plan": {**m["plan"], "groups": [7]}}),
            argv=["sweep", "s.yaml", "--out", "out", "--resume"],
        ),
        "plan.groups malformed",
    ),
    # ---- plot (items 8, 25)
    Refused(
        "plot --at lambda=nan",
        "plot",
        then(
            swept(BASE + "axes: {lambda: [0.2, 0.5], slope_scale: [1, 2], content_diagonal: [0, 1]}\n"),
            argv=["plot", "out", "--at", "content_diagonal=nan"],
        ),
        "expected a finite number",
    ),
    Refused(
        "plot --at inf",
        "plot",
        then(
            swept(BASE + "axes: {lambda: [0.2, 0.5], slope_scale: [1, 2], content_diagonal: [0, 1]}\n"),
            argv=["plot", "out", "--at", "content_diagonal=-inf"],
        ),
        "expected a finite number",
    ),
    Refused(
        "plot --at twice",
        "plot",
        then(
            swept(BASE + "axes: {lambda: [0.2, 0.5], slope_scale: [1, 2], content_diagonal: [0, 1]}\n"),
            argv=["plot", "out", "--at", "content_diagonal=0", "--at", "content_diagonal=1"],
        ),
        "given twice",
    ),
    Refused(
        "plot --at a plotted axis",
        "plot",
        then(swept(), argv=["plot", "out", "--at", "lambda=0.5"]),
        "this axis is plotted",
    ),
    Refused(
        "plot --at a word",
        "plot",
        then(
            swept(BASE + "axes: {lambda: [0.2, 0.5], slope_scale: [1, 2], content_diagonal: [0, 1]}\n"),
            argv=["plot", "out", "--at", "content_diagonal=big"],
        ),
        "expected a number",
    ),
    Refused(
        "curves of a metric with no finite value",
        "plot",
        then(
            swept(BASE.replace("tokens: 8", "tokens: 2") + "axes: {lambda: [0.2, 0.5], slope_scale: [1, 2]}\n"),
            argv=["plot", "out", "--kind", "curves", "--metric", "middle_mass_ratio"],
        ),
        "no finite value",
    ),
    Refused(
        "curves over a label axis",
        "plot",
        then(
            swept(BASE + "axes: {mask: [causal, full], lambda: [0.2, 0.5]}\n"),
            argv=["plot", "out", "--kind", "curves", "--x", "mask", "--series", "lambda"],
        ),
        "holds labels; curves need a numeric x axis",
    ),
    Refused(
        "plot a folder that is no sweep",
        "plot",
        lambda tmp: (os.mkdir(tmp / "out"), ["plot", "out"])[1],
        "no sweep here",
    ),
]


@dataclass(frozen=True)
class Correct:
    id: str
    cls: str
    setup: Callable[[Path], list[str]]
    check: Callable[[Path, str, str], None]  # (folder, stdout, stderr): independent checks


def table_rows(tmp: Path, folder: str = "out") -> list[dict]:
    return read_table(tmp / folder).to_pylist()


def alibi_p(
    n: int, lam: float, t: int, heads: int = 2, scale: float = 1.0, mask: str = "causal", window: int | None = None
) -> np.ndarray:
    """Plain NumPy: the ALiBi kernel by a direct masked softmax, then the per-layer rollout."""
    k = alibi_kernel(n, posbias.alibi_slopes(heads) * scale, [0.0] * heads, [1.0] * heads, mask=mask, window=window)
    return numpy_rollout(np.stack([k] * t), [lam] * t)


def check_range(expected: list[Fraction]):
    def check(tmp: Path, out: str, err: str) -> None:
        rows = table_rows(tmp)
        got = sorted({r["lambda"] for r in rows})
        assert len(got) == len(expected), (got, expected)
        for g, e in zip(got, expected):
            assert abs(Fraction(g) - e) <= Fraction(1, 10**15)
        for r in rows:  # each row's profile against the NumPy rollout at its lambda
            assert np.max(np.abs(np.asarray(r["profile"]) - alibi_p(8, r["lambda"], 2))) < 1e-13

    return check


def closed_form_atom(n: int, lam: float, heads: int) -> tuple[float, np.ndarray]:
    """(log p(N-1), log P_ii per i) of T = 1 layer by C2(c)/C5(a): log(1 - lam (1 - A[i, i]))."""
    a = np.diag(alibi_kernel(n, posbias.alibi_slopes(heads), [0.0] * heads, [1.0] * heads))
    terms = np.log1p(-lam * (1.0 - a))
    return float(terms[-1]), terms


def check_deep(t: int):
    def check(tmp: Path, out: str, err: str) -> None:
        rows = table_rows(tmp)
        assert [r["num_layers"] for r in rows] == [t, t]
        for r in rows:
            lam = r["lambda"]
            last, diag_terms = closed_form_atom(8, lam, 2)
            assert math.isclose(r["log_p_last"], t * last, rel_tol=1e-9)  # C2(c): (1 - lam (1 - a))^T
            assert math.isclose(r["diagonal_min"], math.exp(t * diag_terms.min()), rel_tol=1e-8, abs_tol=1e-300)
            assert r["diagonal_argmin"] == int(np.argmin(diag_terms))  # C5(a)
            assert math.isclose(r["sum_lambda"], t * lam, rel_tol=1e-12)
            k = alibi_kernel(8, posbias.alibi_slopes(2), [0.0, 0.0], [1.0, 1.0])
            rmat = (1 - lam) * np.eye(8) + lam * k
            dense = np.linalg.matrix_power(rmat, t)[-1]  # the plain product, by repeated squaring
            p = np.asarray(r["profile"])  # both routes round T = 1e5 times: T eps = 2.2e-11
            assert abs(p.sum() - 1) <= 1e-12 and np.max(np.abs(p - dense)) < 1e-10

    return check


def check_window(tmp: Path, out: str, err: str) -> None:
    rows = table_rows(tmp)
    for r in rows:
        dense = alibi_p(16, r["lambda"], 4, mask="window", window=4)
        p = np.asarray(r["profile"])
        assert list(p[:3]) == [0.0, 0.0, 0.0] and list(dense[:3]) == [0.0, 0.0, 0.0]  # 15 - 4 * 3 = 3
        assert np.max(np.abs(p - dense)) < 1e-13
        assert r["p_first"] == 0.0 and r["p_min"] == 0.0 and r["argmin"] == 0 and r["unresolved"] == 0
        assert r["u_shape"] is False and r["log_p_first"] is None


def check_same_as(reference_argv: list[str], note: str = "", stated: bool = False):
    """The table equals an uninterrupted run's (``reference_argv`` into ref/); stderr holds ``note``.
    ``stated``: --devices on the native route must be stated (the XLA route uses the devices)."""

    def check(tmp: Path, out: str, err: str) -> None:
        quiet(reference_argv)
        assert read_table(tmp / "out").equals(read_table(tmp / "ref"))
        assert note in err
        if stated:
            from posbias.sweep.runner import native_route

            said = "--devices 1: the batches run on the native CPU kernel" in err
            assert said == native_route("auto"), err

    return check


def check_plot(png: str, note: str):
    """The PNG is written (and said so); stderr holds exactly the expected note (or nothing)."""

    def check(tmp: Path, out: str, err: str) -> None:
        assert (tmp / "out" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"wrote out/{png}" in out
        assert (note in err and err.count("\n") == 1) if note else err == "", err

    return check


CORRECT = [
    Correct(
        "range [0.7, 1.0, 0.1] excludes 1.0",
        "spec",
        spec(range_axis("lambda", "[0.7, 1.0, 0.1]") + "profiles: true\n", "--quiet"),
        check_range([Fraction(7, 10), Fraction(8, 10), Fraction(9, 10)]),
    ),
    Correct(
        "range [0, 1, 0.25] excludes 1",
        "spec",
        spec(range_axis("lambda", "[0, 1, 0.25]") + "profiles: true\n", "--quiet"),
        check_range([Fraction(k, 4) for k in range(4)]),
    ),
    Correct(
        "range [0.1, 0.4, 0.1] (n = 2.9999999999999996)",
        "spec",
        spec(range_axis("lambda", "[0.1, 0.4, 0.1]") + "profiles: true\n", "--quiet"),
        check_range([Fraction(1, 10), Fraction(2, 10), Fraction(3, 10)]),
    ),
    Correct(
        "range [0.05, 0.95, 0.3] keeps a value 0.3 before the stop",
        "spec",
        spec(range_axis("lambda", "[0.05, 0.95, 0.3]") + "profiles: true\n", "--quiet"),
        check_range([Fraction(5, 100), Fraction(35, 100), Fraction(65, 100)]),
    ),
    Correct(
        "100,000 layers, constant schedule (compact)",
        "spec",
        spec(
            "base: {layers: 100000, heads: 2, tokens: 8, schedule: 'constant:0.5'}\n"
            "axes: {lambda: [0.0001, 0.5]}\nprofiles: true\ndiagonal: true\n",
            "--quiet",
        ),
        check_deep(100_000),
    ),
    Correct(
        "99,999 layers, constant schedule (per layer)",
        "spec",
        spec(
            "base: {layers: 99999, heads: 2, tokens: 8, schedule: 'constant:0.5'}\n"
            "axes: {lambda: [0.0001, 0.5]}\nprofiles: true\ndiagonal: true\n",
            "--quiet",
        ),
        check_deep(99_999),
    ),
    Correct(
        "sliding window: exact zeros reported as 0",
        "spec",
        spec(
            "base: {layers: 4, heads: 2, tokens: 16, schedule: 'constant:0.5', mask: 'window:4'}\n"
            "axes: {lambda: [0.5, 0.9]}\nprofiles: true\n",
            "--quiet",
        ),
        check_window,
    ),
    Correct(
        "--devices 1 on the native kernel is stated",
        "flags",
        spec(SMALL, "--devices", "1", "--quiet"),
        check_same_as(["sweep", "s.yaml", "--out", "ref", "--quiet"], "", stated=True),
    ),
    Correct(
        "resume recomputes a truncated part",
        "mixed",
        then(
            swept(SMALL, "out", "s.yaml", "--batch-size", "2"),
            truncate_part,
            argv=["sweep", "s.yaml", "--out", "out", "--resume", "--quiet"],
        ),
        check_same_as(
            ["sweep", "s.yaml", "--out", "ref", "--quiet", "--batch-size", "2"],
            "part-000000.parquet: unreadable; recomputing it",
        ),
    ),
    Correct(
        "manifest deleted, same spec: parts reused",
        "mixed",
        then(
            swept(SMALL, "out", "s.yaml", "--batch-size", "2"),
            delete_manifest,
            argv=["sweep", "s.yaml", "--out", "out", "--quiet", "--batch-size", "2"],
        ),
        check_same_as(["sweep", "s.yaml", "--out", "ref", "--quiet", "--batch-size", "2"]),
    ),
    Correct(
        "plot --at an off-grid value uses and names the nearest",
        "plot",
        then(
            swept(BASE + "axes: {lambda: [0.2, 0.5], slope_scale: [1, 2], content_diagonal: [0, 1.5]}\n"),
            argv=["plot", "out", "--at", "content_diagonal=1.1"],
        ),
        check_plot("heatmap-u_shape.png", "using the nearest, content_diagonal = 1.5"),
    ),
    Correct(
        "plot --at far outside the grid",
        "plot",
        then(
            swept(BASE + "axes: {lambda: [0.2, 0.5], slope_scale: [1, 2], content_diagonal: [0, 1.5]}\n"),
            argv=["plot", "out", "--at", "content_diagonal=-1e300"],
        ),
        check_plot("heatmap-u_shape.png", "using the nearest, content_diagonal = 0.0"),
    ),
    Correct(
        "curves of log p(0) (<= 0) on a linear axis",
        "plot",
        then(
            swept(),
            argv=[
                "plot",
                "out",
                "--kind",
                "curves",
                "--x",
                "lambda",
                "--series",
                "slope_scale",
                "--metric",
                "log_p_first",
            ],
        ),
        check_plot("curves-log_p_first.png", "log_p_first: values <= 0"),
    ),
    Correct(
        "curves with x through 0 on a linear axis",
        "plot",
        then(
            swept(BASE + "axes: {content_diagonal: [-1, 0, 1], lambda: [0.2, 0.5]}\n"),
            argv=[
                "plot",
                "out",
                "--kind",
                "curves",
                "--x",
                "content_diagonal",
                "--series",
                "lambda",
                "--metric",
                "p_last",
            ],
        ),
        check_plot("curves-p_last.png", ""),
    ),
]


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    return tmp_path


@pytest.mark.parametrize("case", REFUSED, ids=[c.id for c in REFUSED])
def test_refused(case: Refused, in_tmp, capsys):
    argv = case.setup(in_tmp)
    before = snapshot(in_tmp)
    try:
        code, _, err = run_cli(argv, capsys)
    finally:
        for root, dirs, _ in os.walk(in_tmp):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
    assert_refused(code, err, case.message)
    assert snapshot(in_tmp) == before, "the command changed files"


@pytest.mark.parametrize("case", CORRECT, ids=[c.id for c in CORRECT])
def test_correct(case: Correct, in_tmp, capsys):
    argv = case.setup(in_tmp)
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    assert "Traceback" not in err and "error" not in err
    case.check(in_tmp, out, err)


# ---------------------------------------------------------------- real processes


def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


RACER = """
import contextlib, io, sys
from posbias.cli import main
print("ready", flush=True)
for line in sys.stdin:
    word, _, out = line.strip().partition(" ")
    if word != "go":
        break
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main([*sys.argv[1:], "--out", out])
    print(code, err.getvalue().strip().replace(chr(10), " | "), flush=True)
"""

FAST = BASE + "name: fast\naxes: {lambda: [0.2, 0.5], slope_scale: [1, 2]}\n"
SLOW = (
    BASE.replace("tokens: 8", "tokens: 32") + "name: slow\naxes: {lambda: {linspace: [0.1, 0.9, 24]}, "
    "slope_scale: [1, 2]}\n"
)


def test_two_sweeps_race_for_one_folder(in_tmp):
    """Item 1: two processes with different specs start into one folder at the same moment, round
    after round. Exactly one claims it; the other is refused in one line; the folder then reads
    as the winner's table (equal to an independent run of its spec) and plots."""
    (in_tmp / "fast.yaml").write_text(FAST)
    (in_tmp / "slow.yaml").write_text(SLOW)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, "sweep", name, "--batch-size", "1", "--quiet"],
            cwd=in_tmp,
            env=_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("fast.yaml", "slow.yaml")
    ]
    try:
        assert [p.stdout.readline().strip() for p in procs] == ["ready", "ready"]
        quiet(["sweep", "fast.yaml", "--out", "ref-fast", "--quiet", "--batch-size", "1"])
        quiet(["sweep", "slow.yaml", "--out", "ref-slow", "--quiet", "--batch-size", "1"])
        winners = []
        for k in range(4):
            for p in procs:
                p.stdin.write(f"go race{k}\n")
                p.stdin.flush()
            results = [p.stdout.readline().strip().split(" ", 1) for p in procs]
            codes = sorted(int(r[0]) for r in results)
            assert codes == [0, 2], results
            loser = next(r[1] for r in results if r[0] == "2")
            assert "holds a sweep of another spec" in loser and "|" not in loser, loser
            winner = json.loads((in_tmp / f"race{k}" / "manifest.json").read_text())["name"]
            winners.append(winner)
            assert read_table(in_tmp / f"race{k}").equals(read_table(in_tmp / f"ref-{winner}"))
            assert main(["plot", f"race{k}"]) == 0
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(timeout=120)
    assert set(winners) <= {"fast", "slow"}


LIMITED = (
    "import os, resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), "
    "int(sys.argv[1]))); os.execv(sys.argv[2], sys.argv[2:])"
)


@pytest.mark.parametrize("limit", [600, 6000], ids=["manifest does not fit", "a part does not fit"])
def test_full_disk_leaves_nothing(in_tmp, limit):
    """Item 23: writes past RLIMIT_FSIZE fail (EFBIG): one line, exit 2, and no manifest.json, no
    table/, no folder the sweep created; an existing empty folder stays empty."""
    (in_tmp / "s.yaml").write_text(BASE + "axes: {lambda: {linspace: [0.1, 0.9, 40]}}\nprofiles: true\n")
    assert len(json.dumps({"x": "y" * 600})) > 600  # the manifest alone is ~2 KB: 600 bytes cannot hold it
    for out in ("new/deeper", "empty"):
        if out == "empty":
            (in_tmp / "empty").mkdir()
        r = subprocess.run(
            [
                sys.executable,
                "-c",
                LIMITED,
                str(limit),
                str(CONSOLE),
                "sweep",
                "s.yaml",
                "--out",
                out,
                "--batch-size",
                "10",
                "--quiet",
            ],
            cwd=in_tmp,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert_refused(r.returncode, r.stderr, f"--out {out}: cannot write (File too large)")
        if out == "empty":
            assert os.listdir(in_tmp / "empty") == []
        else:
            assert not (in_tmp / "new").exists()
    # the same sweep without the limit: what the limited one would have written is large enough
    r = subprocess.run(
        [str(CONSOLE), "sweep", "s.yaml", "--out", "free", "--batch-size", "10", "--quiet"],
        cwd=in_tmp,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    sizes = [p.stat().st_size for p in (in_tmp / "free" / "table").iterdir()]
    assert (in_tmp / "free" / "manifest.json").stat().st_size > 600 and max(sizes) > 6000 > 600


def peak(tmp: Path, *argv: str) -> tuple[int, int]:
    """(exit code, peak resident bytes) of the console script run as its own process."""
    code, _, rss = peak_rss([str(CONSOLE), *argv], cwd=tmp, env=_env())
    return code, rss


def test_diagonal_sweep_stays_within_its_memory_budget(in_tmp):
    """Item 12: with ``diagonal: true`` the plan counts the diagonal's (T, H, N) self-weights. Peak
    RSS over a baseline (the same command on a one-point, T = 1, N = 8 spec: interpreter, JAX,
    pyarrow and compiled code) stays within --memory-budget; a budget below the estimate is refused."""
    (in_tmp / "base.yaml").write_text(
        "base: {layers: 1, heads: 1, tokens: 8, schedule: 'constant:0.5'}\naxes: {lambda: [0.5]}\ndiagonal: true\n"
    )
    (in_tmp / "big.yaml").write_text(
        "base: {layers: 64, heads: 32, tokens: 2048, schedule: 'constant:0.5'}\n"
        "axes: {lambda: [0.3, 0.5, 0.7]}\ndiagonal: true\n"
    )
    budget = 100 * 2**20
    code, base = peak(in_tmp, "sweep", "base.yaml", "--out", "b", "--quiet")
    assert code == 0
    code, big = peak(in_tmp, "sweep", "big.yaml", "--out", "g", "--quiet", "--memory-budget", "100M")
    assert code == 0
    assert big - base <= budget, (big - base) / 2**20
    manifest = json.loads((in_tmp / "g" / "manifest.json").read_text())
    group = manifest["plan"]["groups"][0]
    assert group["batch_size"] * group["bytes_per_point"] + 8 * 64 * 2048 * (2 * 32 + 3) <= budget
    code, _ = peak(in_tmp, "sweep", "big.yaml", "--out", "h", "--quiet", "--memory-budget", "50M")
    assert code == 2 and not (in_tmp / "h").exists()


# ---------------------------------------------------------------- fuzz: specs near the edges


def _exact_count(a: float, b: float, s: float) -> Fraction:
    return (Fraction(b) - Fraction(a)) / Fraction(s)


edge_floats = st.one_of(
    st.sampled_from([0.0, 1e-320, 5e-324, 1e-9, 0.1, 0.25, 0.3, 0.7, 1.0, 1e308, -1e308]),
    st.floats(-2, 2, allow_nan=False),
    st.floats(allow_nan=True, allow_infinity=True),
)


@st.composite
def near_ranges(draw):
    """(start, stop, step) with stop within a hair of start + k step (the count's edge), or wild."""
    if draw(st.integers(0, 3)) == 0:
        return draw(edge_floats), draw(edge_floats), draw(edge_floats)
    start = draw(st.sampled_from([0.0, 0.05, 0.1, 0.3, 0.7]) | st.floats(0, 0.9))
    step = draw(st.sampled_from([0.1, 0.25, 0.3, 0.05, 1 / 3, 0.2, 0.01]))
    k = draw(st.integers(1, 12))
    stop = start + k * step
    jitter = draw(st.sampled_from(["0", "+ulp", "-ulp", "+1e-12", "-1e-12", "+1e-9", "-1e-9", "+half", "-half"]))
    if jitter.endswith("ulp"):
        stop = math.nextafter(stop, math.inf if jitter[0] == "+" else -math.inf)
    elif jitter.endswith("half"):
        stop += step / 2 if jitter[0] == "+" else -step / 2
    elif jitter != "0":
        stop += float(jitter) * (step if jitter.endswith("9") else 1.0)
    return start, stop, step


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    bounds=near_ranges(),
    budget=st.sampled_from([None, None, None, None, "0", "1", "1K", "64M", "1e30", "nan", "2.9G"]),
    batch=st.sampled_from([None, None, "0", "1", "3"]),
)
def test_fuzz_range_axis_and_flags(bounds, budget, batch, tmp_path_factory, monkeypatch):
    """A ``range`` lambda axis and budget/batch flags drawn near the edges of validity: exit 0
    with exactly the values an exact-rational count gives (stop excluded, 1e-9 steps of slack),
    each point's profile equal to a NumPy rollout; or exit 2 with one line and no folder."""
    import contextlib
    import io

    start, stop, step = bounds
    tmp = tmp_path_factory.mktemp("fuzz")
    monkeypatch.setenv("POSBIAS_MEMORY_LIMIT", "3G")
    text = (
        "base: {layers: 2, heads: 1, tokens: 4, schedule: 'constant:0.5'}\n"
        f"axes: {{lambda: {{range: [{start!r}, {stop!r}, {step!r}]}}}}\nprofiles: true\n"
    )
    text = text.replace("nan", ".nan").replace("inf", ".inf")
    (tmp / "s.yaml").write_text(text)
    argv = ["sweep", str(tmp / "s.yaml"), "--out", str(tmp / "out"), "--quiet"]
    argv += [] if budget is None else ["--memory-budget", budget]
    argv += [] if batch is None else ["--batch-size", batch]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(argv)
    err = err.getvalue()
    if code == 2:
        assert err.count("\n") == 1 and "Traceback" not in err and err.startswith("posbias"), err
        assert not (tmp / "out").exists()
        return
    assert code == 0, err
    n = _exact_count(start, stop, step)
    values = [r["lambda"] for r in read_table(tmp / "out").to_pylist()]  # grid order: start, start + step, ...
    count = len(values)
    assert count >= 1 and n - (count - 1) > Fraction(1, 10**9) / 2 and n - count <= Fraction(2, 10**9) + abs(n) / 2**49
    for k, v in enumerate(values):
        assert abs(Fraction(v) - (Fraction(start) + k * Fraction(step))) <= abs(Fraction(step)) / 2**40 + Fraction(
            1, 2**60
        )
    rows = read_table(tmp / "out").to_pylist()
    for r in rows:
        k = alibi_kernel(4, posbias.alibi_slopes(1), [0.0], [1.0])
        assert np.max(np.abs(np.asarray(r["profile"]) - numpy_rollout(np.stack([k, k]), [r["lambda"]] * 2))) < 1e-13


# ---------------------------------------------------------------- the count (README, issue 17)

PROCESS_CASES = {"mixed": ("refused", 4), "output": ("refused", 4), "flags": ("correct result", 1)}
"""Cases run as real processes: 4 race rounds (one refused each), 2 x 2 full-disk runs, the
diagonal's peak memory (one within budget, one refusal counted with the flags' correct results)."""


def hostile_classes() -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for case in REFUSED:
        counts.setdefault(case.cls, {"refused": 0, "correct result": 0})["refused"] += 1
    for case in CORRECT:
        counts.setdefault(case.cls, {"refused": 0, "correct result": 0})["correct result"] += 1
    for cls, (ending, n) in PROCESS_CASES.items():
        counts.setdefault(cls, {"refused": 0, "correct result": 0})[ending] += n
    return counts


def test_table_size():
    assert len({c.id for c in REFUSED}) == len(REFUSED) and len({c.id for c in CORRECT}) == len(CORRECT)
    assert set(hostile_classes()) == {"spec", "flags", "output", "mixed", "plot"}


if __name__ == "__main__":
    for cls, c in hostile_classes().items():
        print(f"{cls:7s} refused {c['refused']:3d}   correct result {c['correct result']:3d}")
