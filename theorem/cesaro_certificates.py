"""Certificates of the Cesàro closed form (claim "cesaro", THEORY.md "An exact closed form"; proofs/cesaro.md).

Each re-derives one step of the proof in SymPy: C = H(1/(k+1)) and I = H(1); the product rule
H(a) H(b) = H(a b) through H(mu) = Δ diag(mu) Δ, Δ^2 = I; the residual layer
(1 - λ) I + λ C = H(1 - λ k/(k+1)); the rollout P = H(mu) and its last row; layer order; collapse
p -> e_0 iff Σ_t λ_t = ∞ (C5(c)); and the integer evaluator of posbias.theorem.cesaro_exact against
the exact matrix product. Symbolic in i, j, m where SymPy can decide it, else exact for N up to a
stated size; no floats.

Examples
--------
>>> layer_order_irrelevant(3).holds
True
"""

from __future__ import annotations

from fractions import Fraction

import sympy as sp

from posbias.theorem.certificate import Check, certificate, check
from posbias.theorem.cesaro_exact import exact_profile
from posbias.theorem.hausdorff import (
    cesaro_matrix,
    hausdorff_matrix,
    layer_moment,
    moment_expr,
    profile_exprs,
    signed_binomial,
)


def _is_zero_matrix(m: sp.Matrix) -> bool:
    return all(sp.expand(sp.together(e)) == 0 for e in m)


@certificate("cesaro:hausdorff-of-cesaro", claims=("cesaro",))
def hausdorff_of_cesaro(max_n: int = 8) -> Check:
    """C = H(1/(k+1)) for every N (symbolic j and n = i - j: C(j+n, j) sum_m (-1)^m C(n, m)/(j+m+1)
    = 1/(j+n+1), a Beta integral SymPy evaluates), and C = H(1/(k+1)), I = H(1) exactly, N <= max_n
    (step 1 of proofs/cesaro.md; H(1) = I for every N is part of cesaro:hausdorff-factorisation)."""
    j, m, n = sp.symbols("j m n", integer=True, nonnegative=True)
    entry = sp.binomial(j + n, j) * sp.Sum((-1) ** m * sp.binomial(n, m) / (j + m + 1), (m, 0, n)).doit()
    general = sp.simplify(sp.gammasimp(entry) - 1 / (j + n + 1)) == 0
    finite = all(
        hausdorff_matrix([sp.Rational(1, k + 1) for k in range(n)]) == cesaro_matrix(n)
        and hausdorff_matrix([1] * n) == sp.eye(n)
        for n in range(1, max_n + 1)
    )
    return check(
        general and finite,
        f"H(1/(k+1))[i, j] = 1/(i+1) for j <= i, symbolic i, j; H(1/(k+1)) = C and H(1) = I exactly for N = 1..{max_n}",
    )


@certificate("cesaro:hausdorff-product-rule", claims=("cesaro",))
def hausdorff_product_rule(max_n: int = 6) -> Check:
    """H(a) H(b) = H(a b) for symbolic moment sequences, N <= max_n (Hausdorff matrices commute)."""
    ok = True
    for n in range(1, max_n + 1):
        a = sp.symbols(f"a0:{n}")
        b = sp.symbols(f"b0:{n}")
        ab = [a[k] * b[k] for k in range(n)]
        ok &= _is_zero_matrix(hausdorff_matrix(a) * hausdorff_matrix(b) - hausdorff_matrix(ab))
    return check(bool(ok), f"H(a) H(b) = H(a·b) for symbolic sequences a, b, N = 1..{max_n} (hence H's commute)")


@certificate("cesaro:hausdorff-factorisation", claims=("cesaro",))
def hausdorff_factorisation(max_n: int = 7) -> Check:
    """The product rule for every N, symbolic: with Δ[i, k] = (-1)^k C(i, k),
    (Δ diag(mu) Δ)[i, j] = sum_k (-1)^(k+j) C(i, k) C(k, j) mu_k (only j <= k <= i survive), and with
    k = j + m the summand is C(i, j) (-1)^m C(i-j, m) mu_{j+m}: H(mu) = Δ diag(mu) Δ, because
    C(i, j+m) C(j+m, j) = C(i, j) C(i-j, m) (symbolic i, j, m). With mu = 1, Δ^2 = H(1) and
    H(1)[i, j] = C(i, j) sum_m (-1)^m C(i-j, m) = C(i, j) (1 - 1)^(i-j) = [i = j] (symbolic n = i - j >= 1).
    Hence H(a) H(b) = Δ diag(a) Δ Δ diag(b) Δ = Δ diag(a b) Δ = H(a b), for every N.
    Cross-check: the matrix identities for N <= max_n with symbolic mu."""
    i, j, m, n = sp.symbols("i j m n", integer=True, nonnegative=True)
    mu = sp.Function("mu")
    ratio = (sp.binomial(i, j + m) * sp.binomial(j + m, j)) / (sp.binomial(i, j) * sp.binomial(i - j, m))
    binomial_identity = sp.gammasimp(sp.combsimp(ratio)) == 1
    lhs = (-1) ** (j + m) * (-1) ** j * sp.binomial(i, j + m) * sp.binomial(j + m, j) * mu(j + m)  # k = j + m
    rhs = sp.binomial(i, j) * (-1) ** m * sp.binomial(i - j, m) * mu(j + m)
    summand = sp.simplify(sp.combsimp(lhs / rhs)) == 1
    alternating = sp.simplify(sp.Sum((-1) ** m * sp.binomial(n + 1, m), (m, 0, n + 1)).doit()) == 0
    finite = True
    for size in range(1, max_n + 1):
        delta = signed_binomial(size)
        moments = sp.symbols(f"mu0:{size}")
        finite &= delta * delta == sp.eye(size)
        finite &= _is_zero_matrix(delta * sp.diag(*moments) * delta - hausdorff_matrix(moments))
    ok = binomial_identity and summand and alternating and bool(finite)
    return check(
        ok,
        "H(mu) = Δ diag(mu) Δ and Δ^2 = I for every N (symbolic i, j, m): the Hausdorff product rule "
        "H(a) H(b) = H(a b) holds for every N",
        f"C(i,j+m) C(j+m,j) = C(i,j) C(i-j,m): {binomial_identity}; summand after k = j + m: {summand}; "
        f"sum_m (-1)^m C(n+1, m) = 0: {alternating}; matrix identities N = 1..{max_n}: {bool(finite)}",
    )


@certificate("cesaro:residual-layer", claims=("cesaro",))
def residual_layer(max_n: int = 6) -> Check:
    """H is linear in its moments (entry formula, symbolic i - j = n, j, sequences a, b, weights) and
    (1 - λ) + λ/(k+1) = 1 - λ k/(k+1), so (1 - λ) I + λ C = H(1 - λ k/(k+1)) for every N; exactly for
    symbolic λ, N <= max_n."""
    lam = sp.Symbol("lambda")
    j, m, n, k = sp.symbols("j m n k", integer=True, nonnegative=True)
    a_seq, b_seq = sp.Function("a"), sp.Function("b")
    alpha, beta = sp.symbols("alpha beta")
    h_entry = lambda f: sp.binomial(j + n, j) * sp.Sum((-1) ** m * sp.binomial(n, m) * f(j + m), (m, 0, n))  # noqa: E731
    linear = (
        sp.simplify(
            h_entry(lambda q: alpha * a_seq(q) + beta * b_seq(q)) - alpha * h_entry(a_seq) - beta * h_entry(b_seq)
        )
        == 0
    )
    moment = sp.simplify((1 - lam) + lam / (k + 1) - layer_moment(k, lam)) == 0
    ok = (
        linear
        and moment
        and all(
            _is_zero_matrix(
                (1 - lam) * sp.eye(n)
                + lam * cesaro_matrix(n)
                - hausdorff_matrix([layer_moment(k, lam) for k in range(n)])
            )
            for n in range(1, max_n + 1)
        )
    )
    return check(
        ok,
        f"H is linear in its moments and (1-λ)·1 + λ/(k+1) = 1 - λk/(k+1) (symbolic); "
        f"(1-λ) I + λ C = H(1 - λ k/(k+1)) for symbolic λ, N = 1..{max_n}",
    )


@certificate("cesaro:rollout-closed-form", claims=("cesaro",))
def rollout_closed_form(max_n: int = 5, num_layers: int = 3) -> Check:
    """P = H(mu), mu_k = Π_t (1 - λ_t k/(k+1)), and its last row is the p(j) formula (symbolic λ)."""
    lams = sp.symbols(f"lambda_0:{num_layers}")
    ok = True
    for n in range(1, max_n + 1):
        p = sp.eye(n)
        for lam in lams:  # P = R^(T-1) ... R^(0)
            p = ((1 - lam) * sp.eye(n) + lam * cesaro_matrix(n)) * p
        ok &= _is_zero_matrix(p - hausdorff_matrix([moment_expr(k, lams) for k in range(n)]))
        ok &= _is_zero_matrix(p[n - 1, :] - sp.Matrix([profile_exprs(n, lams)]))
    return check(
        bool(ok),
        f"R^(2) R^(1) R^(0) = H(mu), mu_k = Π_t (1 - λ_t k/(k+1)), and its last row is the "
        f"p(j) formula, symbolic λ_0..λ_{num_layers - 1}, N = 1..{max_n}",
    )


@certificate("cesaro:layer-order-irrelevant", claims=("cesaro",))
def layer_order_irrelevant(n: int = 6) -> Check:
    """R(λ_0) R(λ_1) = R(λ_1) R(λ_0) symbolically: layer order does not matter."""
    l0, l1 = sp.symbols("lambda_0 lambda_1")
    r0 = (1 - l0) * sp.eye(n) + l0 * cesaro_matrix(n)
    r1 = (1 - l1) * sp.eye(n) + l1 * cesaro_matrix(n)
    ok = _is_zero_matrix(r0 * r1 - r1 * r0)
    return check(ok, f"R(λ_0) R(λ_1) = R(λ_1) R(λ_0) symbolically (N = {n}); in general mu is symmetric in λ_t")


@certificate("cesaro:collapse-iff-divergence", claims=("cesaro",))
def collapse_iff_divergence(max_n: int = 8) -> Check:
    """λ/2 <= λ k/(k+1) <= λ for k >= 1 (mu_k -> 0 iff Σλ_t = ∞), and H(1, 0, ..., 0) has last row e_0 (C5(c))."""
    lam, m = sp.Symbol("lambda", nonnegative=True), sp.Symbol("m", nonnegative=True)
    k = m + 1  # k >= 1
    x = lam * k / (k + 1)
    # λ/2 <= λk/(k+1) <= λ for k >= 1: both gaps are nonnegative.
    sandwich = bool(sp.factor(x - lam / 2).is_nonnegative and sp.factor(lam - x).is_nonnegative)
    # collapse moments (1, 0, 0, ...) give the point mass at token 0.
    point_mass = all(
        [hausdorff_matrix([1] + [0] * (n - 1))[n - 1, q] for q in range(n)] == [1] + [0] * (n - 1)
        for n in range(1, max_n + 1)
    )
    return check(
        sandwich and point_mass,
        "for k >= 1, λ_t/2 <= λ_t k/(k+1) <= λ_t (so mu_k -> 0 iff Σλ_t = ∞ by the product bounds "
        "1-x <= e^{-x}, 1-x >= e^{-x/(1-x)} of theorem.dichotomy_certificates), and H(1,0,...,0) has last row "
        f"e_0 (N = 1..{max_n}): collapse p -> e_0 iff Σλ_t = ∞ (C5(c))",
    )


@certificate("cesaro:integer-evaluator", claims=("cesaro",))
def integer_evaluator(n: int = 7) -> Check:
    """``exact_profile`` (integer difference table) equals the exact matrix product for five λ."""
    lams = [Fraction(1, 3), Fraction(7, 10), Fraction(1, 1), Fraction(0), Fraction(2, 9)]
    cm = cesaro_matrix(n)
    p = sp.eye(n)
    for lam in lams:
        q = sp.Rational(lam.numerator, lam.denominator)
        p = ((1 - q) * sp.eye(n) + q * cm) * p
    want = [Fraction(int(v.p), int(v.q)) for v in p[n - 1, :]]
    got = exact_profile(lams, n).fractions()
    return check(
        got == want,
        f"the integer difference-table evaluator equals the exact matrix product (N = {n}, "
        f"λ = {', '.join(map(str, lams))})",
    )
