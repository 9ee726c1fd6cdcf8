"""Independent NumPy (and exact Fraction) routes to the objects the claims speak about,
used by the properties' checks and by model mode (THEORY.md Notation):

* ``alibi_layer_kernel`` / ``alibi_kernels``: A^(t) = sum_h w_h masked-softmax((d_h [i = j]
  - m_h |i - j|) / tau), formed densely without the engines;
* ``last_row``: p = e_{N-1}^T R^(T-1) ... R^(0) with R^(t) = (1 - lambda_t) I + lambda_t A^(t),
  exact on Fractions;
* ``exact_alibi``: the causal ALiBi kernel with rational r = e^{-m};
* ``engine_profile``: the structured engine's p (the route under test);
* ``with_layer``, ``dominated``: one layer changed, and the first-order stochastic order
  mu ≼ nu (THEORY.md Orders: F_mu(k) >= F_nu(k) for every k) by posbias.theorem.orders, which
  also gives the CDF gap (``cdf_gap``) the explanations print.

Examples
--------
>>> from fractions import Fraction
>>> a = exact_alibi(Fraction(1, 2), 3)
>>> [str(x) for x in a[2]]
['1/7', '2/7', '4/7']
>>> [str(x) for x in last_row(np.stack([a]), [Fraction(1, 2)])]
['1/14', '1/7', '11/14']
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np


def alibi_layer_kernel(stack, t: int, n: int, *, slopes=None, diagonal=None) -> np.ndarray:
    """A^(t) in NumPy: sum_h w_h masked-softmax((d_h [i = j] - m_h |i - j|) / tau) (THEORY.md
    Notation), independent of the engines. slopes / diagonal: (H,) overrides (unscaled)."""
    from posbias.numerics.masks import allowed

    m = (stack.slopes[t] if slopes is None else np.asarray(slopes, np.float64)) / stack.temperature
    d = (stack.diagonal[t] if diagonal is None else np.asarray(diagonal, np.float64)) / stack.temperature
    ok = allowed(stack.mask, n)
    dist = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :]).astype(np.float64)
    out = np.zeros((n, n))
    eye = np.eye(n)
    for mh, dh, wh in zip(m, d, stack.head_weights[t]):
        if wh == 0:
            continue
        x = np.where(ok, dh * eye - mh * dist, -np.inf)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        out += wh * e / e.sum(axis=1, keepdims=True)
    return out


def alibi_kernels(stack, n: int) -> np.ndarray:
    """(T, N, N) kernels of an AlibiStack by ``alibi_layer_kernel``."""
    return np.stack([alibi_layer_kernel(stack, t, n) for t in range(stack.num_layers)])


def last_row(kernels, lambdas) -> np.ndarray:
    """p = e_{N-1}^T R^(T-1) ... R^(0), O(T N^2); exact when given Fractions (object arrays)."""
    kernels = np.asarray(kernels)
    n = kernels.shape[-1]
    exact = kernels.dtype == object
    v = np.array([Fraction(0)] * (n - 1) + [Fraction(1)], dtype=object) if exact else np.eye(n)[-1]
    for a, lam in zip(kernels[::-1], list(lambdas)[::-1]):
        v = (1 - lam) * v + lam * (v @ a)
    return v


def engine_profile(stack, n: int) -> np.ndarray:
    """The structured engine's profile (O(T H N)); the XLA route where the C kernel cannot run."""
    from posbias.numerics import Structured

    return np.asarray(Structured().profile(stack, n).probabilities, np.float64)


def exact_alibi(r: Fraction, n: int) -> np.ndarray:
    """Causal ALiBi kernel with r = e^{-m} rational and d = 0: K[i, j] = r^{i-j} / sum_{g<=i} r^g."""
    out = np.empty((n, n), dtype=object)
    out[...] = Fraction(0)
    for i in range(n):
        total = sum(r**g for g in range(i + 1))
        for j in range(i + 1):
            out[i, j] = r ** (i - j) / total
    return out


def with_layer(stack, t: int, **changes):
    """The stack with layer t's slopes / diagonal / lambda replaced (validated)."""
    from posbias.numerics.stack import AlibiStack

    lambdas, slopes, diag = stack.lambdas.copy(), stack.slopes.copy(), stack.diagonal.copy()
    if "lam" in changes:
        lambdas[t] = changes["lam"]
    if "slopes" in changes:
        slopes[t] = changes["slopes"]
    if "diagonal" in changes:
        diag[t] = changes["diagonal"]
    return AlibiStack.build(lambdas, slopes, diag, stack.head_weights, stack.temperature, stack.mask)


def dominated(mu, nu, tol=1e-10) -> bool:
    """mu ≼ nu (THEORY.md Orders) up to ``tol``, by ``posbias.theorem.orders.dominated``."""
    from posbias.theorem import orders

    return orders.dominated(mu, nu, tol)
