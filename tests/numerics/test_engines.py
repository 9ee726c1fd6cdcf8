"""Structured engine == dense engine on generated stacks, for every mask; the
diagonal identity (C5(a)); row sums; collapse at lambda = 1; the log-space route."""

import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import posbias.numerics as nx

MASKS = st.one_of(
    st.just(nx.Causal()),
    st.just(nx.Full()),
    st.integers(1, 12).map(nx.SlidingWindow),
    st.integers(0, 12).map(nx.Prefix),
)


@st.composite
def stacks(draw, masks=MASKS, max_tokens=24):
    t = draw(st.integers(1, 5))
    h = draw(st.integers(1, 4))
    n = draw(st.integers(1, max_tokens))
    floats = lambda lo, hi, shape: np.array(  # noqa: E731
        draw(st.lists(st.floats(lo, hi), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    ).reshape(shape)
    stack = nx.AlibiStack.build(
        lambdas=floats(0.0, 1.0, (t,)),
        slopes=np.where(floats(0, 1, (t, h)) < 0.2, 0.0, floats(0.0, 3.0, (t, h))),  # m = 0 included
        diagonal=floats(-8.0, 8.0, (t, h)),
        head_weights=floats(0.05, 1.0, (t, h)),
        temperature=draw(st.sampled_from([0.5, 1.0, 2.0])),
        mask=draw(masks),
    )
    return stack, n


def _dense(stack, n):
    kernels = nx.alibi_kernels(stack, n)
    lambdas = jnp.asarray(stack.lambdas)
    return np.asarray(kernels), np.asarray(nx.rollout_matrix(kernels, lambdas))


PATHS = {"native": nx.Structured(native=True), "xla": nx.Structured(native=False)}


@pytest.mark.parametrize("path", PATHS)
@given(case=stacks())
def test_structured_profile_equals_dense(path, case):
    """Both layer paths of the structured engine: the C kernel (numerics.native) and pure XLA."""
    stack, n = case
    _, p_matrix = _dense(stack, n)
    res = nx.profile(stack, n, engine=PATHS[path])
    assert res.path == path
    assert np.max(np.abs(res.probabilities - p_matrix[-1])) <= 1e-12
    assert abs(res.probabilities.sum() - 1.0) <= 1e-12


def test_native_kernel_builds_here():
    """The C layer kernel must build where the suite runs (gcc is part of every setup)."""
    from posbias.numerics import native

    assert native.available()


@given(stacks(masks=st.one_of(st.just(nx.Causal()), st.just(nx.Full()), st.integers(0, 12).map(nx.Prefix))))
def test_log_engine_equals_dense(case):
    stack, n = case
    _, p_matrix = _dense(stack, n)
    res = nx.profile(stack, n, engine="log")
    assert np.max(np.abs(res.probabilities - p_matrix[-1])) <= 1e-12


@given(stacks())
def test_dense_kernels_are_stochastic_and_masked(case):
    stack, n = case
    kernels, p_matrix = _dense(stack, n)
    assert np.max(np.abs(kernels.sum(axis=2) - 1.0)) <= 1e-12
    assert np.all(kernels[:, ~nx.allowed(stack.mask, n)] == 0.0)
    assert np.max(np.abs(p_matrix.sum(axis=1) - 1.0)) <= 1e-12
    # the closed-form self weights alpha_i(d) (C4(b)) equal the softmax diagonal
    diag = nx.kernel_diagonals(stack, n)
    assert np.max(np.abs(diag - np.diagonal(kernels, axis1=1, axis2=2))) <= 1e-12
    # the engine's per-layer statistics are the same diagonal
    res = nx.profile(stack, n)
    assert np.allclose(res.min_self_weight, diag.min(axis=1), atol=1e-12)
    assert np.allclose(res.last_self_weight, diag[:, -1], atol=1e-12)


@given(stacks(masks=st.one_of(st.just(nx.Causal()), st.integers(1, 12).map(nx.SlidingWindow))))
def test_diagonal_identity_and_last_token_atom(case):
    """C5(a): P_ii = prod_t (1 - lambda_t (1 - A_ii)); C2(c): p(N-1) is its last entry."""
    stack, n = case
    kernels, p_matrix = _dense(stack, n)
    predicted = nx.diagonal_product(np.diagonal(kernels, axis1=1, axis2=2), stack.lambdas)
    assert np.max(np.abs(np.diag(p_matrix) - predicted)) <= 1e-12
    assert abs(nx.profile(stack, n).probabilities[-1] - predicted[-1]) <= 1e-12


def test_dense_rollout_matches_kernel_products():
    stack = nx.AlibiStack.build([0.3, 0.9, 0.6], nx.alibi_slopes(4), [0.5, -1.0, 2.0, 0.0], mask=nx.Prefix(5))
    kernels, p_matrix = _dense(stack, 17)
    p2, diag = nx.dense_rollout(stack, 17)
    assert np.max(np.abs(np.asarray(p2) - p_matrix)) <= 1e-14
    assert np.max(np.abs(np.asarray(diag) - np.diagonal(kernels, axis1=1, axis2=2))) <= 1e-15


def test_attention_only_collapses_onto_first_token():
    """C5: lambda = 1 with uniformly positive causal kernels sends p to e_0 as T grows."""
    slopes = nx.alibi_slopes(8)
    firsts = [nx.profile(nx.AlibiStack.build(np.ones(t), slopes), 32).probabilities[0] for t in (1, 3, 10, 30, 1000)]
    assert all(a < b for a, b in zip(firsts[:-1], firsts[1:-1]))
    assert abs(firsts[-1] - 1.0) <= 1e-12


def test_residual_stack_does_not_collapse():
    """C5(a): sum lambda_t delta_t < inf keeps the last-token atom away from 0 at any depth."""
    slopes = nx.alibi_slopes(8)
    lambdas = 0.5 / np.arange(1, 2001) ** 2.0
    res = nx.profile(nx.AlibiStack.build(lambdas, slopes), 32)
    assert res.probabilities[-1] >= np.prod(1.0 - lambdas) - 1e-12 > 0.3


def test_log_engine_keeps_values_below_float64_range():
    """Uniform causal attention (m = 0), lambda = 1: p(N-1) = N^-T underflows float64.
    Independent route: the same walk in 60-digit mpmath arithmetic."""
    n, t = 24, 300
    stack = nx.AlibiStack.build(np.ones(t), [0.0])
    res = nx.profile(stack, n, engine="log")
    mpmath.mp.dps = 60
    v = [mpmath.mpf(0)] * (n - 1) + [mpmath.mpf(1)]
    for _ in range(t):
        v = [sum(v[i] / (i + 1) for i in range(j, n)) for j in range(n)]
    exact_log = np.array([float(mpmath.log(x)) for x in v])
    assert exact_log.min() < -700  # really below the float64 range
    # |delta log p| is the relative error of p; 300 layers of log-space rounding at |log p| ~ 900
    assert np.max(np.abs(res.log_probabilities - exact_log)) <= 1e-10
    linear = nx.profile(stack, n, engine="structured").probabilities
    assert linear[-1] == 0.0  # the linear engine underflows here


def test_float32_is_close_and_reported():
    from posbias.rollout import run_stack

    stack = nx.AlibiStack.build(np.full(12, 0.4), nx.alibi_slopes(8), 1.0)
    p64 = run_stack(stack, 200).profile
    r32 = run_stack(stack, 200, precision="float32")
    assert r32.summary.precision == "float32"
    assert np.max(np.abs(r32.profile - p64)) <= 1e-6


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("mask", [nx.Causal(), nx.SlidingWindow(300), nx.Prefix(700), nx.Full()])
def test_large_n_structured_equals_dense(mask, path):
    """Blocks of 32 tokens, several head blocks (13 heads): N = 1000 crosses both."""
    stack = nx.AlibiStack.build(np.array([0.7, 0.2, 0.5]), nx.alibi_slopes(13), np.linspace(-3, 3, 13), mask=mask)
    _, p_matrix = _dense(stack, 1000)
    res = nx.profile(stack, 1000, engine=PATHS[path])
    assert np.max(np.abs(res.probabilities - p_matrix[-1])) <= 1e-12


def test_head_groups_path_equals_dense():
    """Large problems process heads a group at a time on the XLA path (memory O(group * N)); force small groups."""
    engine = nx.Structured(native=False, group_budget=2 * (300 + 64))
    stack = nx.AlibiStack.build(np.array([0.7, 0.2]), nx.alibi_slopes(7), np.linspace(-3, 3, 7))
    _, p_matrix = _dense(stack, 300)
    assert np.max(np.abs(nx.profile(stack, 300, engine=engine).probabilities - p_matrix[-1])) <= 1e-12


@given(stacks(masks=st.one_of(st.just(nx.Causal()), st.integers(1, 40).map(nx.SlidingWindow)), max_tokens=300))
def test_fft_engine_equals_structured(case):
    """The saturation split (numerics.fft) against the exact recurrence."""
    stack, n = case
    exact = nx.profile(stack, n)
    fast = nx.profile(stack, n, engine="fft")
    assert np.max(np.abs(fast.probabilities - exact.probabilities)) <= 1e-12
    assert np.allclose(fast.min_self_weight, exact.min_self_weight, atol=1e-12)
    assert np.allclose(fast.last_self_weight, exact.last_self_weight, atol=1e-12)


@pytest.mark.parametrize("merge", [True, False])
@pytest.mark.parametrize("mask", [nx.Causal(), nx.SlidingWindow(2000)])
def test_fft_engine_at_moderate_n(mask, merge, monkeypatch):
    """Long and short heads (m from 0 to 0.95), content, N = 9000: several FFT blocks, and
    prefix buckets merged by cost (one bucket here) or kept apart (compile cost 0: one per size)."""
    from posbias.numerics import fft

    if not merge:
        monkeypatch.setattr(fft, "COMPILE_COST_ELEMENTS", 0)
    slopes = np.concatenate([[0.0, 1e-4], nx.alibi_slopes(14)])
    buckets = fft.layer_plan(slopes, 9000, mask, 4)[1]
    assert (len(buckets) == 1) if merge else (len(buckets) > 4)
    stack = nx.AlibiStack.build(np.array([0.6, 0.3, 0.8, 0.2]), slopes, np.linspace(-4, 4, 16), mask=mask)
    exact = nx.profile(stack, 9000).probabilities
    assert np.max(np.abs(nx.profile(stack, 9000, engine="fft").probabilities - exact)) <= 1e-12


@given(
    st.lists(st.integers(1, 5), min_size=1, max_size=7),
    st.lists(st.integers(1, 30), min_size=7, max_size=7),
    st.integers(1, 10**6),
)
def test_fft_bucket_merge_is_the_cheapest_partition(exponents, counts, layers):
    """merge_buckets' dynamic programme against every contiguous partition, enumerated."""
    import itertools

    from posbias.numerics import fft

    prefixes = sorted({64 << e for e in exponents})
    counts = counts[: len(prefixes)]
    got = fft.merge_buckets(prefixes, counts, layers)
    assert sum(c for c, _ in got) == sum(counts) and got[-1][1] == prefixes[-1]

    def cost(buckets):
        return len(buckets) * fft.COMPILE_COST_ELEMENTS + layers * sum(c * p for c, p in buckets)

    best = min(
        cost([(sum(counts[i:j]), prefixes[j - 1]) for i, j in zip((0, *cuts), (*cuts, len(prefixes)))])
        for r in range(len(prefixes))
        for cuts in itertools.combinations(range(1, len(prefixes)), r)
    )
    assert cost(got) == best


def test_fft_engine_refuses_bidirectional_masks():
    with pytest.raises(nx.Unsupported, match="causal and sliding-window masks only"):
        nx.profile(nx.AlibiStack.build([0.5], [0.5], mask=nx.Full()), 8, engine="fft")


def test_unresolved_is_a_boolean_mask():
    """``~profile.unresolved()`` must select the resolved entries (an integer 0/1 mask would turn into
    -1/-2 under ~, and index the wrong entries): the mask is bool, for profiles with and without losses."""
    from posbias.numerics.engine import Profile

    lost = Profile(np.array([1.0, 0.0]), np.array([0.0, -np.inf]), np.ones(1), np.ones(1), "e", "p")
    full = Profile(np.array([0.5, 0.5]), np.log([0.5, 0.5]), np.ones(1), np.ones(1), "e", "p")
    for profile, want in [(lost, [False, True]), (full, [False, False])]:
        mask = profile.unresolved()
        assert mask.dtype == np.bool_ and mask.tolist() == want
        assert profile.probabilities[~mask].tolist() == [x for x, w in zip(profile.probabilities, want) if not w]
