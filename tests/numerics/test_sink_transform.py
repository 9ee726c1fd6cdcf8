"""The sink-to-diagonal transform S_K (posbias.numerics.sink_transform; issue 35, part 1).

Independent routes: exact rationals (Fractions) on small kernels, moved by hand; the softmax identity
against a dense construction (the softmax of the transformed logits, formed from the logits, against the
transform of the softmax); properties on generated causal and full kernels (row sums, causality,
non-negativity, idempotence, rows in K unchanged).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posbias.numerics.sink_transform import sink_logits, sink_to_diagonal


def _by_hand(rows, sinks):
    """S_K in exact rationals: for i not in K, each A_ik (k in K) added to A_ii and set to 0."""
    out = [list(r) for r in rows]
    for i, row in enumerate(out):
        if i in sinks:
            continue
        for k in sinks:
            row[i] += row[k]
            row[k] = Fraction(0)
    return out


@pytest.mark.parametrize("sinks", [(0,), (0, 1), (2,), (1, 3)])
def test_exact_rationals(sinks):
    rows = [
        [Fraction(1), 0, 0, 0],
        [Fraction(1, 3), Fraction(2, 3), 0, 0],
        [Fraction(1, 2), Fraction(1, 4), Fraction(1, 4), 0],
        [Fraction(2, 5), Fraction(1, 5), Fraction(1, 10), Fraction(3, 10)],
    ]
    want = _by_hand(rows, sinks)
    got = sink_to_diagonal(np.array(rows, dtype=float), sinks)
    np.testing.assert_allclose(got, np.array([[float(x) for x in r] for r in want]), rtol=0, atol=2e-16)
    assert [[Fraction(x).limit_denominator(1000) for x in r] for r in got.tolist()] == want


def _softmax(s):
    z = np.exp(s - s.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_a_sink_becomes_a_raised_diagonal_logit(seed, causal):
    rng = np.random.default_rng(seed)
    t, n = 3, int(rng.integers(2, 12))
    logits = rng.normal(scale=3.0, size=(t, n, n))
    logits[:, :, 0] += 4.0  # a strong sink on key 0
    if causal:
        logits = np.where(np.tril(np.ones((n, n), bool)), logits, -np.inf)
    sinks = (0,) if seed % 2 == 0 else tuple(sorted(rng.choice(n, size=min(2, n - 1), replace=False)))
    transformed = sink_logits(logits, sinks)
    np.testing.assert_allclose(_softmax(transformed), sink_to_diagonal(_softmax(logits), sinks), rtol=0, atol=1e-14)
    others = [i for i in range(n) if i not in sinks]
    assert np.all(transformed[:, others][:, :, list(sinks)] == -np.inf)


@st.composite
def kernels(draw):
    n = draw(st.integers(1, 9))
    causal = draw(st.booleans())
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    a = rng.random((2, n, n)) ** 3  # uneven rows
    if causal:
        a = np.tril(a)
    a[:, np.arange(n), np.arange(n)] += 1e-3
    sinks = draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n))
    return a / a.sum(axis=-1, keepdims=True), causal, tuple(sorted(sinks))


@given(kernels())
def test_row_stochastic_causal_idempotent_and_sink_rows_unchanged(case):
    a, causal, sinks = case
    s = sink_to_diagonal(a, sinks)
    assert s.min() >= 0
    assert np.abs(s.sum(axis=-1) - 1).max() < 1e-12
    if causal:
        assert np.all(np.triu(s, 1) == 0)
    np.testing.assert_array_equal(sink_to_diagonal(s, sinks), s)
    np.testing.assert_array_equal(s[:, list(sinks)], a[:, list(sinks)])
    others = [i for i in range(a.shape[-1]) if i not in sinks]
    assert np.all(s[:, others][:, :, list(sinks)] == 0)


@pytest.mark.parametrize(
    ("sinks", "message"),
    [((), "at least one"), ((0, 0), "repeated"), ((5,), "key 5 lies outside the window 0..3"), ((-1,), "key -1")],
)
def test_bad_sink_sets_are_refused_in_one_line(sinks, message):
    with pytest.raises(ValueError, match=message):
        sink_to_diagonal(np.eye(4), sinks)
