"""C6: where finite-depth profiles are U-shaped, and what is proved versus observed.

u_shape(p) (posbias.numerics.shape, the one definition): the minimum of p over the
interior lies strictly below both ends. It works on exact lists, so the witnesses
below are decided in rational arithmetic.

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
>>> u_shape(exact_profile_of(*U_CASES[0]))
True
>>> single_layer().holds
True
"""

from __future__ import annotations

import sympy as sp

from posbias.numerics.shape import u_shape
from posbias.theorem.alibi_row import exact_kernel
from posbias.theorem.certificate import Check, certificate, check
from posbias.theorem.exact import exact_profile

__all__ = ["STEEP", "U_CASES", "exact_profile_of", "single_layer", "steep_witnesses", "u_shape", "u_witnesses"]


@certificate("shape:single-layer", claims=("C6",))
def single_layer() -> Check:
    """T = 1: p(j) = lambda r^{N-1-j} / Z_{N-1} on j <= N-2; p(j+1)/p(j) = 1/r >= 1, symbolic N, j."""
    n, jj = sp.symbols("N j", integer=True, positive=True)
    r = sp.Symbol("r", positive=True)
    lam, z = sp.symbols("lambda Z", positive=True)
    p = lambda q: lam * r ** (n - 1 - q) / z  # noqa: E731
    ratio = sp.simplify(p(jj + 1) / p(jj))
    u = sp.Symbol("u", nonnegative=True)
    ok = sp.simplify(ratio - 1 / r) == 0 and sp.simplify(ratio.subs(r, 1 / (1 + u)) - 1 - u) == 0
    return check(
        ok,
        "C6: a single ALiBi + content layer never gives a U-shape (strict-past part of p non-decreasing, ratio 1/r >= 1)",
        f"p(j+1)/p(j) = {ratio}",
    )


def exact_profile_of(n, r_val, d_exp, layers, lam) -> list:
    """The exact profile of ``layers`` identical ALiBi + content layers (r = e^{-m}, e^d, lambda), N = n."""
    a = exact_kernel(n, r_val, d_exp)
    return exact_profile([a] * layers, [lam] * layers)


U_CASES = [  # (N, r, e^d, T, lambda): U-shaped, exactly
    (8, 1, 1, 2, sp.Rational(1, 2)),
    (8, 1, 1, 4, sp.Rational(1, 4)),
    (8, sp.Rational(9, 10), 1, 3, sp.Rational(1, 2)),
    (10, sp.Rational(9, 10), 1, 2, sp.Rational(3, 4)),
]
STEEP = (8, sp.Rational(1, 5), 1)


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
    """C6: with r = 1/5 (``STEEP``), T = 1..6 and lambda in {1/4, 1/2, 3/4} the profile is non-decreasing."""
    n, rv, dv = STEEP
    fails = []
    for layers in range(1, 7):
        for lam in (sp.Rational(1, 4), sp.Rational(1, 2), sp.Rational(3, 4)):
            p = exact_profile_of(n, rv, dv, layers, lam)
            if u_shape(p) or any(b < a for a, b in zip(p, p[1:])):
                fails.append((layers, lam))
    return check(
        not fails,
        "C6: with the steep slope r = 1/5 (m = log 5), N = 8, T = 1..6, lambda in {1/4, 1/2, 3/4} the profile is non-decreasing (exact)",
        f"failures: {fails}" if fails else "all 18 profiles non-decreasing",
    )

