"""Stochastic orders on positions: the one CDF and the one dominance test (THEORY.md, Orders).

F_mu(k) = sum_{j <= k} mu(j);  mu ≼ nu ("nu sits later") iff F_mu >= F_nu
pointwise; K is stochastically monotone iff its rows are ≼-increasing.

Two arithmetics, each written once here:

* float64 with a tolerance (``cdf``, ``dominated``, ``rows_dominated``, ``is_monotone``):
  numpy arrays, rows broadcast; F_mu >= F_nu - tol, because a float CDF carries rounding
  of about N ulp(1) (a cumulative sum of N terms), so ``tol`` (default 1e-10) must exceed it.
  These are the numeric predicates behind the claim registry.
* the entries' own arithmetic, no tolerance (``exact_cdf``, ``exact_dominated``, ``cdf_gap``):
  Fractions, SymPy numbers or expressions, ints; exact comparison. On floats ``exact_cdf``
  is the plain sequential sum (the same additions as ``np.cumsum``), compared without slack.

None of this imports JAX or SymPy.

Examples
--------
>>> import numpy as np
>>> dominated(np.array([0.5, 0.5]), np.array([0.2, 0.8]))
True
>>> is_monotone(np.array([[1.0, 0.0], [0.5, 0.5]]))
True
>>> is_monotone(np.array([[0.0, 1.0], [1.0, 0.0]]))
False
>>> from fractions import Fraction
>>> exact_dominated([Fraction(1, 2), Fraction(1, 2)], [0, 1])
True
>>> cdf_gap([Fraction(1, 2), Fraction(1, 2)], [1, 0])
(0, Fraction(-1, 2))
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import accumulate
from typing import Any

import numpy as np

TOL = 1e-10


def cdf(mu: np.ndarray) -> np.ndarray:
    """F_mu(k) = sum_{j <= k} mu(j) along the last axis."""
    return np.cumsum(np.asarray(mu, dtype=np.float64), axis=-1)


def dominated(mu: np.ndarray, nu: np.ndarray, tol: float = TOL) -> bool:
    """mu ≼ nu: F_mu(k) >= F_nu(k) - tol for every k (rows broadcast)."""
    return bool(np.all(cdf(mu) >= cdf(nu) - tol))


def rows_dominated(k1: np.ndarray, k2: np.ndarray, tol: float = TOL) -> bool:
    """Row-wise K1(i,·) ≼ K2(i,·) for every i."""
    return dominated(k1, k2, tol)


def exact_cdf(mu: Iterable[Any], zero: Any = 0) -> list[Any]:
    """F_mu(k) = zero + sum_{j <= k} mu(j) for every k, in the entries' own arithmetic (exact for
    Fractions and SymPy); ``zero`` starts the sum, so its type decides the arithmetic of integer
    entries (``Fraction(0)``: exact quotients later)."""
    return list(accumulate(mu, initial=zero))[1:]


def exact_dominated(mu: Iterable[Any], nu: Iterable[Any]) -> bool:
    """mu ≼ nu exactly: F_mu(k) >= F_nu(k) for every k (no tolerance)."""
    return all(a >= b for a, b in zip(exact_cdf(mu), exact_cdf(nu)))


def exact_rows_monotone(rows: Sequence[Iterable[Any]]) -> bool:
    """Rows ≼-increasing exactly: every row dominated by the next (``exact_dominated``), in the entries'
    own arithmetic (Fractions, SymPy numbers)."""
    rows = [list(row) for row in rows]
    return all(exact_dominated(rows[a], rows[a + 1]) for a in range(len(rows) - 1))


def cdf_gap(lo: Sequence[Any], hi: Sequence[Any]) -> tuple[int, Any]:
    """(k, min_k F_lo(k) - F_hi(k)), the first k where the gap is smallest, in the entries' own
    arithmetic: lo ≼ hi iff the gap is >= 0."""
    gaps = [a - b for a, b in zip(exact_cdf(lo), exact_cdf(hi))]
    k = min(range(len(gaps)), key=lambda i: gaps[i])
    return k, gaps[k]


def is_monotone(kernel: np.ndarray, tol: float = TOL) -> bool:
    """Rows ≼-increasing: F_{K(i,·)}(k) >= F_{K(i+1,·)}(k) - tol for all i, k."""
    f = cdf(kernel)
    return bool(np.all(f[:-1] >= f[1:] - tol))


def is_causal_stochastic(kernel: np.ndarray, tol: float = TOL) -> bool:
    """Non-negative, rows summing to 1, zero above the diagonal."""
    k = np.asarray(kernel, dtype=np.float64)
    return bool(
        np.all(k >= -tol)
        and np.allclose(k.sum(axis=-1), 1.0, atol=tol * k.shape[-1])
        and np.all(np.abs(np.triu(k, 1)) <= tol)
    )


def residual(kernel: np.ndarray, lam: float) -> np.ndarray:
    """R_lambda = (1 - lambda) I + lambda K."""
    n = kernel.shape[-1]
    return (1.0 - lam) * np.eye(n) + lam * kernel


def rollout(kernels: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """P = R^(T-1) ... R^(0) in numpy (an independent route to numerics.rollout_matrix)."""
    n = kernels.shape[-1]
    p = np.eye(n)
    for a, lam in zip(kernels, lambdas):
        p = residual(a, lam) @ p
    return p
