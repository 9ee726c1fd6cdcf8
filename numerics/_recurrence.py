"""The O(H N) ALiBi + content layer recurrence shared by the structured and FFT engines.

Private to posbias.numerics: numerics/structured.py and numerics/fft.py import it;
nothing else should. Names here carry no underscore because two modules use them.

Row i of head h (slope m, diagonal excess d, both already divided by the
temperature; r = e^{-m}) reads itself and the allowed tokens j != i:

    A[i, i] = alpha_i = 1 / (1 + e^{-d} S_i)
    A[i, j] = c_i r^{|i-j|},  c_i = e^{-d} / (1 + e^{-d} S_i)

with the row normaliser (C4(b), THEORY.md; alpha_i(d) there)

    S_i = G(past reach of i) + G(future reach of i),   G(L) = sum_{g=1}^{L} r^g
                                                             = -expm1(-m L) / expm1(m)  (L if m = 0).

Column j of v A therefore is

    (v A)_j = alpha_j v_j + sum_{i > j, i-j < w} u_i r^{i-j} + [j < K] sum_{i < j} u_i r^{j-i},
    u_i = v_i c_i,

(w the sliding window, K the bidirectional prefix length; see masks.py). The
two sums are geometric tails that obey first-order recurrences,
    T_j = r T_{j+1} + x_j,   x_j = r u_{j+1} - [w finite] r^w u_{j+w},
which ``tail_recurrence`` solves in O(N) per head with a blocked scan: a
sequential pass over the B offsets inside blocks (vectorised over heads and
blocks), an associative scan over block carries, and an elementwise fix-up.
Only multiplications by r <= 1 occur, so no slope can overflow it. The blocked
scan serves the log ring and numerics/fft.py; the structured engine's XLA path in
linear arithmetic uses the chunked formulation of numerics/_chunked.py (parallel
in positions and heads: Toeplitz-block matmuls and a scan over chunk carries; its
operation count, bytes and peak memory are stated there).

The diagonal excess is never clipped: in linear arithmetic e^{-d} S is formed directly
for |d| <= D_CLIP = 600 and as exp(log S - d) beyond. In log arithmetic
log alpha = -logaddexp(0, log S - d) and log c = -logaddexp(d, log S), with log S formed
in log space, each to float64 relative accuracy for any finite d and slope (forming
log c as log alpha - d would cancel catastrophically at large |d|).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from posbias.numerics.masks import Causal, Mask
from posbias.numerics.semiring import LINEAR, Semiring
from posbias.numerics.stack import register_pytrees

register_pytrees()

D_CLIP = 600.0


class LayerParams(NamedTuple):
    """One layer's parameters, per head: (lambda (), slopes m (H,), diagonal d (H,), weights w (H,))."""

    lam: jax.Array
    slopes: jax.Array
    diagonal: jax.Array
    weights: jax.Array


@dataclass(frozen=True)
class Geometry:
    """The static shape of a run: N tokens padded to ``padded`` = a multiple of ``block``,
    heads processed ``group`` at a time, under ``mask``."""

    num_tokens: int
    mask: Mask
    block: int
    padded: int
    group: int
    band: ClassVar[bool] = False  # blocks have no banded path (``Chunking.band``)


def plan(num_tokens: int, num_heads: int, mask: Mask | None, budget: int = 1 << 22) -> Geometry:
    """B ~ sqrt(N) in [8, 256]; P = N rounded up to B; G heads with G * P <= ``budget`` elements.
    ``mask`` None (a size estimate): the causal mask, whose sizes are those of every mask."""
    mask = Causal() if mask is None else mask
    block = int(np.clip(1 << int(np.ceil(np.log2(max(num_tokens, 1)) / 2)), 8, 256))
    padded = -(-num_tokens // block) * block
    group = int(np.clip(budget // padded, 1, max(num_heads, 1)))
    return Geometry(num_tokens, mask, block, padded, group)


def geometric_sum(m, length):
    """G(L) = sum_{g=1}^{L} e^{-m g} for m >= 0 (broadcasting)."""
    safe_m = jnp.where(m > 0, m, 1.0)
    return jnp.where(m > 0, -jnp.expm1(-safe_m * length) / jnp.expm1(safe_m), length)


def log_geometric_sum(m, length):
    """log G(L) without forming G (exact for slopes far beyond the float64 range of e^{-m}):
    log G(L) = -m + log(-expm1(-m L)) - log(-expm1(-m)) for m > 0, log L for m = 0."""
    safe_m = jnp.where(m > 0, m, 1.0)
    length = jnp.asarray(length, m.dtype)
    with_slope = -safe_m + jnp.log(-jnp.expm1(-safe_m * length)) - jnp.log(-jnp.expm1(-safe_m))
    return jnp.where(m > 0, jnp.where(length > 0, with_slope, -jnp.inf), jnp.log(length))


def _reaches(positions, num_tokens, mask: Mask, dtype):
    """(past reach, future reach) of each position under ``mask``."""
    past = positions.astype(dtype)
    if mask.past_window is not None:
        past = jnp.minimum(past, mask.past_window - 1)
    k = mask.bidirectional_length(num_tokens)
    future = jnp.where(positions < k, k - 1 - positions, 0).astype(dtype) if k > 1 else None
    return past, future


def row_normaliser(m, positions, num_tokens, mask: Mask):
    """S_i for heads m (G, 1) at positions (1, P): the kernel's off-diagonal row mass / c_i."""
    past, future = _reaches(positions, num_tokens, mask, m.dtype)
    s = geometric_sum(m, past)
    return s if future is None else s + geometric_sum(m, future)


def log_row_normaliser(m, positions, num_tokens, mask: Mask):
    """log S_i, formed in log space (no underflow of e^{-m} for any slope)."""
    past, future = _reaches(positions, num_tokens, mask, m.dtype)
    s = log_geometric_sum(m, past)
    return s if future is None else jnp.logaddexp(s, log_geometric_sum(m, future))


def linear_weights(d, s):
    """(alpha, c) = (1 / (1 + e^{-d} S), 1 / (e^{d} + S)) in linear arithmetic for any finite d:
    e^{-d} S directly for |d| <= D_CLIP, as exp(log S - d) beyond (c = 0 where S = 0: no
    off-diagonal entries there)."""
    inside = jnp.abs(d) <= D_CLIP
    q = jnp.exp(-jnp.clip(d, -D_CLIP, D_CLIP))
    qs = jnp.where(inside, q * s, jnp.exp(jnp.log(s) - jnp.where(inside, 0.0, d)))
    alpha = 1.0 / (1.0 + qs)
    c = jnp.where(inside, q * alpha, jnp.where(s > 0, 1.0 / (jnp.exp(d) + s), 0.0))
    return alpha, c


def row_weights(ring: Semiring, m, d, positions, num_tokens, mask, s=None):
    """(alpha, c) in ``ring`` for heads (G, 1) and positions (1, P); ``s``: S_i if already known.

    Linear arithmetic: alpha = 1 / (1 + e^{-d} S), c = e^{-d} alpha. For |d| <= D_CLIP the
    product e^{-d} S is formed directly; beyond it as exp(log S - d) (one rounding of the
    exponent more, no clip), so no content value is ever altered. Needs e^{-m} > 0 in
    float64 (slopes m <= 700; ``Structured.supports`` refuses steeper ones).
    """
    if ring.can_subtract:  # linear arithmetic
        if s is None:
            s = row_normaliser(m, positions, num_tokens, mask)
        return linear_weights(d, s)
    # alpha = 1 / (1 + e^{-d} S), c = 1 / (e^{d} + S): each one logaddexp, no cancellation.
    log_s = log_row_normaliser(m, positions, num_tokens, mask)
    return -jnp.logaddexp(0.0, log_s - d), -jnp.logaddexp(d, log_s)


def shift_left(x, by: int, fill):
    """y_j = x_{j+by} along the last axis, ``fill`` past the end."""
    if by >= x.shape[-1]:
        return jnp.full_like(x, fill)
    pad = jnp.full(x.shape[:-1] + (by,), fill, x.dtype)
    return jnp.concatenate([x[..., by:], pad], axis=-1)


def linear_recurrence(ring: Semiring, a, z):
    """Inclusive reverse solve H_k = z_k + a H_{k+1} along the last axis (H past the end = 0)."""

    def combine(left, right):  # left precedes right in the flipped order
        a1, b1 = left
        a2, b2 = right
        return ring.mul(a1, a2), ring.add(ring.mul(a2, b1), b2)

    flipped = jnp.flip(z, axis=-1)
    _, h = jax.lax.associative_scan(combine, (jnp.broadcast_to(a, z.shape), flipped), axis=-1)
    return jnp.flip(h, axis=-1)


def tail_recurrence(ring: Semiring, x, m, block: int):
    """T_j = x_j + r T_{j+1} (T past the end = 0) for x (G, P), P a multiple of ``block``."""
    g, p = x.shape
    nb = p // block
    r = ring.from_linear(jnp.exp(-m))  # (G, 1)
    xb = x.reshape(g, nb, block).transpose(2, 0, 1)  # (B, G, nb)

    def step(carry, xb_b):
        y = ring.add(xb_b, ring.mul(r, carry))
        return y, y

    _, y = jax.lax.scan(step, jnp.full((g, nb), ring.zero, x.dtype), xb, reverse=True)
    offsets = jnp.arange(block, dtype=x.dtype)[:, None, None]
    rho = ring.from_linear(jnp.exp(-m * block))  # r^B, (G, 1)
    carry_in = shift_left(linear_recurrence(ring, rho, y[0]), 1, ring.zero)  # T at next block start
    decay = ring.from_linear(jnp.exp(-m[None] * (block - offsets)))  # r^{B-b}, (B, G, 1)
    t = ring.add(y, ring.mul(decay, carry_in[None]))
    return t.transpose(1, 2, 0).reshape(g, p)


def weighted_rows(ring, m, d, w, num_tokens, mask, padded, s=None):
    """(w_h c_{h,i} (G, P), sum_h w_h alpha_{h,i} (P,)) for one group of heads (G, 1)."""
    positions = jnp.arange(padded)[None, :]
    alpha, c = row_weights(ring, m, d, positions, num_tokens, mask, s)
    return ring.mul(w, c), ring.sum(ring.mul(w, alpha), axis=0)


def off_diagonal(ring, v, m, wc, num_tokens, mask, block):
    """sum_h w_h sum_{i != j} v_i c_{h,i} r_h^{|i-j|} over the allowed i: (P,)."""
    u = ring.mul(wc, v[None, :])  # u_i = w_h c_i v_i, (G, P)
    r = ring.from_linear(jnp.exp(-m))
    x = ring.mul(r, shift_left(u, 1, ring.zero))
    if mask.past_window is not None:
        if not ring.can_subtract:
            raise ValueError(f"sliding-window masks need subtraction, which {ring.name} arithmetic cannot do")
        # Subtract what falls out of the window: r^w u_{j+w} (linear arithmetic only).
        x = x - jnp.exp(-m * mask.past_window) * shift_left(u, mask.past_window, 0.0)
    off = tail_recurrence(ring, x, m, block)
    k = mask.bidirectional_length(num_tokens)
    if k > 1:
        xf = ring.mul(r, shift_left(jnp.flip(u, axis=-1), 1, ring.zero))
        forward = jnp.flip(tail_recurrence(ring, xf, m, block), axis=-1)
        forward = jnp.where(jnp.arange(v.shape[0]) < k, forward, ring.zero)
        off = ring.add(off, forward)
    return ring.sum(off, axis=0)


def apply_heads(ring, v, m, d, w, num_tokens, mask, block, s=None):
    """For one group of heads (G, 1): (sum_h w_h off-diagonal column sums, sum_h w_h alpha_h), both (P,)."""
    wc, alpha_bar = weighted_rows(ring, m, d, w, num_tokens, mask, v.shape[0], s)
    return off_diagonal(ring, v, m, wc, num_tokens, mask, block), alpha_bar


def mix(ring, v, lam, off, alpha_bar):
    """(1 - lambda) v + lambda (alpha-bar v + off): the residual step R^(t)."""
    va = ring.add(ring.mul(alpha_bar, v), off)
    stay = ring.mul(ring.from_linear(1.0 - lam), v)
    return ring.add(stay, ring.mul(ring.from_linear(lam), va))


def layer_step(ring: Semiring, v, layer: LayerParams, geometry: Geometry, s=None):
    """v R^(t) = (1 - lambda) v + lambda v A^(t), and the head-averaged diagonal of A^(t).

    v is (P,) in ``ring``; the per-head arrays of ``layer`` are (H_pad,) with H_pad a
    multiple of ``geometry.group``; ``s`` (H_pad, P), when given, holds the row
    normalisers S_i (they depend on the slopes only). Heads are processed
    ``group`` at a time, so memory stays O(group * P).
    """
    g = geometry
    heads = layer.slopes.shape[0] // g.group
    shaped = [a.reshape(heads, g.group, 1) for a in (layer.slopes, layer.diagonal, ring.from_linear(layer.weights))]
    if s is not None:
        shaped.append(s.reshape(heads, g.group, -1))

    def one_group(acc, params):
        m, d, w, *s_group = params
        off, alpha_bar = apply_heads(ring, v, m, d, w, g.num_tokens, g.mask, g.block, *s_group)
        return (ring.add(acc[0], off), ring.add(acc[1], alpha_bar)), None

    zeros = jnp.full_like(v, ring.zero)
    (off, alpha_bar), _ = jax.lax.scan(one_group, (zeros, zeros), shaped)
    return mix(ring, v, layer.lam, off, alpha_bar), alpha_bar


def alibi_diagonal(m, d, w, num_tokens: int, mask: Mask, ring: Semiring):
    """Head-averaged self-weights alpha-bar_i = sum_h w_h alpha_{h,i}, shape (N,), for heads (H,)."""
    return weighted_rows(ring, m[:, None], d[:, None], w[:, None], num_tokens, mask, num_tokens)[1]


@partial(jax.jit, static_argnames=("ring", "geometry"))
def layers_scan(v, layers: LayerParams, s, *, ring, geometry: Geometry):
    """Apply the given layers top-down: v <- v R^(t) for t = last .. first.

    ``s``: the row normalisers (H_pad, P) shared by every layer when all layers have
    the same slopes (then they are computed once instead of once per layer).
    Returns v and, per layer, (min_i alpha-bar_i, alpha-bar_{N-1}).
    """

    def body(v, layer):
        v, alpha_bar = layer_step(ring, v, LayerParams(*layer), geometry, s)
        n = geometry.num_tokens
        return v, (jnp.min(ring.to_linear(alpha_bar[:n])), ring.to_linear(alpha_bar[n - 1]))

    return jax.lax.scan(body, v, tuple(layers), reverse=True)


@partial(jax.jit, static_argnames=("geometry",))
def shared_normaliser(m, *, geometry: Geometry):
    """S_i for heads m (H,) at positions 0..P-1: (H, P)."""
    return row_normaliser(m[:, None], jnp.arange(geometry.padded)[None, :], geometry.num_tokens, geometry.mask)


@partial(jax.jit, static_argnames=("num_tokens", "mask"))
def kernel_diagonals(m, d, w, *, num_tokens, mask):
    """(T, N) head-averaged self-weights for per-layer heads m, d, w (T, H), linear arithmetic (C4(b))."""
    return jax.vmap(lambda a, b, c: alibi_diagonal(a, b, c, num_tokens, mask, LINEAR))(m, d, w)
