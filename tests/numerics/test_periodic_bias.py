"""Periodic relative-bias stacks (C7 with numerics/periodic.py, numerics/power.py; issue 19 §1):
the power engine on BiasStack blocks against the bias engine on the expanded stack, and at
T = 10^9 against log-space squaring of a kernel written out here in NumPy; ``posbias rollout
--periodic --bias`` and ``--bias`` / ``--sink`` with a CONFIG end to end."""

from __future__ import annotations

import numpy as np
import pytest

import posbias.numerics as nx
from posbias.cli import main
from posbias.model import build_model
from posbias.numerics.bias import Alibi, Bias, KerpleLog, KerplePower, Table
from posbias.numerics.bias_stack import BiasStack
from posbias.numerics.masks import Full
from posbias.numerics.periodic import PeriodicStack
from posbias.numerics.power import Power
from tests.exact_rollout import log_power_row


def _block(mask=None):
    """Two layers, two heads: Kerple-log, Kerple-power, ALiBi and a bump table; content and sinks."""
    biases = [
        [Bias(KerpleLog(1.0, 0.5)), Bias(KerplePower(0.4, 0.7))],
        [Bias(Table((0.0, -0.5, 0.3, -2.0))), Bias(Alibi(0.2))],
    ]
    return BiasStack.build(
        [0.6, 0.35],
        biases,
        diagonal=[[0.5, -0.3], [1.0, 0.0]],
        sink=[[1.5, 0.0], [0.0, 0.7]],
        head_weights=[[0.3, 0.7], [0.5, 0.5]],
        mask=mask,
    )


@pytest.mark.parametrize("mask", [None, Full()], ids=["causal", "full"])
def test_power_engine_on_a_periodic_bias_stack_matches_the_bias_engine(mask):
    block = _block(mask)
    for t in (2, 3, 7, 1000):
        stack = PeriodicStack.build(block, t)
        got = Power().profile(stack, 64)
        flat = stack.expand()
        assert isinstance(flat, BiasStack) and flat.num_layers == t
        reference = nx.profile(flat, 64, engine="bias")
        assert np.abs(got.probabilities - reference.probabilities).max() <= 1e-12, t
        assert abs(got.probabilities.sum() - 1.0) <= 1e-12
        np.testing.assert_allclose(got.min_self_weight, stack.compress(reference.min_self_weight), atol=1e-14)


def _numpy_kernel(n: int, r1: float, r2: float, d: float, s: float) -> np.ndarray:
    """One causal Kerple-log head with content d and sink s, its logits soft-maxed row by row here."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    logits = -r1 * np.log1p(r2 * np.abs(i - j)) + d * (i == j) + s * (j == 0)
    logits = np.where(j <= i, logits, -np.inf)
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    return w / w.sum(axis=1, keepdims=True)


def test_periodic_bias_stack_at_a_billion_layers_matches_log_space_squaring():
    n, t, lam = 16, 10**9, 0.5
    stack = PeriodicStack.build(BiasStack.build([lam], Bias(KerpleLog(0.8, 1.5)), diagonal=0.4, sink=0.6), t)
    prof = nx.profile(stack, n)
    assert prof.engine == "power" and prof.unresolved().sum() == 0
    r = (1.0 - lam) * np.eye(n) + lam * _numpy_kernel(n, 0.8, 1.5, 0.4, 0.6)
    with np.errstate(divide="ignore"):
        reference = log_power_row(np.log(r), t)
    np.testing.assert_allclose(prof.log_probabilities, reference, rtol=1e-12, atol=1e-12)
    assert reference[-1] < -1e6  # far below the float64 range: only log p carries it
    assert abs(float(np.exp(prof.log_probabilities).sum()) - 1.0) <= 1e-12


def test_a_periodic_bias_stack_of_alibi_heads_takes_the_alibi_route():
    block = BiasStack.build([0.5, 0.2], [Bias(Alibi(0.5)), Bias(KerplePower(0.25, 1.0))], diagonal=0.3)
    stack = PeriodicStack.build(block, 10**6)
    prof = nx.profile(stack, 32)
    assert "an ALiBi stack" in prof.notes[0]
    alibi = PeriodicStack.build(nx.AlibiStack.build([0.5, 0.2], [0.5, 0.25], diagonal=0.3), 10**6)
    np.testing.assert_allclose(
        prof.log_probabilities, Power().profile(alibi, 32).log_probabilities, rtol=1e-12, atol=1e-12
    )


def test_deep_constant_bias_model_is_compact():
    model = build_model(
        layers=10**6, heads=2, tokens=24, schedule="constant:0.5", bias="kerple-log:1,0.5/alibi:0.1", sink=0.5
    )
    assert isinstance(model.stack, PeriodicStack) and model.stack.is_bias and model.stack.period == 1
    assert model.summary().engine == "power"


def _csv(path):
    return np.loadtxt(path, delimiter=",", skiprows=1)[:, 1]


def test_rollout_periodic_bias_end_to_end(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            "rollout",
            "--layers",
            "1001",
            "--heads",
            "2",
            "--tokens",
            "48",
            "--schedule",
            "custom:0.6,0.35",
            "--periodic",
            "--bias",
            "kerple-log:1,0.5/alibi:0.2",
            "--sink",
            "1.5,0",
            "--content-diagonal",
            "0.5",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert "engine power" in capsys.readouterr().out
    flat = BiasStack.build(
        np.tile([0.6, 0.35], 501)[:1001],
        [Bias(KerpleLog(1.0, 0.5)), Bias(Alibi(0.2))],
        diagonal=0.5,
        sink=np.tile([[1.5], [0.0]], (501, 2))[:1001],
    )
    reference = nx.profile(flat, 48, engine="bias").probabilities
    got = _csv(out / "profile.csv")
    assert np.abs(got - reference).max() <= 1e-12 and abs(got.sum() - 1.0) <= 1e-12


def test_rollout_periodic_bias_refuses_a_sink_list_of_the_wrong_length(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            "rollout",
            "--layers",
            "9",
            "--heads",
            "1",
            "--tokens",
            "8",
            "--schedule",
            "custom:0.6,0.35",
            "--periodic",
            "--bias",
            "alibi:0.5",
            "--sink",
            "1,2,3",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "sink: 3 rows" in err and "the 2 layers of one period" in err and err.count("\n") == 1
    assert not out.exists()


ALIBI_CONFIG = """\
sequence_length: 40
num_layers: 3
attention_config:
  num_heads: 2
  alibi_slopes: [[0.5, 0.25]]
content_config:
  diagonal_scores: [[0.5]]
lambda_schedule_config:
  schedule_type: constant
  lambda_const: 0.5
"""


def test_rollout_bias_overrides_a_config(tmp_path, capsys):
    cfg = tmp_path / "alibi.yaml"
    cfg.write_text(ALIBI_CONFIG)
    out = tmp_path / "run"
    code = main(
        [
            "rollout",
            str(cfg),
            "--bias",
            "kerple-log:1,0.5",
            "--sink",
            "2",
            "--tokens",
            "32",
            "--json",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    direct = BiasStack.build([0.5] * 3, Bias(KerpleLog(1.0, 0.5)), diagonal=0.5, sink=2.0)
    np.testing.assert_allclose(
        _csv(out / "profile.csv"), nx.Dense().profile(direct, 32).probabilities, rtol=0, atol=1e-12
    )
    assert '"bias"' in capsys.readouterr().out  # recorded among the overrides


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["--sink", "1"], "--sink: applies with a relative bias"),
        (["--bias", "alibi:1", "--slopes", "hf"], "does not combine with --slopes"),
        (["--bias", "kerple-log:1,1", "--periodic"], "--periodic: applies to models from flags"),
        (["--bias", "kerple-log:1,1", "--sink", "1,2"], "--sink: 2 values, expected one number or num_layers = 3"),
    ],
)
def test_rollout_config_bias_refusals(tmp_path, capsys, argv, fragment):
    cfg = tmp_path / "alibi.yaml"
    cfg.write_text(ALIBI_CONFIG)
    out = tmp_path / "run"
    code = main(["rollout", str(cfg), *argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and fragment in err and err.count("\n") == 1, err
    assert not out.exists()
