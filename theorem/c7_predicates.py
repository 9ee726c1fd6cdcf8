"""Numeric predicates of the C7 claims (THEORY.md C7), on NumPy arrays, for ``theorem.claims``.

* ``bias_kernel(weights, n)``: the causal N-token kernel A(i, j) = w(i-j)/W(i) (j <= i) formed densely
  from the weights w(0..N-1) (w(0) carries e^d; entries beyond the given weights are 0);
* ``log_concave(weights)``: W(n)^2 >= W(n-1) W(n+1) for 1 <= n <= N-2 (relative tolerance ``tol``), and
  ``exact_log_concave(weights)`` the same without tolerance in the weights' own arithmetic (Fractions);
* ``c7a(K, weights)``: the row CDFs of K are 1 - W(i-k-1)/W(i) (k < i) and 1 (k >= i);
* ``c7b(K, weights)``: K stochastically monotone <=> W log-concave;
* ``c7c(K, K_later)``: every row of K_later sits later (rows dominated).

Float64: W is a cumulative sum of positive weights, so relative errors stay near N eps; the predicates
compare with ``tol`` (absolute on CDFs, relative on the log-concavity gaps).

>>> import numpy as np
>>> k = bias_kernel([1.0, 0.1, 0.1, 5.0], 4)
>>> bool(log_concave([1.0, 0.1, 0.1, 5.0])), c7b(k, [1.0, 0.1, 0.1, 5.0])
(False, True)
"""

from __future__ import annotations

import numpy as np

from posbias.theorem import orders

TOL = 1e-10


def bias_kernel(weights, n: int) -> np.ndarray:
    """A(i, j) = w(i-j) / W(i) for j <= i, 0 above the diagonal (float64)."""
    w = np.zeros(n)
    given = np.asarray(weights, dtype=np.float64)[:n]
    w[: len(given)] = given
    dist = np.arange(n)[:, None] - np.arange(n)[None, :]
    out = np.where(dist >= 0, w[np.clip(dist, 0, n - 1)], 0.0)
    return out / out.sum(axis=1, keepdims=True)


def log_concave(weights, tol: float = TOL) -> bool:
    """W(n)^2 >= W(n-1) W(n+1) - tol W(n)^2 for every 1 <= n <= N-2."""
    W = orders.cdf(weights)
    if len(W) < 3:
        return True
    gaps = W[1:-1] ** 2 - W[:-2] * W[2:]
    return bool(np.all(gaps >= -tol * W[1:-1] ** 2))


def exact_log_concave(weights) -> bool:
    """W(n)^2 >= W(n-1) W(n+1) for every 1 <= n <= N-2, exactly (W = ``orders.exact_cdf`` of the weights)."""
    W = orders.exact_cdf(weights)
    return all(W[n] * W[n] >= W[n - 1] * W[n + 1] for n in range(1, len(W) - 1))


def c7a(kernel, weights, tol: float = TOL) -> bool:
    """Row CDFs of ``kernel`` equal 1 - W(i-k-1)/W(i) for k < i and 1 for k >= i."""
    k = np.asarray(kernel, dtype=np.float64)
    n = k.shape[0]
    W = orders.cdf(np.asarray(weights, dtype=np.float64)[:n])
    F = orders.cdf(k)
    want = np.ones((n, n))
    for i in range(n):
        for kk in range(i):
            want[i, kk] = 1 - W[i - kk - 1] / W[i]
    return bool(np.allclose(F, want, atol=tol, rtol=0))


def c7b(kernel, weights, tol: float = TOL) -> bool:
    """``kernel`` is stochastically monotone iff W (of ``weights``) is log-concave."""
    return orders.is_monotone(np.asarray(kernel, dtype=np.float64), tol) == log_concave(weights, tol)


def c7c(kernel, kernel_later, tol: float = TOL) -> bool:
    """Every row of ``kernel_later`` sits later: kernel(i, .) ≼ kernel_later(i, .)."""
    return orders.rows_dominated(np.asarray(kernel, np.float64), np.asarray(kernel_later, np.float64), tol)
