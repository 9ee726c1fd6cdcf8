"""The chunked (parallel) formulation of the ALiBi + content layer recurrence in linear arithmetic.

Private to posbias.numerics: what the structured engine's XLA path runs in linear arithmetic
(the formulation for GPUs/TPUs). It solves the same geometric tails as the blocked scan of
numerics/_recurrence.py (C4(b), THEORY.md; the row weights come from there), with
Toeplitz-block matmuls inside chunks of C tokens and an associative scan over the chunk
carries. The formulation, its operation count, bytes and peak memory, and its numerics are
stated in the comment below. Names here carry no underscore where numerics/structured.py uses
them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from posbias.numerics._recurrence import (
    LayerParams,
    linear_recurrence,
    linear_weights,
    mix,
    row_normaliser,
    shift_left,
)
from posbias.numerics.masks import Causal, Mask
from posbias.numerics.semiring import LINEAR

# The formulation.
#
# What the XLA path runs in linear arithmetic (the formulation for GPUs/TPUs; the blocked
# scan of numerics/_recurrence.py remains for the log ring and for fft.py). Positions are cut into chunks of C
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
