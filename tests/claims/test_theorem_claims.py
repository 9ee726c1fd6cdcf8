"""The claim registry: every claim once, its certificates hold, and its numeric predicate
agrees with the dense numerics engine (property tests) and fails on counterexamples."""

import doctest
from pathlib import Path

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp
from hypothesis import given

import posbias.numerics as nx
from posbias.theorem import orders
from posbias.theorem.claims import CLAIMS, certificate_registry, claims_citing, run_certificate

REPO = Path(__file__).resolve().parents[2]
LABELS = (
    "C1",
    "C2(a)",
    "C2(b)",
    "C2(c)",
    "C3(a)",
    "C3(b)",
    "C3(c)",
    "C4(a)",
    "C4(b)",
    "C5(a)",
    "C5(b)",
    "C5(c)",
    "C6",
    "cesaro",
    "C7(a)",
    "C7(b)",
    "C7(c)",
    "C8(a)",
    "C8(b)",
    "C8(c)",
)


def test_every_claim_listed_once_with_a_proof_file():
    assert tuple(CLAIMS) == LABELS
    for claim in CLAIMS.values():
        assert (REPO / claim.proof).is_file(), claim.proof
        assert claim.statement and claim.latex and claim.hypotheses and claim.certificates


@pytest.mark.parametrize("label", LABELS)
def test_claim_certificates_exist_and_hold(label):
    reg = certificate_registry()
    for name in CLAIMS[label].certificates:
        assert name in reg.certificates, f"{label} lists unknown certificate {name}"
        check = run_certificate(name, reg)
        assert check.holds, f"{name}: {check.description}"
        assert label in claims_citing(name)
    assert all(check.holds for check in CLAIMS[label].check())


def test_unknown_and_crashing_certificates_do_not_hold():
    from posbias.theorem.claims import Registry

    def boom():
        raise RuntimeError("broken")

    reg = Registry({"x:boom": boom}, {})
    assert not run_certificate("x:nothing", reg).holds
    assert not run_certificate("x:boom", reg).holds


@pytest.mark.parametrize(
    "module",
    [
        "orders",
        "certificate",
        "params",
        "exact",
        "softmax_shift",
        "alibi_row",
        "monotone",
        "drift",
        "diagonal_product",
        "shape",
        "claims",
        "queries",
        "statements",
        "cesaro",
    ],
)
def test_doctests(module):
    mod = __import__(f"posbias.theorem.{module}", fromlist=["_"])
    failures, tried = doctest.testmod(mod)
    assert tried > 0 and failures == 0


# ------------------------------------------------------------------------ strategies
def causal_kernel(draw, n):
    rows = []
    for i in range(n):
        w = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=i + 1, max_size=i + 1))) + 1e-3
        rows.append(np.concatenate([w / w.sum(), np.zeros(n - i - 1)]))
    return np.array(rows)


@st.composite
def kernel_and_mu(draw):
    n = draw(SIZES)
    mu = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n))) + 1e-3
    return causal_kernel(draw, n), mu / mu.sum()


@st.composite
def alibi_stack(draw, layers=3):
    lams = draw(st.lists(st.floats(0.0, 1.0), min_size=layers, max_size=layers))
    slopes = draw(st.lists(st.lists(st.floats(0.0, 2.0), min_size=2, max_size=2), min_size=layers, max_size=layers))
    diag = draw(st.lists(st.lists(st.floats(-2.0, 2.0), min_size=2, max_size=2), min_size=layers, max_size=layers))
    return nx.AlibiStack.build(lams, slopes, diagonal=diag)


_dense = jax.jit(nx.alibi_kernels, static_argnums=1)  # one compilation per (T, H, N)
SIZES = st.sampled_from((3, 5, 8))  # few shapes: JAX compiles once per shape


def dense(stack, n):
    return np.asarray(_dense(stack, n))


def rollout(stack, n):
    return np.array(nx.rollout_matrix(jnp.asarray(dense(stack, n)), jnp.asarray(stack.lambdas)))


# -------------------------------------------------------------------------- C1, C2
@given(kernel_and_mu())
def test_c1_random_causal_kernels(km):
    kernel, mu = km
    assert CLAIMS["C1"].predicate(kernel, mu)


@given(alibi_stack(), SIZES)
def test_c1_on_engine_kernels(stack, n):
    for a in dense(stack, n):
        assert orders.is_causal_stochastic(a)
        assert CLAIMS["C1"].predicate(a, np.full(n, 1.0 / n))


def test_c1_predicate_fails_without_causality():
    anti = np.array([[0.0, 1.0], [0.0, 1.0]])  # reads the *later* token
    assert not CLAIMS["C1"].predicate(anti, np.array([1.0, 0.0]))


@given(kernel_and_mu(), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_c2a_random(km, lam, lam2):
    kernel, mu = km
    lo, hi = sorted((lam, lam2))
    assert CLAIMS["C2(a)"].predicate(kernel, mu, lo, hi)


@given(alibi_stack(), SIZES, st.integers(0, 2), st.floats(0.0, 1.0))
def test_c2b_on_monotone_engine_stacks(stack, n, layer, bump):
    kernels = dense(stack, n)
    assert all(orders.is_monotone(a) for a in kernels)
    new = stack.lambdas[layer] + bump * (1 - stack.lambdas[layer])
    assert CLAIMS["C2(b)"].predicate(kernels, stack.lambdas, layer, new)
    # the same conclusion through the engine's own rollout
    more = np.array(stack.lambdas)
    more[layer] = new
    p_old = np.asarray(nx.profile_from_kernels(jnp.asarray(kernels), jnp.asarray(stack.lambdas)))
    p_new = np.asarray(nx.profile_from_kernels(jnp.asarray(kernels), jnp.asarray(more)))
    assert orders.dominated(p_new, p_old)


def test_c2b_fails_without_monotonicity():
    top = np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0]], float)
    bottom = np.array([[1, 0, 0], [0, 1, 0], [1, 0, 0]], float)
    assert not orders.is_monotone(bottom)
    assert not CLAIMS["C2(b)"].predicate(np.stack([bottom, top]), np.array([1.0, 0.25]), 1, 0.75)


@given(alibi_stack(layers=4), SIZES)
def test_c2c_last_token_atom(stack, n):
    p = nx.profile(stack, n).probabilities
    assert CLAIMS["C2(c)"].predicate(p, dense(stack, n), stack.lambdas, tol=1e-12)


# ------------------------------------------------------------------------------ C3
@given(alibi_stack(), SIZES)
def test_c3a_engine_kernels_monotone(stack, n):
    for a in dense(stack, n):
        assert CLAIMS["C3(a)"].predicate(a)


@given(st.floats(0.0, 3.0), st.floats(0.0, 3.0), st.floats(-2.0, 2.0), SIZES)
def test_c3b_slopes_order_rows(m1, m2, d, n):
    lo, hi = sorted((m1, m2))
    k_lo = dense(nx.AlibiStack.build([1.0], [lo], diagonal=d), n)[0]
    k_hi = dense(nx.AlibiStack.build([1.0], [hi], diagonal=d), n)[0]
    assert CLAIMS["C3(b)"].predicate(k_lo, k_hi)
    if hi - lo > 0.1 and n > 2:
        assert not CLAIMS["C3(b)"].predicate(k_hi, k_lo)  # the order is strict, not vacuous


@given(alibi_stack(), st.integers(0, 2), st.floats(0.0, 2.0), SIZES)
def test_c3c_steeper_layer_later_profile(stack, layer, extra, n):
    steeper = np.array(stack.slopes)
    steeper[layer] += extra
    stack2 = nx.AlibiStack.build(stack.lambdas, steeper, diagonal=stack.diagonal)
    p_flat = nx.profile(stack, n).probabilities
    p_steep = nx.profile(stack2, n).probabilities
    assert CLAIMS["C3(c)"].predicate(p_flat, p_steep)


# ------------------------------------------------------------------------------ C4
@given(st.integers(1, 10), st.floats(-50, 50), st.integers(0, 2**31 - 1))
def test_c4a_background_cancels(n, b, seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, n)) * 3
    mask = np.tril(np.ones((n, n), dtype=bool))
    assert CLAIMS["C4(a)"].predicate(logits, np.full(n, b), mask)
    assert CLAIMS["C4(a)"].predicate(logits, rng.normal(size=n) * 10, mask)  # per-row constants too


def test_c4a_predicate_fails_for_a_non_constant_shift():
    """The predicate compares real softmaxes: a shift that varies along the row does change them."""
    logits = np.zeros((2, 3))
    assert CLAIMS["C4(a)"].predicate(logits, np.array([[5.0, 5.0, 5.0], [-1.0, -1.0, -1.0]]))
    assert not CLAIMS["C4(a)"].predicate(logits, np.array([[0.0, 1.0, 2.0], [0.0, 0.0, 0.0]]))


@given(alibi_stack(), st.integers(0, 2), st.floats(0.0, 3.0), SIZES)
def test_c4b_raising_d(stack, layer, extra, n):
    raised = np.array(stack.diagonal)
    raised[layer] += extra
    stack2 = nx.AlibiStack.build(stack.lambdas, stack.slopes, diagonal=raised)
    k_lo, k_hi = dense(stack, n)[layer], dense(stack2, n)[layer]
    p_lo, p_hi = nx.profile(stack, n).probabilities, nx.profile(stack2, n).probabilities
    assert CLAIMS["C4(b)"].predicate(k_lo, k_hi, p_lo, p_hi)


# ------------------------------------------------------------------------------ C5
@given(alibi_stack(layers=5), SIZES)
def test_c5a_diagonals(stack, n):
    assert CLAIMS["C5(a)"].predicate(rollout(stack, n), dense(stack, n), stack.lambdas, tol=1e-12)


def test_c5a_predicate_detects_a_wrong_diagonal():
    stack = nx.AlibiStack.build([0.5, 0.5], [0.3], diagonal=0.0)
    pmat = rollout(stack, 5)
    pmat[2, 2] += 1e-3
    assert not CLAIMS["C5(a)"].predicate(pmat, dense(stack, 5), stack.lambdas)


@given(alibi_stack(layers=6), SIZES)
def test_c5b_collapse_bound(stack, n):
    assert CLAIMS["C5(b)"].predicate(rollout(stack, n), dense(stack, n), stack.lambdas, tol=1e-12)


@given(alibi_stack(layers=6), SIZES)
def test_c5c_sandwich(stack, n):
    assert CLAIMS["C5(c)"].predicate(rollout(stack, n), dense(stack, n), stack.lambdas, tol=1e-12)


def test_c5c_dichotomy_in_depth():
    """Constant lambda collapses, lambda_t = 0.5 (t+1)^-2 does not (uniform kernel, N = 6)."""
    n, depth = 6, 400
    for lams, collapses in ((np.full(depth, 0.5), True), (0.5 * (np.arange(depth) + 1.0) ** -2, False)):
        stack = nx.AlibiStack.build(lams, [0.0], diagonal=0.0)
        pmat = rollout(stack, n)
        assert CLAIMS["C5(c)"].predicate(pmat, dense(stack, n), lams, tol=1e-12)
        assert (pmat[:, 0].min() > 1 - 1e-9) == collapses


# ---------------------------------------------------------------------- C6, cesaro
def test_c6_engine_matches_exact_witnesses():
    """The engine's profiles at the exact witnesses of shape:u-witnesses / shape:steep-witnesses."""
    from posbias.theorem.shape import STEEP, U_CASES

    for n, r, dexp, layers, lam in U_CASES:
        stack = nx.AlibiStack.build(np.full(layers, float(lam)), [-np.log(float(r))], diagonal=np.log(float(dexp)))
        assert CLAIMS["C6"].predicate(nx.profile(stack, n).probabilities)
    n, r, dexp = STEEP
    stack = nx.AlibiStack.build(np.full(3, 0.5), [-np.log(float(r))], diagonal=np.log(float(dexp)))
    p = nx.profile(stack, n).probabilities
    assert not CLAIMS["C6"].predicate(p) and np.all(np.diff(p) >= 0)


def test_c6_engine_shows_the_steep_hump():
    """C6 as corrected: the engine's profiles at shape.HUMP_CASES (r = 1/5, T = 8 and 16) end in a hump,
    are neither monotone nor U-shaped, and agree with the exact fractions of shape:steep-hump."""
    from posbias.theorem.shape import HUMP_CASES, exact_profile_of

    for case in HUMP_CASES:
        n, r, dexp, layers, lam = case
        stack = nx.AlibiStack.build(np.full(layers, float(lam)), [-np.log(float(r))], diagonal=np.log(float(dexp)))
        p = np.asarray(nx.profile(stack, n).probabilities)
        exact = np.array([float(x) for x in exact_profile_of(*case)])
        np.testing.assert_allclose(p, exact, rtol=1e-12, atol=1e-15)
        assert p[-3] < p[-2] > p[-1] and not CLAIMS["C6"].predicate(p) and np.any(np.diff(p) < 0)


@pytest.mark.parametrize(
    "lams", [[sp.Rational(1, 2)] * 3, [sp.Rational(1, 3), sp.Rational(7, 10), 1, 0], [sp.Rational(9, 10)] * 6]
)
def test_cesaro_predicate_against_engine(lams):
    n = 9
    stack = nx.AlibiStack.build([float(x) for x in lams], [0.0], diagonal=0.0)  # m = 0, d = 0: uniform causal
    p = np.asarray(nx.profile_from_kernels(jnp.asarray(dense(stack, n)), jnp.asarray(stack.lambdas)))
    assert CLAIMS["cesaro"].predicate(p, lams, tol=1e-12)
    assert not CLAIMS["cesaro"].predicate(p, [sp.Rational(1, 5)] + lams[1:], tol=1e-6)


def test_exact_grid_orders_are_not_vacuous():
    """The exact dominance used by monotone:alibi-grid rejects the reversed orders."""
    from posbias.theorem.alibi_row import exact_kernel
    from posbias.theorem.exact import exact_monotone
    from posbias.theorem.orders import exact_dominated

    flat, steep = exact_kernel(5, 1, 1), exact_kernel(5, sp.Rational(1, 5), 1)
    assert exact_dominated(list(flat.row(4)), list(steep.row(4)))
    assert not exact_dominated(list(steep.row(4)), list(flat.row(4)))
    assert not exact_monotone(sp.Matrix([[0, 1], [1, 0]]))
