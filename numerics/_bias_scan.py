"""One layer of a relative-bias stack applied to the walk vector, in XLA (THEORY.md, C7(a)).

Head h (logit tables already divided by tau): past logits l(g) = b(g) / tau + [g = 0] d for
j = i - g (g <= L, the window's reach; L = N - 1 without a window), future logits
f(g) = b_future(g) / tau for j = i + g (1 <= g, i and j below the bidirectional length K),
and the sink: column j = 0 read from row i has logit l(i) + s. With one shift per head,
M = the largest logit the head has anywhere, the weights are e(g) = exp(l(g) - M) <= 1,
ef(g) = exp(f(g) - M), es(i) = exp(l(i) + s - M), and the cumulative weights
W(a) = sum_{g <= a} e(g), W_f(a) = sum_{1 <= g <= a} ef(g) give every row's normaliser
without the N x N matrix (C7(a)):

    Z_i = W(i - 1) + es(i) + W_f(f_i)    (row i reads column 0: i <= L; W(-1) = 0)
    Z_i = W(L) + W_f(f_i)                (i > L),            f_i = max(K - 1 - i, 0).

With u_i = w_h v_i / Z_i one head contributes to (vA)_j

    sum_{g >= 0} u_{j+g} e(g)   (j >= 1),   sum_i u_i es(i)   (j = 0),
    + [j < K] sum_{g >= 1} u_{j-g} ef(g),

a Toeplitz correlation of O(N^2) multiply-adds per head, with non-negative terms only (no
subtraction anywhere). It runs as blocks of C tokens: for each block offset k, one batched
matmul of the (H, N / C, C) blocks of u shifted by k with the (H, C, C) Toeplitz block
E_k[p, q] = e(kC + p - q), gathered from e inside the loop: O(H N^2) work, O(H (N + C^2))
memory. Relative error per entry O(N eps) (sums of non-negative terms).

Range: a row whose largest logit c_i lies D = M - c_i below the head's largest has weights
down to e^-D before they are normalised; ``deficit`` returns max D over heads, so the engine
refuses D > ``MAX_DEFICIT`` and states the absolute resolution otherwise (terms below 2^-1022
of the head's scale are lost).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

MAX_DEFICIT = 600.0  # nats: rows more than this below their head's largest logit are refused
TINY_LOG = float(np.log(np.finfo(np.float64).tiny))  # -708.4


@dataclass(frozen=True)
class Geometry:
    """Static shape of the scan: N tokens padded to ``blocks`` x ``chunk``; ``reach`` L (the past
    reach of a sliding window, N - 1 without one); ``bidirectional`` K; ``offsets``: block offsets
    the past correlation visits (ceil(L / C) + 1 at most)."""

    num_tokens: int
    chunk: int
    blocks: int
    reach: int
    bidirectional: int

    @property
    def padded(self) -> int:
        return self.chunk * self.blocks

    @property
    def offsets(self) -> int:
        return min(self.blocks, self.reach // self.chunk + 2)


def geometry(num_tokens: int, mask, chunk: int | None = None) -> Geometry:
    """The scan's geometry for N tokens under ``mask`` (chunk C: 128, or the next power of two >= N if smaller)."""
    n = int(num_tokens)
    c = int(chunk) if chunk else min(128, 1 << max(0, (n - 1).bit_length()))
    window = mask.past_window
    reach = n - 1 if window is None else min(n - 1, int(window) - 1)
    k = mask.bidirectional_length(n)
    return Geometry(n, c, -(-n // c), reach, k if k > 1 else 0)


def head_weights(past, future, diagonal, sink, geo: Geometry):
    """Per head (H, N): the shifted weights e, ef, es, the normalisers Z and the row deficit max D."""
    n = geo.num_tokens
    g = jnp.arange(n)
    lp = past.at[:, 0].add(diagonal)
    lp = jnp.where(g[None, :] <= geo.reach, lp, -jnp.inf)
    ls = lp + sink[:, None]
    top = jnp.maximum(lp.max(axis=1), ls.max(axis=1))
    if geo.bidirectional:
        lf = jnp.where((g[None, :] >= 1) & (g[None, :] < geo.bidirectional), future, -jnp.inf)
        top = jnp.maximum(top, lf.max(axis=1))
    top = top[:, None]
    e, es = jnp.exp(lp - top), jnp.exp(ls - top)
    cum = jnp.cumsum(e, axis=1)
    reads_first = g <= geo.reach
    before = jnp.concatenate([jnp.zeros_like(cum[:, :1]), cum[:, :-1]], axis=1)  # W(i - 1)
    z = jnp.where(reads_first, before + es, cum[:, geo.reach][:, None])
    # largest logit of each row: the past part with the sink, then the future part
    pmax = jax.lax.cummax(lp, axis=1)
    pbefore = jnp.concatenate([jnp.full_like(pmax[:, :1], -jnp.inf), pmax[:, :-1]], axis=1)
    row = jnp.where(reads_first, jnp.maximum(pbefore, ls), pmax[:, geo.reach][:, None])
    if geo.bidirectional:
        ef = jnp.exp(lf - top)
        fwd = jnp.clip(geo.bidirectional - 1 - g, 0)
        z = z + jnp.cumsum(ef, axis=1)[:, fwd]
        row = jnp.maximum(row, jax.lax.cummax(lf, axis=1)[:, fwd])
    else:
        ef = jnp.zeros_like(e)
    deficit = jnp.max(top[:, 0] - row.min(axis=1))
    return e, ef, es, z, deficit


def correlate(u, e, ef, es, geo: Geometry):
    """sum_h of the head contributions to (vA)_j (module docstring) for u (H, P), weights (H, N)."""
    h, c, nb, n = u.shape[0], geo.chunk, geo.blocks, geo.num_tokens
    pad = geo.padded + 2 * c
    e_pad = jnp.zeros((h, pad), u.dtype).at[:, c : c + n].set(e)
    blocks = u.reshape(h, nb, c)
    shifted = jnp.concatenate([blocks, jnp.zeros_like(blocks)], axis=1)  # (H, 2 nb, C)
    p = jnp.arange(c)
    gap = p[:, None] - p[None, :] + c  # (C, C): index of e(kC + p - q) is kC + gap

    def past_step(k, acc):
        ek = e_pad[:, k * c + gap]  # (H, C, C)
        part = jax.lax.dynamic_slice_in_dim(shifted, k, nb, axis=1)
        return acc + jnp.einsum("hbp,hpq->bq", part, ek, precision=jax.lax.Precision.HIGHEST)

    out = jax.lax.fori_loop(0, geo.offsets, past_step, jnp.zeros((nb, c), u.dtype)).reshape(-1)
    out = out.at[0].set(jnp.sum(u[:, :n] * es))
    if geo.bidirectional:
        ef_pad = jnp.zeros((h, pad), u.dtype).at[:, c : c + n].set(ef.at[:, 0].set(0.0))
        earlier = jnp.concatenate([jnp.zeros_like(blocks), blocks], axis=1)
        fgap = p[None, :] - p[:, None] + c

        def future_step(k, acc):
            fk = ef_pad[:, k * c + fgap]
            part = jax.lax.dynamic_slice_in_dim(earlier, nb - k, nb, axis=1)
            return acc + jnp.einsum("hbp,hpq->bq", part, fk, precision=jax.lax.Precision.HIGHEST)

        kb = -(-geo.bidirectional // c) + 1
        fut = jax.lax.fori_loop(0, min(nb, kb), future_step, jnp.zeros((nb, c), u.dtype)).reshape(-1)
        out = out + jnp.where(jnp.arange(geo.padded) < geo.bidirectional, fut, 0.0)
    return out


def layers_scan(v, layers, past_tables, future_tables, geo: Geometry):
    """Apply layers (lambda (T,), index (T, H), d, s, w (T, H)) top-down to v (P,); returns v and,
    per layer, (min_i A[i, i], A[N-1, N-1], max row deficit)."""
    n = geo.num_tokens

    def layer(v, params):
        lam, idx, d, s, w = params
        e, ef, es, z, deficit = head_weights(past_tables[idx], future_tables[idx], d, s, geo)
        u = jnp.zeros((idx.shape[0], geo.padded), v.dtype).at[:, :n].set(w[:, None] * v[None, :n] / z)
        av = correlate(u, e, ef, es, geo)
        self_w = (w[:, None] * jnp.where(jnp.arange(n) == 0, es[:, :1], e[:, :1]) / z).sum(axis=0)
        return (1.0 - lam) * v + lam * av, (self_w.min(), self_w[n - 1], deficit)

    return jax.lax.scan(layer, v, layers, reverse=True)


_JITTED = {}


def run(v, layers, past_tables, future_tables, geo: Geometry):
    """jit(layers_scan) for this geometry (compiled once per shape)."""
    fn = _JITTED.get(geo)
    if fn is None:
        fn = _JITTED[geo] = jax.jit(lambda v, layers, p, f: layers_scan(v, layers, p, f, geo))
    return fn(v, layers, past_tables, future_tables)
