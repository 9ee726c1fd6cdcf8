"""The FFT engine: causal / sliding-window ALiBi stacks at large N, O(N log L) per layer for all heads.

With the notation of numerics/_recurrence.py (r = e^{-m}, row normaliser S_i,
c_i = e^{-d} / (1 + e^{-d} S_i)), causal rows *saturate*: S_i -> S_inf
(= 1/expm1(m), or G(w-1) under a window of w tokens), so c_i -> c_inf and
alpha_i -> alpha_inf. Split c_i = c_inf + (c_i - c_inf):

    sum_h w_h sum_{i>j} v_i c_i r^{i-j}
        = sum_{g>=1} K(g) v_{j+g}                                (one Toeplitz correlation)
        + sum_h w_h sum_{j<i<L_B} v_i (c_i - c_inf) r^{i-j}       (per head, a short prefix)

    K(g) = sum_h w_h c_inf,h r_h^g [g < w].

The correction c_i - c_inf is at most c_inf r^i / (1 - r^i) (relative), so beyond
the saturation index I_h = ceil(42 / m_h) (r^I <= e^{-42} < 2^-60) it is below
float64 resolution and is dropped; under a window, saturation at i = w - 1 is
exact. The same holds for K's terms beyond distance L >= max I_h. The prefix
part reuses the exact blocked recurrence; heads that do not saturate within N
(m = 0, or tiny m) go entirely through that exact recurrence. The correlation is
done blockwise with FFTs of length 2L (L >= the kernel's support): each output
block needs only its own and the next input block.

Linear float arithmetic only. FFT round-off is *absolute*: about 1e-16 of the
largest entry per layer, so after T layers an entry below RESOLUTION(T) * max p,
RESOLUTION(T) = 16 eps (T + 1), is not determined by this engine (it may come back
as 0 or as round-off noise). The returned Profile carries that bound as
``resolution``; summaries never take an extreme from such entries, and the ``auto``
engine re-runs such profiles on an exact route.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from posbias.numerics import _recurrence as rec
from posbias.numerics.engine import Engine, Profile, linear_profile
from posbias.numerics.masks import Mask
from posbias.numerics.semiring import LINEAR
from posbias.numerics.stack import AlibiStack, register_pytrees

if TYPE_CHECKING:
    from posbias.numerics.boundary import Stack

register_pytrees()

SATURATION = 42.0  # e^{-42} = 5.7e-19 < 2^-60


def resolution(num_layers: int) -> float:
    """Entries below this times max p are not resolved after ``num_layers`` FFT layers."""
    return 16.0 * float(np.finfo(np.float64).eps) * (num_layers + 1)


@dataclass(frozen=True)
class FFT(Engine):
    """Causal and sliding-window masks (kernels lower triangular for every N); linear float arithmetic."""

    name = "fft"

    def supports(self, stack: Stack, num_tokens: int) -> str | None:
        if not isinstance(stack, AlibiStack):
            return f"expected an ALiBi + content stack, got {type(stack).__name__}"
        if stack.mask.reads_future:
            return f"handles causal and sliding-window masks only (mask {stack.mask.name} reads later tokens)"
        slopes, _ = stack.scaled()
        if np.max(slopes, initial=0.0) > 700.0:
            return "slopes m/tau above 700 leave the float64 range in linear arithmetic (use the log engine)"
        return None

    def memory_bytes(self, num_layers: int, num_heads: int, num_tokens: int) -> int:
        # block windows of 2L (L <= 2N) in complex128, the decay table (H, L), prefix buckets
        length = 1 << max(3, int(np.ceil(np.log2(max(num_tokens, 2)))))
        return 16 * 8 * (num_tokens + length) + 8 * 2 * num_heads * length + 8 * 8 * num_layers * num_heads

    def compute(self, stack: AlibiStack, num_tokens: int, *, dtype, progress=None) -> Profile:
        v, mins, lasts = _profile(stack, num_tokens, dtype=dtype, progress=progress)
        return linear_profile(v, mins, lasts, engine=self.name, path="fft", resolution=resolution(stack.num_layers))


def saturation(m: np.ndarray, window: int | None) -> np.ndarray:
    """Per head: the index from which row weights equal their limit to float64 resolution (inf: never)."""
    with np.errstate(divide="ignore", over="ignore"):
        index = np.where(m > 0, np.ceil(SATURATION / np.where(m > 0, m, 1.0)), np.inf)
    return index if window is None else np.minimum(index, window)


def _correlate(v, kernel, length: int):
    """A_j = sum_{g=0}^{L-1} K[g] v_{j+g} (v = 0 past its end), by FFTs of blocks of 2L."""
    n = v.shape[0]
    nb = -(-n // length)
    blocks = jnp.zeros((nb + 1) * length, v.dtype).at[:n].set(v).reshape(nb + 1, length)
    windows = jnp.concatenate([blocks[:-1], blocks[1:]], axis=1)
    k_hat = jnp.conj(jnp.fft.rfft(jnp.zeros(2 * length, v.dtype).at[:length].set(kernel)))
    out = jnp.fft.irfft(jnp.fft.rfft(windows, axis=1) * k_hat, n=2 * length, axis=1)
    return out[:, :length].reshape(-1)[:n]


@jax.jit
def _decay_table(m, g):
    """E[h, g] = r_h^g = exp(-m_h g): shared by every layer with the same slopes."""
    return jnp.exp(-m[:, None] * g[None, :])


def _prefix_corrections(v, m, d, w, c_inf, alpha_inf, *, num_tokens, mask, prefix):
    """Exact sum_{j<i<prefix} w v_i (c_i - c_inf) r^{i-j} and sum_h w (alpha_i - alpha_inf), both (prefix,)."""
    window = mask.past_window
    ms, ds, ws = m[:, None], d[:, None], w[:, None]
    head = min(prefix, num_tokens)
    vp = jnp.zeros(prefix, v.dtype).at[:head].set(v[:head])
    positions = jnp.arange(prefix)[None, :]
    alpha, c = rec.row_weights(LINEAR, ms, ds, positions, num_tokens, mask)
    u = ws * (c - c_inf[:, None]) * vp[None, :]
    x = jnp.exp(-ms) * rec.shift_left(u, 1, 0.0)
    if window is not None:
        x = x - jnp.exp(-ms * window) * rec.shift_left(u, window, 0.0)
    corr = jnp.sum(rec.tail_recurrence(LINEAR, x, ms, _prefix_block(prefix)), axis=0)
    return corr, jnp.sum(ws * (alpha - alpha_inf[:, None]), axis=0)


@partial(jax.jit, static_argnames=("num_tokens", "mask", "length", "buckets", "long_plan"))
def _layer(v, lam, short, table, long, *, num_tokens, mask, length, buckets, long_plan):
    """One layer v <- v R^(t). ``short`` = (m, d, w) of the saturating heads, sorted so that
    ``buckets`` = ((count, prefix), ...) slices them by prefix length; ``table`` = their
    decay table E (H_short, length); ``long`` = (m, d, w) of the others. Shapes are static."""
    window = mask.past_window
    m, d, w = short
    s_inf = jnp.where(m > 0, 1.0 / jnp.expm1(jnp.where(m > 0, m, 1.0)), 0.0)
    if window is not None:
        s_inf = rec.geometric_sum(m, window - 1)
    alpha_inf, c_inf = rec.linear_weights(d, s_inf)

    # Toeplitz part: one correlation for every saturated head.
    g = jnp.arange(length)
    kernel = (w * c_inf) @ table
    kernel = jnp.where((g > 0) & (g < (window or length + 1)), kernel, 0.0)
    off = _correlate(v, kernel, length)
    alpha_bar = jnp.full((num_tokens,), jnp.sum(w * alpha_inf), v.dtype)

    start = 0
    for count, prefix in buckets:  # exact corrections on each bucket's prefix
        part = slice(start, start + count)
        corr, dalpha = _prefix_corrections(
            v,
            m[part],
            d[part],
            w[part],
            c_inf[part],
            alpha_inf[part],
            num_tokens=num_tokens,
            mask=mask,
            prefix=prefix,
        )
        head = min(prefix, num_tokens)
        off = off.at[:head].add(corr[:head])
        alpha_bar = alpha_bar.at[:head].add(dalpha[:head])
        start += count

    if long_plan is not None:  # heads that never saturate: the exact recurrence over all N
        blk, padded, group = long_plan.block, long_plan.padded, long_plan.group
        vp = jnp.zeros(padded, v.dtype).at[:num_tokens].set(v)
        heads = long[0].shape[0] // group
        shaped = [a.reshape(heads, group, 1) for a in long]

        def one_group(acc, params):
            o, a = rec.apply_heads(LINEAR, vp, *params, num_tokens=num_tokens, mask=mask, block=blk)
            return (acc[0] + o, acc[1] + a), None

        (o, a), _ = jax.lax.scan(one_group, (jnp.zeros_like(vp), jnp.zeros_like(vp)), shaped)
        off = off + o[:num_tokens]
        alpha_bar = alpha_bar + a[:num_tokens]

    new = (1.0 - lam) * v + lam * (alpha_bar * v + off)
    return new, jnp.min(alpha_bar), alpha_bar[num_tokens - 1]


# One prefix bucket costs about one XLA compilation (~0.35 s on a 2-core CPU) per
# process; a padded prefix entry costs ~15 ns per layer. Buckets are merged while
# that trades fewer compilations for less than their cost in padding.
COMPILE_COST_ELEMENTS = 25_000_000


def layer_plan(m: np.ndarray, num_tokens: int, mask: Mask, num_layers: int = 1):
    """Host-side split of one layer's heads.

    Returns (order of the saturating heads, buckets ((count, prefix), ...), long heads,
    FFT block L). Each saturating head needs an exact prefix of its saturation index
    (a power of two, or N); heads are grouped into buckets that share one padded
    prefix, chosen by :func:`merge_buckets` to minimise compilations plus padding
    over ``num_layers`` layers.
    """
    index = saturation(m, mask.past_window)
    short = np.flatnonzero(index < num_tokens)
    long = np.flatnonzero(index >= num_tokens)
    if not short.size:
        return short, (), long, 8
    reach = int(index[short].max())
    if mask.past_window is not None:
        reach = max(reach, mask.past_window)
    length = 1 << max(3, int(np.ceil(np.log2(max(reach, 2)))))
    prefix = np.minimum(num_tokens, 1 << np.ceil(np.log2(np.maximum(index[short], 2))).astype(int))
    order = np.argsort(prefix, kind="stable")
    sizes, counts = np.unique(prefix[order], return_counts=True)
    buckets = merge_buckets([_padded(int(p)) for p in sizes], [int(c) for c in counts], num_layers)
    return short[order], buckets, long, length


def merge_buckets(prefixes: list[int], counts: list[int], num_layers: int) -> tuple[tuple[int, int], ...]:
    """Partition ascending prefix sizes into contiguous buckets ((count, padded prefix), ...)
    minimising ``buckets * COMPILE_COST_ELEMENTS + num_layers * sum(count * prefix)``
    (dynamic programming over the split points; k distinct sizes, O(k^2))."""
    k = len(prefixes)
    best = [0.0] + [np.inf] * k  # best[j]: cost of the first j sizes
    cut = [0] * (k + 1)
    for j in range(1, k + 1):
        for i in range(j):  # last bucket = sizes i..j-1, padded to prefixes[j-1]
            cost = best[i] + COMPILE_COST_ELEMENTS + num_layers * sum(counts[i:j]) * prefixes[j - 1]
            if cost < best[j]:
                best[j], cut[j] = cost, i
    buckets, j = [], k
    while j:
        i = cut[j]
        buckets.append((sum(counts[i:j]), prefixes[j - 1]))
        j = i
    return tuple(reversed(buckets))


def _padded(prefix: int) -> int:
    block = _prefix_block(prefix)
    return -(-prefix // block) * block


def _prefix_block(prefix: int) -> int:
    return rec.plan(prefix, 1, None).block


def _profile(stack, num_tokens: int, *, dtype, progress=None):
    """(p, min self-weight per layer, last self-weight per layer) by the saturation split."""
    slopes, diagonal = stack.scaled()
    t_total = stack.num_layers
    v = jnp.zeros(num_tokens, dtype).at[num_tokens - 1].set(1.0)
    mins, lasts = np.zeros(t_total), np.zeros(t_total)
    tables = {}
    for done, t in enumerate(range(t_total - 1, -1, -1), start=1):
        m, d, w = slopes[t], diagonal[t], stack.head_weights[t]
        short, buckets, long, length = layer_plan(m, num_tokens, stack.mask, t_total)
        key = (m[short].tobytes(), length)
        if key not in tables:
            tables = {key: _decay_table(jnp.asarray(m[short], dtype), jnp.arange(length, dtype=dtype))}
        long_plan = long_arrays = None
        if long.size:
            long_plan = rec.plan(num_tokens, long.size, stack.mask)
            n_pad = -(-long.size // long_plan.group) * long_plan.group
            long_arrays = tuple(jnp.asarray(np.pad(a[long], (0, n_pad - long.size)), dtype) for a in (m, d, w))
        v, mn, last = _layer(
            v,
            jnp.asarray(stack.lambdas[t], dtype),
            tuple(jnp.asarray(a[short], dtype) for a in (m, d, w)),
            tables[key],
            long_arrays,
            num_tokens=num_tokens,
            mask=stack.mask,
            length=length,
            buckets=buckets,
            long_plan=long_plan,
        )
        mins[t], lasts[t] = float(mn), float(last)
        if progress is not None:
            progress(done, t_total)
    return np.asarray(v, np.float64), mins, lasts
