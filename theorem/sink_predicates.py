"""Numeric predicates of the C8 claims (the attention sink as diagonal content), on NumPy arrays, for
``theorem.claims``. S_K is ``posbias.numerics.sink_transform.sink_to_diagonal``; K is the sink set.

* ``c8a(weights, sinks, mask)``: with A the masked row softmax of the logits s = log(weights), S_K(A) is
  row-stochastic, zero wherever the mask forbids, and equal to the masked row softmax of the logits formed
  from the statement (keys of K at -inf, s'_ii = log(e^{s_ii} + sum_K e^{s_ik}), built here densely with
  ``numpy.logaddexp``, not through ``sink_logits``);
* ``c8b(kernels, lambdas, sinks)``: the profile of the stack with every layer transformed sits later:
  p ≼ p_S;
* ``c8c(P_S, kernels, lambdas, sinks)``: P_S (the transformed stack's product) has no mass on K in the
  rows outside K, and on J = {positions outside K}, j0 = min J, for i in J, i != j0:
  prod_t (1 - lambda_t (1 - eps_t)) <= P_S[i, i] <= 1 - P_S[i, j0] <= prod_t (1 - lambda_t eps_t), with
  eps_t the least allowed (causal) entry of A^(t) on J x J: C5(c)'s sandwich with j0 in token 0's role.

Float64, absolute tolerance ``tol`` (1e-10) on probabilities and CDFs.

>>> import numpy as np
>>> uniform = np.tril(np.ones((3, 3))) / np.arange(1, 4)[:, None]
>>> c8b(np.stack([uniform, uniform]), np.array([0.5, 0.5]), [0])
True
"""

from __future__ import annotations

import numpy as np

from posbias.theorem import orders

TOL = 1e-10


def _softmax(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    x = np.where(mask, logits, -np.inf)
    top = np.max(x, axis=-1, keepdims=True)
    e = np.where(mask, np.exp(x - np.where(np.isfinite(top), top, 0.0)), 0.0)
    return e / e.sum(axis=-1, keepdims=True)


def c8a(weights, sinks, mask=None, tol: float = TOL) -> bool:
    """S_K(softmax(log w)) is row-stochastic, respects the mask, and is the softmax of the raised-diagonal logits."""
    from posbias.numerics.sink_transform import sink_to_diagonal

    w = np.asarray(weights, dtype=np.float64)
    n = w.shape[-1]
    mask = np.ones((n, n), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    allowed = mask & (w > 0)
    with np.errstate(divide="ignore"):
        logits = np.where(allowed, np.log(np.where(w > 0, w, 1.0)), -np.inf)
    kernel = _softmax(logits, allowed)
    moved = sink_to_diagonal(kernel, sinks)
    keys = sorted(set(int(k) for k in sinks))
    raised = logits.copy()
    for i in range(n):
        if i in keys:
            continue
        raised[i, i] = np.logaddexp.reduce([logits[i, i], *(logits[i, k] for k in keys)])
        raised[i, keys] = -np.inf
    target = _softmax(raised, np.isfinite(raised))
    stochastic = np.allclose(moved.sum(axis=-1), 1.0, atol=tol, rtol=0)
    respects = bool(np.all(np.abs(np.where(mask, 0.0, moved)) <= tol))
    return bool(stochastic and respects and np.allclose(moved, target, atol=tol, rtol=0))


def c8b(kernels, lambdas, sinks, tol: float = TOL) -> bool:
    """p ≼ p_S: the last row of the transformed stack's product sits later than the original's."""
    from posbias.numerics.sink_transform import sink_to_diagonal

    kernels = np.asarray(kernels, dtype=np.float64)
    p = orders.rollout(kernels, np.asarray(lambdas, dtype=np.float64))[-1]
    p_s = orders.rollout(sink_to_diagonal(kernels, sinks), np.asarray(lambdas, dtype=np.float64))[-1]
    return orders.dominated(p, p_s, tol)


def c8c(pmat, kernels, lambdas, sinks, tol: float = TOL) -> bool:
    """No mass on K outside K's rows, and C5(c)'s sandwich on J = the positions outside K."""
    pmat, kernels = np.asarray(pmat, dtype=np.float64), np.asarray(kernels, dtype=np.float64)
    lambdas = np.asarray(lambdas, dtype=np.float64)
    n = kernels.shape[-1]
    keys = sorted(set(int(k) for k in sinks))
    rest = [i for i in range(n) if i not in keys]
    if not rest:
        return False
    if np.any(np.abs(pmat[np.ix_(rest, keys)]) > tol):
        return False
    block = kernels[:, rest][:, :, rest]
    low = np.tril(np.ones((len(rest), len(rest)), dtype=bool))
    eps = np.where(low, block, np.inf).min(axis=(1, 2))
    lower, upper = np.prod(1 - lambdas * (1 - eps)), np.prod(1 - lambdas * eps)
    j0 = rest[0]
    for i in rest[1:]:
        d, off = pmat[i, i], 1 - pmat[i, j0]
        if not (d >= lower - tol and d <= off + tol and off <= upper + tol):
            return False
    return True
