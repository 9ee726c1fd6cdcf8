"""Derivations: each query runs fast, its lambdified (JAX) form matches the numerics engine,
and bad input gives one error line and exit status 2."""

import json

import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp

import posbias.numerics as nx
from posbias.cli.derive import derive_command
from posbias.theorem import alibi_row, diagonal_product, drift, monotone, softmax_shift
from posbias.theorem.queries import derivations

MINE = {
    "softmax-shift": [{}],
    "alibi-row": [
        {},
        {"row": 5},
        {"row": 4, "slope": 0.7, "diag": -1.0},
        {"slope": 0.0},
        {"row": 3, "slope": 0.0, "diag": 0.0},
    ],
    "monotone": [{}, {"max_row": 10}],
    "drift": [{}, {"row": 6, "slope": 0.3, "diag": 1.5, "lam": 0.4}, {"tokens": 8}],
    "diagonal-product": [{}, {"layers": 5, "tokens": 5}],
}
ALL_NAMES = (
    "softmax-shift",
    "alibi-row",
    "monotone",
    "drift",
    "diagonal-product",
    "cesaro-rollout",
    "dichotomy",
    "continuum-profile",
    "row",
    "order",
)


def test_registry_has_every_derivation():
    assert set(derivations()) == set(ALL_NAMES)


@pytest.mark.parametrize("name,kwargs", [(n, a) for n, cases in MINE.items() for a in cases])
def test_query_answers(name, kwargs):
    """Each query gives a complete answer (speed: benchmarks, never timed in tests)."""
    der = derivations()[name]
    result = der.compute(der.params(**kwargs))
    assert result.name == name and result.text and result.latex
    json.dumps(result.data)  # JSON-serialisable
    assert "NO" not in result.text and "FAIL" not in result.text


OTHERS = {
    "cesaro-rollout": ["--tokens", "64", "--layers", "8", "--schedule", "constant:0.5"],
    "dichotomy": ["power_decay:0.5,1.5"],
    "continuum-profile": [],
    "row": ["--bias", "-m*g"],
    "order": ["--bias", "-2*m*g", "--than", "-m*g"],
}


@pytest.mark.parametrize("name", ALL_NAMES)
def test_every_registered_query_answers_through_the_cli(name, capsys):
    args = OTHERS.get(name, [])
    assert derive_command([name, *args, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == name


def _kernels(m, d, n):
    stack = nx.AlibiStack.build([1.0], [m], diagonal=d)
    return np.asarray(nx.alibi_kernels(stack, n))[0], stack


GRID = [(m, d) for m in (0.0, 0.15, 0.7, 2.0) for d in (-1.5, 0.0, 1.0)]
MS = np.array([m for m, _ in GRID])
DS = np.array([d for _, d in GRID])


def _grid_kernels(n):
    """(len(GRID), n, n): one single-head layer per grid point, by the engine's masked softmax."""
    stack = nx.AlibiStack.build(np.ones(len(GRID)), MS[:, None], diagonal=DS[:, None])
    return np.asarray(nx.alibi_kernels(stack, n)), stack


def _eval(values, shape):
    """lambdify output (list of JAX arrays / scalars) -> numpy array of the grid's shape."""
    return np.stack([np.broadcast_to(np.asarray(v, dtype=np.float64), shape) for v in values], axis=-1)


def test_softmax_shift_lambdified_matches_engine():
    """Row i of the engine's kernel (no background) equals the shifted softmax with any b (C4(a))."""
    n, row = 7, 4
    xs, shifted, _ = softmax_shift.row_expressions(n, mask=[1] * (row + 1) + [0] * (n - row - 1))
    fn = sp.lambdify([*xs, softmax_shift.b], shifted, modules="jax")
    kernels, _ = _grid_kernels(n)
    logits = [jnp.asarray(np.where(j == row, DS, -MS * (row - j))) for j in range(n)]
    for b in (-30.0, 0.0, 12.5):
        got = _eval(fn(*logits, jnp.float64(b)), MS.shape)
        np.testing.assert_allclose(got, kernels[:, row], atol=1e-13)


def test_alibi_row_lambdified_matches_engine():
    n = 9
    m, d = alibi_row.m, alibi_row.d
    kernels, stack = _grid_kernels(n)
    diags = nx.kernel_diagonals(stack, n)
    steep = MS > 0  # the closed forms divide by 1 - r
    for row in (0, 1, 4, 8):
        row_fn = sp.lambdify((m, d), alibi_row.row_vector(row), modules="jax")
        np.testing.assert_allclose(
            _eval(row_fn(jnp.asarray(MS), jnp.asarray(DS)), MS.shape), kernels[:, row, : row + 1], atol=1e-13
        )
        alpha_fn = sp.lambdify((m, d), alibi_row.self_weight(row), modules="jax")
        np.testing.assert_allclose(
            np.broadcast_to(np.asarray(alpha_fn(jnp.asarray(MS), jnp.asarray(DS))), MS.shape), diags[:, row], atol=1e-13
        )
        e_fn = sp.lambdify((m, d), alibi_row.expected_position(row), modules="jax")
        got_e = np.broadcast_to(np.asarray(e_fn(jnp.asarray(MS[steep]), jnp.asarray(DS[steep]))), MS[steep].shape)
        np.testing.assert_allclose(got_e, kernels[steep, row] @ np.arange(n), atol=1e-12)
        if row > 0:
            flat_d = steep & (DS == 0.0)
            f_fn = sp.lambdify(m, alibi_row.cdf_closed(row), modules="jax")
            got_f = _eval(f_fn(jnp.asarray(MS[flat_d])), MS[flat_d].shape)
            np.testing.assert_allclose(got_f, np.cumsum(kernels[flat_d, row], axis=-1)[:, : row + 1], atol=1e-12)


def test_alibi_row_exact_kernel_matches_engine():
    """Rational r = 1/2 (m = log 2), e^d = 3 (d = log 3): exact kernel vs the engine."""
    exact = alibi_row.exact_kernel(6, sp.Rational(1, 2), 3)
    kernel, _ = _kernels(np.log(2.0), np.log(3.0), 6)
    np.testing.assert_allclose(np.array(exact, dtype=float), kernel, atol=1e-14)


def test_monotone_gap_lambdified_matches_engine_cdfs():
    """1 - F_{i+1}(k)/F_i(k) from the engine's kernels equals the symbolic gap (C3(a))."""
    gap = (monotone.D * (1 - monotone.r) + monotone.r) / (monotone.D + monotone.G(monotone.i + 1))
    n = 10
    kernels, _ = _grid_kernels(n)
    steep = MS > 0
    f = np.cumsum(kernels[steep], axis=-1)
    for row in (2, 5, 8):
        fn = sp.lambdify((monotone.r, monotone.D), gap.subs(monotone.i, row), modules="jax")
        want = np.asarray(fn(jnp.asarray(np.exp(-MS[steep])), jnp.asarray(np.exp(DS[steep]))))
        for k in range(row):
            np.testing.assert_allclose(1 - f[:, row + 1, k] / f[:, row, k], want, atol=1e-12)
        assert np.all(want >= 0)


def test_drift_lambdified_matches_engine():
    n = 9
    kernels, _ = _grid_kernels(n)
    for row in (1, 4, 8):
        expr = drift.DRIFT.subs(drift.i, row).doit()
        fn = sp.lambdify((drift.lam, drift.r, drift.D), expr, modules="jax")
        for lam in (0.2, 1.0):
            moved = ((1 - lam) * np.eye(n) + lam * kernels)[:, row] @ np.arange(n) - row
            got = np.asarray(fn(jnp.float64(lam), jnp.asarray(np.exp(-MS)), jnp.asarray(np.exp(DS))))
            np.testing.assert_allclose(got, moved, atol=1e-12)
            assert np.all(got < 0)


def test_causal_drift_identity_on_engine_kernels():
    """F_{mu K}(k) - F_mu(k) = sum_{i>k} mu(i) F_{K(i,.)}(k) (C1) on dense ALiBi kernels."""
    rng = np.random.default_rng(0)
    kernel, _ = _kernels(0.4, 0.8, 8)
    for _ in range(5):
        mu = rng.dirichlet(np.ones(8))
        left = np.cumsum(mu @ kernel) - np.cumsum(mu)
        right = [sum(mu[i] * np.cumsum(kernel[i])[k] for i in range(k + 1, 8)) for k in range(8)]
        np.testing.assert_allclose(left, right, atol=1e-14)


def test_diagonal_product_lambdified_matches_engine():
    layers, n = 4, 5
    _, lams, kernels = diagonal_product.product(layers, n)
    stack = nx.AlibiStack.build(
        [0.3, 0.9, 0.5, 1.0],
        [[0.2, 1.1], [0.0, 0.5], [2.0, 0.1], [0.7, 0.7]],
        diagonal=[[0.5, -1.0], [1.0, 0.0], [-0.5, 2.0], [0.0, 0.3]],
    )
    dense = np.asarray(nx.alibi_kernels(stack, n))
    pmat = np.asarray(nx.rollout_matrix(jnp.asarray(dense), jnp.asarray(stack.lambdas)))
    closed = nx.diagonal_product(nx.kernel_diagonals(stack, n), stack.lambdas)
    for row in range(n):
        expr = diagonal_product.diagonal_formula(lams, kernels, row)
        syms = list(lams) + [a[row, row] for a in kernels]
        fn = sp.lambdify(syms, expr, modules="jax")
        got = float(fn(*stack.lambdas, *dense[:, row, row]))
        assert got == pytest.approx(pmat[row, row], abs=1e-13)
        assert got == pytest.approx(closed[row], abs=1e-13)


@pytest.mark.parametrize(
    "argv",
    [
        ["no-such-derivation"],
        ["alibi-row", "--row", "x"],
        ["alibi-row", "--row", "-1"],
        ["alibi-row", "--slope", "-0.5"],
        ["alibi-row", "--bogus", "1"],
        ["alibi-row", "--row"],
        ["alibi-row", "stray"],
        ["drift", "--tokens", "9"],
        ["drift", "--lam", "nan"],
        ["diagonal-product", "--layers", "6"],
        ["monotone", "--format", "xml"],
        ["softmax-shift", "--tokens", "3"],
    ],
)
def test_bad_input_gives_one_line_and_status_2(argv, capsys):
    assert derive_command(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("posbias derive: error: ")
    assert "Traceback" not in err


def test_list_and_formats(capsys):
    assert derive_command(["--list"]) == 0
    out = capsys.readouterr().out
    for name in MINE:
        assert name in out
    assert derive_command(["alibi-row", "--row", "2", "--slope", "0", "--diag", "0", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["name"] == "alibi-row"
    np.testing.assert_allclose(data["data"]["row"], [1 / 3, 1 / 3, 1 / 3], atol=1e-15)
    assert derive_command(["diagonal-product", "--format=latex"]) == 0
    assert r"\prod" in capsys.readouterr().out
