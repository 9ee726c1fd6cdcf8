"""Hausdorff matrices and the symbolic closed form of the Cesàro rollout (THEORY.md, "An exact closed form").

The Cesàro kernel C[i, j] = 1/(i+1) for j <= i is the Hausdorff matrix of the moment sequence
1/(k+1), the identity is the Hausdorff matrix of 1, where

    H(mu)[i, j] = C(i, j) sum_{m=0}^{i-j} (-1)^m C(i-j, m) mu_{j+m}     (j <= i), 0 otherwise,

and H(mu) = Δ diag(mu) Δ with Δ[i, j] = (-1)^j C(i, j), Δ^2 = I. H is linear in mu and
H(a) H(b) = H(a b) (pointwise product), so every layer (1 - λ_t) I + λ_t C = H(1 - λ_t k/(k+1))
and the rollout is P = H(mu), mu_k = prod_t (1 - λ_t k/(k+1)): layer order does not matter (mu is
symmetric in the λ_t). The proofs are proofs/cesaro.md, checked by posbias.theorem.cesaro_certificates.

The expressions are exact SymPy; ``jax_profile`` / ``jax_moments`` lambdify them for float64
evaluation, which is trustworthy only for small N (the alternating sum cancels terms of size
2^(N-1)); posbias.theorem.cesaro_exact evaluates the same sum exactly in integers.

Examples
--------
>>> hausdorff_matrix([1, sp.Rational(1, 2)]) == cesaro_matrix(2)
True
>>> signed_binomial(3) ** 2 == sp.eye(3)
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sympy as sp


def hausdorff_matrix(moments: Sequence) -> sp.Matrix:
    """H(mu) of size N = len(moments): H[i, j] = C(i,j) Σ_m (-1)^m C(i-j,m) mu_{j+m}, j <= i."""
    n = len(moments)
    mu = [sp.sympify(m) for m in moments]

    def entry(i, j):
        if j > i:
            return sp.Integer(0)
        return sp.binomial(i, j) * sum((-1) ** m * sp.binomial(i - j, m) * mu[j + m] for m in range(i - j + 1))

    return sp.Matrix(n, n, entry)


def cesaro_matrix(num_tokens: int) -> sp.Matrix:
    """C[i, j] = 1/(i+1) for j <= i, else 0."""
    return sp.Matrix(num_tokens, num_tokens, lambda i, j: sp.Rational(1, i + 1) if j <= i else 0)


def layer_moment(k, lam):
    """The moment sequence of (1 - λ) I + λ C: 1 - λ k/(k+1)."""
    return 1 - lam * sp.Rational(k, k + 1) if isinstance(k, int) else 1 - lam * k / (k + 1)


def moment_expr(k, lambdas: Sequence) -> sp.Expr:
    """mu_k = prod_t (1 - λ_t k/(k+1)) as a SymPy expression in the given λ's."""
    return sp.Mul(*[layer_moment(k, lam) for lam in lambdas])


def profile_exprs(num_tokens: int, lambdas: Sequence) -> list[sp.Expr]:
    """[p(0), ..., p(N-1)] as SymPy expressions (unexpanded closed form) in the λ's."""
    n = num_tokens
    mu = [moment_expr(k, lambdas) for k in range(n)]
    return [
        sp.binomial(n - 1, j) * sp.Add(*[(-1) ** i * sp.binomial(n - 1 - j, i) * mu[j + i] for i in range(n - j)])
        for j in range(n)
    ]


def jax_profile(num_tokens: int, num_layers: int) -> Callable:
    """``f(lambdas[T]) -> p[N]``: the closed form lambdified with ``modules="jax"``.

    Float64 evaluation of the alternating sum is only trustworthy for small N
    (cancellation of terms of size 2^(N-1)); use ``exact_profile`` otherwise.
    """
    import jax.numpy as jnp

    syms = sp.symbols(f"lambda_0:{num_layers}")
    f = sp.lambdify([syms], profile_exprs(num_tokens, syms), modules="jax")
    return lambda lambdas: jnp.stack(jnp.broadcast_arrays(*f(lambdas)))


def jax_moments(num_tokens: int, num_layers: int) -> Callable:
    """``f(lambdas[T]) -> mu[N]`` lambdified with ``modules="jax"``."""
    import jax.numpy as jnp

    syms = sp.symbols(f"lambda_0:{num_layers}")
    f = sp.lambdify([syms], [moment_expr(k, syms) for k in range(num_tokens)], modules="jax")
    return lambda lambdas: jnp.stack(jnp.broadcast_arrays(*f(lambdas)))


def signed_binomial(num_tokens: int) -> sp.Matrix:
    """Δ[i, j] = (-1)^j C(i, j) (lower-triangular, N x N); H(mu) = Δ diag(mu) Δ and Δ^2 = I."""
    return sp.Matrix(num_tokens, num_tokens, lambda i, j: (-1) ** j * sp.binomial(i, j))
