"""Dense attention kernels A^(t) (N x N): the direct route, for moderate N.

``alibi_kernels`` builds every head's masked row softmax of its logits
    (d [i = j] - m |i - j|) / tau
and averages heads with their weights, exactly as THEORY.md defines A^(t);
``bias_kernels`` does the same for a relative-bias stack (C7), logits
    (b(i - j) + d [i = j] + s [j = 0]) / tau.
``layer_kernels`` is the one kernel-forming function per stack type that the
dense-matrix engines (numerics/power.py) call. These share no closed form with the
structured and bias engines, so they check each other. User-supplied (measured) kernels
are checked by ``numerics.kernel_checks``.

Floating point: each row is soft-maxed after subtracting its largest logit, so every
entry is exact to float64 rounding except those below 2^-1022 of the row's largest
weight, which are lost (absolute error below 2^-1022 per entry).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from posbias.numerics.arrays import JaxKernels
from posbias.numerics.bias_stack import BiasStack
from posbias.numerics.engine import float64
from posbias.numerics.masks import allowed
from posbias.numerics.stack import AlibiStack, register_pytrees

register_pytrees()


def layer_kernel(slopes_t, diagonal_t, weights_t, num_tokens: int, mask) -> jax.Array:
    """A^(t) = sum_h w_h masked-softmax((d_h [i = j] - m_h |i - j|)), logits already / tau.

    Heads are accumulated one at a time: O(N^2) memory whatever H is.
    """
    ok = jnp.asarray(allowed(mask, num_tokens))
    idx = jnp.arange(num_tokens)
    distance = jnp.abs(idx[:, None] - idx[None, :]).astype(slopes_t.dtype)
    eye = jnp.eye(num_tokens, dtype=slopes_t.dtype)

    def add_head(acc, head):
        m, d, w = head
        logits = jnp.where(ok, d * eye - m * distance, -jnp.inf)
        return acc + w * jax.nn.softmax(logits, axis=-1), None

    zero = jnp.zeros((num_tokens, num_tokens), slopes_t.dtype)
    return jax.lax.scan(add_head, zero, (slopes_t, diagonal_t, weights_t))[0]


@float64
def alibi_kernels(stack: AlibiStack, num_tokens: int) -> JaxKernels:
    """(T, N, N) head-averaged kernels of ``stack`` by masked softmax (T N^2 memory)."""
    slopes, diagonal = stack.scaled()
    return jax.lax.map(
        lambda a: layer_kernel(*a, num_tokens=num_tokens, mask=stack.mask),
        (jnp.asarray(slopes), jnp.asarray(diagonal), jnp.asarray(stack.head_weights)),
    )


@float64
def bias_kernels(stack: BiasStack, num_tokens: int) -> JaxKernels:
    """(T, N, N) head-averaged kernels of a relative-bias stack (C7) by masked softmax of its N x N
    logits (``bias_layer_kernel``; T N^2 memory). Bias values are checked at this N
    (``BiasStack.tables``: ``StackError`` for values that are not finite or overflow after tau)."""
    past, future = stack.tables(num_tokens)
    tau = stack.temperature
    index = np.asarray(stack.bias_index)
    layers = (
        jnp.asarray(past[index]),
        jnp.asarray(future[index]),
        jnp.asarray(stack.diagonal / tau),
        jnp.asarray(stack.sink / tau),
        jnp.asarray(stack.head_weights),
    )
    return jax.lax.map(lambda a: bias_layer_kernel(*a, num_tokens=num_tokens, mask=stack.mask), layers)


def layer_kernels(stack: AlibiStack | BiasStack, num_tokens: int) -> JaxKernels:
    """(T, N, N) kernels A^(t) of an ALiBi + content stack (``alibi_kernels``) or a relative-bias stack
    (``bias_kernels``): the kernel-forming function for each stack type."""
    if isinstance(stack, BiasStack):
        return bias_kernels(stack, num_tokens)
    if isinstance(stack, AlibiStack):
        return alibi_kernels(stack, num_tokens)
    raise TypeError(f"layer_kernels: expected an AlibiStack or a BiasStack, got {type(stack).__name__}")


def bias_layer_kernel(past_t, future_t, diagonal_t, sink_t, weights_t, num_tokens: int, mask) -> jax.Array:
    """A^(t) = sum_h w_h masked-softmax(b_h(i - j) + d_h [i = j] + s_h [j = 0]) for relative biases (C7),
    from each head's (N,) past and future logit tables (already / tau, -inf where a window gives
    no weight; posbias.numerics.bias_stack.BiasStack.tables). The logits are written out as an
    N x N matrix and soft-maxed row by row: no cumulative weights, so this checks the bias engines.
    Heads are accumulated one at a time (O(N^2) memory)."""
    ok = jnp.asarray(allowed(mask, num_tokens))
    idx = jnp.arange(num_tokens)
    gap = idx[:, None] - idx[None, :]
    eye = jnp.eye(num_tokens, dtype=past_t.dtype)
    first = jnp.zeros((num_tokens, num_tokens), past_t.dtype).at[:, 0].set(1.0)

    def add_head(acc, head):
        past, future, d, s, w = head
        logits = jnp.where(gap >= 0, past[jnp.clip(gap, 0)], future[jnp.clip(-gap, 0)]) + d * eye + s * first
        logits = jnp.where(ok, logits, -jnp.inf)
        return acc + w * jax.nn.softmax(logits, axis=-1), None

    zero = jnp.zeros((num_tokens, num_tokens), past_t.dtype)
    return jax.lax.scan(add_head, zero, (past_t, future_t, diagonal_t, sink_t, weights_t))[0]
