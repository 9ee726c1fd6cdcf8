"""The power engine's squarings keep every power row-stochastic (numerics/scaled.py ``normalise_rows``):
without it a squaring's rounding doubled with every further squaring, and deep profiles drifted by about
q ulps (found by an audit: [0.49999997, 0.49999997] at T = 10^9 where symmetry gives [1/2, 1/2], mass
off by 6e-8, nothing flagged). Checked against symmetry, a closed form and a dense product."""

import numpy as np
import pytest

from posbias.numerics import engines
from posbias.numerics.masks import Full
from posbias.numerics.periodic import PeriodicStack
from posbias.numerics.scaled import log_entries, normalise_rows, scaled
from posbias.numerics.stack import AlibiStack


@pytest.mark.parametrize("layers", [10**3, 10**6, 10**9, 2**40])
def test_a_symmetric_stack_stays_symmetric_at_any_depth(layers):
    """N = 2, full mask: R is symmetric and doubly stochastic, so p = (1/2, 1/2) at every depth."""
    stack = PeriodicStack.build(AlibiStack.build([1.0], [1.0], mask=Full()), layers)
    got = engines.get("power").profile(stack, 2)
    assert not got.unresolved().any()
    assert np.abs(got.probabilities - 0.5).max() <= 4e-16


@pytest.mark.parametrize("layers", [10**6, 10**9, 10**12])
def test_the_causal_two_token_closed_form(layers):
    """N = 2, causal, one head of slope m: p(1) = (1 - lambda (1 - a))^T with a = 1 / (1 + e^{-m})."""
    lam, m = 1e-9, 1.0
    got = engines.get("power").profile(PeriodicStack.build(AlibiStack.build([lam], [m]), layers), 2)
    log_p1 = layers * np.log1p(-lam * (1.0 - 1.0 / (1.0 + np.exp(-m))))
    assert got.log_probabilities[1] == pytest.approx(log_p1, rel=1e-12, abs=1e-12)
    assert abs(got.probabilities.sum() - 1.0) <= 1e-12


def _full_mask_layer(lam: float, slopes: list[float], n: int) -> np.ndarray:
    """R = (1 - lambda) I + lambda mean_h softmax_j(-m_h |i - j|), dense, full mask."""
    g = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    heads = [np.exp(-m * g) / np.exp(-m * g).sum(axis=1, keepdims=True) for m in slopes]
    return (1.0 - lam) * np.eye(n) + lam * np.mean(heads, axis=0)


def test_a_deep_profile_is_the_stationary_distribution_and_sums_to_one():
    """Full mask, 10^9 layers of period 2: p B = p for B = R(1) R(0) (THEORY.md: p = e^T B^q), and sum p = 1."""
    lams, slopes = [0.5, 0.3], [[1.0, 0.3], [0.2, 0.05]]
    stack = PeriodicStack.build(AlibiStack.build(lams, slopes, mask=Full()), 10**9)
    got = engines.get("power").profile(stack, 5).probabilities
    assert abs(got.sum() - 1.0) <= 1e-12
    block = _full_mask_layer(lams[1], slopes[1], 5) @ _full_mask_layer(lams[0], slopes[0], 5)
    assert np.abs(got @ block - got).max() <= 1e-15


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("rows", [1, 2, 4, 8])
def test_normalise_rows_against_a_dense_division(causal, rows):
    rng = np.random.default_rng(rows)
    n = 8
    dense = rng.random((n, n)) * np.exp(rng.normal(scale=20.0, size=(n, n)))
    if causal:
        dense = np.tril(dense)
    dense[3] = 0.0  # a row of zeros stays zeros
    m = normalise_rows(scaled(dense.copy(), 1e-300, causal=causal, rows=rows), causal=causal)
    sums = dense.sum(axis=1, keepdims=True)
    expected = np.where(sums > 0, dense / np.where(sums > 0, sums, 1.0), 0.0)
    got = np.exp(log_entries(m, causal=causal))
    # entries up to e^{+-80} here: a scale is a logarithm, held to eps of its size (80 eps relative)
    assert np.allclose(got, expected, rtol=1e-13, atol=0.0)
    assert np.allclose(got.sum(axis=1), np.where(sums[:, 0] > 0, 1.0, 0.0), rtol=1e-13, atol=0.0)
    # the form's invariant: mantissas in {0} u [2^-1022, 1], every non-zero block-column's maximum 1
    assert m.mant.max() <= 1.0 and np.all((m.mant == 0) | (m.mant >= np.finfo(float).tiny))
    for blk in range(0, n, rows):
        top = m.mant[blk : blk + rows].max(axis=0)
        assert np.all((top == 0) | (top == 1.0))
