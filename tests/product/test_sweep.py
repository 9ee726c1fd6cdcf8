"""posbias sweep / posbias plot: the table against independent single-model runs, bad specs
(one line, exit 2, nothing written), resume after a real kill -9, memory refusal, plots.

Tiny grids (T <= 8, N <= 64) keep this file CI-sized."""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from posbias.sweep import read_table
from posbias.sweep.cli import main as sweep_main
from posbias.sweep.plot import main as plot_main

REPO = Path(__file__).resolve().parents[2]

TINY = """\
name: tiny
base: {layers: 4, heads: 4, tokens: 16, schedule: "constant:0.5", content_diagonal: 1.0}
axes:
  lambda: [0.2, 0.5, 0.9]
  slope_scale: {geomspace: [0.25, 4, 3]}
  mask: [causal, "window:8"]
profiles: true
diagonal: true
"""


def _spec(tmp_path, text, name="spec.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _sweep(*argv):
    return sweep_main([str(a) for a in argv])


def test_table_rows_equal_independent_single_model_runs(tmp_path):
    import posbias

    spec = _spec(tmp_path, TINY)
    assert _sweep(spec, "--out", tmp_path / "out", "--batch-size", "5", "--quiet") == 0
    table = read_table(tmp_path / "out").to_pylist()
    assert [r["point"] for r in table] == list(range(18))
    k = 0
    for lam in (0.2, 0.5, 0.9):  # the grid order: first axis slowest
        for scale in (0.25, 1.0, 4.0):
            for mask in ("causal", "window:8"):
                row = table[k]
                k += 1
                assert (row["lambda"], row["mask"]) == (lam, mask) and math.isclose(row["slope_scale"], scale)
                stack = posbias.AlibiStack.build(
                    [lam] * 4,
                    posbias.alibi_slopes(4) * row["slope_scale"],
                    diagonal=1.0,
                    mask=posbias.numerics.masks.parse(mask),
                )
                dense = posbias.profile(stack, 16, engine="dense").probabilities  # independent route
                p = np.asarray(row["profile"])
                assert abs(p.sum() - 1) < 1e-12
                assert np.max(np.abs(p - dense)) < 1e-13
                assert row["p_first"] == p[0] and row["p_last"] == p[-1] and row["argmin"] == int(np.argmin(dense))
                assert math.isclose(row["sum_lambda"], 4 * lam)
                diag = np.diag(posbias.rollout_matrix(posbias.alibi_kernels(stack, 16), stack.lambdas))
                assert math.isclose(row["diagonal_min"], diag.min(), rel_tol=1e-12)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["complete"] and manifest["points"] == 18 and manifest["plan"]["batches"] == 4
    assert sum(b["points"] for b in manifest["batches"].values()) == 18
    assert all(sum(b["engines"].values()) == b["points"] for b in manifest["batches"].values())
    assert manifest["versions"]["pyarrow"] and manifest["spec"]["name"] == "tiny"


def test_zip_and_power_decay_axes(tmp_path):
    spec = _spec(
        tmp_path,
        """\
base: {heads: 2, tokens: 8, schedule: "power_decay:0.5,1.0"}
axes:
  lambda0: [0.3, 0.6]
  beta: [0.5, 2.0]
  layers: [1, 3]
zip: [[lambda0, beta]]
""",
    )
    assert _sweep(spec, "--out", tmp_path / "out", "--quiet") == 0
    rows = read_table(tmp_path / "out").to_pylist()
    got = [(r["lambda0"], r["beta"], r["layers"]) for r in rows]
    assert got == [(0.3, 0.5, 1), (0.3, 0.5, 3), (0.6, 2.0, 1), (0.6, 2.0, 3)]
    for r in rows:  # sum_t lambda0 (t+1)^-beta, by hand
        assert math.isclose(r["sum_lambda"], sum(r["lambda0"] / (t + 1) ** r["beta"] for t in range(r["layers"])))


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "base: {layers: 2, heads: 2, tokens: 8, schedule: 'constant:0.5'}\naxes: {lamda: [0.5]}\n",
            "axes.lamda: unknown axis",
        ),
        (
            "base: {layers: 2, heads: 2, tokens: 8, schedule: 'constant:0.5'}\naxes: {lambda: []}\n",
            "axes.lambda: empty axis",
        ),
        (
            "base: {layers: 2, heads: 2, tokens: 8, schedule: 'constant:0.5'}\naxes: {lambda: [0.5, 1.5]}\n",
            "axes.lambda[1]: lambda = 1.5, expected a value in [0, 1]",
        ),
        (
            "base: {layers: 2, heads: 2, tokens: 8, schedule: 'constant:0.5'}\naxes: {tokens: [8, 0]}\n",
            "axes.tokens[1]: tokens = 0, expected an integer between 1 and 2^53",
        ),
        (
            "base: {layers: 2, heads: 2, tokens: 8, schedule: 'constant:0.5'}\naxes: {lambda0: [0.5]}\n",
            "axis lambda0 alone needs a power_decay base schedule",
        ),
        (
            "base: {layers: 2, heads: 2, tokens: 8, schedule: 'constant:0.5'}\naxes: {lambda: [0.1, 0.2], "
            "slope_scale: [1]}\nzip: [[lambda, slope_scale]]\n",
            "zipped axes need equal lengths",
        ),
        (
            "base: {layers: 2, heads: 2, tokens: 8, schedule: 'constant:0.5'}\naxes: {mask: [causal, 'window:0']}\n",
            "axes.mask[1]: mask 'window:0'",
        ),
        (
            "base: {layers: 2, heads: 2, tokens: 8, schedule: 'constant:0.5'}\n"
            "axes: {lambda: {linspace: [0, 1, 1001]}, "
            "slope_scale: {linspace: [0, 1, 1001]}}\n",
            "more than 1,000,000 (use --force",
        ),
        ("base: {layers: 2, tokens: 8, schedule: 'constant:0.5'}\naxes: {lambda: [0.5]}\n", "base.heads is missing"),
        (
            "base: {layers: 2, heads: 2, tokens: 8, schedule: 'constant:0.5'}\naxes: {lambda: [0.5]}\nengine: gpu\n",
            "engine: expected one of auto",
        ),
    ],
)
def test_bad_specs_one_line_exit_2_nothing_written(tmp_path, capsys, text, expected):
    spec = _spec(tmp_path, text)
    out = tmp_path / "out"
    assert _sweep(spec, "--out", out, "--quiet") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err and "Traceback" not in err
    assert not out.exists()


def test_a_point_that_cannot_fit_is_refused_with_its_estimate(tmp_path, capsys):
    spec = _spec(tmp_path, "base: {layers: 8, heads: 4, tokens: 64, schedule: 'constant:0.5'}\naxes: {lambda: [0.5]}\n")
    assert _sweep(spec, "--out", tmp_path / "out", "--memory-budget", "1K") == 2
    err = capsys.readouterr().err
    assert "one point of shape T = 8, H = 4, N = 64 (causal) needs about" in err and "memory budget of 1.0 KiB" in err
    assert not (tmp_path / "out").exists()


def test_refuses_to_mix_sweeps_and_resume_checks_the_spec(tmp_path, capsys):
    spec = _spec(tmp_path, TINY)
    out = tmp_path / "out"
    assert _sweep(spec, "--out", out, "--quiet", "--batch-size", "9") == 0
    before = {p.name: p.read_bytes() for p in (out / "table").iterdir()}
    assert _sweep(spec, "--out", out, "--quiet") == 2
    assert "holds this sweep already" in capsys.readouterr().err
    other = _spec(tmp_path, TINY.replace("0.9]", "0.8]"), "other.yaml")
    assert _sweep(other, "--out", out, "--quiet", "--resume") == 2
    assert "holds a sweep of another spec" in capsys.readouterr().err
    assert _sweep(spec, "--out", out, "--quiet", "--resume", "--batch-size", "3") == 2
    assert "was planned with --batch-size 9" in capsys.readouterr().err
    assert _sweep(spec, "--out", out, "--quiet", "--resume") == 0  # nothing left to do
    assert {p.name: p.read_bytes() for p in (out / "table").iterdir()} == before


KILL_SPEC = """\
base: {layers: 8, heads: 4, tokens: 64, schedule: "constant:0.5"}
axes:
  lambda: {linspace: [0.05, 0.95, 40]}
  content_diagonal: {linspace: [-2, 2, 15]}
profiles: true
"""


def test_kill_9_mid_sweep_then_resume_equals_an_uninterrupted_run(tmp_path):
    spec = _spec(tmp_path, KILL_SPEC)
    full, killed = tmp_path / "full", tmp_path / "killed"
    assert _sweep(spec, "--out", full, "--batch-size", "4", "--quiet") == 0
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, "-m", "posbias.sweep.cli", str(spec), "--out", str(killed), "--batch-size", "4", "--quiet"]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240  # a hang guard, not a timing assertion
    while time.monotonic() < deadline and proc.poll() is None:
        if len(list((killed / "table").glob("part-*.parquet"))) >= 3:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the sweep finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    parts = sorted((killed / "table").glob("part-*.parquet"))
    assert 3 <= len(parts) < 150
    stamps = {p.name: p.stat().st_mtime_ns for p in parts}
    assert _sweep(spec, "--out", killed, "--resume", "--quiet") == 0
    for name, stamp in stamps.items():  # finished batches were not recomputed
        assert (killed / "table" / name).stat().st_mtime_ns == stamp
    assert read_table(killed).equals(read_table(full))
    assert not list((killed / "table").glob(".*"))  # no temporary left
    manifest = json.loads((killed / "manifest.json").read_text())
    assert manifest["complete"] and len(manifest["batches"]) >= 150 - len(parts)


def test_parquet_reads_with_pyarrow_pandas_and_polars(tmp_path):
    spec = _spec(tmp_path, TINY)
    assert _sweep(spec, "--out", tmp_path / "out", "--batch-size", "4", "--quiet") == 0
    t = pq.read_table(tmp_path / "out" / "table")  # the folder as one dataset
    assert t.num_rows == 18 and sorted(t.column("point").to_pylist()) == list(range(18))
    import pandas as pd
    import polars as pl

    df = pd.read_parquet(tmp_path / "out" / "table").sort_values("point")
    assert list(df["point"]) == list(range(18)) and df["u_shape"].dtype == bool
    frame = pl.read_parquet(str(tmp_path / "out" / "table" / "*.parquet")).sort("point")
    assert frame["point"].to_list() == list(range(18))
    assert frame["p_first"].to_list() == df["p_first"].tolist() == t.sort_by("point").column("p_first").to_pylist()


def test_plot_heatmap_and_curves(tmp_path, capsys):
    spec = _spec(tmp_path, TINY)
    out = tmp_path / "out"
    assert _sweep(spec, "--out", out, "--quiet") == 0
    assert plot_main([str(out)]) == 0
    png = out / "heatmap-u_shape.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (
        plot_main(
            [
                str(out),
                "--x",
                "slope_scale",
                "--y",
                "mask",
                "--metric",
                "p_first",
                "--reduce",
                "first",
                "--out",
                str(tmp_path / "f.png"),
            ]
        )
        == 0
    )
    assert (tmp_path / "f.png").is_file()
    assert (
        plot_main([str(out), "--kind", "curves", "--x", "slope_scale", "--series", "lambda", "--at", "mask=causal"])
        == 0
    )
    assert (out / "curves-p_first.png").is_file()
    capsys.readouterr()
    assert plot_main([str(out), "--x", "depth"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert plot_main([str(out), "--metric", "nope"]) == 2


def test_posbias_command_runs_sweep_and_plot(tmp_path):
    """Through the installed `posbias` entry point (needs the two lines in posbias/cli.py)."""
    exe = shutil.which("posbias", path=str(Path(sys.executable).parent))
    assert exe is not None
    spec = _spec(tmp_path, TINY)
    res = subprocess.run(
        [exe, "sweep", str(spec), "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    assert "18 points" in res.stdout
    res = subprocess.run([exe, "plot", str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
