"""The straightforward dense float64 NumPy rollout: the baseline posbias is measured against.

Exactly what the reference implementation's cost model is: per layer, H dense
N x N head matrices (masked row softmax of content + ALiBi logits), their
weighted average A^(t), R^(t) = (1 - lambda_t) I + lambda_t A^(t), and full
N x N products P <- R^(t) P. Time O(T H N^2 + T N^3), memory O(H N^2).
Causal masks only (what the benchmark configs use).
"""

from __future__ import annotations

import numpy as np


def dense_profile(lambdas, slopes, diagonal, head_weights, temperature, num_tokens):
    """Last row of P = R^(T-1) ... R^(0), renormalised; arrays (T,), (T, H), (T, H), (T, H)."""
    n = num_tokens
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    allowed = j <= i
    distance = (i - j).astype(np.float64)
    p = np.eye(n)
    for t in range(len(lambdas)):
        heads = []
        for h in range(slopes.shape[1]):
            logits = diagonal[t, h] * np.eye(n) - slopes[t, h] * distance
            logits = np.where(allowed, logits / temperature, -np.inf)
            logits -= logits.max(axis=1, keepdims=True)
            e = np.exp(logits)
            heads.append(e / e.sum(axis=1, keepdims=True))
        a = np.tensordot(head_weights[t], np.stack(heads), axes=1)
        r = (1.0 - lambdas[t]) * np.eye(n) + lambdas[t] * a
        p = r @ p
    row = p[-1]
    return row / row.sum()


if __name__ == "__main__":  # whole-process baseline: python benchmarks/dense_baseline.py CONFIG
    import sys

    from posbias.config import load

    loaded = load(sys.argv[1])
    s = loaded.stack
    prof = dense_profile(s.lambdas, s.slopes, s.diagonal, s.head_weights, s.temperature, loaded.num_tokens)
    print(f"p(0) = {prof[0]:.6g}  argmin = {int(np.argmin(prof))}")
