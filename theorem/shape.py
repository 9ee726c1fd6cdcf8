"""C6: where finite-depth profiles are U-shaped, and what is proved versus observed.

u_shape(p): the minimum of p is interior and both ends lie strictly above it.

Proved here:
* Depth 1 is never U-shaped (any m >= 0, d, lambda): p = (1 - lambda) e_{N-1} + lambda A(N-1, ·)
  and on j <= N-2, p(j) = lambda r^{N-1-j} / Z_{N-1}, so p(j+1) / p(j) = 1/r >= 1: the minimum over
  j <= N-2 is at j = 0 (``single_layer``, symbolic N).
* Exact witnesses (rational arithmetic, so proofs for those parameters): U-shaped profiles for
  the uniform kernel (m = 0) and for r = 9/10 at depths 2-4; a monotone (non-U) profile for the
  steep slope r = e^{-m} = 1/5 (m = log 5) at depths 1-6 and lambda in {1/4, 1/2, 3/4}
  (``u_witnesses``, ``steep_witnesses``).
Only observed numerically (not proved): the shape of the region of (m, d, lambda, T, N) where
U-shapes occur; see proofs/C6.md.

Examples
--------
>>> u_shape([3, 1, 2])
True
>>> u_shape([1, 2, 3])
False
"""

from __future__ import annotations

import sympy as sp

from posbias.theorem.certificate import Check


def u_shape(p) -> bool:
    """argmin interior and both ends strictly above the minimum (works on exact or float lists)."""
    p = list(p)
    if len(p) < 3:
        return False
    low = min(p[1:-1])
    return low < p[0] and low < p[-1]


def single_layer() -> Check:
    """T = 1: p(j) = lambda r^{N-1-j} / Z_{N-1} on j <= N-2; p(j+1)/p(j) = 1/r >= 1, symbolic N, j."""
    n, jj = sp.symbols("N j", integer=True, positive=True)
    r = sp.Symbol("r", positive=True)
    lam, z = sp.symbols("lambda Z", positive=True)
    p = lambda q: lam * r ** (n - 1 - q) / z  # noqa: E731
    ratio = sp.simplify(p(jj + 1) / p(jj))
    u = sp.Symbol("u", nonnegative=True)
    ok = sp.simplify(ratio - 1 / r) == 0 and sp.simplify(ratio.subs(r, 1 / (1 + u)) - 1 - u) == 0
    return Check(
        "shape:single-layer",
        bool(ok),
        "C6: a single ALiBi + content layer never gives a U-shape (strict-past part of p non-decreasing, ratio 1/r >= 1)",
        f"p(j+1)/p(j) = {ratio}",
    )


def _profile(n, r_val, d_exp, layers, lam):
    from posbias.theorem.alibi_row import exact_kernel
    from posbias.theorem.exact import exact_profile

    a = exact_kernel(n, r_val, d_exp)
    return exact_profile([a] * layers, [lam] * layers)


U_CASES = [  # (N, r, e^d, T, lambda): U-shaped, exactly
    (8, 1, 1, 2, sp.Rational(1, 2)),
    (8, 1, 1, 4, sp.Rational(1, 4)),
    (8, sp.Rational(9, 10), 1, 3, sp.Rational(1, 2)),
    (10, sp.Rational(9, 10), 1, 2, sp.Rational(3, 4)),
]
STEEP = (8, sp.Rational(1, 5), 1)


def u_witnesses() -> Check:
    shapes = [u_shape(_profile(*case)) for case in U_CASES]
    return Check(
        "shape:u-witnesses",
        all(shapes),
        "C6: exact U-shaped profiles for m = 0 and r = 9/10 at depth 2-4 (N = 8, 10)",
        f"cases (N, r, e^d, T, lambda) = {U_CASES}: {shapes}",
    )


def steep_witnesses() -> Check:
    n, rv, dv = STEEP
    fails = []
    for layers in range(1, 7):
        for lam in (sp.Rational(1, 4), sp.Rational(1, 2), sp.Rational(3, 4)):
            p = _profile(n, rv, dv, layers, lam)
            if u_shape(p) or any(b < a for a, b in zip(p, p[1:])):
                fails.append((layers, lam))
    return Check(
        "shape:steep-witnesses",
        not fails,
        "C6: with the steep slope r = 1/5 (m = log 5), N = 8, T = 1..6, lambda in {1/4, 1/2, 3/4} the profile is non-decreasing (exact)",
        f"failures: {fails}" if fails else "all 18 profiles non-decreasing",
    )


def certificates() -> dict:
    return {
        "shape:single-layer": single_layer,
        "shape:u-witnesses": u_witnesses,
        "shape:steep-witnesses": steep_witnesses,
    }
