"""The bias engine's extended range in XLA: the layer recursion in log space (THEORY.md C7(a)).

Head h of a layer (logit tables already divided by tau, as in numerics/_bias_scan.py) has
logits L[i, j] = b(i - j) + d [i = j] + s [j = 0] for 0 <= i - j <= R (R the window's reach),
b_future(j - i) for i < j < K (the bidirectional length), -inf elsewhere; its kernel in log
space is log A[i, j] = L[i, j] - logsumexp_j L[i, j], so no row ever leaves float64's range,
whatever the deficit between rows. With log u = log v (the walk vector in log space):

    log (vA)_j = logsumexp_{h, i} (log w_h + log v_i + log A_h[i, j]),
    log v' = logaddexp(log(1 - lambda) + log v, log lambda + log (vA)).

Each head's (N, N) log-kernel is formed in turn (O(N^2) memory per head, O(T H N^2)
exponentials in all): this is the fallback where the native log-space kernel is not available
(a GPU, no C compiler), at the native mode's accuracy: absolute error O(T eps (N + |log p|)) in
log p (every layer rounds log values of size |log p|). Float64 only.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp


def head_log_kernel(past, future, diagonal, sink, num_tokens: int, reach: int, bidirectional: int):
    """log A (N, N) of one head from its (N,) past and future logit tables."""
    n = num_tokens
    i = jnp.arange(n)[:, None]
    j = jnp.arange(n)[None, :]
    g = i - j
    seen = (g >= 0) & (g <= reach)
    logits = jnp.where(seen, past[jnp.clip(g, 0, n - 1)], -jnp.inf)
    logits = logits + jnp.where(g == 0, diagonal, 0.0) + jnp.where(seen & (j == 0), sink, 0.0)
    if bidirectional > 1:
        later = (g < 0) & (i < bidirectional) & (j < bidirectional)
        logits = jnp.where(later, future[jnp.clip(-g, 0, n - 1)], logits)
    return logits - logsumexp(logits, axis=1, keepdims=True)


def log_layers_scan(logv, layers, past_tables, future_tables, num_tokens: int, reach: int, bidirectional: int):
    """Apply layers (lambda (T,), index (T, H), d, s, w (T, H)) top-down to log v (N,); returns log v
    and, per layer, (min_i A[i, i], A[N-1, N-1]) of the head-weighted kernel."""
    n = num_tokens

    def layer(logv, params):
        lam, idx, d, s, w = params

        def head(carry, h):
            acc, self_w = carry
            log_a = head_log_kernel(past_tables[idx[h]], future_tables[idx[h]], d[h], s[h], n, reach, bidirectional)
            contrib = logsumexp(jnp.log(w[h]) + logv[:, None] + log_a, axis=0)
            return (jnp.logaddexp(acc, contrib), self_w + w[h] * jnp.exp(jnp.diagonal(log_a))), None

        start = (jnp.full(n, -jnp.inf, logv.dtype), jnp.zeros(n, logv.dtype))
        (log_va, self_w), _ = jax.lax.scan(head, start, jnp.arange(idx.shape[0]))
        new = jnp.logaddexp(jnp.log1p(-lam) + logv, jnp.log(lam) + log_va)
        return new, (self_w.min(), self_w[n - 1])

    return jax.lax.scan(layer, logv, layers, reverse=True)


_JITTED: dict = {}


def run(logv, layers, past_tables, future_tables, num_tokens: int, reach: int, bidirectional: int):
    """jit(log_layers_scan) for this shape (compiled once per (N, reach, K))."""
    key = (num_tokens, reach, bidirectional)
    fn = _JITTED.get(key)
    if fn is None:
        fn = _JITTED[key] = jax.jit(lambda v, layers, p, f: log_layers_scan(v, layers, p, f, *key))
    return fn(logv, layers, past_tables, future_tables)
