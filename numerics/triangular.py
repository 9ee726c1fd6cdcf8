"""Products of lower-triangular (causal) matrices by 2 x 2 block recursion.

Under a causal mask every kernel A^(t), every layer matrix R^(t) = (1 - lambda) I + lambda A^(t)
and every product of them is lower triangular (THEORY.md, Notation: A[i, j] = 0 for j > i).
Splitting at h = n // 2,

    [[A, 0], [C, D]] [[E, 0], [F, G]] = [[A E, 0], [C E + D F, D G]],

and recursing on every triangular factor (C E and D F have one each) takes N^3 / 6
multiply-adds instead of N^3 for two triangles (N^3 / 2 for one triangle times a full
matrix). Below ``TRIANGULAR_BASE`` the blocks are plain BLAS products (their zero halves
multiplied too). The entries are those of x @ y up to the order of summation (float64
rounding, relative for non-negative factors); the zero upper triangle of the result is
exact.

Examples
--------
>>> import numpy as np
>>> x = np.tril(np.arange(1.0, 17.0).reshape(4, 4))
>>> bool(np.array_equal(tri_matmul(x, x, base=1), x @ x))
True
"""

from __future__ import annotations

import numpy as np

TRIANGULAR_BASE = 256  # below this size triangular products are plain matmuls


def tri_matmul(x: np.ndarray, y: np.ndarray, base: int = TRIANGULAR_BASE) -> np.ndarray:
    """x @ y for square lower-triangular x, y (N^3 / 6 multiply-adds)."""
    return lower_matmul(x, y, True, True, base)


def lower_matmul(x: np.ndarray, y: np.ndarray, x_tri: bool, y_tri: bool, base: int = TRIANGULAR_BASE) -> np.ndarray:
    """x @ y where x (m x n) and / or y (n x k) are square lower triangular as flagged."""
    n = x.shape[1]
    if n <= base or not (x_tri or y_tri):
        return x @ y
    h = n // 2
    if x_tri and y_tri:
        out = np.zeros((n, n))
        out[:h, :h] = lower_matmul(x[:h, :h], y[:h, :h], True, True, base)
        out[h:, h:] = lower_matmul(x[h:, h:], y[h:, h:], True, True, base)
        out[h:, :h] = lower_matmul(x[h:, :h], y[:h, :h], False, True, base)
        out[h:, :h] += lower_matmul(x[h:, h:], y[h:, :h], True, False, base)
        return out
    if y_tri:  # [F1 F2] [[L11, 0], [L21, L22]] = [F1 L11 + F2 L21, F2 L22]
        out = np.empty((x.shape[0], n))
        out[:, :h] = lower_matmul(x[:, :h], y[:h, :h], False, True, base)
        out[:, :h] += x[:, h:] @ y[h:, :h]
        out[:, h:] = lower_matmul(x[:, h:], y[h:, h:], False, True, base)
        return out
    out = np.empty((n, y.shape[1]))  # [[L11, 0], [L21, L22]] [F1; F2] = [L11 F1; L21 F1 + L22 F2]
    out[:h] = lower_matmul(x[:h, :h], y[:h], True, False, base)
    out[h:] = lower_matmul(x[h:, h:], y[h:], True, False, base)
    out[h:] += x[h:, :h] @ y[:h]
    return out
