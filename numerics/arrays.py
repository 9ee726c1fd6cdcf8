"""Array aliases with their shape, for annotations: T layers, H heads, N tokens (THEORY.md, Notation).

``Annotated`` carries the shape as metadata a reader (and the docs) sees; type checkers treat each
alias as its array type. numpy arrays are float64 unless noted; no JAX is imported at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, TypeAlias

import numpy as np

if TYPE_CHECKING:
    import jax

Vector: TypeAlias = Annotated[np.ndarray, "(N,)"]  # a profile p or log p
PerLayer: TypeAlias = Annotated[np.ndarray, "(T,)"]  # lambdas, per-layer self-weights
PerHead: TypeAlias = Annotated[np.ndarray, "(T, H)"]  # slopes, diagonal excess, head weights
Kernels: TypeAlias = Annotated[np.ndarray, "(T, N, N)"]  # row-stochastic A^(t), head-averaged
JaxKernels: TypeAlias = Annotated["jax.Array", "(T, N, N)"]  # the same, as numerics/kernels.py builds them
