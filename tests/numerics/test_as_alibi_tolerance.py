"""``Bias.alibi_slope_at`` / ``BiasStack.as_alibi(N)`` accept a bias as ALiBi only when the ALiBi
engines' -m g changes every attention weight by a few ulp, whatever constant offset b(0) the bias
carries (numerics/bias.py): softmax sees only b(g) - b(0), so the line is fitted to those differences.

Before, the tolerance was 4 ulp of max |b|: with b(0) = 2e14 a logit error of 0.18 was allowed and
``auto`` (structured engine) returned a different kernel. References: the dense engine (every N x N
logit matrix soft-maxed row by row) and the bias engine on the given values."""

from __future__ import annotations

import numpy as np
import pytest

from posbias.numerics import engines
from posbias.numerics.bias import Bias, Table
from posbias.numerics.bias_engine import BiasEngine
from posbias.numerics.bias_stack import BiasStack
from posbias.numerics.dense import Dense
from posbias.numerics.stack import AlibiStack


@pytest.mark.parametrize(
    "values, expected",
    [
        ((2e14, 2e14, 2e14 - 0.25), [0.28026507, 0.35986747, 0.35986747]),
        ((1e16, 1e16, 1e16 - 4), [0.00907471, 0.49546264, 0.49546264]),
    ],
)
def test_large_offset_non_linear_tables_are_not_alibi(values, expected):
    bias = Bias(Table(values))
    stack = BiasStack.build([1.0], bias)
    assert bias.alibi_slope_at(3) is None and stack.as_alibi(3) is None
    dense = Dense().profile(stack, 3).probabilities
    np.testing.assert_allclose(dense, expected, rtol=0, atol=1e-8)  # the audit's hand-checked kernel
    for engine in (engines.get("auto"), BiasEngine(native=False)):
        np.testing.assert_allclose(engine.profile(stack, 3).probabilities, dense, rtol=1e-12, atol=0)


@pytest.mark.parametrize("offset", [0.0, 3.0, 1e3, 2e14, -1e16])
def test_exactly_linear_tables_with_any_offset_are_alibi(offset):
    """b(g) = c - m g with every value exact in float64 is ALiBi of slope m at any offset c; the
    structured route then equals the dense ALiBi stack of slope m."""
    m = 0.25 if abs(offset) < 1e15 else 4.0  # 4 is a multiple of ulp(1e16) = 2
    n = 12
    bias = Bias(Table(tuple(offset - m * g for g in range(n))))
    assert bias.alibi_slope_at(n) == m
    lam = [0.6, 0.3, 0.9]
    stack = BiasStack.build(lam, bias, diagonal=0.5)
    routed = engines.profile(stack, n)
    assert routed.engine == "structured"
    reference = Dense().profile(AlibiStack.build(lam, m, diagonal=0.5), n).probabilities
    np.testing.assert_allclose(routed.probabilities, reference, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("seed", range(6))
def test_accepted_biases_change_every_weight_by_a_few_ulp(seed):
    """Lines b(g) = c - m g with huge offsets c, some perturbed by 1 .. 8 ulp of c at one distance:
    whenever one is accepted as ALiBi, ``auto`` agrees with the bias engine on the given values to a
    few ulp relatively (the perturbations of 0.03 .. 0.25 logits at c = 2e14 must be refused)."""
    rng = np.random.default_rng(seed)
    n = 16
    for c in (2e14, -3e13, 5e12):
        ulp = float(np.spacing(abs(c)))
        m = ulp * int(rng.integers(1, 64))
        values = c - m * np.arange(n)
        if seed % 2:
            values[int(rng.integers(1, n - 1))] += ulp * int(rng.integers(1, 9)) * rng.choice([-1, 1])
        bias = Bias(Table(tuple(values.tolist())))
        slope = bias.alibi_slope_at(n)
        assert (slope is None) == bool(seed % 2)
        # a diagonal exact beside c (a multiple of its ulp), so the given logits b + d are exact too
        stack = BiasStack.build([0.7, 0.4], bias, diagonal=0.25)
        exact = BiasEngine(native=False).profile(stack, n).probabilities
        np.testing.assert_allclose(engines.profile(stack, n).probabilities, exact, rtol=1e-12, atol=1e-300)
