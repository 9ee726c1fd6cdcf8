"""theorem.cesaro and its pieces (cesaro_schedule, cesaro_exact, hausdorff, cesaro_certificates): the exact
Cesàro rollout (THEORY.md 'An exact closed form'; C2(c), C5, C6).

Every numeric check compares the closed-form evaluator against an independent route:
an exact Fraction matrix product, the numerics engine's dense products, or the
JAX-lambdified closed form where float64 is safe.
"""

import itertools
import json
import random
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posbias import numerics
from posbias.theorem import cesaro, cesaro_exact, cesaro_schedule, hausdorff
from posbias.theorem.cesaro import CesaroParams
from posbias.theorem.claims import certificate_registry
from posbias.theorem.derivation import DeriveError


def fraction_rollout_last_row(lambdas, n):
    """e_{N-1} R^(T-1) ... R^(0) with exact Fractions, C[i, j] = 1/(i+1) for j <= i."""
    v = [Fraction(0)] * n
    v[n - 1] = Fraction(1)
    for lam in reversed(lambdas):  # row vector times R^(T-1) first
        vc = [Fraction(0)] * n
        suffix = Fraction(0)
        for i in range(n - 1, -1, -1):  # (v C)_j = sum_{i >= j} v_i / (i+1)
            suffix += v[i] / (i + 1)
            vc[i] = suffix
        v = [(1 - lam) * a + lam * b for a, b in zip(v, vc)]
    return v


def cesaro_kernels(n, t):
    k = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    return np.broadcast_to(k, (t, n, n)).copy()


fractions_01 = st.fractions(min_value=0, max_value=1, max_denominator=50)


@given(st.integers(1, 9), st.lists(fractions_01, min_size=0, max_size=6))
def test_exact_profile_equals_fraction_matrix_product(n, lambdas):
    assert cesaro_exact.exact_profile(lambdas, n).fractions() == fraction_rollout_last_row(lambdas, n)


@pytest.mark.parametrize(
    "spec,n,t",
    [
        ("constant:0.3", 48, 32),
        ("constant:1", 40, 12),
        ("power_decay:0.9,1", 64, 40),
        ("power_decay:0.8,1.5", 64, 40),
        ("custom:0.1,0.9,0.5,0,1,0.25", 33, 6),
    ],
)
def test_exact_profile_equals_numerics_dense_products(spec, n, t):
    sched = cesaro_schedule.parse_schedule(spec, t)
    exact = np.array(cesaro_exact.exact_profile(sched.lambdas, n).floats())
    lams = jnp.asarray([float(x) for x in sched.lambdas])
    kernels = jnp.asarray(cesaro_kernels(n, t))
    dense_matrix = np.asarray(numerics.rollout_matrix(kernels, lams))[-1]
    dense_scan = np.asarray(numerics.profile_from_kernels(kernels, lams))
    np.testing.assert_allclose(dense_matrix, exact, rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(dense_scan, exact, rtol=1e-10, atol=1e-15)


def test_lambdified_closed_form_agrees_on_a_grid_small_n():
    n, t = 6, 3
    f_p = jax.jit(jax.vmap(hausdorff.jax_profile(n, t)))
    f_mu = jax.jit(jax.vmap(hausdorff.jax_moments(n, t)))
    exact_grid = list(itertools.product([Fraction(k, 5) for k in range(6)], repeat=t))  # 216 schedules
    grid = jnp.asarray([[float(x) for x in row] for row in exact_grid])
    p_jax, mu_jax = np.asarray(f_p(grid)), np.asarray(f_mu(grid))
    for lams, p_row, mu_row in zip(exact_grid, p_jax, mu_jax):
        np.testing.assert_allclose(p_row, cesaro_exact.exact_profile(lams, n).floats(), rtol=0, atol=1e-13)
        np.testing.assert_allclose(
            mu_row, [float(cesaro_exact.moment_fraction(k, lams)) for k in range(n)], rtol=1e-14, atol=0
        )


def test_layer_order_is_irrelevant():
    rng = random.Random(7)
    lambdas = [Fraction(rng.randint(0, 20), 20) for _ in range(9)]
    base = cesaro_exact.exact_profile(lambdas, 25).fractions()
    for _ in range(3):
        shuffled = lambdas[:]
        rng.shuffle(shuffled)
        assert cesaro_exact.exact_profile(shuffled, 25).fractions() == base
        assert fraction_rollout_last_row(shuffled, 25) == base  # independent route, same answer


def test_last_atom_is_c2c_product_and_first_mass_grows_to_collapse():
    n = 20
    lambdas = [Fraction(3, 10)] * 50
    p = cesaro_exact.exact_profile(lambdas, n).fractions()
    assert p[-1] == (1 - Fraction(3, 10) * Fraction(n - 1, n)) ** 50  # C2(c)
    # constant λ > 0: Σλ = ∞, p -> e_0 (C5(c)); p(0) increases with depth
    p0 = [cesaro_exact.exact_profile([Fraction(3, 10)] * t, n).fractions()[0] for t in (10, 100, 400)]
    assert p0[0] < p0[1] < p0[2] and 1 - p0[2] < Fraction(1, 10**6)


def test_summable_schedule_keeps_limit_moments_positive():
    # λ_t = 1/(t+1)^2, k >= 1: mu_k >= exp(-k Σλ) > exp(-k π²/6) at every depth (no collapse)
    import math

    for t in (10, 200):
        lambdas = [Fraction(1, (s + 1) ** 2) for s in range(t)]
        for k in (1, 5, 30):
            assert float(cesaro_exact.moment_fraction(k, lambdas)) >= math.exp(-k * math.pi**2 / 6)


def test_large_exact_profile_n1024_t64():
    lambdas = [Fraction(3, 10)] * 64
    prof = cesaro_exact.exact_profile(lambdas, 1024)  # about 2 s (timed separately, not asserted)
    assert sum(prof.numerators) == prof.denominator  # Σ p = 1 exactly
    assert prof.numerators[-1] * 10**64 * 1024**64 == prof.denominator * (1024 * 10 - 3 * 1023) ** 64
    p = np.array(prof.floats())
    assert np.all(p > 0)
    dense = np.asarray(numerics.profile_from_kernels(jnp.asarray(cesaro_kernels(1024, 64)), jnp.full(64, 0.3)))
    np.testing.assert_allclose(dense, p, rtol=1e-9, atol=0)


def test_float64_alternating_sum_is_unsafe_at_moderate_n():
    # the reason for exact evaluation: the float64 closed form loses everything by N = 60
    import math

    n, lambdas = 60, [Fraction(1, 2)] * 8
    mu = [float(cesaro_exact.moment_fraction(k, lambdas)) for k in range(n)]
    naive = [
        math.comb(n - 1, j) * sum((-1) ** i * math.comb(n - 1 - j, i) * mu[j + i] for i in range(n - j))
        for j in range(n)
    ]
    exact = cesaro_exact.exact_profile(lambdas, n).floats()
    assert max(abs(a - b) for a, b in zip(naive, exact)) > 1e-3


def test_certificates_hold():
    certs = {n: c for n, c in certificate_registry().certificates.items() if n.startswith("cesaro:")}
    assert set(certs) >= {
        "cesaro:hausdorff-of-cesaro",
        "cesaro:hausdorff-product-rule",
        "cesaro:residual-layer",
        "cesaro:rollout-closed-form",
    }
    for name, check in certs.items():
        c = check()
        assert c.name == name and c.holds, (name, c.detail)


def test_derivation_run_outputs():
    r = cesaro.compute(CesaroParams(tokens=64, schedule="constant:0.3", layers=32))
    assert r.name == "cesaro-rollout"
    d = json.loads(json.dumps(r.data))
    assert len(d["profile"]) == 64 and d["layers"] == 32
    exact = cesaro_exact.exact_profile([Fraction(3, 10)] * 32, 64).floats()
    assert d["profile"] == exact and d["p0"] == exact[0] and d["p_last"] == exact[-1]
    assert d["argmin"] == int(np.argmin(exact))
    assert "p(N-1)" in r.text and r"\mu_k" in r.latex


def test_irrational_schedule_is_rounded_with_a_bound():
    r = cesaro.compute(CesaroParams(tokens=16, schedule="power_decay:0.5,0.5", layers=5))
    assert r.data["rounded_layers"] == 3  # t+1 = 1, 4 give rational λ_t
    assert 0 < r.data["rounding_l1_bound"] < 1e-38
    lams = 0.5 / np.sqrt(np.arange(1, 6))
    dense = np.asarray(numerics.profile_from_kernels(jnp.asarray(cesaro_kernels(16, 5)), jnp.asarray(lams)))
    np.testing.assert_allclose(r.data["profile"], dense, rtol=1e-12)


@pytest.mark.parametrize(
    "args",
    [
        ["--tokens", "x"],
        ["--bogus"],
        ["--schedule", "constant:1.5"],
        ["--schedule", "warp:1"],
        ["--schedule", "custom:0.1,0.2", "--layers", "3"],
        ["--tokens", "0"],
        ["--schedule", "constant:nan"],
        ["--tokens", "4096"],
        ["--tokens", "2048", "--layers", "64"],
        ["--tokens", "8192", "--layers", "1"],
    ],
)
def test_bad_input_raises_one_line_derive_error(args):
    with pytest.raises(DeriveError) as info:
        cesaro.compute(cesaro.DERIVATION.parse(args))
    assert "\n" not in str(info.value)
