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
linear arithmetic uses the chunked formulation at the end of this module (parallel
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


# ------------------------------------------------------------------ the chunked (parallel) linear path
#
# What the XLA path runs in linear arithmetic (the formulation for GPUs/TPUs; the blocked
# scan above remains for the log ring and for fft.py). Positions are cut into chunks of C
# tokens, P = N rounded up to C, nc = P / C chunks; arrays are laid out (nc, G, C): chunk,
# head, offset. For u_{h,i} = w_h c_{h,i} v_i the past tail of column j (C4(b), the sum over
# rows i > j of the kernel's strict-past entries) is
#
#     T_j = sum_h sum_{i > j, i - j <= L} r_h^{i-j} u_{h,i},   L = w - 1 (window w) or inf,
#
# and for j = bC + q it splits into the part inside chunk b and the part beyond it:
#
#   * inside: sum_{k > q} r_h^{k-q} u_{h,bC+k}, for all chunks and all heads at once ONE
#     matmul (nc, G C) @ (G C, C) with the stacked upper-triangular Toeplitz blocks
#     W[(h, k), q] = r_h^{k-q} [k > q] (the head sum is part of the contraction, so no
#     (G, P) output is ever formed; one factor r of each weight is moved into u, see Numerics);
#   * beyond: r_h^{C-q} Z_{h,b+1}, where Z_{h,b} = sum_{i >= bC} r_h^{i-bC} u_{h,i} obeys
#     Z_b = a_b + r^C Z_{b+1}, a_b = sum_k r^k u_{h,bC+k}: an associative scan over the nc
#     chunk carries (depth log2 nc), then one small matmul (nc, G) @ (G, C).
#
# Windows with L <= C need no carries and no subtraction: the band reaches the next chunk
# only, T = (u @ W_0)_b + (u @ W_1)_{b+1} with W_0[(h,k),q] = r^{k-q} [0 < k-q <= L],
# W_1[(h,k),q] = r^{C+k-q} [C+k-q <= L]; every term is non-negative, so every entry keeps
# float64 relative accuracy (the profile's resolution is 0). Windows with L > C subtract
# what leaves the window, T^w_j = T_j - r^w (u_j + T_j)_{j+w}, per head (as the blocked
# path does; absolute error, resolution as there). The bidirectional prefix (K > 1) adds
# F_j = sum_{i < j} r^{j-i} u_i for j < K, the mirror image (lower-triangular blocks, a
# forward scan over the first ceil(K / C) chunks only).
#
# Numerics: c_i can be as large as 1/r (d -> -inf, S_i ~ r), so u itself may be ~e^{m};
# what is bounded is r c_i <= 1 (S_i >= r wherever row i has a neighbour). The matmuls
# therefore take u' = w (r c) v <= 1 and the weights r^{n-1} (n = i - j >= 1), each formed
# directly as exp(-m (n-1)) (no repeated products). Where such a weight underflows, the
# term r^{n-1} u' is below float64's range (exactly as in the dense product), so the 0 is
# exact to float64 range; forming r^n and multiplying by u instead would drop terms up to
# r^{n-1} (e.g. 1e-162 at m = 373, n = 2). All factors are non-negative (outside the
# L > C window subtraction): a sum of n non-negative terms has relative error <= n eps.
#
# Cost per layer (H heads, P ~ N positions, chunk C; flops counted as multiply + add):
#   inside matmul 2 H P C, chunk sums 2 H P, carry scan ~ 4 H (P / C) log2(P / C),
#   carry matmul 2 H P, row weights ~ 20 H P (exp, expm1, one division per element),
#   doubled for the bidirectional part over the first K positions, plus 2 H P C for the
#   second band matmul (windows L <= C). Bytes touched (float64, what no fusion removes):
#   u written once and read twice (GEMM, chunk sums): 24 H P, the shared normalisers
#   S (H, P) read once when they are stored (8 H P), v and the output O(P); the Toeplitz
#   blocks 8 H C^2 (<= 8 H P by the rule for C). Peak memory ~ 8 (2 G P + G C^2 + 8 P)
#   bytes for G heads at once (u and one temporary of the same size), G = H unless
#   H P exceeds the budget; then the heads run in as few equal groups as fit.
#
# The rule for C: C = 2^ceil(log2 sqrt N) clipped to [CHUNK_MIN, cap] (the carry scan then
# has <= max(sqrt N, N / cap) steps of depth log2 of that, and the Toeplitz blocks never
# outweigh the state), raised to the power of two >= L for windows with L <= BAND_MAX = 256
# (so that the band path applies). The cap is the machine balance: the GEMM does 2C flops
# per element against ~24 bytes, so C ~ 12 x (float64 flop/s) / (bytes/s). On GPUs/TPUs
# cap = CHUNK_MAX = 128 (H100/H200: 67 TF/s float64 tensor cores, 3.4-4.8 TB/s); on CPUs
# cap = CHUNK_MAX_CPU = 32 (measured on a 2-core x86 machine: at N = 2^20, H = 112, C = 32
# or 64 ran ~1.9 s/layer against 3.1 s for C = 128, and at N = 4096 C = 32 was fastest).

CHUNK_MIN, CHUNK_MAX, CHUNK_MAX_CPU, BAND_MAX = 16, 128, 32, 256
_HIGHEST = jax.lax.Precision.HIGHEST


@dataclass(frozen=True)
class Chunking:
    """The static shape of a chunked run: N tokens padded to ``padded`` = a multiple of
    ``chunk``; heads in ``groups`` groups of ``group``; ``band``: a window with L = w - 1 <= chunk
    (two banded matmuls, no carries, no subtraction)."""

    num_tokens: int
    mask: Mask
    chunk: int
    padded: int
    group: int
    groups: int
    band: bool
    moderate: bool = False  # every |d| <= D_CLIP: row weights without the log-space branch

    @property
    def chunks(self) -> int:
        return self.padded // self.chunk

    @property
    def forward_chunks(self) -> int:
        """Chunks that hold the bidirectional prefix (0: no forward part)."""
        k = self.mask.bidirectional_length(self.num_tokens)
        return 0 if k <= 1 else -(-k // self.chunk)


def chunk_size(num_tokens: int, mask: Mask | None, cap: int | None = None) -> int:
    """The rule for C (see above): 2^ceil(log2 sqrt N) in [16, cap] (cap: 128 on accelerators,
    32 on the CPU backend), raised to cover a window's reach L <= 256."""
    if cap is None:
        cap = CHUNK_MAX_CPU if jax.default_backend() == "cpu" else CHUNK_MAX
    chunk = int(np.clip(1 << int(np.ceil(np.log2(max(num_tokens, 1)) / 2)), CHUNK_MIN, max(cap, CHUNK_MIN)))
    reach = None if mask is None or mask.past_window is None else mask.past_window - 1
    if reach is not None and chunk < reach <= BAND_MAX:
        chunk = 1 << int(np.ceil(np.log2(reach)))
    return chunk


def chunk_plan(
    num_tokens: int,
    num_heads: int,
    mask: Mask | None,
    budget: int = 1 << 27,
    chunk: int | None = None,
    moderate: bool = False,
    cap: int | None = None,
) -> Chunking:
    """C by ``chunk_size`` (or ``chunk``); all heads at once while H P <= ``budget`` elements, else
    the fewest equal groups with G P <= budget (at least one head per group). ``moderate``: the
    caller knows every |d| <= D_CLIP (then e^{-d} S is one multiplication per element). ``mask``
    None (a size estimate): planned as the causal mask (no window)."""
    mask = Causal() if mask is None else mask
    c = chunk_size(num_tokens, mask, cap) if chunk is None else int(chunk)
    if c < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    padded = -(-num_tokens // c) * c
    heads = max(num_heads, 1)
    groups = int(np.clip(-(-heads * padded // max(budget, 1)), 1, heads))
    group = -(-heads // groups)
    groups = -(-heads // group)
    band = mask.past_window is not None and mask.past_window - 1 <= c
    return Chunking(num_tokens, mask, c, padded, group, groups, band, bool(moderate))


def toeplitz(m, chunk: int, lo, hi, *, shift: int = 0, forward: bool = False):
    """W[h, k, q] = r_h^(n-1) with n = shift + (k - q) (``forward``: q - k), where 1 <= lo <= n <= hi,
    else 0; (G, C, C) for slopes m (G,). Row k is the source offset, column q the target; the
    missing factor r is carried by u' = r u."""
    off = jnp.arange(chunk)
    n = shift + ((off[None, :] - off[:, None]) if forward else (off[:, None] - off[None, :]))
    inside = (n >= lo) & (n <= hi)
    powers = jnp.where(inside, n - 1, 0).astype(m.dtype)  # integers, exact in float
    return jnp.where(inside[None], jnp.exp(-m[:, None, None] * powers[None]), 0.0)


def _fused(u, blocks):
    """sum_h sum_k u[b, h, k] W[h, k, q] for u (nc, G, C), W (G, C, C): one matmul, (nc, C)."""
    nc, g, c = u.shape
    return jnp.dot(u.reshape(nc, g * c), blocks.reshape(g * c, c), precision=_HIGHEST)


def _next_chunk(x, fill=0.0):
    """y_b = x_{b+1} along axis 0 (``fill`` past the end)."""
    return jnp.concatenate([x[1:], jnp.full_like(x[:1], fill)], axis=0)


def _previous_chunk(x, fill=0.0):
    """y_b = x_{b-1} along axis 0 (``fill`` before the start)."""
    return jnp.concatenate([jnp.full_like(x[:1], fill), x[:-1]], axis=0)


def chunk_carries(a, m, chunk: int, *, forward: bool = False):
    """Z_b = a_b + r^C Z_{b+1} (``forward``: Z_b = a_b + r^C Z_{b-1}) for a (nc, G): an associative scan."""
    rho = jnp.exp(-m * chunk)[:, None]  # (G, 1)
    z = a.T if not forward else jnp.flip(a.T, axis=-1)
    z = linear_recurrence(LINEAR, rho, z)
    return (z if not forward else jnp.flip(z, axis=-1)).T


def past_tails(u, m, plan: Chunking):
    """sum_h sum_{i > j, i - j <= L} r_h^{i-j-1} u'_{h,i} for u' = r u (nc, G, C), slopes m (G,): (nc, C)."""
    c = plan.chunk
    window = plan.mask.past_window
    off = jnp.arange(c, dtype=m.dtype)  # offsets in chunk, exact in float
    if plan.band and window is not None:  # L <= C (band: a window): this chunk and the next, no carries
        if window <= 1:
            return jnp.zeros(u.shape[::2], u.dtype)
        near = _fused(u, toeplitz(m, c, 1, window - 1))
        far = _fused(u, toeplitz(m, c, 1, window - 1, shift=c))
        return near + _next_chunk(far)
    within = toeplitz(m, c, 1, c)
    a = jnp.sum(u * jnp.exp(-m[:, None] * off), axis=-1)  # chunk-start sums (nc, G), one fused pass
    z_next = _next_chunk(chunk_carries(a, m, c))
    tail = jnp.exp(-m[:, None] * (c - 1 - off))  # r^{C-q-1}, (G, C)
    if window is None:
        return _fused(u, within) + jnp.dot(z_next, tail, precision=_HIGHEST)
    # L > C: per head, subtract what leaves the window, T^w_j = T_j - r^w (u + T)_{j+w}
    # = T_j - r^{w-1} (u' + r T)_{j+w}.
    t = jnp.einsum("bgk,gkq->bgq", u, within, precision=_HIGHEST) + z_next[:, :, None] * tail[None]
    nc, g, _ = u.shape
    inclusive = (u + jnp.exp(-m)[None, :, None] * t).transpose(1, 0, 2).reshape(g, nc * c)
    leaving = shift_left(inclusive, window, 0.0).reshape(g, nc, c).transpose(1, 0, 2)
    return jnp.sum(t - jnp.exp(-m * (window - 1))[None, :, None] * leaving, axis=1)


def future_heads(u, m, plan: Chunking):
    """[j < K] sum_h sum_{i < j} r_h^{j-i-1} u'_{h,i} (u' = r u) over the first ceil(K / C) chunks: (kc, C)."""
    c, kc = plan.chunk, plan.forward_chunks
    uf = u[:kc]
    off = jnp.arange(c, dtype=m.dtype)  # offsets in chunk, exact in float
    e = jnp.sum(uf * jnp.exp(-m[:, None] * (c - 1 - off)), axis=-1)  # chunk-end sums (kc, G)
    e_prev = _previous_chunk(chunk_carries(e, m, c, forward=True))
    out = _fused(uf, toeplitz(m, c, 1, c, forward=True)) + jnp.dot(
        e_prev, jnp.exp(-m[:, None] * off), precision=_HIGHEST
    )
    k = plan.mask.bidirectional_length(plan.num_tokens)
    return jnp.where(jnp.arange(kc * c).reshape(kc, c) < k, out, 0.0)


def _moderate_weights(d, s):
    """(alpha, c) = (1 / (1 + e^{-d} S), e^{-d} alpha) for |d| <= D_CLIP (no clip needed)."""
    q = jnp.exp(-d)
    alpha = 1.0 / (1.0 + q * s)
    return alpha, q * alpha


def chunk_apply_heads(v, m, d, w, plan: Chunking, s=None):
    """For heads (G,): (sum_h w_h off-diagonal column sums, sum_h w_h alpha_h), both (P,);
    ``s`` (nc, G, C): the row normalisers when stored."""
    nc, c = plan.chunks, plan.chunk
    positions = jnp.arange(plan.padded).reshape(nc, 1, c)
    if s is None:
        s = row_normaliser(m[None, :, None], positions, plan.num_tokens, plan.mask)
    # |d| <= D_CLIP for every head (the usual case, known on the host): alpha = 1 / (1 + e^{-d} S),
    # c = e^{-d} alpha, one multiplication per element; else ``linear_weights`` (exp(log S - d) beyond).
    alpha, cw = (_moderate_weights if plan.moderate else linear_weights)(d[None, :, None], s)
    wh = w[None, :, None]
    # u' = w (r c) v: r c <= 1 wherever row i has a neighbour (S_i >= r), so no weight r^n below is
    # asked to undo a large c (see the numerics note above)
    u = (wh * (jnp.exp(-m)[None, :, None] * cw)) * v.reshape(nc, 1, c)  # (nc, G, C)
    alpha_bar = jnp.sum(wh * alpha, axis=1)  # (nc, C)
    u = jax.lax.optimization_barrier(u)  # formed once, not re-derived inside each consumer's fusion
    off = past_tails(u, m, plan)
    if plan.forward_chunks:
        off = off.at[: plan.forward_chunks].add(future_heads(u, m, plan))
    return off.reshape(-1), alpha_bar.reshape(-1)


def chunk_layer_step(v, layer: LayerParams, plan: Chunking, s=None):
    """v R^(t) and the head-averaged diagonal of A^(t), every head of a group at once.

    Per-head arrays of ``layer`` are (groups * group,); ``s``, when given, is
    (nc, H, C) for one group or (groups, nc, group, C) for several.
    """
    if plan.groups == 1:
        off, alpha_bar = chunk_apply_heads(v, layer.slopes, layer.diagonal, layer.weights, plan, s)
    else:
        shaped = [a.reshape(plan.groups, plan.group) for a in (layer.slopes, layer.diagonal, layer.weights)]
        if s is not None:
            shaped.append(s)

        def one_group(acc, params):
            m, d, w, *s_group = params
            o, a = chunk_apply_heads(v, m, d, w, plan, *s_group)
            return (acc[0] + o, acc[1] + a), None

        (off, alpha_bar), _ = jax.lax.scan(one_group, (jnp.zeros_like(v), jnp.zeros_like(v)), shaped)
    return mix(LINEAR, v, layer.lam, off, alpha_bar), alpha_bar


@partial(jax.jit, static_argnames=("plan",))
def chunked_layers_scan(v, layers: LayerParams, s, *, plan: Chunking):
    """Apply the given layers top-down with the chunked layer step (linear arithmetic).
    Returns v and, per layer, (min_i alpha-bar_i, alpha-bar_{N-1})."""

    def body(v, layer):
        v, alpha_bar = chunk_layer_step(v, LayerParams(*layer), plan, s)
        n = plan.num_tokens
        return v, (jnp.min(alpha_bar[:n]), alpha_bar[n - 1])

    return jax.lax.scan(body, v, tuple(layers), reverse=True)


@partial(jax.jit, static_argnames=("plan",))
def chunked_normaliser(m, *, plan: Chunking):
    """S_i for heads m (groups * group,) laid out for ``chunk_layer_step``."""
    nc, c = plan.chunks, plan.chunk
    positions = jnp.arange(plan.padded).reshape(nc, 1, c)
    s = row_normaliser(m[None, :, None], positions, plan.num_tokens, plan.mask)  # (nc, H, C)
    if plan.groups == 1:
        return s
    return s.reshape(nc, plan.groups, plan.group, c).transpose(1, 0, 2, 3)
