"""The measured-kernels engine: profiles of given (T, N, N) kernels (e.g. measured attention).

p = e_{N-1}^T R^(T-1) ... R^(0) by vector-matrix products from the top layer down,
O(T N^2) time, no assumption on the kernels beyond what ``KernelStack.build``
checked (row-stochastic, causal if declared).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from posbias.numerics.engine import Engine, Profile, float64, linear_profile
from posbias.numerics.stack import KernelStack, register_pytrees

if TYPE_CHECKING:
    from posbias.numerics.boundary import Stack

register_pytrees()


@dataclass(frozen=True)
class Measured(Engine):
    name = "measured"

    def supports(self, stack: Stack, num_tokens: int) -> str | None:
        if not isinstance(stack, KernelStack):
            return f"expected measured kernels (a KernelStack), got {type(stack).__name__}"
        if num_tokens != stack.num_tokens:
            return f"the kernels have N = {stack.num_tokens} tokens, asked for {num_tokens}"
        return None

    def memory_bytes(self, num_layers: int, num_heads: int, num_tokens: int) -> int:
        return 8 * (num_layers + 2) * num_tokens**2  # a device copy of the kernels

    def compute(self, stack: KernelStack, num_tokens: int, *, dtype, progress=None) -> Profile:
        p = profile_from_kernels(jnp.asarray(stack.kernels, dtype), jnp.asarray(stack.lambdas, dtype))
        diag = np.diagonal(stack.kernels, axis1=1, axis2=2)
        return linear_profile(
            np.asarray(p, np.float64), diag.min(axis=1), diag[:, -1], engine=self.name, path="measured"
        )


@float64
def profile_from_kernels(kernels, lambdas):
    """e_{N-1}^T R^(T-1) ... R^(0) for dense (T, N, N) kernels, O(T N^2)."""
    with jax.default_matmul_precision("highest"):
        return _profile_from_kernels(jnp.asarray(kernels), jnp.asarray(lambdas))


@jax.jit
def _profile_from_kernels(kernels, lambdas):
    n = kernels.shape[-1]
    v = jnp.zeros(n, kernels.dtype).at[n - 1].set(1.0)

    def body(v, layer):
        a, lam = layer
        return (1.0 - lam) * v + lam * (v @ a), None

    v, _ = jax.lax.scan(body, v, (kernels, lambdas), reverse=True)
    return v
