"""Exact rational rollouts shared by the periodic-stack and power-engine tests."""

from __future__ import annotations

from fractions import Fraction


def exact_kernel(n: int, r: Fraction, excess: Fraction) -> list[list[Fraction]]:
    """Causal ALiBi + content kernel of one head with r = e^{-m}, e^d = excess, as Fractions:
    row i is proportional to r^(i - j) for j < i and to e^d on the diagonal."""
    rows = []
    for i in range(n):
        w = [r ** (i - j) if j < i else (excess if j == i else Fraction(0)) for j in range(n)]
        total = sum(w)
        rows.append([x / total for x in w])
    return rows


def periodic_profile(lambdas, kernels, layers: int) -> list[Fraction]:
    """e_{N-1}^T R^(T-1) ... R^(0) with R^(t) = (1 - lambda_t) I + lambda_t A^(t), the block of
    (lambdas, kernels) repeated up to ``layers`` (the top layer acts first), in exact arithmetic."""
    n = len(kernels[0])
    rs = [
        [[(1 - lam) * (i == j) + lam * k[i][j] for j in range(n)] for i in range(n)] for lam, k in zip(lambdas, kernels)
    ]
    row = [Fraction(int(j == n - 1)) for j in range(n)]
    for layer in reversed(range(layers)):
        r = rs[layer % len(rs)]
        row = [sum(row[i] * r[i][j] for i in range(n)) for j in range(n)]
    return row


def log_matmul(a, b):
    """log(exp(a) @ exp(b)) by log-sum-exp, rows in chunks of 16 (no BLAS, no scales: an independent route)."""
    import numpy as np

    out = np.empty((a.shape[0], b.shape[1]))
    with np.errstate(divide="ignore", invalid="ignore"):
        for r in range(0, a.shape[0], 16):
            x = a[r : r + 16, :, None] + b[None]
            top = x.max(axis=1)
            safe = np.where(np.isfinite(top), top, 0.0)
            out[r : r + 16] = safe + np.log(np.exp(x - safe[:, None, :]).sum(axis=1))
    return out


def log_power_row(log_matrix, q: int):
    """log of e_{N-1}^T M^q for M = exp(log_matrix), by squaring in log space (no underflow)."""
    import numpy as np

    v = np.full((1, log_matrix.shape[0]), -np.inf)
    v[0, -1] = 0.0
    while q:
        if q & 1:
            v = log_matmul(v, log_matrix)
        q >>= 1
        if q:
            log_matrix = log_matmul(log_matrix, log_matrix)
    return v[0]
