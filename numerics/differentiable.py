"""A differentiable profile: p as a JAX function of the stack's parameters (for fitting).

    p = e_{N-1}^T R^(T-1) ... R^(0),   R^(t) = (1 - lambda_t) I + lambda_t A^(t)   (THEORY.md, Notation)

computed as T vector-matrix products v <- (1 - lambda_t) v + lambda_t v A^(t), starting
from v = e_{N-1} at the top layer, with every A^(t) built densely by masked softmax
(numerics/kernels.py ``layer_kernel``, the dense engine's construction). Cost
O(T H N^2) time and O(N^2) memory per evaluation; reverse-mode gradients (``jax.grad``)
rematerialise each layer (``jax.checkpoint``): they keep one (N,) vector per layer and, while
one layer's backward pass runs, its H softmax outputs, O(H N^2), never O(T H N^2) (BLOOM's
70 x 112 heads at N = 512: 0.6 GB peak instead of more than 16 GB;
``posbias.fit.profile.memory_bytes``). It is the route ``posbias fit`` differentiates: the native
kernel has no gradient, and the structured XLA recurrence would need the same care at |d| -> infinity
that the dense softmax already has. Suited to N up to a few thousand.

Call inside ``jax.enable_x64(True)`` for float64 (posbias's fitting does).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from posbias.numerics.kernels import layer_kernel


@partial(jax.jit, static_argnames=("num_tokens", "mask"))
def profile(lambdas, slopes, diagonal, weights, temperature, *, num_tokens: int, mask):
    """(N,) profile of the ALiBi + content stack with these (T,), (T, H), (T, H), (T, H), scalar
    parameters; differentiable in all of them (weights must be non-negative rows summing to 1)."""
    v = jnp.zeros(num_tokens, lambdas.dtype).at[num_tokens - 1].set(1.0)

    @jax.checkpoint  # the gradient keeps one (N,) vector per layer, recomputing A^(t) (no T H N^2 residuals)
    def layer(v, params):
        lam, m, d, w = params
        a = layer_kernel(m / temperature, d / temperature, w, num_tokens, mask)
        return (1.0 - lam) * v + lam * (v @ a), None

    v, _ = jax.lax.scan(layer, v, (lambdas, slopes, diagonal, weights), reverse=True)
    return v


def w1(p, q):
    """Wasserstein-1 on positions divided by N - 1: sum_k |F_p(k) - F_q(k)| / (N - 1) (F: cumulative sums)."""
    n = p.shape[0]
    return jnp.sum(jnp.abs(jnp.cumsum(p)[:-1] - jnp.cumsum(q)[:-1])) / max(n - 1, 1)
