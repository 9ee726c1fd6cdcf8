"""Sweeps with relative-bias axes (C7, issue 19 §1): ``base.bias`` with placeholders, the ``bias`` and
``sink`` axes, the ALiBi-only engines, the planner's estimates, and compact deep points.

Rows are checked against stacks built here from the numerics types (the dense engine: N x N logits
soft-maxed row by row), against ``posbias rollout --bias`` of the same point, against the slopes
sweep for ``alibi:`` biases, and at depth against log-space squaring of a kernel written in NumPy."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import posbias.numerics as nx
from posbias.cli import main
from posbias.numerics.bias import Alibi, Bias, KerpleLog, KerplePower
from posbias.numerics.bias_stack import BiasStack
from posbias.sweep import read_table
from posbias.sweep.cli import main as sweep_main
from posbias.sweep.spec import SpecError, parse
from tests.exact_rollout import log_power_row

REPO = Path(__file__).resolve().parents[2]
BASE = {"layers": 4, "heads": 2, "tokens": 24, "schedule": "constant:0.5"}


def _sweep(*argv):
    return sweep_main([str(a) for a in argv])


def _spec(tmp_path, text, name="spec.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_example_kerple_sweep_runs_and_its_rows_are_the_bias_stacks(tmp_path):
    out = tmp_path / "kerple"
    assert _sweep(REPO / "examples" / "sweep-kerple.yaml", "--out", out, "--profiles", "--quiet") == 0
    rows = read_table(out).to_pylist()
    assert len(rows) == 30
    k = 0
    for r1 in np.linspace(0, 2, 5).tolist():  # the grid order: first axis slowest
        for r2 in (0.5, 1.0, 2.0):
            for sink in (0.0, 2.0):
                row = rows[k]
                k += 1
                assert (row["r1"], row["r2"], row["sink"]) == (r1, r2, sink)
                assert row["bias_spec"] == f"kerple-log:{r1!r},{r2!r}"
                if k % 7:  # every seventh point against the dense engine (N x N products, slow-ish)
                    continue
                direct = BiasStack.build([0.5] * 12, Bias(KerpleLog(r1, r2)), sink=sink)
                reference = nx.Dense().profile(direct, 256).probabilities
                p = np.asarray(row["profile"])
                assert np.abs(p - reference).max() <= 1e-12 and abs(p.sum() - 1.0) <= 1e-12
                s = nx.summarize(nx.profile(direct, 256), direct)
                assert row["argmin"] == s.argmin and row["p_first"] == pytest.approx(s.p_first, abs=1e-15)


def test_bias_points_equal_rollout_of_the_same_flags(tmp_path):
    spec = _spec(
        tmp_path,
        """\
base: {layers: 3, heads: 2, tokens: 40, schedule: "constant:0.5", content_diagonal: 0.5}
axes:
  bias: ["kerple-power:{a},0.5/alibi:0.25", "t5:8,16:0,-{a},-2,-3,-4,-5,-6,-7"]
  a: [0.5, 1.5]
  sink: [0, 1.25]
profiles: true
""",
    )
    assert _sweep(spec, "--out", tmp_path / "out", "--quiet") == 0
    rows = read_table(tmp_path / "out").to_pylist()
    assert [r["bias_spec"] for r in rows[:4]] == ["kerple-power:0.5,0.5/alibi:0.25"] * 2 + [
        "kerple-power:1.5,0.5/alibi:0.25"
    ] * 2
    for row in (rows[1], rows[6]):
        run = tmp_path / f"run{row['point']}"
        assert (
            main(
                [
                    "rollout",
                    "--layers",
                    "3",
                    "--heads",
                    "2",
                    "--tokens",
                    "40",
                    "--schedule",
                    "constant:0.5",
                    "--content-diagonal",
                    "0.5",
                    "--bias",
                    row["bias_spec"],
                    "--sink",
                    repr(row["sink"]),
                    "--out",
                    str(run),
                ]
            )
            == 0
        )
        p = np.loadtxt(run / "profile.csv", delimiter=",", skiprows=1)[:, 1]
        assert np.abs(np.asarray(row["profile"]) - p).max() <= 1e-15
        summary = json.loads((run / "summary.json").read_text())
        assert row["argmin"] == summary["argmin"] and row["entropy"] == pytest.approx(summary["entropy"], abs=1e-15)


@pytest.mark.parametrize("engine", ["auto", "structured"])
def test_alibi_bias_sweep_equals_the_slopes_sweep(tmp_path, engine):
    by_bias = _spec(
        tmp_path,
        f"""\
base: {{layers: 5, heads: 2, tokens: 32, schedule: "constant:0.5", content_diagonal: 1.0}}
axes:
  lambda: [0.3, 0.8]
  m: [0, 0.25, 1.5]
engine: {engine}
profiles: true
""".replace("base: {", 'base: {bias: "alibi:{m}/alibi:0.5", '),
        "bias.yaml",
    )
    by_slopes = _spec(
        tmp_path,
        f"""\
base: {{layers: 5, tokens: 32, schedule: "constant:0.5", content_diagonal: 1.0}}
axes:
  lambda: [0.3, 0.8]
  slopes: [[0, 0.5], [0.25, 0.5], [1.5, 0.5]]
engine: {engine}
profiles: true
""",
        "slopes.yaml",
    )
    assert _sweep(by_bias, "--out", tmp_path / "b", "--quiet") == 0
    assert _sweep(by_slopes, "--out", tmp_path / "s", "--quiet") == 0
    a, b = read_table(tmp_path / "b").to_pylist(), read_table(tmp_path / "s").to_pylist()
    assert len(a) == len(b) == 6
    for x, y in zip(a, b):
        assert np.abs(np.asarray(x["profile"]) - np.asarray(y["profile"])).max() <= 1e-15
        assert x["p_first"] == pytest.approx(y["p_first"], abs=1e-15) and x["engine"] == y["engine"] == "structured"


def test_alibi_only_engine_refuses_a_non_alibi_point_at_plan_time(tmp_path, capsys):
    spec = _spec(
        tmp_path,
        """\
base: {layers: 2, heads: 1, tokens: 16, schedule: "constant:0.5", bias: "kerple-power:1,{r2}"}
axes: {r2: [1, 0.5]}
engine: fft
""",
    )
    out = tmp_path / "out"
    assert _sweep(spec, "--out", out) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "engine fft: point 1: bias 'kerple-power:1,0.5'" in err
    assert "not ALiBi at N = 16" in err and not out.exists()


def test_planner_estimates_bias_points_as_the_bias_engine(tmp_path):
    spec = _spec(
        tmp_path,
        """\
base: {layers: 8, heads: 4, schedule: "constant:0.5", bias: "kerple-log:1,0.5"}
axes: {tokens: [1024, 4096]}
""",
    )
    assert _sweep(spec, "--out", tmp_path / "out", "--quiet") == 0
    groups = json.loads((tmp_path / "out" / "manifest.json").read_text())["plan"]["groups"]
    small, large = groups
    assert large["seconds_per_point"] / small["seconds_per_point"] == pytest.approx(16.0)  # O(T H N^2)
    assert large["bytes_per_point"] / small["bytes_per_point"] < 4.5  # O(H N): no N x N array planned
    assert large["bytes_per_point"] < 8 * 4096**2


def test_deep_constant_bias_points_are_compact_and_exact(tmp_path):
    spec = _spec(
        tmp_path,
        """\
base: {layers: 100000, heads: 1, tokens: 12, schedule: "constant:0.5", bias: "kerple-log:{r1},1.5"}
axes: {r1: [0.5, 2]}
""",
    )
    assert _sweep(spec, "--out", tmp_path / "out", "--quiet") == 0
    rows = read_table(tmp_path / "out").to_pylist()
    i, j = np.arange(12)[:, None], np.arange(12)[None, :]
    for row, r1 in zip(rows, (0.5, 2.0)):
        assert row["engine"] == "power"
        logits = np.where(j <= i, -r1 * np.log1p(1.5 * np.abs(i - j)), -np.inf)
        w = np.exp(logits - logits.max(axis=1, keepdims=True))
        r = 0.5 * np.eye(12) + 0.5 * w / w.sum(axis=1, keepdims=True)
        with np.errstate(divide="ignore"):
            reference = log_power_row(np.log(r), 100000)
        assert row["log_p_last"] == pytest.approx(reference[-1], rel=1e-12)
        assert row["p_first"] == pytest.approx(math.exp(reference[0]), abs=1e-12)


@pytest.mark.parametrize(
    "base,axes,expected",
    [
        ({"bias": "kerple-log:{r1},{r2}"}, {"r1": [1]}, "base.bias: placeholder {r2} has no axis (add axes.r2)"),
        (
            {"bias": "kerple-log:{r1},{r2}"},
            {"r1": [1], "r2": [1, -0.5]},
            "axes.r1 = 1.0, axes.r2 = -0.5: bias 'kerple-log:1.0,-0.5': kerple-log r2: -0.5 is below 0",
        ),
        ({"bias": "kerple-log:{r1},1"}, {"r1": [1], "q": [2]}, "axes.q: unknown axis"),
        ({"bias": "alibi:{m"}, {"lambda": [0.5]}, "a brace that is not a placeholder"),
        ({"bias": "alibi:{lambda}"}, {"lambda": [0.5]}, "placeholder {lambda} names a built-in axis"),
        ({"bias": "alibi:1"}, {"slope_scale": [1, 2]}, "axes.slope_scale: a bias sweep has no ALiBi slopes"),
        ({"bias": "alibi:1", "slopes": "hf"}, {"lambda": [0.5]}, "base.slopes: a bias sweep has no ALiBi slopes"),
        ({"bias": "alibi:1"}, {"bias": ["alibi:2"]}, "base.bias and the axis bias both set the bias"),
        ({"bias": "alibi:1/alibi:2/alibi:3"}, {"lambda": [0.5]}, "3 head biases, expected one or heads = 2"),
        ({}, {"sink": [1.0]}, "axes.sink: a sink needs a relative bias"),
        ({}, {"bias": [3]}, "axes.bias[0]: expected a bias spec string"),
        ({}, {"bias": ["nope:1"]}, "axes.bias[0]: bias 'nope:1': unknown bias"),
    ],
)
def test_bad_bias_specs_are_one_line(base, axes, expected):
    with pytest.raises(SpecError) as info:
        parse({"base": {**BASE, **base}, "axes": axes}, "s.yaml")
    message = str(info.value)
    assert expected in message and "\n" not in message and message.startswith("s.yaml: ")


def test_engine_bias_needs_a_bias_and_bad_spec_exits_2_writing_nothing(tmp_path, capsys):
    with pytest.raises(SpecError, match="engine bias needs a relative bias"):
        parse({"base": BASE, "axes": {"lambda": [0.5]}, "engine": "bias"})
    spec = _spec(
        tmp_path,
        'base: {layers: 2, heads: 1, tokens: 8, schedule: "constant:0.5", bias: "alibi:{m}"}\naxes: {m: [0.5, -1]}\n',
    )
    out = tmp_path / "out"
    assert _sweep(spec, "--out", out) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "axes.m = -1.0: bias 'alibi:-1.0': alibi slope: -1 is below 0" in err
    assert not out.exists()


def test_a_config_with_a_bias_sweeps_its_lambda_and_the_bias_axis_overrides_it(tmp_path):
    cfg = tmp_path / "k.yaml"
    cfg.write_text(
        "sequence_length: 20\nnum_layers: 3\nattention_config:\n  num_heads: 2\n"
        "  bias: kerple-log:1,0.5\n  sink: [[1.0]]\ncontent_config:\n  diagonal_scores: [[0.0]]\n"
        "lambda_schedule_config:\n  schedule_type: constant\n  lambda_const: 0.5\n"
    )
    spec = _spec(
        tmp_path,
        "base: k.yaml\naxes:\n  lambda: [0.25, 0.75]\n  bias: ['kerple-log:1,0.5', 'alibi:0.5']\nprofiles: true\n",
    )
    assert _sweep(spec, "--out", tmp_path / "out", "--quiet") == 0
    rows = read_table(tmp_path / "out").to_pylist()
    for row, (lam, bias) in zip(
        rows, [(lam, b) for lam in (0.25, 0.75) for b in (Bias(KerpleLog(1.0, 0.5)), Bias(Alibi(0.5)))]
    ):
        direct = BiasStack.build([lam] * 3, bias, sink=1.0)
        assert np.abs(np.asarray(row["profile"]) - nx.Dense().profile(direct, 20).probabilities).max() <= 1e-12
    no_sink = _spec(
        tmp_path, "base: k.yaml\naxes:\n  sink: [0, 0.5]\n  bias: ['kerple-power:0.5,0.5']\nprofiles: true\n", "s.yaml"
    )
    assert _sweep(no_sink, "--out", tmp_path / "o2", "--quiet") == 0
    row = read_table(tmp_path / "o2").to_pylist()[1]
    direct = BiasStack.build([0.5] * 3, Bias(KerplePower(0.5, 0.5)), sink=0.5)
    assert np.abs(np.asarray(row["profile"]) - nx.Dense().profile(direct, 20).probabilities).max() <= 1e-12
