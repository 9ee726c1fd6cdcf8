"""The attention sink as diagonal content: the transform S_K of a kernel (issue 35, part 1).

A head that parks a row's weight on a sink key (the first token, or [CLS] / [SEP] in an encoder) mixes
little of that key's value into the row: in rollout terms the row stays where it is. For a sink set K of
key positions and a row-stochastic kernel A (N x N), S_K(A) moves, in every row i not in K, the mass on
the keys of K to the diagonal:

    S_K(A)_ik = 0                           for k in K,
    S_K(A)_ii = A_ii + sum_{k in K} A_ik,
    S_K(A)_ij = A_ij                        for every other j,

and leaves the rows i in K as they are. Row sums are unchanged, so S_K(A) is row-stochastic whenever A
is; entries only move to the diagonal, which every mask allows, so a causal A stays causal.

For a softmax kernel A_ij = exp(s_ij) / Z_i (masked entries s_ij = -inf), S_K(A) is again a softmax
kernel, of the logits ``sink_logits``: s'_ik = -inf for k in K and s'_ii = log(exp(s_ii) + sum_{k in K}
exp(s_ik)) in the rows i not in K, the rest unchanged. The normaliser is the same sum Z_i, so the identity
is exact: the sink becomes a raised diagonal logit, a content term on the diagonal in the paper's sense.

Floating point: ``sink_to_diagonal`` adds at most |K| + 1 numbers per row (float64 round-off ~1e-16
relative); ``sink_logits`` uses ``numpy.logaddexp`` (no overflow for large logits).

Examples
--------
>>> import numpy as np
>>> a = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.5, 0.25, 0.25]])
>>> sink_to_diagonal(a).tolist()
[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.25, 0.75]]
>>> with np.errstate(divide="ignore"):
...     logits = np.log(a)                     # a softmax kernel: its rows sum to 1 already
>>> np.allclose(np.exp(sink_logits(logits)), sink_to_diagonal(a))   # the softmax identity
True
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def sink_set(sinks: Iterable[int], num_tokens: int) -> np.ndarray:
    """The sorted key positions of ``sinks`` as an index array; ``ValueError`` (one line) for an empty set, a
    repeated position or one outside 0 .. N-1."""
    keys = [int(k) for k in sinks]
    if not keys:
        raise ValueError("sink set: expected at least one key position")
    if len(set(keys)) != len(keys):
        raise ValueError(f"sink set: a key position is repeated in {keys}")
    outside = [k for k in keys if not 0 <= k < num_tokens]
    if outside:
        raise ValueError(f"sink set: key {outside[0]} lies outside the window 0..{num_tokens - 1}")
    return np.array(sorted(keys), dtype=np.intp)


def sink_to_diagonal(kernels, sinks: Iterable[int] = (0,)) -> np.ndarray:
    """S_K of (..., N, N) kernels (module docstring), float64: in every row i not in K the mass on the keys
    of K moved to the diagonal; the rows in K unchanged."""
    a = np.array(kernels, dtype=np.float64)
    n = a.shape[-1]
    keys = sink_set(sinks, n)
    rows = np.setdiff1d(np.arange(n), keys)
    moved = a[..., rows[:, None], keys[None, :]].sum(axis=-1)  # (..., rows)
    a[..., rows[:, None], keys[None, :]] = 0.0
    a[..., rows, rows] += moved
    return a


def sink_logits(logits, sinks: Iterable[int] = (0,)) -> np.ndarray:
    """The logits whose softmax is S_K(softmax(logits)) (module docstring), float64: in every row i not in
    K the keys of K set to -inf and the diagonal raised to log(exp(s_ii) + sum_{k in K} exp(s_ik))."""
    s = np.array(logits, dtype=np.float64)
    n = s.shape[-1]
    keys = sink_set(sinks, n)
    rows = np.setdiff1d(np.arange(n), keys)
    with np.errstate(divide="ignore"):  # a masked sink entry (-inf) adds exp(-inf) = 0
        gathered = np.logaddexp.reduce(s[..., rows[:, None], keys[None, :]], axis=-1)
    s[..., rows, rows] = np.logaddexp(s[..., rows, rows], gathered)
    s[..., rows[:, None], keys[None, :]] = -np.inf
    return s
