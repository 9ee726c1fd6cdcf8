"""Stochastic orders on positions, for numpy arrays (THEORY.md, Orders).

F_mu(k) = sum_{j <= k} mu(j);  mu ≼ nu ("nu sits later") iff F_mu >= F_nu
pointwise; K is stochastically monotone iff its rows are ≼-increasing.
These are the numeric predicates behind the claim registry; they never
import JAX.

Examples
--------
>>> import numpy as np
>>> dominated(np.array([0.5, 0.5]), np.array([0.2, 0.8]))
True
>>> is_monotone(np.array([[1.0, 0.0], [0.5, 0.5]]))
True
>>> is_monotone(np.array([[0.0, 1.0], [1.0, 0.0]]))
False
"""

from __future__ import annotations

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
