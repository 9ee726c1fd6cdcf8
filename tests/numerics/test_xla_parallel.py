"""The chunked XLA formulation (numerics/_chunked.py, ``Structured(native=False)``) against
the C kernel (``Structured(native=True)``) and against a dense NumPy rollout written here.

The dense reference is independent of the engines: each head's masked softmax of
d [i = j] - m |i - j| (d unclipped, the max subtracted per row), heads averaged with
their weights, R^(t) = (1 - lambda_t) I + lambda_t A^(t) multiplied from the top
(THEORY.md, Notation; C4(b) for the diagonal excess d).
"""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import posbias.numerics as nx

XLA = nx.Structured(native=False)
NATIVE = nx.Structured(native=True)

SLOPES = (0.0, 1e-12, 1e-3, 0.05, 0.5, 2.0, 30.0, 300.0, 700.0)
DIAGONALS = (-1e300, -1e4, -600.0, -40.0, -3.0, 0.0, 2.5, 40.0, 600.0, 1e4, 1e300)
LAMBDAS = (0.0, 1e-300, 1e-12, 0.3, 0.5, 0.9, 1.0 - 1e-16, 1.0)


def dense_profile(stack, n: int) -> np.ndarray:
    """p = e_{N-1}^T R^(T-1) ... R^(0) from dense N x N kernels (float64 NumPy)."""
    allowed = nx.allowed(stack.mask, n)
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    slopes, diagonal = stack.scaled()
    v = np.zeros(n)
    v[-1] = 1.0
    for t in range(stack.num_layers - 1, -1, -1):
        a = np.zeros((n, n))
        for h in range(stack.num_heads):
            logits = np.where(i == j, diagonal[t, h], 0.0) - slopes[t, h] * np.abs(i - j)
            logits = np.where(allowed, logits, -np.inf)
            e = np.exp(logits - logits.max(axis=1, keepdims=True))
            a += stack.head_weights[t, h] * e / e.sum(axis=1, keepdims=True)
        lam = stack.lambdas[t]
        v = (1.0 - lam) * v + lam * (v @ a)
    return v


def masks(n_max: int = 40):
    return st.one_of(
        st.just(nx.Causal()),
        st.just(nx.Full()),
        st.integers(1, n_max + 2).map(nx.SlidingWindow),
        st.integers(0, n_max).map(nx.Prefix),
    )


@st.composite
def extreme_stacks(draw):
    """Small N, up to 64 heads, slopes 0 .. 700, diagonals up to +-1e300, any mask."""
    n = draw(st.integers(1, 40))
    t = draw(st.integers(1, 4))
    h = draw(st.sampled_from([1, 2, 3, 8, 17, 64]))
    pick = lambda values, size: np.array(draw(st.lists(st.sampled_from(values), min_size=size, max_size=size)))  # noqa: E731
    weights = np.array(draw(st.lists(st.integers(0, 9), min_size=t * h, max_size=t * h)), float).reshape(t, h)
    weights[:, 0] += 1.0
    stack = nx.AlibiStack.build(
        lambdas=pick(LAMBDAS, t),
        slopes=pick(SLOPES, t * h).reshape(t, h),
        diagonal=pick(DIAGONALS, t * h).reshape(t, h),
        head_weights=weights,
        mask=draw(masks()),
    )
    chunk = draw(st.sampled_from([None, 1, 3, 16]))
    return stack, n, chunk


def _check(stack, n, chunk):
    res = nx.profile(stack, n, engine=nx.Structured(native=False, chunk=chunk))
    assert res.path == "xla"
    p = res.probabilities
    assert abs(p.sum() - 1.0) <= 1e-12
    assert np.max(np.abs(p - dense_profile(stack, n))) <= 1e-12
    native = nx.profile(stack, n, engine=NATIVE)
    if native.path == "native":  # where its clip of d is inexact (structured.clip_inexact) it is XLA too
        assert np.max(np.abs(p - native.probabilities)) <= 1e-12
        assert np.allclose(res.min_self_weight, native.min_self_weight, rtol=0, atol=1e-12)
        assert np.allclose(res.last_self_weight, native.last_self_weight, rtol=0, atol=1e-12)


@settings(max_examples=30)
@given(extreme_stacks())
@example(
    (
        nx.AlibiStack.build(
            [1.0, 1.0],
            np.tile([700.0, 0.0, 30.0, 700.0], (2, 1)),
            np.tile([1e300, -1e300, 600.0, -600.0], (2, 1)),
            mask=nx.Full(),
        ),
        20,
        None,
    )
)
@example((nx.AlibiStack.build([1.0], [0.0, 1.0], [-1e300, 0.0], mask=nx.SlidingWindow(5)), 30, 3))
def test_chunked_equals_native_and_dense(case):
    _check(*case)


@pytest.mark.parametrize(
    "mask", [nx.Causal(), nx.SlidingWindow(3), nx.SlidingWindow(200), nx.SlidingWindow(700), nx.Prefix(333), nx.Full()]
)
def test_many_heads_all_masks(mask):
    """64 heads (one group), N = 500: several chunks, banded (w - 1 <= C) and subtracting windows."""
    rng = np.random.default_rng(7)
    t, h, n = 3, 64, 500
    stack = nx.AlibiStack.build(
        rng.uniform(0.2, 1.0, t),
        rng.choice(SLOPES, (t, h)),
        rng.uniform(-8, 8, (t, h)),
        rng.uniform(0.1, 1.0, (t, h)),
        mask=mask,
    )
    _check(stack, n, None)


def test_groups_of_heads_when_the_budget_is_small():
    """H P above the budget: heads in the fewest equal groups that fit (here 5 groups of 3 for 13 heads)."""
    stack = nx.AlibiStack.build([0.8, 0.4], nx.alibi_slopes(13), np.linspace(-4, 4, 13), mask=nx.Prefix(90))
    engine = nx.Structured(native=False, group_budget=3 * 320)
    res = nx.profile(stack, 300, engine=engine)
    assert np.max(np.abs(res.probabilities - dense_profile(stack, 300))) <= 1e-12


def test_banded_window_is_relative_and_resolved():
    """A window with w - 1 <= C runs without subtraction: small entries keep relative accuracy
    (against the dense product, entries > 1e-280), and the profile claims full resolution."""
    n, t = 120, 40
    stack = nx.AlibiStack.build(
        np.full(t, 0.99), np.tile([0.0, 2.0], (t, 1)), np.tile([6.0, 0.0], (t, 1)), mask=nx.SlidingWindow(10)
    )
    res = nx.profile(stack, n, engine=XLA)
    ref = dense_profile(stack, n)
    big = ref > 1e-280
    assert res.resolution == 0.0
    assert ref.min() < 1e-20  # spans many orders of magnitude
    assert np.all(np.abs(res.probabilities[big] - ref[big]) <= 1e-12 * ref[big])
    # the subtracting (blocked) formulation loses the small entries here: the check can tell
    old = nx.profile(stack, n, engine=nx.Structured(native=False, xla_scan="blocked")).probabilities
    assert np.max(np.abs(old[big] - ref[big]) / ref[big]) > 1e-3


@pytest.mark.parametrize("mask", [nx.Causal(), nx.Full(), nx.SlidingWindow(3), nx.SlidingWindow(40)])
@pytest.mark.parametrize("slope, diagonal", [(373.0, -600.0), (400.0, -1e4), (700.0, -1e300)])
def test_large_c_small_r_keeps_representable_terms(mask, slope, diagonal):
    """d very negative makes c_i ~ 1/r: row i reads i -+ 1 with weight ~1 and i -+ 2 with weight
    ~r = e^{-m}, representable although r^2 is not. Entries above 1e-280 keep relative accuracy
    against the dense product (a route forming r^2 u would return 0 for them). N = 40 with
    chunk 16 puts such pairs inside chunks and across chunk borders."""
    n = 40
    stack = nx.AlibiStack.build([1.0, 0.5], [[slope, 0.0]], [[diagonal, 0.0]], [[1.0, 1e-300]], mask=mask)
    ref = dense_profile(stack, n)
    big = ref > 1e-280
    if slope < 600:  # e^{-m} representable above 1e-280: the check reaches such small entries
        assert np.sum(big & (ref < 1e-100)) > 0
    for chunk in (None, 16, 3):
        p = nx.profile(stack, n, engine=nx.Structured(native=False, chunk=chunk)).probabilities
        assert np.all(np.abs(p[big] - ref[big]) <= 1e-12 * ref[big])
        assert abs(p.sum() - 1.0) <= 1e-12


@pytest.mark.parametrize("mask", [nx.Causal(), nx.SlidingWindow(5000), nx.Prefix(3000)])
def test_moderate_n_against_the_c_kernel(mask):
    """N = 20000, H = 32 (paper slopes, content, uneven head weights) against the C kernel."""
    rng = np.random.default_rng(3)
    t, h, n = 3, 32, 20000
    stack = nx.AlibiStack.build(
        [0.7, 0.3, 0.9], nx.alibi_slopes(h), rng.uniform(-3, 3, (t, h)), rng.uniform(0.2, 1.0, (t, h)), mask=mask
    )
    res = nx.profile(stack, n, engine=XLA)
    ref = nx.profile(stack, n, engine=NATIVE)
    assert ref.path == "native" and res.path == "xla"
    assert abs(res.probabilities.sum() - 1.0) <= 1e-12
    assert np.max(np.abs(res.probabilities - ref.probabilities)) <= 1e-12
    assert np.allclose(res.min_self_weight, ref.min_self_weight, rtol=0, atol=1e-12)


def test_blocked_formulation_still_reachable():
    """``xla_scan="blocked"`` runs the earlier formulation (for comparison); same profile as dense."""
    stack = nx.AlibiStack.build([0.6, 0.9], nx.alibi_slopes(5), [1.0, -2.0, 0.0, 3.0, -1.0], mask=nx.Prefix(40))
    res = nx.profile(stack, 150, engine=nx.Structured(native=False, xla_scan="blocked"))
    assert np.max(np.abs(res.probabilities - dense_profile(stack, 150))) <= 1e-12
    with pytest.raises(nx.Unsupported, match="unknown XLA formulation"):
        nx.profile(stack, 150, engine=nx.Structured(native=False, xla_scan="sequential"))
