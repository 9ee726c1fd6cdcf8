"""The dense engine: the full rollout P = R^(T-1) ... R^(0) by N x N products, for moderate N.

It builds every A^(t) by masked softmax (numerics/kernels.py) inside a scan:
O(N^2) memory, O(T H N^2 + T N^3) time. It shares no closed form with the
structured or FFT engines, so it is the reference they are tested against, and
the route to the whole matrix (``rollout``), e.g. min_i P_ii or P's first column.

Examples
--------
>>> from posbias.numerics.stack import AlibiStack
>>> p, diag = rollout(AlibiStack.build([1.0], [0.0]), 2)
>>> p.tolist()
[[1.0, 0.0], [0.5, 0.5]]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from posbias.numerics.bias_stack import BiasStack
from posbias.numerics.engine import Engine, Profile, float64, linear_profile
from posbias.numerics.kernels import bias_layer_kernel, layer_kernel
from posbias.numerics.stack import AlibiStack, register_pytrees

if TYPE_CHECKING:
    from posbias.numerics.boundary import Stack

register_pytrees()

MAX_TOKENS = 8192  # 8192^2 float64 = 512 MiB per matrix


@dataclass(frozen=True)
class Dense(Engine):
    """Any mask, N <= ``max_tokens``; ALiBi stacks and relative-bias stacks (``BiasStack``, C7)."""

    name = "dense"
    max_tokens: int = MAX_TOKENS

    def supports(self, stack: Stack, num_tokens: int) -> str | None:
        if not isinstance(stack, (AlibiStack, BiasStack)):
            return f"expected an ALiBi + content or relative-bias stack, got {type(stack).__name__}"
        if num_tokens > self.max_tokens:
            return (
                f"N = {num_tokens} is too large for dense N x N products (at most {self.max_tokens}); "
                "the structured engine computes the profile"
            )
        return None

    def memory_bytes(self, num_layers: int, num_heads: int, num_tokens: int) -> int:
        return 8 * 6 * num_tokens**2 + 8 * 8 * num_layers * num_heads

    def compute(self, stack: AlibiStack | BiasStack, num_tokens: int, *, dtype, progress=None) -> Profile:
        if isinstance(stack, BiasStack):
            p, diag = bias_rollout(stack, num_tokens, dtype)
        else:
            p, diag = rollout(stack, num_tokens, dtype)
        p, diag = np.asarray(p, np.float64), np.asarray(diag, np.float64)
        return linear_profile(p[-1], diag.min(axis=1), diag[:, -1], engine=self.name, path="dense")


@float64
def rollout(stack: AlibiStack, num_tokens: int, dtype=jnp.float64):
    """(P (N, N), self-weights A^(t)_ii (T, N)) for an ALiBi stack by dense products."""
    slopes, diagonal = stack.scaled()
    params = [jnp.asarray(a, dtype) for a in (stack.lambdas, slopes, diagonal, stack.head_weights)]
    with jax.default_matmul_precision("highest"):
        return _rollout(*params, num_tokens=num_tokens, mask=stack.mask)


@partial(jax.jit, static_argnames=("num_tokens", "mask"))
def _rollout(lambdas, slopes, diagonal, weights, *, num_tokens, mask):
    def body(p, layer):
        lam, m, d, w = layer
        a = layer_kernel(m, d, w, num_tokens, mask)
        return (1.0 - lam) * p + lam * (a @ p), jnp.diagonal(a)

    eye = jnp.eye(num_tokens, dtype=lambdas.dtype)
    return jax.lax.scan(body, eye, (lambdas, slopes, diagonal, weights))


@float64
def bias_rollout(stack: BiasStack, num_tokens: int, dtype=jnp.float64):
    """(P (N, N), self-weights A^(t)_ii (T, N)) for a relative-bias stack by dense products: every
    A^(t) soft-maxed from its N x N logits (``kernels.bias_layer_kernel``)."""
    past, future = stack.tables(num_tokens)
    params = [
        jnp.asarray(a, dtype)
        for a in (
            stack.lambdas,
            stack.diagonal / stack.temperature,
            stack.sink / stack.temperature,
            stack.head_weights,
            past,
            future,
        )
    ]
    with jax.default_matmul_precision("highest"):
        return _bias_rollout(jnp.asarray(stack.bias_index), *params, num_tokens=num_tokens, mask=stack.mask)


@partial(jax.jit, static_argnames=("num_tokens", "mask"))
def _bias_rollout(index, lambdas, diagonal, sink, weights, past, future, *, num_tokens, mask):
    def body(p, layer):
        lam, u, d, s, w = layer
        a = bias_layer_kernel(past[u], future[u], d, s, w, num_tokens, mask)
        return (1.0 - lam) * p + lam * (a @ p), jnp.diagonal(a)

    eye = jnp.eye(num_tokens, dtype=lambdas.dtype)
    return jax.lax.scan(body, eye, (lambdas, index, diagonal, sink, weights))


@float64
def rollout_matrix(kernels, lambdas):
    """P = R^(T-1) ... R^(0) with R^(t) = (1 - lambda_t) I + lambda_t A^(t) for given (T, N, N) kernels, O(T N^3)."""
    with jax.default_matmul_precision("highest"):
        return _rollout_matrix(jnp.asarray(kernels), jnp.asarray(lambdas))


@jax.jit
def _rollout_matrix(kernels, lambdas):
    n = kernels.shape[-1]

    def body(p, layer):
        a, lam = layer
        return (1.0 - lam) * p + lam * (a @ p), None

    p, _ = jax.lax.scan(body, jnp.eye(n, dtype=kernels.dtype), (kernels, lambdas))
    return p
