"""C8 (the attention sink as diagonal content): the certificates can fail, the two implementations of S_K
(SymPy/Fractions in theorem, float64 in numerics) agree exactly, and the predicates decide known cases.
The registry-wide tests (tests/claims/test_theorem_claims.py, test_claims_statements.py, test_verify.py)
already run every C8 certificate, statement check, property and the necessity search."""

from fractions import Fraction

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from posbias.numerics.sink_transform import sink_to_diagonal
from posbias.theorem import sink_certificates as sc
from posbias.theorem import sink_predicates
from posbias.theorem.statement_instances import sink_moved


@st.composite
def exact_case(draw):
    n = draw(st.integers(1, 6))
    rows = []
    for i in range(n):
        w = [draw(st.integers(0, 5)) for _ in range(i + 1)]
        if sum(w) == 0:
            w[i] = 1
        rows.append([Fraction(x, sum(w)) for x in w] + [Fraction(0)] * (n - i - 1))
    sinks = sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n)))
    return rows, sinks


@settings(max_examples=60, deadline=None)
@given(exact_case())
def test_the_three_implementations_of_the_transform_agree_exactly(case):
    """theorem's SymPy ``moved``, the instances' Fraction ``sink_moved`` and numerics' float64 route."""
    rows, sinks = case
    symbolic = sc.moved(sp.Matrix(rows), sinks)
    fractions = sink_moved(rows, sinks)
    assert [
        [Fraction(int(sp.numer(x)), int(sp.denom(x))) for x in symbolic.row(i)] for i in range(len(rows))
    ] == fractions
    floats = sink_to_diagonal(np.array(rows, dtype=np.float64), sinks)
    assert np.allclose(floats, np.array(fractions, dtype=np.float64), atol=1e-15, rtol=0)


def test_the_path_inequality_is_specific_to_initial_segments():
    """The coefficient check of ``sink:initial-segment-paths`` is not vacuous: with K = {1} the path
    2 -> 1 -> 0 is lost under S_K, so P_S[2, 0] - P[2, 0] has a negative coefficient."""
    kernels = [sc._free_kernel(t, 3) for t in range(2)]
    lams, stays = sp.symbols("lambda0:2", nonnegative=True), sp.symbols("stay0:2", nonnegative=True)
    p = sc._product(kernels, lams, stays)
    ps = sc._product([sc.moved(a, [1]) for a in kernels], lams, stays)
    diff = sp.Poly(sp.expand(ps[2, 0] - p[2, 0]), *sorted(ps.free_symbols | p.free_symbols, key=str))
    assert min(diff.coeffs()) < 0


def _no_diagonal_credit(kernel, sinks):
    out = sp.Matrix(kernel)
    for i in range(out.rows):
        if i not in sinks:
            for k in sinks:
                out[i, k] = 0
    return out


def _to_last_column(kernel, sinks):
    out = sp.Matrix(kernel)
    n = out.rows
    for i in range(n):
        if i not in sinks and n - 1 not in sinks:
            out[i, n - 1] += sum((kernel[i, k] for k in sinks), sp.Integer(0))
            for k in sinks:
                out[i, k] = 0
    return out


@pytest.mark.parametrize(
    ("broken", "certificate"),
    [
        (_no_diagonal_credit, sc.row_sums_and_mask),  # the sink mass dropped: rows no longer sum to 1
        (_to_last_column, sc.row_sums_and_mask),  # moved past the diagonal: not causal
        (_to_last_column, sc.row_order),  # the row CDFs move by the wrong amount
    ],
)
def test_a_wrong_transform_fails_the_certificates(broken, certificate, monkeypatch):
    assert certificate().holds
    monkeypatch.setattr(sc, "moved", broken)
    assert not certificate().holds


def test_the_counterexample_is_the_documented_one():
    check = sc.counterexample()
    assert check.holds and "p = ['0', '1', '0'], p_S = ['1', '0', '0']" in check.detail


def test_the_predicates_refuse_what_the_statement_excludes():
    uniform = np.tril(np.ones((3, 3))) / np.arange(1, 4)[:, None]
    # C8(a): a correct transform holds; the raised-diagonal reference really is the softmax identity
    assert sink_predicates.c8a(
        np.exp(np.array([[0.0, 9, 9], [1, 2, 9], [3, -1, 0.5]])), [0], np.tril(np.ones((3, 3), bool))
    )
    # C8(c): the untransformed product keeps mass on the sink
    from posbias.theorem import orders

    lam = np.array([0.5, 0.5])
    stack = np.stack([uniform, uniform])
    assert not sink_predicates.c8c(orders.rollout(stack, lam), stack, lam, [0])
    assert sink_predicates.c8c(orders.rollout(sink_to_diagonal(stack, [0]), lam), stack, lam, [0])
    assert not sink_predicates.c8c(np.eye(3), stack, lam, [0, 1, 2])  # no position outside K


def test_under_uniform_bounds_the_transformed_stack_collapses_onto_the_first_token_outside_k():
    """C8(c) at depth: uniform causal kernels (every entry >= 1/N), K = {0}: constant lambda drives every row
    outside K onto token 1; a summable schedule leaves P_S[i, i] above C5(a)'s bound."""
    n = 5
    uniform = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    deep = np.stack([sink_to_diagonal(uniform, [0])] * 400)
    from posbias.theorem import orders

    collapsed = orders.rollout(deep, np.full(400, 0.5))
    assert np.all(collapsed[1:, 0] == 0) and np.all(collapsed[1:, 1] > 1 - 1e-9)
    summable = orders.rollout(deep, 0.5 * 0.5 ** np.arange(400))
    assert np.all(np.diagonal(summable)[1:] > np.prod(1 - 0.5 * 0.5 ** np.arange(400) * (1 - 1 / n)) - 1e-12)
    assert summable[1, 1] == 1 and np.all(summable[2:, 1] < 0.9)  # token 1 is j_0 itself
