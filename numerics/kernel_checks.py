"""Checks of user-supplied (measured) attention kernels A^(t): shape (T, N, N), finite, non-negative,
rows summing to 1 within a tolerance, and no weight on later tokens where the kernels are declared causal.

NumPy only (no JAX), so that ``numerics.stack`` can check a ``KernelStack`` without importing the
kernel-forming module (numerics/kernels.py), which imports the stacks.

Examples
--------
>>> import numpy as np
>>> validate_kernels(np.array([[[1.0, 0.0], [0.5, 0.5]]]), causal=True)
>>> validate_kernels(np.array([[[0.5, 0.5], [0.5, 0.5]]]), causal=True)
Traceback (most recent call last):
...
posbias.numerics.kernel_checks.KernelError: layer 0 row 0: reads later token 1 (0.5) but kernels were declared causal
"""

from __future__ import annotations

import numpy as np


class KernelError(ValueError):
    """A supplied kernel is not what the rollout needs; the message names layer and row."""


def validate_kernels(kernels: np.ndarray, *, causal: bool, tol: float = 1e-9) -> None:
    """Check (T, N, N) kernels: finite, non-negative, rows summing to 1, causal if declared."""
    if kernels.ndim != 3 or kernels.shape[1] != kernels.shape[2]:
        raise KernelError(f"kernels must have shape (T, N, N), got {kernels.shape}")
    if kernels.shape[0] < 1 or kernels.shape[1] < 1:
        raise KernelError(f"kernels must have T >= 1 and N >= 1, got shape {kernels.shape}")
    bad = ~np.isfinite(kernels)
    if bad.any():
        t, i, j = np.argwhere(bad)[0]
        raise KernelError(f"layer {t} row {i}: entry {j} is not finite")
    neg = kernels < -tol
    if neg.any():
        t, i, j = np.argwhere(neg)[0]
        raise KernelError(f"layer {t} row {i}: entry {j} = {kernels[t, i, j]:.3g} is negative")
    err = np.abs(kernels.sum(axis=2) - 1.0)
    if (err > tol).any():
        t, i = np.argwhere(err > tol)[0]
        raise KernelError(f"layer {t} row {i}: sums to {kernels[t, i].sum():.12g}, expected 1 within {tol:g}")
    if causal:
        upper = np.abs(np.triu(kernels, k=1)) > tol
        if upper.any():
            t, i, j = np.argwhere(upper)[0]
            raise KernelError(
                f"layer {t} row {i}: reads later token {j} ({kernels[t, i, j]:.3g}) but kernels were declared causal"
            )
