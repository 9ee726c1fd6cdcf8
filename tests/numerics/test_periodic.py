"""Periodic stacks at any depth (numerics/periodic.py, numerics/power.py): the power engine
against the plain per-layer scan, exact rationals, a log-space reference and C2(c)'s closed
form at T = 10^9; the compact model, the summary's aggregates and the CLI flags."""

import json
import math
from fractions import Fraction

import numpy as np
import pytest

import posbias
import posbias.numerics as nx
from posbias.cli import main
from posbias.model import ModelError
from posbias.numerics.masks import Full
from posbias.numerics.periodic import PeriodicStack, detect, minimal_period
from posbias.numerics.power import Power
from tests.exact_rollout import exact_kernel, log_power_row, periodic_profile

N = 24


def _block(period, mask=None, seed=0):
    rng = np.random.default_rng(seed + 10 * period)
    return nx.AlibiStack.build(
        rng.uniform(0.2, 0.95, period),
        rng.uniform(0.0, 1.5, (period, 3)),
        rng.normal(0.0, 1.5, (period, 3)),
        rng.uniform(0.1, 1.0, (period, 3)),
        mask=mask,
    )


@pytest.mark.parametrize("mask", [None, Full()], ids=["causal", "full"])
@pytest.mark.parametrize("period", [1, 2, 3])
def test_power_engine_matches_the_plain_scan(mask, period):
    block = _block(period, mask)
    for t in (1, 2, 3, 5, 8, 13, 64, 1000):
        if t < period:
            continue
        stack = PeriodicStack.build(block, t)
        got = Power().profile(stack, N)
        flat = stack.expand()
        assert flat.num_layers == t
        reference = nx.profile(flat, N, engine="structured" if t > 13 else "dense")
        assert np.abs(got.probabilities - reference.probabilities).max() <= 1e-12, (t, period)
        assert abs(got.probabilities.sum() - 1.0) <= 1e-12
        assert got.extended_range
        # the per-distinct-layer self-weights are the scan's per-layer ones, compressed
        np.testing.assert_allclose(got.min_self_weight, stack.compress(reference.min_self_weight), atol=1e-14)


def test_layer_order_of_a_non_commuting_block_is_kept():
    a = nx.AlibiStack.build([0.9], [0.05], diagonal=-2.0)
    b = nx.AlibiStack.build([0.3], [2.0], diagonal=3.0)
    ab = nx.AlibiStack(
        *(np.concatenate([getattr(a, f), getattr(b, f)]) for f in ("lambdas", "slopes", "diagonal", "head_weights"))
    )
    ba = nx.AlibiStack(
        *(np.concatenate([getattr(b, f), getattr(a, f)]) for f in ("lambdas", "slopes", "diagonal", "head_weights"))
    )
    for t in (2, 7, 40):
        got_ab = Power().profile(PeriodicStack.build(ab, t), 12)
        got_ba = Power().profile(PeriodicStack.build(ba, t), 12)
        ref = nx.profile(PeriodicStack.build(ab, t).expand(), 12, engine="dense").probabilities
        assert np.abs(got_ab.probabilities - ref).max() <= 1e-13
        # the other order is a different profile (relative differences of 1e-4 and more)
        assert np.abs(got_ab.log_probabilities - got_ba.log_probabilities).max() > 1e-4


def test_exact_rationals_for_a_period_two_block():
    n = 3
    lam = [Fraction(1, 2), Fraction(3, 4)]
    kernels = [exact_kernel(n, Fraction(1), Fraction(1)), exact_kernel(n, Fraction(1, 2), Fraction(3))]
    block = nx.AlibiStack.build([0.5, 0.75], [[0.0], [math.log(2.0)]], [[0.0], [math.log(3.0)]])
    for t in (2, 3, 5, 8, 61):
        exact = np.array([float(x) for x in periodic_profile(lam, kernels, t)])
        got = Power().profile(PeriodicStack.build(block, t), n)
        assert np.abs(got.probabilities - exact).max() <= 1e-14, t


def test_attention_heavy_stack_at_a_billion_layers():
    n, t = 32, 10**9
    block = nx.AlibiStack.build([0.5], [0.5, 0.125])
    stack = PeriodicStack.build(block, t)
    prof = Power().profile(stack, n)
    assert prof.extended_range  # log p finite everywhere, far below 1e-308
    assert abs(prof.probabilities[0] - 1.0) <= 1e-12  # C5(b)/(c): collapse onto token 0
    assert np.all(prof.probabilities[1:] == 0.0) and np.all(prof.log_probabilities[1:] < -1e8)
    # C2(c): log p(N-1) = T log(1 - lambda (1 - A[N-1, N-1])), from the closed-form self-weights
    a_last = nx.kernel_diagonals(block, n)[0, -1]
    atom = t * math.log1p(-0.5 * (1.0 - a_last))
    assert abs(prof.log_probabilities[-1] - atom) <= 1e-12 * abs(atom)
    # every entry against log-space squaring of the dense block product
    with np.errstate(divide="ignore"):
        reference = log_power_row(np.log(np.asarray(nx.dense_rollout(block, n)[0])), t)
    np.testing.assert_allclose(prof.log_probabilities, reference, rtol=1e-13, atol=1e-12)
    s = nx.summarize(nx.profile(stack, n), stack)
    assert s.engine == "power" and s.argmin == n - 1 and s.log_p_min == pytest.approx(atom, rel=1e-12)
    assert s.p_first == pytest.approx(1.0, abs=1e-12) and s.unresolved == 0


def test_summary_never_takes_an_extreme_among_underflowed_entries():
    stack = PeriodicStack.build(nx.AlibiStack.build([0.5], nx.alibi_slopes(8)), 10**9)
    prof = nx.profile(stack, 512)
    s = nx.summarize(prof, stack)
    lost = prof.unresolved()
    if lost.any():  # a column of B^(2^k) spanned more than the float64 range: reported, never guessed
        assert s.argmin is None and s.p_min is None and s.u_shape is None and s.unresolved == int(lost.sum())
        gone = ~np.isfinite(prof.log_probabilities)
        assert gone.any() and np.all(prof.probabilities[gone] == 0.0)
    else:
        assert s.argmin is not None and s.log_p_min is not None
    assert s.argmin != 0


def test_compact_summary_aggregates_match_the_expanded_stack():
    block = _block(3, seed=4)
    stack = PeriodicStack.build(block, 1000)
    compact = nx.summarize(Power().profile(stack, N), stack)
    flat = stack.expand()
    plain = nx.summarize(nx.profile(flat, N, engine="structured"), flat)
    for field in ("sum_lambda", "sum_lambda_delta", "last_token_atom", "p_first", "p_last", "entropy"):
        assert getattr(compact, field) == pytest.approx(getattr(plain, field), rel=1e-12, abs=1e-300), field
    assert compact.argmin == plain.argmin and compact.u_shape == plain.u_shape
    assert compact.num_layers == 1000


def test_detect_finds_the_minimal_period_and_keeps_the_profile():
    assert minimal_period(np.array([[1.0], [2.0], [1.0], [2.0], [1.0]])) == 2
    assert minimal_period(np.array([[1.0], [2.0], [3.0]])) == 3
    assert minimal_period(np.array([[1.0], [1.0], [2.0], [1.0], [1.0]])) == 3
    flat = PeriodicStack.build(_block(3, seed=7), 11).expand()
    found = detect(flat)
    assert (found.period, found.repeats, found.top.num_layers) == (3, 3, 2)
    ref = nx.profile(flat, N, engine="dense").probabilities
    assert np.abs(Power().profile(flat, N).probabilities - ref).max() <= 1e-13  # an AlibiStack via its period


def test_auto_routes_compact_stacks_and_expands_when_the_scan_is_cheaper():
    deep = PeriodicStack.build(_block(1), 10**9)
    assert nx.profile(deep, 16).engine == "power"
    shallow = PeriodicStack.build(_block(2), 10)
    prof = nx.profile(shallow, 4000)  # N^3 log T far above T H N: the scan
    assert prof.engine == "structured" and prof.min_self_weight.shape == (2,)
    assert any("expanded" in note for note in prof.notes)
    with pytest.raises(nx.Unsupported, match="too large for the dense power route"):
        nx.profile(deep, 9000)


def test_build_model_is_compact_for_deep_constant_and_periodic_schedules():
    m = posbias.build_model(layers=10**9, heads=8, tokens=16, schedule="constant:0.5")
    assert isinstance(m.stack, PeriodicStack) and m.stack.num_layers == 10**9 and m.stack.block.num_layers == 1
    assert m.summary().sum_lambda == 5e8
    shallow = posbias.build_model(layers=50, heads=2, tokens=8, schedule="constant:0.5")
    assert isinstance(shallow.stack, nx.AlibiStack)
    per = posbias.build_model(layers=7, heads=2, tokens=10, schedule="custom:0.5,0.2", periodic=True)
    assert (per.stack.period, per.stack.repeats, per.stack.top.num_layers) == (2, 3, 1)
    flat = posbias.build_model(layers=7, heads=2, tokens=10, schedule="custom:0.5,0.2,0.5,0.2,0.5,0.2,0.5")
    assert np.abs(per.profile().probabilities - flat.profile().probabilities).max() <= 1e-13
    np.testing.assert_allclose(per.diagonal(), flat.diagonal(), rtol=1e-13)
    with pytest.raises(ModelError, match="periodic: expected a custom"):
        posbias.build_model(layers=7, heads=2, tokens=10, schedule="power_decay:0.5,1", periodic=True)
    with pytest.raises(ModelError, match="longer than layers"):
        posbias.build_model(layers=1, heads=2, tokens=10, schedule="custom:0.5,0.2", periodic=True)
    with pytest.raises(ModelError, match="matrix: the dense P"):
        m.matrix()


def test_cli_billion_layers(tmp_path, capsys):
    out = tmp_path / "o"
    assert (
        main(
            [
                "rollout",
                "--layers",
                "1000000000",
                "--heads",
                "8",
                "--tokens",
                "64",
                "--schedule",
                "constant:0.5",
                "--out",
                str(out),
                "--json",
                "--diagonal",
            ]
        )
        == 0
    )
    s = json.loads(capsys.readouterr().out)
    assert s["num_layers"] == 10**9 and s["engine"] == "power" and s["period"] == 1
    assert any(note.startswith("power: B = R^(0)...R^(0)") for note in s["notes"])
    assert s["sum_lambda"] == 5e8 and s["diagonal"]["argmin"] == 63
    assert sorted(p.name for p in out.iterdir()) == [
        "diagonal.csv",
        "log_profile.csv",
        "profile.csv",
        "profile.png",
        "summary.json",
    ]


def test_cli_periodic_flag(tmp_path, capsys):
    assert (
        main(
            [
                "rollout",
                "--layers",
                "1000001",
                "--heads",
                "4",
                "--tokens",
                "32",
                "--schedule",
                "custom:0.5,0.2",
                "--periodic",
                "--out",
                str(tmp_path / "o"),
                "--json",
            ]
        )
        == 0
    )
    s = json.loads(capsys.readouterr().out)
    assert s["num_layers"] == 1000001 and s["period"] == 2 and s["sum_lambda"] == pytest.approx(350000.5)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--layers", "1000000000", "--heads", "2", "--tokens", "9000", "--schedule", "constant:0.5"],
            "too large for the dense power route",
        ),
        (
            ["--layers", "10", "--heads", "2", "--tokens", "8", "--schedule", "power_decay:0.5,1", "--periodic"],
            "periodic: expected a custom",
        ),
        (
            ["--layers", "1", "--heads", "2", "--tokens", "8", "--schedule", "custom:0.5,0.2", "--periodic"],
            "longer than layers",
        ),
        (
            ["--layers", "1000000000", "--heads", "2", "--tokens", "8", "--schedule", "constant:0.5", "--full"],
            "--full: the dense P of a compact periodic stack",
        ),
        (
            [
                "--layers",
                "1000000000",
                "--heads",
                "2",
                "--tokens",
                "8",
                "--schedule",
                "constant:0.5",
                "--engine",
                "structured",
            ],
            "--engine structured: expected an ALiBi",
        ),
    ],
)
def test_cli_refusals(tmp_path, capsys, argv, message):
    out = tmp_path / "o"
    assert main(["rollout", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_cli_periodic_refused_with_a_config_or_kernels(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("sequence_length: 8\nnum_layers: 2\n")
    assert main(["rollout", str(cfg), "--periodic", "--out", str(tmp_path / "o")]) == 2
    assert "--periodic: applies to models from flags" in capsys.readouterr().err
    assert main(["rollout", "--kernels", str(tmp_path / "k.npy"), "--periodic"]) == 2
    assert "--periodic" in capsys.readouterr().err
