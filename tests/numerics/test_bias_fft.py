"""The bias FFT engine (issue 19 §2, THEORY.md C7): relative-bias stacks by FFT Toeplitz correlation.

References are independent of the code under test: a dense NumPy rollout written here (every
N x N logit matrix soft-maxed row by row, no cumulative weights, no FFT) and the exact bias
engine (direct Toeplitz sums of non-negative terms). The FFT's error is absolute, so every
comparison checks (a) agreement to 1e-12 of max p, (b) that each entry's error lies within the
bound the engine states (``resolution * max p``), (c) that entries marked unresolved are
exactly those below that bound.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posbias.cli import main
from posbias.numerics import engines
from posbias.numerics.auto import Auto
from posbias.numerics.bias import Alibi, Bias, KerpleLog, KerplePower, Table
from posbias.numerics.bias_engine import BiasEngine
from posbias.numerics.bias_fft import MAX_BOUND, BiasFFT
from posbias.numerics.bias_stack import BiasStack
from posbias.numerics.engine import Unsupported
from posbias.numerics.masks import Causal, Full, Prefix, SlidingWindow
from posbias.numerics.native_bias import available as native_available
from posbias.numerics.stack import AlibiStack
from tests.numerics.test_bias import sides  # the one strategy of bias sides (C7), shared

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EXACT = [BiasEngine(native=False)] + ([BiasEngine()] if native_available() else [])


def dense_reference(stack: BiasStack, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(p, min_i A[i, i], A[N-1, N-1]) by forming every kernel: logits (b(i - j) + d [i = j] + s [j = 0]) / tau
    over the causal (or sliding-window) positions, soft-maxed per row, averaged over heads."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    allowed = j <= i
    if stack.mask.past_window is not None:
        allowed &= i - j < stack.mask.past_window
    tau = stack.temperature
    p = np.zeros(n)
    p[-1] = 1.0
    mins, lasts = np.zeros(stack.num_layers), np.zeros(stack.num_layers)
    for t in reversed(range(stack.num_layers)):
        a = np.zeros((n, n))
        for h in range(stack.num_heads):
            past = stack.biases[stack.bias_index[t, h]].values(n)[0]
            logits = past[np.clip(i - j, 0, n - 1)] + stack.diagonal[t, h] * (i == j) + stack.sink[t, h] * (j == 0)
            logits = np.where(allowed, logits / tau, -np.inf)
            rows = np.exp(logits - logits.max(axis=1, keepdims=True))
            a += stack.head_weights[t, h] * rows / rows.sum(axis=1, keepdims=True)
        lam = stack.lambdas[t]
        p = (1 - lam) * p + lam * (p @ a)
        mins[t], lasts[t] = np.diag(a).min(), a[-1, -1]
    return p, mins, lasts


def assert_within_bound(got, reference: np.ndarray, num_layers: int):
    """Agreement to 1e-12 of max p; every error within the stated absolute bound plus the relative
    error 8 (T + 1) N eps of the direct sums; unresolved = below the bound."""
    p = got.probabilities
    bound = got.resolution * p.max()
    err = np.abs(p - reference)
    assert err.max() <= 1e-12 * reference.max()
    slack = 8 * (num_layers + 1) * p.size * np.finfo(np.float64).eps * reference
    assert np.all(err <= bound + slack), (err.max(), bound)
    assert np.array_equal(got.unresolved(), (p <= bound) | (p < 1e-280))
    assert abs(p.sum() - 1) < 1e-12


@st.composite
def causal_bias_stacks(draw):
    t, h = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    mask = draw(st.sampled_from([Causal(), SlidingWindow(1), SlidingWindow(4), SlidingWindow(9)]))
    heads = [Bias(draw(sides())) for _ in range(h)]
    if draw(st.booleans()):
        heads[-1] = heads[0]  # heads sharing one bias share one transform
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    return BiasStack.build(
        rng.uniform(0, 1, t),
        heads,
        diagonal=rng.normal(0, 1.5, (t, h)),
        sink=rng.normal(0, 1.5, (t, h)) * draw(st.booleans()),
        head_weights=rng.uniform(0.05, 1, (t, h)),
        temperature=draw(st.sampled_from([0.7, 1.0, 2.0])),
        mask=mask,
    )


@SETTINGS
@given(causal_bias_stacks(), st.sampled_from([1, 2, 5, 13, 24, 100]))
def test_agrees_with_the_dense_reference_and_the_exact_engine_on_generated_stacks(stack, n):
    p, mins, lasts = dense_reference(stack, n)
    assert abs(p.sum() - 1) < 1e-12
    got = BiasFFT().profile(stack, n)
    assert (got.engine, got.path) == ("bias-fft", "fft")
    assert_within_bound(got, p, stack.num_layers)
    assert np.abs(got.min_self_weight - mins).max() < 1e-12
    assert np.abs(got.last_self_weight - lasts).max() < 1e-12
    for engine in EXACT:
        assert_within_bound(got, engine.profile(stack, n).probabilities, stack.num_layers)


@SETTINGS
@given(
    st.integers(1, 3),
    st.sampled_from([Causal(), SlidingWindow(6)]),
    st.sampled_from([7, 40, 120]),
    st.floats(0.0, 40.0),
    st.integers(0, 2**31),
)
def test_stated_bound_holds_with_large_sinks_and_diagonals(t, mask, n, scale, seed):
    """Logits tens of nats apart (rows far below their head's largest): the error grows with them and
    must stay within the bound the engine states; entries below it are the unresolved ones."""
    rng = np.random.default_rng(seed)
    heads = [Bias(KerpleLog(2.0, 1.0)), Bias(Table((0.0, 3.0, -2.0))), Bias(KerplePower(-0.1, 1.5))]
    stack = BiasStack.build(
        rng.uniform(0, 1, t),
        heads,
        diagonal=rng.uniform(-scale, scale, (t, 3)),
        sink=rng.uniform(-scale, scale, (t, 3)),
        head_weights=rng.uniform(0.05, 1, (t, 3)),
        mask=mask,
    )
    p, _, _ = dense_reference(stack, n)
    try:
        got = BiasFFT().profile(stack, n)
    except Unsupported as exc:  # the bound B would exceed MAX_BOUND, or a row beyond MAX_DEFICIT
        assert "error bound" in str(exc) or "nats below" in str(exc)
        assert engines.profile(stack, n).engine == "bias"  # auto takes the exact engine instead
        return
    bound = got.resolution * got.probabilities.max()
    assert bound <= MAX_BOUND
    slack = 8 * (t + 1) * n * np.finfo(np.float64).eps * p
    assert np.all(np.abs(got.probabilities - p) <= bound + slack)
    assert np.array_equal(got.unresolved(), (got.probabilities <= bound) | (got.probabilities < 1e-280))
    assert abs(got.probabilities.sum() - 1) <= 1e-12 + bound  # B bounds the error's 1-norm too


def test_one_uniform_layer_by_hand():
    """A constant bias with sink s: row i puts e^s / (e^s + i) on token 0 and 1 / (e^s + i) elsewhere."""
    s, n = np.log(3.0), 5
    got = BiasFFT().profile(BiasStack.build([1.0], Bias(Table((0.7,))), sink=s), n)
    expected = np.array([3 / (3 + n - 1)] + [1 / (3 + n - 1)] * (n - 1))
    np.testing.assert_allclose(got.probabilities, expected, rtol=1e-15, atol=0)


def test_steep_bias_leaves_tiny_entries_unresolved_and_the_bound_holds():
    """Kerple-log with r1 = 12 and 8: the earliest entries fall far below 1e-16 of max p, below the FFT's reach."""
    stack = BiasStack.build([0.6, 0.4], [Bias(KerpleLog(12.0, 1.0)), Bias(KerpleLog(8.0, 2.0))], diagonal=0.5)
    p, _, _ = dense_reference(stack, 300)
    got = BiasFFT().profile(stack, 300)
    assert_within_bound(got, p, stack.num_layers)
    lost = got.unresolved()
    assert 0 < lost.sum() < 300 and lost[0] and not lost[-1]
    assert np.all(p[lost] < 1e-9 * p.max())  # only entries the bound says are below its reach


def test_large_n_against_the_exact_engine():
    n = 1 << 14
    rng = np.random.default_rng(1)
    heads = [
        Bias(KerpleLog(0.8, 0.7)),
        Bias(KerplePower(0.3, 0.6)),
        Bias(KerpleLog(1.5, 2.0)),
        Bias(Table((0.0, 1.0, -1.0, 0.5))),
    ]
    stack = BiasStack.build(
        rng.uniform(0.2, 0.9, 3),
        heads,
        diagonal=rng.normal(size=(3, 4)),
        sink=rng.normal(size=(3, 4)),
        head_weights=rng.uniform(0.1, 1, (3, 4)),
    )
    got = BiasFFT().profile(stack, n)
    exact = BiasEngine().profile(stack, n)
    assert_within_bound(got, exact.probabilities, stack.num_layers)
    assert not got.unresolved().any()
    assert np.abs(got.min_self_weight - exact.min_self_weight).max() < 1e-12


def test_auto_picks_the_fft_engine_at_large_n():
    n = 1 << 14
    heads = [
        Bias(KerpleLog(1.0, 0.5)),
        Bias(KerplePower(0.5, 0.5)),
        Bias(KerpleLog(0.5, 1.0)),
        Bias(Table((0.0, -0.5))),
    ]
    stack = BiasStack.build([0.5] * 8, heads, diagonal=1.0)  # the exact engine: an estimated 2.1 s
    auto = Auto()
    assert not auto.bias_fft_first(stack, 1024)
    assert auto.bias_fft_first(stack, n)
    result = engines.profile(stack, n)
    assert result.engine == "bias-fft" and not result.unresolved().any()
    assert "auto: bias-fft (fft)" in result.notes
    assert abs(result.probabilities.sum() - 1) < 1e-12


def test_auto_reruns_unresolved_fft_entries_on_the_exact_engine():
    stack = BiasStack.build([0.6, 0.4], [Bias(KerpleLog(12.0, 1.0)), Bias(KerpleLog(8.0, 2.0))], diagonal=0.5)
    n = 8192
    fft = BiasFFT().profile(stack, n)
    assert fft.unresolved().any()
    eager = Auto(bias_fft_from_seconds=0.0)
    assert eager.bias_fft_first(stack, n)
    result = eager.profile(stack, n)
    assert result.engine == "bias"
    assert any("re-running on the exact bias engine" in note for note in result.notes)
    exact = BiasEngine().profile(stack, n).probabilities
    lost = fft.unresolved()
    assert np.array_equal(result.probabilities, exact)
    assert np.all(np.abs(result.probabilities[lost] - exact[lost]) <= 1e-12 * exact[lost])
    stingy = Auto(bias_fft_from_seconds=0.0, bias_retry_seconds=0.0)
    kept = stingy.profile(stack, n)
    assert kept.engine == "bias-fft" and kept.unresolved().sum() == lost.sum()
    assert any("not re-run" in note for note in kept.notes)


def test_refusals():
    engine = BiasFFT()
    for mask in (Full(), Prefix(3)):
        assert "causal and sliding-window masks only" in engine.supports(
            BiasStack.build([1.0], Bias(Alibi(1.0)), mask=mask), 8
        )
    assert "expected a relative-bias stack" in engine.supports(AlibiStack.build([1.0], [1.0]), 8)
    stack = BiasStack.build([1.0], Bias(KerpleLog(1.0, 1.0)))
    with pytest.raises(Unsupported, match="float64 only"):
        engine.profile(stack, 8, dtype=np.float32)
    amplified = BiasStack.build([0.5, 0.5], Bias(KerplePower(-0.1, 1.5)))  # b rising: 130 nats at N = 120
    with pytest.raises(Unsupported, match="error bound"):
        engine.profile(amplified, 120)
    assert engines.get("auto").profile(amplified, 120).engine == "bias"
    rising = BiasStack.build([1.0], Bias(Table(tuple(10.0 * g for g in range(80)))))
    with pytest.raises(Unsupported, match="nats below its head's largest"):
        engine.profile(rising, 80)
    assert engines.get("bias-fft") == BiasFFT()


def test_rollout_engine_flag(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            "rollout",
            "--layers",
            "3",
            "--heads",
            "2",
            "--tokens",
            "200",
            "--schedule",
            "constant:0.5",
            "--bias",
            "kerple-log:1,0.5/table:0,-1,0.5",
            "--sink",
            "1",
            "--engine",
            "bias-fft",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    assert "engine bias-fft [fft]" in capsys.readouterr().out
    stack = BiasStack.build([0.5] * 3, [Bias(KerpleLog(1.0, 0.5)), Bias(Table((0.0, -1.0, 0.5)))], sink=1.0)
    p = np.loadtxt(out / "profile.csv", delimiter=",", skiprows=1)[:, 1]
    np.testing.assert_allclose(p, dense_reference(stack, 200)[0], rtol=0, atol=1e-12)
    code = main(
        [
            "rollout",
            "--layers",
            "1",
            "--heads",
            "1",
            "--tokens",
            "8",
            "--schedule",
            "constant:0.5",
            "--bias",
            "kerple-log:1,1",
            "--mask",
            "full",
            "--engine",
            "bias-fft",
            "--out",
            str(tmp_path / "refused"),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "causal and sliding-window masks only" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "refused").exists()
