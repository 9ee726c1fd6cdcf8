"""Rollout engines: the profile p = e_{N-1}^T R^(T-1) ... R^(0) and the full product P.

* ``profile`` (engines ``structured`` and ``log``): ALiBi + content stacks in
  O(T H N) time and O(N) memory per head group, via numerics.structured.
  ``log`` runs the same recurrences in log space for stacks whose profile
  falls below the float64 range (attention-only at large N and T).
* ``profile`` (engine ``fft``): causal / sliding-window stacks at large N in
  O(N log L) per layer for all heads together, via numerics.toeplitz.
* ``profile_from_kernels``: any (T, N, N) kernels, O(T N^2) (measured mode).
* ``rollout_matrix`` / ``dense_rollout``: the full P by dense products, O(T N^3), for moderate N.
* ``diagonal_product``: P_ii = prod_t (1 - lambda_t (1 - A^(t)_ii)) (C5(a)),
  exact for lower-triangular (causal) kernels, O(T N).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from posbias.numerics import native, structured, toeplitz
from posbias.numerics.kernels import layer_kernel
from posbias.numerics.stack import AlibiStack

ENGINES = ("structured", "log", "fft")
SHARED_NORMALISER_MAX = 1 << 24  # elements (128 MiB in float64)


@dataclass(frozen=True)
class Profile:
    """Result of a profile run.

    probabilities: (N,) float64 profile p (how much each position feeds the last token)
    log_probabilities: (N,) log p (finite where p underflows, from the log engine)
    min_self_weight: (T,) min_i A^(t)[i, i]  (delta_t = 1 - this)
    last_self_weight: (T,) A^(t)[N-1, N-1]
    engine: which engine computed it
    """

    probabilities: np.ndarray
    log_probabilities: np.ndarray
    min_self_weight: np.ndarray
    last_self_weight: np.ndarray
    engine: str


def profile(
    stack: AlibiStack,
    num_tokens: int,
    *,
    engine: str = "structured",
    dtype=jnp.float64,
    layers_per_call: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    native_kernel: bool = True,
) -> Profile:
    """Last row of P for an ALiBi + content stack (THEORY.md, Notation; C6).

    The walk starts at token N-1 in the top layer and moves down:
    v <- v R^(t) for t = T-1, ..., 0. Layers are applied ``layers_per_call`` at
    a time (padding with identity layers, lambda = 0) so that ``progress``
    (called with (layers done, T)) can report on long runs. ``native_kernel=False``
    forces the pure-XLA path (numerics.native is otherwise used on the CPU where it builds).
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; expected one of {ENGINES}")
    if engine == "fft":
        p, mins, lasts = toeplitz.profile(stack, num_tokens, dtype=dtype, progress=progress)
        p = np.maximum(p, 0.0)  # FFT round-off can leave entries of order -1e-18
        with np.errstate(divide="ignore"):
            return Profile(p, np.log(p), mins, lasts, engine)
    ring = structured.RINGS["log" if engine == "log" else "linear"]
    block, padded, group = structured.plan(num_tokens, stack.num_heads)
    heads = -(-stack.num_heads // group) * group
    t_total = stack.num_layers
    chunk = t_total if layers_per_call is None else max(1, min(layers_per_call, t_total))
    t_pad = -(-t_total // chunk) * chunk

    slopes, diagonal = stack.scaled()

    def arr(x, fill):
        x = np.pad(x, ((t_pad - t_total, 0), (0, heads - x.shape[1])), constant_values=fill)
        return jnp.asarray(x, dtype=dtype)

    # Identity layers go *below* layer 0 (applied last, lambda = 0): they change nothing.
    lambdas = jnp.asarray(np.pad(stack.lambdas, (t_pad - t_total, 0)), dtype=dtype)
    m, d, w = arr(slopes, 0.0), arr(diagonal, 0.0), arr(stack.head_weights, 0.0)

    # One C loop per layer on the CPU when all heads fit in one group (linear float64 only).
    use_native = (ring is structured.LINEAR and dtype == jnp.float64 and group >= stack.num_heads
                  and native_kernel and native.available())
    shared = None
    if np.all(slopes == slopes[:1]) and heads * padded <= SHARED_NORMALISER_MAX:
        shared = structured.shared_normaliser(m[-1], num_tokens=num_tokens, mask=stack.mask,
                                              padded=padded)
    v = np.zeros(padded)
    v[num_tokens - 1] = 1.0
    v = ring.from_linear(jnp.asarray(v, dtype=dtype))
    mins, lasts = [], []
    done = 0
    for start in range(t_pad - chunk, -1, -chunk):
        part = slice(start, start + chunk)
        v, (mn, last) = structured._layers(
            v, lambdas[part], m[part], d[part], w[part], shared,
            num_tokens=num_tokens, mask=stack.mask, ring=ring, block=block, group=group,
            use_native=use_native,
        )
        mins.append(np.asarray(mn))
        lasts.append(np.asarray(last))
        done = min(t_total, done + chunk)
        if progress is not None:
            jax.block_until_ready(v)
            progress(done, t_total)
    mins = np.concatenate(mins[::-1])[t_pad - t_total:]
    lasts = np.concatenate(lasts[::-1])[t_pad - t_total:]
    v = np.asarray(v, dtype=np.float64)[:num_tokens]
    if ring is structured.LOG:
        logp = v
        p = np.exp(v)
    else:
        # Sliding windows subtract; round-off can leave entries of order -1e-17.
        p = np.maximum(v, 0.0)
        with np.errstate(divide="ignore"):
            logp = np.log(p)
    return Profile(p, logp, mins, lasts, engine)


def kernel_diagonals(stack: AlibiStack, num_tokens: int) -> np.ndarray:
    """(T, N) head-averaged self-weights A^(t)[i, i] in closed form (C4(b): alpha_i(d))."""
    slopes, diagonal = stack.scaled()
    return np.asarray(_kernel_diagonals(jnp.asarray(slopes), jnp.asarray(diagonal), jnp.asarray(stack.head_weights),
                                        num_tokens=num_tokens, mask=stack.mask))


@partial(jax.jit, static_argnames=("num_tokens", "mask"))
def _kernel_diagonals(m, d, w, *, num_tokens, mask):
    return jax.vmap(lambda a, b, c: structured.alibi_diagonal(a, b, c, num_tokens, mask))(m, d, w)


def diagonal_product(self_weights: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """P_ii = prod_t (1 - lambda_t (1 - A^(t)_ii)) for causal stacks (C5(a)); (T, N) -> (N,)."""
    return np.prod(1.0 - lambdas[:, None] * (1.0 - self_weights), axis=0)


def dense_rollout(stack: AlibiStack, num_tokens: int, dtype=jnp.float64):
    """(P, diagonals (T, N)) for an ALiBi stack by dense products, building each A^(t)
    inside the scan: O(N^2) memory, O(T H N^2 + T N^3) time."""
    slopes, diagonal = stack.scaled()
    params = [jnp.asarray(a, dtype) for a in (stack.lambdas, slopes, diagonal, stack.head_weights)]
    return _dense_rollout(*params, num_tokens=num_tokens, mask=stack.mask)


@partial(jax.jit, static_argnames=("num_tokens", "mask"))
def _dense_rollout(lambdas, slopes, diagonal, weights, *, num_tokens, mask):
    def body(p, layer):
        lam, m, d, w = layer
        a = layer_kernel(m, d, w, num_tokens, mask)
        return (1.0 - lam) * p + lam * (a @ p), jnp.diagonal(a)

    eye = jnp.eye(num_tokens, dtype=lambdas.dtype)
    return jax.lax.scan(body, eye, (lambdas, slopes, diagonal, weights))


@jax.jit
def profile_from_kernels(kernels, lambdas):
    """e_{N-1}^T R^(T-1) ... R^(0) for dense (T, N, N) kernels, O(T N^2)."""
    n = kernels.shape[-1]
    v = jnp.zeros(n, kernels.dtype).at[n - 1].set(1.0)

    def body(v, layer):
        a, lam = layer
        return (1.0 - lam) * v + lam * (v @ a), None

    v, _ = jax.lax.scan(body, v, (kernels, lambdas), reverse=True)
    return v


@jax.jit
def rollout_matrix(kernels, lambdas):
    """P = R^(T-1) ... R^(0) with R^(t) = (1 - lambda_t) I + lambda_t A^(t), O(T N^3)."""
    n = kernels.shape[-1]

    def body(p, layer):
        a, lam = layer
        return (1.0 - lam) * p + lam * (a @ p), None

    p, _ = jax.lax.scan(body, jnp.eye(n, dtype=kernels.dtype), (kernels, lambdas))
    return p
