"""The C kernel's batch entry and guarded linear mode (issue 21), and the vectorised summaries.

* ``native.profile_batch`` gives every stack what ``native.profile(..., threads=1)`` gives it, to the
  bit, and both agree with a dense rollout written here in NumPy to 1e-12;
* the guarded linear mode stops a stack whose profile would fall below 2^-900 (code 1), and
  ``profile(..., extended=True, adaptive=True)`` then finishes it in block floating point: log p
  equals a log-space rollout written here (log-sum-exp over the kernel's entries) far below 1e-308;
  a stack that never nears underflow is the plain linear mode's, to the bit, with path "native";
* ``summarize_columns`` equals ``summarize(...).to_dict()`` key by key, to the bit, on batches that
  mix vectorisable rows with rows it must take one at a time (exact zeros of a window, unresolved
  entries).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import posbias.numerics as nx
from posbias.numerics import native
from posbias.numerics.summary import summarize, summarize_columns

pytestmark = pytest.mark.skipif(not native.available(), reason="the C kernel needs a C compiler")


def _kernel(n, slope, diag, window=None, full=False):
    """One ALiBi head's kernel in NumPy: row i proportional to e^{-m |i - j|} (e^{d} on the diagonal)."""
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    logits = -slope * np.abs(i - j) + diag * (i == j)
    allowed = np.ones((n, n), bool) if full else j <= i
    if window is not None:
        allowed &= i - j <= window - 1
    w = np.where(allowed, np.exp(logits - np.where(allowed, logits, -np.inf).max(axis=1, keepdims=True)), 0.0)
    return w / w.sum(axis=1, keepdims=True)


def _dense(lam, m, d, w, n, window=None, full=False):
    v = np.zeros(n)
    v[-1] = 1.0
    for t in reversed(range(len(lam))):
        a = sum(w[t, h] * _kernel(n, m[t, h], d[t, h], window, full) for h in range(m.shape[1]))
        v = (1 - lam[t]) * v + lam[t] * (v @ a)
    return v


def _random(rng, count, layers, heads):
    lam = rng.uniform(0, 1, (count, layers))
    m = rng.uniform(0, 2, (count, layers, heads))
    d = rng.uniform(-3, 3, (count, layers, heads))
    w = rng.uniform(0.1, 1, (count, layers, heads))
    return lam, m, d, w / w.sum(axis=2, keepdims=True)


@settings(max_examples=12, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 6),
    st.integers(1, 5),
    st.integers(1, 12),
    st.integers(2, 90),
    st.sampled_from(["causal", "window", "full"]),
    st.booleans(),
)
def test_batch_entry_equals_single_calls_to_the_bit(seed, count, layers, heads, n, mask, guarded):
    rng = np.random.default_rng(seed)
    lam, m, d, w = _random(rng, count, layers, heads)
    window = 5 if mask == "window" else None
    k = n if mask == "full" else 0
    batch = native.profile_batch(
        lam, m, d, w, num_tokens=n, past_window=window, bidirectional_length=k, guarded=guarded, threads=2
    )
    assert batch.probabilities.shape == (count, n) and batch.codes.shape == (count,)
    for b in range(count):
        assert batch.codes[b] == 0  # shallow stacks of mild slopes never near 2^-900
        one = native.profile(
            lam[b], m[b], d[b], w[b], num_tokens=n, past_window=window, bidirectional_length=k, threads=1
        )
        assert np.array_equal(batch.probabilities[b], one.probabilities)
        assert np.array_equal(batch.min_self_weight[b], one.min_self_weight)
        assert np.array_equal(batch.last_self_weight[b], one.last_self_weight)
        p = batch.probabilities[b]
        assert abs(p.sum() - 1.0) <= 1e-12
        assert np.max(np.abs(p - _dense(lam[b], m[b], d[b], w[b], n, window, mask == "full"))) <= 1e-12


def _log_rollout(lam, m, d, n):
    """log p of a one-head causal stack by log-sum-exp over log R[i, j] (no scaling, no blocks)."""
    logv = np.full(n, -np.inf)
    logv[-1] = 0.0
    with np.errstate(divide="ignore"):
        for t in reversed(range(len(lam))):
            log_r = np.log(lam[t] * _kernel(n, m[t], d[t]) + (1 - lam[t]) * np.eye(n))
            x = logv[:, None] + log_r
            top = x.max(axis=0)
            safe = np.where(np.isfinite(top), top, 0.0)
            logv = np.where(np.isfinite(top), safe + np.log(np.exp(x - safe).sum(axis=0)), -np.inf)
    return logv


def test_guard_stops_a_deep_stack_and_adaptive_finishes_it_in_extended_range():
    n, layers = 40, 1000
    lam = np.ones(layers)  # attention only: p(N-1) shrinks by the diagonal weight every layer
    m = np.full((layers, 1), 0.3)
    d = np.zeros((layers, 1))
    w = np.ones((layers, 1))
    batch = native.profile_batch(
        lam[None], m[None], d[None], w[None], num_tokens=n, past_window=None, bidirectional_length=0, guarded=True
    )
    assert batch.codes.tolist() == [1]
    got = native.profile(
        lam, m, d, w, num_tokens=n, past_window=None, bidirectional_length=0, extended=True, adaptive=True
    )
    assert got.path == "native-extended"
    want = _log_rollout(lam, m[:, 0], d[:, 0], n)
    assert want.min() < -800  # far below float64's range
    assert np.max(np.abs(got.log_probabilities - want)) <= 1e-9 * np.max(np.abs(want))
    pure = native.profile(lam, m, d, w, num_tokens=n, past_window=None, bidirectional_length=0, extended=True)
    assert np.max(np.abs(got.log_probabilities - pure.log_probabilities)) <= 1e-12 * np.max(np.abs(want))


def test_adaptive_mode_is_the_linear_mode_where_nothing_nears_underflow():
    rng = np.random.default_rng(5)
    lam, m, d, w = (a[0] for a in _random(rng, 1, 8, 4))
    got = native.profile(
        lam, m, d, w, num_tokens=64, past_window=None, bidirectional_length=0, extended=True, adaptive=True
    )
    plain = native.profile(lam, m, d, w, num_tokens=64, past_window=None, bidirectional_length=0)
    assert got.path == "native"
    assert np.array_equal(got.probabilities, plain.probabilities)
    assert np.max(np.abs(got.probabilities - _dense(lam, m, d, w, 64))) <= 1e-12


def _mixed_profiles(seed):
    """Profiles of one shape from several routes: ordinary causal and full stacks (vectorisable),
    window stacks (exact zeros: one at a time) and a deep stack the FFT engine leaves unresolved."""
    rng = np.random.default_rng(seed)
    n, layers = 48, 6
    stacks = []
    for mask in [nx.Causal(), nx.Full(), nx.SlidingWindow(6), nx.Causal()]:
        stacks.append(
            nx.AlibiStack.build(
                rng.uniform(0, 1, layers),
                rng.uniform(0, 2, (layers, 3)),
                rng.uniform(-3, 3, (layers, 3)),
                rng.uniform(0.1, 1, (layers, 3)),
                mask=mask,
            )
        )
    profiles = [nx.profile(s, n) for s in stacks]
    steep = nx.AlibiStack.build(
        np.ones(layers), np.full((layers, 3), 30.0), np.zeros((layers, 3)), np.ones((layers, 3)) / 3
    )
    profiles.append(nx.profile(steep, n, engine="fft"))
    stacks.append(steep)
    return profiles, stacks


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorised_summaries_equal_one_summary_at_a_time(seed):
    profiles, stacks = _mixed_profiles(seed)
    assert profiles[-1].unresolved().any()  # the batch really mixes in a row summarize must take
    columns = summarize_columns(profiles, stacks)
    for i, (pr, st_) in enumerate(zip(profiles, stacks)):
        one = summarize(pr, st_).to_dict()
        assert set(one) == set(columns)
        for key, value in one.items():
            got = columns[key][i]
            if isinstance(value, float) and np.isnan(value):
                assert isinstance(got, float) and np.isnan(got), key
            else:
                assert got == value and type(got) is type(value), (key, got, value)


def test_vectorised_summaries_against_values_computed_here():
    rng = np.random.default_rng(9)
    stacks = [
        nx.AlibiStack.build(rng.uniform(0, 1, 4), rng.uniform(0, 1, (4, 2)), np.zeros((4, 2)), np.full((4, 2), 0.5))
        for _ in range(5)
    ]
    profiles = [nx.profile(s, 30) for s in stacks]
    columns = summarize_columns(profiles, stacks)
    for i, (_pr, s) in enumerate(zip(profiles, stacks)):
        p = _dense(np.asarray(s.lambdas), np.asarray(s.slopes), np.zeros((4, 2)), np.full((4, 2), 0.5), 30)
        assert abs(columns["p_first"][i] - p[0]) <= 1e-12 and abs(columns["p_last"][i] - p[-1]) <= 1e-12
        assert columns["argmin"][i] == int(np.argmin(p))
        assert abs(columns["entropy"][i] + np.sum(p * np.log(p))) <= 1e-11
        assert abs(columns["sum_lambda"][i] - float(np.sum(s.lambdas))) <= 1e-14
