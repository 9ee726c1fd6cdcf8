"""The diagonal of P without forming P (THEORY.md C5(a)): lower-triangular products multiply diagonals."""

from __future__ import annotations

import numpy as np


def log_diagonal(stack, num_tokens: int) -> np.ndarray:
    """(N,) log P_ii = sum_t log(1 - lambda_t (1 - A^(t)_ii)) (C5(a), lower-triangular kernels) for
    measured kernels, an ALiBi stack or a compact periodic stack (its distinct layers, counted).

    Summed in log space with ``log1p``, so P_ii far below the float64 range stays finite; a layer
    with lambda_t = 1 and A_ii = 0 gives -inf (P_ii = 0 exactly)."""
    from posbias import numerics as nx

    if isinstance(stack, nx.KernelStack):
        weights, lambdas = np.diagonal(stack.kernels, axis1=1, axis2=2), stack.lambdas
    elif hasattr(stack, "log_diagonal"):  # PeriodicStack: never T-long arrays
        weights = np.concatenate([nx.kernel_diagonals(s, num_tokens) for s in stack.distinct])
        return stack.log_diagonal(weights)
    else:
        weights, lambdas = nx.kernel_diagonals(stack, num_tokens), stack.lambdas
    with np.errstate(divide="ignore"):
        return np.sum(np.log1p(-np.asarray(lambdas)[:, None] * (1.0 - weights)), axis=0)
