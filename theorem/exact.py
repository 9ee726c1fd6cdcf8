"""Exact rational helpers: monotonicity, residual layers and rollouts on SymPy matrices (THEORY.md, Orders).

Used by certificates that check a claim over a grid with no rounding at all; the CDF and the exact
order ≼ they rest on are posbias.theorem.orders's ``exact_cdf`` / ``exact_dominated``.

Examples
--------
>>> import sympy as sp

from posbias.theorem.orders import exact_rows_monotone
>>> exact_monotone(sp.Matrix([[1, 0], [sp.Rational(1, 3), sp.Rational(2, 3)]]))
True
"""

from __future__ import annotations

import sympy as sp

from posbias.theorem.orders import exact_rows_monotone


def exact_monotone(kernel: sp.Matrix) -> bool:
    """Rows ≼-increasing, exactly."""
    return exact_rows_monotone([kernel.row(a) for a in range(kernel.rows)])


def exact_residual(kernel: sp.Matrix, lam) -> sp.Matrix:
    """R_lambda = (1 - lambda) I + lambda K, exactly (THEORY.md, Notation)."""
    return (1 - lam) * sp.eye(kernel.rows) + lam * kernel


def exact_profile(kernels, lambdas) -> list:
    """Last row of R^(T-1) ... R^(0), exactly (kernels[t] is layer t)."""
    n = kernels[0].rows
    v = sp.zeros(1, n)
    v[n - 1] = 1
    for a, lam in reversed(list(zip(kernels, lambdas))):
        v = v * exact_residual(a, lam)
    return list(v)
