"""C6: where finite-depth profiles are U-shaped, and what is proved versus observed.

u_shape(p) (posbias.numerics.shape, the one definition): the minimum of p over the
interior lies strictly below both ends. It works on exact lists, so the witnesses
below are decided in rational arithmetic.

Proved here:
* Depth 1 is never U-shaped (any m >= 0, d, b, lambda). The depth-1 profile is built from the
  kernel: the logits of row N-1 are b + d [j = N-1] - m (N-1-j), A(N-1, ·) is their row softmax,
  and p = e_{N-1} R = (1 - lambda) e_{N-1} + lambda A(N-1, ·). On 0 <= j < j+1 <= N-2 SymPy
  simplifies p(j+1)/p(j) to e^m = 1/r >= 1 with N and j symbolic (``single_layer``): p is
  non-decreasing on {0, ..., N-2}, so no interior point lies below p(0).
* Exact witnesses (rational arithmetic, so proofs for those parameters): U-shaped profiles for
  the uniform kernel (m = 0) and for r = 9/10 at depths 2-4 (``u_witnesses``).
* A steep slope does *not* make the profile monotone at depth: with N = 8, r = e^{-m} = 1/5,
  d = 0 the profile is non-decreasing for T < T*(lambda) and has a hump p(N-3) < p(N-2) > p(N-1)
  at T*(lambda) = 24, 12, 8, 5 for lambda = 1/4, 1/2, 3/4, 1; in particular at (T, lambda) =
  (8, 3/4), ending 0.2136, 0.3078, 0.2725, and at (16, 1/2) (``steep_witnesses``, ``steep_hump``).
Only observed numerically (not proved): the shape of the region of (m, d, lambda, T, N) where
U-shapes or humps occur; see proofs/C6.md.

Examples
--------
>>> u_shape(exact_profile_of(*U_CASES[0]))
True
>>> single_layer().holds
True
>>> [round(float(x), 4) for x in exact_profile_of(*HUMP_CASES[0])[-3:]]
[0.2136, 0.3078, 0.2725]
"""

from __future__ import annotations

from fractions import Fraction

import sympy as sp

from posbias.numerics.shape import u_shape
from posbias.theorem.alibi_row import exact_kernel
from posbias.theorem.certificate import Check, certificate, check
from posbias.theorem.exact import exact_profile

__all__ = [
    "FIRST_HUMP",
    "HUMP_CASES",
    "STEEP",
    "U_CASES",
    "depth_one_profile",
    "exact_profile_of",
    "non_decreasing",
    "single_layer",
    "steep_hump",
    "steep_witnesses",
    "u_shape",
    "u_witnesses",
]


def depth_one_profile(n, q, lam, m, d, b) -> sp.Expr:
    """p(q) = (e_{N-1} R)(q) = (1 - lam) [q = N-1] + lam A(N-1, q) for one ALiBi + content layer, built
    from the logits b + d [q = N-1] - m (N-1-q) of row N-1 and their softmax over 0..N-1 (unevaluated
    sum: it is the same object in every entry of the row)."""
    ell = lambda c: b + sp.Piecewise((d, sp.Eq(c, n - 1)), (0, True)) - m * (n - 1 - c)  # noqa: E731
    c = sp.Symbol("c", integer=True, nonnegative=True)
    z = sp.Sum(sp.exp(ell(c)), (c, 0, n - 1))
    return (1 - lam) * sp.Piecewise((1, sp.Eq(q, n - 1)), (0, True)) + lam * sp.exp(ell(q)) / z


@certificate("shape:single-layer", claims=("C6",))
def single_layer(max_tokens: int = 6) -> Check:
    """T = 1, derived from the kernel: p = (1 - lambda) e_{N-1} + lambda A(N-1, ·) with A the softmax of
    the ALiBi + content logits; for j + 1 <= N - 2 (N = j + 3 + x, j, x >= 0 symbolic)
    p(j+1)/p(j) = e^m = 1/r >= 1. Cross-check: for N <= max_tokens the last row of the symbolic
    kernel's residual step equals depth_one_profile entry by entry."""
    jj, x = sp.symbols("j x", integer=True, nonnegative=True)
    m = sp.Symbol("m", nonnegative=True)
    d, b = sp.symbols("d b", real=True)
    lam = sp.Symbol("lambda", positive=True)
    n = jj + 3 + x  # so that j < j + 1 <= N - 2
    p_j, p_next = depth_one_profile(n, jj, lam, m, d, b), depth_one_profile(n, jj + 1, lam, m, d, b)
    ratio = sp.simplify(p_next / p_j)
    ratio_ok = sp.simplify(ratio - sp.exp(m)) == 0
    positive = bool(p_j.is_positive)
    # e^m = 1/r >= 1 for m >= 0: with r = 1/(1+u), u >= 0, 1/r - 1 = u.
    u = sp.Symbol("u", nonnegative=True)
    r = sp.Symbol("r", positive=True)
    ge_one = sp.simplify((1 / r).subs(r, 1 / (1 + u)) - 1 - u) == 0
    # finite cross-check against the matrix: e_{N-1} ((1 - lam) I + lam softmax(logits)).
    matrix_ok = True
    for size in range(2, max_tokens + 1):
        logits = sp.Matrix(size, size, lambda a, c: b + (d if a == c else 0) - m * (a - c))
        kernel = sp.Matrix(
            size,
            size,
            lambda a, c, logits=logits: (
                sp.exp(logits[a, c]) / sum(sp.exp(logits[a, e]) for e in range(a + 1)) if c <= a else 0
            ),
        )
        row = ((1 - lam) * sp.eye(size) + lam * kernel)[size - 1, :]
        want = [depth_one_profile(sp.Integer(size), sp.Integer(c), lam, m, d, b).doit() for c in range(size)]
        matrix_ok &= all(sp.simplify(got - w) == 0 for got, w in zip(row, want))
    ok = ratio_ok and positive and ge_one and matrix_ok
    return check(
        ok,
        "C6: a single ALiBi + content layer never gives a U-shape: from the kernel, p = (1-λ) e_{N-1} + λ A(N-1,·) "
        "has p(j+1)/p(j) = e^m = 1/r >= 1 for j+1 <= N-2 (symbolic N, j, m, d, b, λ)",
        f"p(j+1)/p(j) = {ratio}; p(j) > 0: {positive}; matrix cross-check N = 2..{max_tokens}: {matrix_ok}",
    )


def exact_profile_of(n, r_val, d_exp, layers, lam) -> list:
    """The exact profile of ``layers`` identical ALiBi + content layers (r = e^{-m}, e^d, lambda), N = n."""
    a = exact_kernel(n, r_val, d_exp)
    return exact_profile([a] * layers, [lam] * layers)


def _fraction_kernel(n: int, r: Fraction, dexp: Fraction) -> list[list[Fraction]]:
    """A[i, j] = r^{i-j} / Z_i (j < i), e^d / Z_i (j = i), Z_i = e^d + sum_{g=1}^{i} r^g (Fractions)."""
    rows = []
    for i in range(n):
        z = dexp + sum((r**g for g in range(1, i + 1)), Fraction(0))
        rows.append([(dexp if c == i else r ** (i - c)) / z if c <= i else Fraction(0) for c in range(n)])
    return rows


def _fraction_profiles(n: int, r: Fraction, dexp: Fraction, lam: Fraction, max_layers: int) -> list[list[Fraction]]:
    """[p_1, ..., p_T]: the exact profiles of T = 1..max_layers identical layers (v <- v R, from e_{N-1})."""
    a = _fraction_kernel(n, r, dexp)
    v = [Fraction(0)] * (n - 1) + [Fraction(1)]
    out = []
    for _ in range(max_layers):
        v = [(1 - lam) * v[c] + lam * sum(v[i] * a[i][c] for i in range(c, n)) for c in range(n)]
        out.append(v)
    return out


def non_decreasing(p) -> bool:
    """p(0) <= p(1) <= ... <= p(N-1), exactly."""
    return all(b >= a for a, b in zip(p, p[1:]))


U_CASES = [  # (N, r, e^d, T, lambda): U-shaped, exactly
    (8, 1, 1, 2, sp.Rational(1, 2)),
    (8, 1, 1, 4, sp.Rational(1, 4)),
    (8, sp.Rational(9, 10), 1, 3, sp.Rational(1, 2)),
    (10, sp.Rational(9, 10), 1, 2, sp.Rational(3, 4)),
]
STEEP = (8, sp.Rational(1, 5), 1)  # (N, r = e^{-m}, e^d): m = log 5, d = 0
FIRST_HUMP = {Fraction(1, 4): 24, Fraction(1, 2): 12, Fraction(3, 4): 8, Fraction(1): 5}  # lambda -> T*(lambda)
HUMP_CASES = [(*STEEP, 8, sp.Rational(3, 4)), (*STEEP, 16, sp.Rational(1, 2))]  # (N, r, e^d, T, lambda)
HUMP_ENDS = ("0.2136", "0.3078", "0.2725")  # THEORY.md C6: the last three entries at HUMP_CASES[0], 4 decimals


@certificate("shape:u-witnesses", claims=("C6",))
def u_witnesses() -> Check:
    """C6: the profiles of ``U_CASES`` are U-shaped, exactly."""
    shapes = [u_shape(exact_profile_of(*case)) for case in U_CASES]
    return check(
        all(shapes),
        "C6: exact U-shaped profiles for m = 0 and r = 9/10 at depth 2-4 (N = 8, 10)",
        f"cases (N, r, e^d, T, lambda) = {U_CASES}: {shapes}",
    )


@certificate("shape:steep-witnesses", claims=("C6",))
def steep_witnesses() -> Check:
    """C6, shallow depth only: with r = 1/5 (``STEEP``) the profile is non-decreasing for every
    T < T*(lambda) and is not at T*(lambda) (``FIRST_HUMP``: 24, 12, 8, 5 for lambda = 1/4, 1/2, 3/4, 1)."""
    n, rv, dv = STEEP
    fails = []
    for lam, first in FIRST_HUMP.items():
        profiles = _fraction_profiles(n, Fraction(str(rv)), Fraction(str(dv)), lam, first)
        shallow = [t for t, p in enumerate(profiles[:-1], start=1) if not non_decreasing(p) or u_shape(p)]
        if shallow or non_decreasing(profiles[-1]):
            fails.append((str(lam), shallow, first))
    return check(
        not fails,
        "C6: with the steep slope r = 1/5 (m = log 5), N = 8, d = 0 the profile is non-decreasing only at shallow "
        "depth: for every T < T*(λ) and not at T*(λ) = 24, 12, 8, 5 (λ = 1/4, 1/2, 3/4, 1), exact",
        f"failures: {fails}"
        if fails
        else "T*(λ) Σλ = 6, 6, 6, 5: the hump appears once Σλ_t reaches 5-6 (these cases)",
    )


@certificate("shape:steep-hump", claims=("C6",))
def steep_hump() -> Check:
    """C6 as first stated ("a steep slope makes the profile monotone") is false: at (N, r, d) = (8, 1/5, 0),
    (T, lambda) = (8, 3/4) and (16, 1/2), the exact profile has p(N-3) < p(N-2) > p(N-1) (a hump just
    before the end), is not U-shaped (its minimum is p(0)), and the first case ends 0.2136, 0.3078, 0.2725."""
    fails, shown = [], []
    for case in HUMP_CASES:
        p = exact_profile_of(*case)  # SymPy rationals, the matrix product of theorem.exact
        n, rv, dv, layers, lam = case
        independent = _fraction_profiles(n, Fraction(str(rv)), Fraction(str(dv)), Fraction(str(lam)), layers)[-1]
        same = [Fraction(int(x.p), int(x.q)) for x in p] == independent
        hump = p[-3] < p[-2] > p[-1]
        if not (same and hump and not u_shape(p) and min(p) == p[0] and sum(p) == 1):
            fails.append(case)
        shown.append(f"T = {layers}, λ = {lam}: ..., {', '.join(f'{float(x):.4f}' for x in p[-3:])}")
    ends = tuple(f"{float(x):.4f}" for x in exact_profile_of(*HUMP_CASES[0])[-3:])
    ok = not fails and ends == HUMP_ENDS
    return check(
        ok,
        "C6: a steep slope does not make the profile monotone at depth: N = 8, r = 1/5, d = 0 gives an exact hump "
        "p(5) < p(6) > p(7) at (T, λ) = (8, 3/4) and (16, 1/2), no U-shape (minimum at p(0))",
        "; ".join(shown) + (f"; failures: {fails}" if fails else ""),
    )
