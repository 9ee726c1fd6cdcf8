"""A prefix mask with a past window (``Prefix(k, past_window=w)``, an API-only mask; issue 29 item 3).

The structured routes cannot take it: the structured and bias engines refuse it as ``Unsupported``
(one line, as every other mask an engine cannot take), not with a plain ValueError from inside the
kernel; ``auto`` falls back to the dense engine, whose profile is checked against a NumPy rollout
with the mask written out by hand here.
"""

from __future__ import annotations

import numpy as np
import pytest

import posbias.numerics as nx
from posbias.numerics.bias import Bias, KerpleLog
from posbias.numerics.bias_stack import BiasStack
from posbias.numerics.engine import Unsupported

N, K, W = 9, 3, 2
LAMBDAS = [0.5, 0.7]
SLOPES = [0.5, 0.1]


def reference() -> np.ndarray:
    i, j = np.meshgrid(np.arange(N), np.arange(N), indexing="ij")
    ok = ((j <= i) & (i - j <= W - 1)) | ((i < K) & (j < K))
    kernel = np.zeros((N, N))
    for m in SLOPES:
        logits = np.where(ok, -m * np.abs(i - j), -np.inf)
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        kernel += e / e.sum(axis=1, keepdims=True) / len(SLOPES)
    v = np.eye(N)[-1]
    for lam in reversed(LAMBDAS):
        v = (1 - lam) * v + lam * (v @ kernel)
    return v


def test_structured_routes_refuse_it_as_unsupported_and_auto_answers_densely():
    stack = nx.AlibiStack.build(lambdas=LAMBDAS, slopes=SLOPES, mask=nx.Prefix(K, W))
    with pytest.raises(Unsupported, match="a sliding window cannot be combined with a bidirectional prefix"):
        nx.profile(stack, N, engine="structured")
    for engine in ("auto", "dense"):
        got = nx.profile(stack, N, engine=engine)
        assert got.engine == "dense"
        np.testing.assert_allclose(got.probabilities, reference(), rtol=0, atol=1e-15)
        assert abs(got.probabilities.sum() - 1) < 1e-12


def test_the_bias_engine_refuses_it_as_unsupported():
    stack = BiasStack.build([0.5], [Bias(KerpleLog(1.0, 0.5))], mask=nx.Prefix(K, W))
    with pytest.raises(Unsupported, match="a sliding window cannot be combined with a bidirectional prefix"):
        nx.profile(stack, N, engine="bias")
