"""Extended range for relative-bias stacks (issue 19 §2, THEORY.md C7): ``BiasEngine(extended=True)``.

The reference is a log-space dense product written here: every head's N x N logit matrix is
built from the bias values and the mask's rule by hand, log-soft-maxed row by row, the heads
mixed and the residual added by log-sum-exp, and the walk vector multiplied by
``tests.exact_rollout.log_matmul`` (no cumulative weights, no Toeplitz correlation, no scales,
nothing below the float64 range lost). It is compared on (a) a bias rising by more than 600
nats, which the linear mode refuses, (b) a deep attention-only stack whose entries fall far
below 1e-308, which the linear mode leaves unresolved, and (c) generated ordinary stacks,
where the extended mode must equal the linear mode.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posbias.numerics import engines
from posbias.numerics.bias import Bias, KerpleLog, KerplePower, T5Buckets, Table
from posbias.numerics.bias_engine import BiasEngine
from posbias.numerics.bias_stack import BiasStack
from posbias.numerics.engine import Unsupported
from posbias.numerics.masks import Causal, Prefix, SlidingWindow
from posbias.numerics.native_bias import available as native_available
from tests.exact_rollout import log_matmul
from tests.numerics.test_bias import SETTINGS, bias_stacks

needs_native = pytest.mark.skipif(not native_available(), reason="extended range runs in the native C kernel")
EXTENDED = [BiasEngine(extended=True), BiasEngine(extended=True, threads=1), BiasEngine(extended=True, native=False)]


def _lse(x: np.ndarray, axis: int) -> np.ndarray:
    top = x.max(axis=axis, keepdims=True)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.squeeze(safe + np.log(np.exp(x - safe).sum(axis=axis, keepdims=True)), axis=axis)


def log_dense_profile(stack: BiasStack, n: int) -> np.ndarray:
    """log p by dense log-space products: logits b(i - j) (past), b_f(j - i) (future, i and j below
    the bidirectional length), + d on the diagonal, + s on column 0, all / tau, -inf where the mask
    forbids; rows log-soft-maxed, heads mixed by their weights, R = (1 - lambda) I + lambda A."""
    past, future = [], []
    for bias in stack.biases:
        p, f = bias.values(n)
        past.append(p)
        future.append(f)
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    gap = np.abs(i - j)
    mask = stack.mask
    k = mask.bidirectional_length(n)
    allowed = j <= i
    if mask.past_window is not None:
        allowed &= i - j < mask.past_window
    if k > 1:
        allowed |= (i < k) & (j < k)
    v = np.full((1, n), -np.inf)
    v[0, -1] = 0.0
    with np.errstate(divide="ignore"):
        for t in reversed(range(stack.num_layers)):
            heads = []
            for h in range(stack.num_heads):
                u = stack.bias_index[t, h]
                logits = np.where(j <= i, past[u][gap], future[u][gap])
                logits = logits + stack.diagonal[t, h] * (i == j) + stack.sink[t, h] * (j == 0)
                logits = np.where(allowed, logits / stack.temperature, -np.inf)
                heads.append(np.log(stack.head_weights[t, h]) + logits - _lse(logits, 1)[:, None])
            log_a = _lse(np.stack(heads), 0)
            lam = stack.lambdas[t]
            log_r = np.logaddexp(np.log1p(-lam) + np.where(i == j, 0.0, -np.inf), np.log(lam) + log_a)
            v = log_matmul(v, log_r)
    return v[0]


def _check_against_reference(got, reference: np.ndarray, layers: int):
    """log p within 1e-12 absolute plus T eps |log p| (each layer rounds log values of size |log p|,
    on both routes), every entry finite, sum p = 1."""
    assert got.path in ("native-extended", "xla-extended") and got.resolution == 0.0
    assert np.all(np.isfinite(got.log_probabilities)) and got.extended_range
    tol = 1e-12 + layers * np.finfo(float).eps * np.abs(reference)
    assert np.all(np.abs(got.log_probabilities - reference) <= tol), np.abs(got.log_probabilities - reference).max()
    assert abs(got.probabilities.sum() - 1.0) <= 1e-12
    assert not got.unresolved().any()


# ----------------------------------------------------------------------------- (a) rising bias: refused today
@needs_native
@pytest.mark.parametrize("mask", [Causal(), Prefix(10), SlidingWindow(70)])
def test_a_bias_rising_by_more_than_600_nats(mask):
    """b(g) = 12 g and 10 g + (g mod 3) on 80 tokens (rows up to 900 nats below the head's largest
    logit): the linear mode refuses it; the extended mode matches the log-space dense product on
    every entry, p down to e^-600 and below (e^-790 causal)."""
    rng = np.random.default_rng(11)
    heads = [Bias(Table(tuple(12.0 * g for g in range(80)))), Bias(Table(tuple(10.0 * g + g % 3 for g in range(80))))]
    stack = BiasStack.build(
        [0.8, 0.6, 0.9],
        heads,
        diagonal=rng.normal(size=(3, 2)),
        sink=rng.normal(size=(3, 2)),
        head_weights=rng.uniform(0.2, 1.0, (3, 2)),
        mask=mask,
    )
    n = 80
    for linear in (BiasEngine(), BiasEngine(native=False)):
        with pytest.raises(Unsupported, match="nats below its head's largest"):
            linear.profile(stack, n)
    reference = log_dense_profile(stack, n)
    assert reference.min() < -600  # down to e^-600 ~ 1e-261 and beyond
    for engine in EXTENDED:
        _check_against_reference(engine.profile(stack, n), reference, 3)
    routed = engines.profile(stack, n)
    assert (routed.engine, routed.path) == ("bias", "native-extended")
    assert any("bias refused" in note for note in routed.notes)
    np.testing.assert_array_equal(routed.log_probabilities, EXTENDED[0].profile(stack, n).log_probabilities)


# ----------------------------------------------------------------------------- (b) deep stack: unresolved today
@needs_native
@pytest.mark.parametrize("mask", [Causal(), Prefix(5)])
def test_a_deep_attention_only_stack_below_the_float64_range(mask):
    """T = 300 attention-only layers (lambda = 1), N = 48: the last entries fall to ~1e-400; the
    linear mode leaves them unresolved, the extended mode resolves every one and ``auto`` re-runs."""
    n, t = 48, 300
    stack = BiasStack.build(
        np.ones(t), [Bias(KerpleLog(0.2, 1.0)), Bias(KerplePower(0.1, 0.5))], diagonal=0.3, mask=mask
    )
    linear = BiasEngine().profile(stack, n)
    assert linear.unresolved().sum() >= 10
    reference = log_dense_profile(stack, n)
    assert reference.min() < np.log(1e-308)
    for engine in EXTENDED:
        got = engine.profile(stack, n)
        _check_against_reference(got, reference, t)
        kept = ~linear.unresolved()
        assert kept.sum() >= n // 4  # the comparison covers the entries the linear mode resolved
        # log values carry an absolute error of about T eps |log p| (the log-space mode stores log v):
        # relative 1e-12 + T eps |log p| in p, up to 4e-11 here (entries down to 1e-246)
        tol = 1e-12 + t * np.finfo(float).eps * np.abs(np.log(linear.probabilities[kept]))
        assert np.all(np.abs(got.probabilities[kept] / linear.probabilities[kept] - 1) <= tol)
        np.testing.assert_allclose(got.min_self_weight, linear.min_self_weight, rtol=1e-13, atol=0)
        np.testing.assert_allclose(got.last_self_weight, linear.last_self_weight, rtol=1e-13, atol=0)
    routed = engines.profile(stack, n)
    assert (routed.engine, routed.path) == ("bias", "native-extended") and not routed.unresolved().any()
    assert any("re-ran with extended range" in note for note in routed.notes)


@needs_native
def test_a_sink_700_nats_above_the_rest_under_a_sliding_window():
    """Rows within the window's reach of token 0 see a sink 700 nats up, rows beyond it do not: a
    700-nat deficit, refused by the linear mode; T5 buckets and Kerple-log heads."""
    rng = np.random.default_rng(5)
    t5 = Bias(T5Buckets(16, 64, tuple(rng.normal(size=16)), False))
    stack = BiasStack.build(
        [0.7, 0.9, 0.8],
        [t5, Bias(KerpleLog(1.0, 1.0))],
        sink=[[700.0, 0.0], [0.0, 2.0], [1.0, 700.0]],
        mask=SlidingWindow(20),
    )
    with pytest.raises(Unsupported, match="nats below its head's largest"):
        BiasEngine().profile(stack, 40)
    reference = log_dense_profile(stack, 40)
    for engine in EXTENDED:
        _check_against_reference(engine.profile(stack, 40), reference, 3)


# ----------------------------------------------------------------------------- (c) ordinary stacks: = linear
@needs_native
@SETTINGS
@given(bias_stacks(), st.sampled_from([1, 2, 5, 13, 24]))
def test_extended_equals_the_linear_mode_on_generated_stacks(stack, n):
    linear = BiasEngine().profile(stack, n)
    reference = log_dense_profile(stack, n)
    assert abs(np.exp(reference).sum() - 1.0) <= 1e-12
    for engine in EXTENDED:
        got = engine.profile(stack, n)
        assert np.abs(got.probabilities - linear.probabilities).max() <= 1e-13, engine
        assert np.abs(got.min_self_weight - linear.min_self_weight).max() <= 1e-13, engine
        assert np.abs(got.last_self_weight - linear.last_self_weight).max() <= 1e-13, engine
        assert abs(got.probabilities.sum() - 1.0) <= 1e-12
        reached = np.isfinite(reference)  # a window's unreachable tokens are exactly 0 on both routes
        np.testing.assert_array_equal(np.isfinite(got.log_probabilities), reached)
        assert np.all(np.abs(got.log_probabilities[reached] - reference[reached]) <= 1e-12)


def test_extended_range_without_the_native_kernel_runs_in_xla(monkeypatch):
    """POSBIAS_NATIVE=0 (as on a GPU): the log-space recursion in XLA, against the log-space dense product."""
    monkeypatch.setenv("POSBIAS_NATIVE", "0")
    rng = np.random.default_rng(3)
    for mask in [Causal(), Prefix(10), SlidingWindow(70)]:
        heads = [Bias(Table(tuple(12.0 * g for g in range(80)))), Bias(KerpleLog(0.5, 1.0))]
        stack = BiasStack.build(
            [0.8, 0.6, 1.0],
            heads,
            diagonal=rng.normal(size=(3, 2)),
            sink=rng.normal(size=(3, 2)),
            head_weights=rng.uniform(0.2, 1.0, (3, 2)),
            mask=mask,
        )
        got = BiasEngine(extended=True).profile(stack, 80)
        assert got.path == "xla-extended"
        _check_against_reference(got, log_dense_profile(stack, 80), 3)
        routed = engines.profile(stack, 80)  # the linear XLA path refuses the deficit; auto takes this one
        assert routed.path == "xla-extended"


def test_float32_underflow_is_reported_not_re_run():
    """The extended mode is float64: a float32 profile that lost entries keeps them as unresolved."""
    stack = BiasStack.build(np.ones(60), Bias(KerpleLog(0.2, 1.0)), diagonal=0.3)
    result = engines.profile(stack, 24, dtype=np.float32)
    assert result.engine == "dense" and result.unresolved().any()
    assert any("no extended-range route fits" in note for note in result.notes)


# ----------------------------------------------------------------------------- time caps on the extended route
@needs_native
def test_auto_estimates_the_extended_mode_before_running_it():
    """The log-space mode is taken only within ``Auto``'s time caps: in place of a refused stack up to
    ``bias_extended_max_seconds``, as a re-run for lost entries up to ``bias_retry_seconds``; beyond
    them the refusal (one line) or the notes give the estimate, and no wrong value is returned."""
    from posbias.numerics.auto import Auto

    rising = BiasStack.build([0.8, 0.6], [Bias(Table(tuple(12.0 * g for g in range(80))))])  # rows 948 nats down
    estimate = Auto().bias_extended_seconds(rising, 80)
    assert estimate == pytest.approx(14.0 * 2.5e-10 * 2 * 1 * 80 * 80)
    capped = Auto(bias_extended_max_seconds=0.0, bias_retry_seconds=0.0).profile(rising, 80)  # dense takes it
    assert capped.engine == "dense"
    assert any(
        note.startswith("auto: bias (extended) skipped: estimated") and note.endswith("s > 0 s")
        for note in capped.notes
    )
    ext = Auto().profile(rising, 80)
    assert ext.path == "native-extended"
    good = ~capped.unresolved()
    np.testing.assert_allclose(capped.log_probabilities[good], ext.log_probabilities[good], rtol=0, atol=1e-9)
    assert np.all(np.isfinite(ext.log_probabilities))

    n, t = 48, 300
    deep = BiasStack.build(np.ones(t), [Bias(KerpleLog(0.2, 1.0))], diagonal=0.3)
    kept = Auto(bias_retry_seconds=0.0).profile(deep, n)
    assert kept.path == "native" and kept.unresolved().sum() >= 10  # reported, not re-run
    assert any("no extended-range route fits" in note and "estimated at most 0 s" in note for note in kept.notes)
    reference = log_dense_profile(deep, n)
    ok = ~kept.unresolved()
    np.testing.assert_allclose(kept.log_probabilities[ok], reference[ok], rtol=0, atol=1e-9)
