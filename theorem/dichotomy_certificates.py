"""The certificates behind C5's dichotomy: the series tests and the two product bounds.

* ``constant_diverges``: Σ_t c = ∞ for every constant c > 0 (constant λ > 0 collapses).
* ``power_decay_threshold``: Σ (t+1)^(-β) < ∞ iff β > 1 (integral test, ζ(β), harmonic
  comparison): λ_0 (t+1)^(-β) collapses iff β <= 1.
* ``geometric_threshold``: Σ q^t = 1/(1-q) for 0 < q < 1, ∞ for q = 1.
* ``product_upper_bound``: 1 - x <= e^{-x} for x >= 0, so Π_t (1 - λ_t δ) <= exp(-δ Σλ_t) (C5(b)).
* ``product_lower_bound``: 1 - x >= e^{-x/(1-x)} on [0, 1), so Π_t (1 - λ_t δ) >= exp(-δ S/(1 - δ sup λ))
  (C5(a)).

Examples
--------
>>> geometric_threshold().holds
True
"""

from __future__ import annotations

import sympy as sp

from posbias.theorem.certificate import Check, certificate, check
from posbias.theorem.schedule_expr import T
from posbias.theorem.sympy_types import as_expr


@certificate("dichotomy:constant-diverges", claims=("C5(c)",))
def constant_diverges() -> Check:
    """Σ_t c = ∞ for a positive symbol c."""
    c = sp.Symbol("c", positive=True)
    ok = sp.summation(c, (T, 0, sp.oo)) is sp.oo
    return check(ok, "Σ_t c = ∞ for every constant c > 0 (C5: constant λ > 0 collapses)")


@certificate("dichotomy:power-decay-threshold", claims=("C5(c)",))
def power_decay_threshold() -> Check:
    """∫_1^∞ x^(-β) dx = 1/(β-1) iff β > 1; Σ (t+1)^(-β) = ζ(β) for β > 1; Σ 1/(t+1) = ∞ and
    (t+1)^(-β) >= (t+1)^(-1) for β <= 1."""
    beta, x = sp.Symbol("beta", positive=True), sp.Symbol("x", positive=True)
    integral = sp.integrate(x ** (-beta), (x, 1, sp.oo))  # integral test
    converges_beyond_1 = (
        isinstance(integral, sp.Piecewise)
        and integral.args[0].args[1] == (beta > 1)
        and sp.simplify(as_expr(integral.args[0].args[0]) - 1 / (beta - 1)) == 0
    )
    harmonic = sp.summation(1 / (T + 1), (T, 0, sp.oo)) is sp.oo
    # β <= 1: (t+1)^(-β) >= (t+1)^(-1) since (t+1)^(1-β) >= 1; compare with the harmonic series.
    gamma = sp.Symbol("gamma", nonnegative=True)  # 1 - β = γ >= 0
    comparison = (sp.powsimp((T + 1) ** (-(1 - gamma)) / (T + 1) ** (-1)) - 1).subs(T, 0) == 0 and sp.diff(
        (T + 1) ** gamma, T
    ).is_nonnegative
    zeta_sum = sp.summation(1 / (T + 1) ** beta, (T, 0, sp.oo))
    zeta_ok = isinstance(zeta_sum, sp.Piecewise) and zeta_sum.args[0] == (sp.zeta(beta), beta > 1)
    ok = bool(converges_beyond_1 and harmonic and comparison and zeta_ok)
    return check(
        ok,
        "∫_1^∞ x^(-β) dx = 1/(β-1) iff β > 1 (integral test), Σ (t+1)^(-β) = ζ(β) for β > 1, "
        "Σ 1/(t+1) = ∞ and (t+1)^(-β) >= (t+1)^(-1) for β <= 1: λ_0 (t+1)^(-β) collapses iff β <= 1",
    )


@certificate("dichotomy:geometric-threshold", claims=("C5(c)",))
def geometric_threshold() -> Check:
    """Σ q^t = 1/(1-q) for 0 < q < 1 (SymPy's Piecewise) and Σ 1^t = ∞."""
    q = sp.Symbol("q", positive=True)
    total = sp.summation(q**T, (T, 0, sp.oo))
    ok = isinstance(total, sp.Piecewise) and total.args[0] == (1 / (1 - q), q < 1)
    ok = ok and sp.summation(sp.Integer(1) ** T, (T, 0, sp.oo)) is sp.oo
    return check(ok, "Σ q^t = 1/(1-q) for 0 < q < 1 and = ∞ for q = 1: λ_0 q^t never collapses for q < 1")


@certificate("dichotomy:product-upper-bound", claims=("C5(b)", "C5(c)", "C8(c)"))
def product_upper_bound() -> Check:
    """1 - x <= e^{-x} for x >= 0: g = e^{-x} - 1 + x has g(0) = 0 and g' >= 0."""
    x, u = sp.Symbol("x", nonnegative=True), sp.Symbol("u", nonnegative=True)
    g = sp.exp(-x) - (1 - x)
    dg = sp.diff(g, x)
    # x = log(1+u) ranges over [0, ∞) as u does; there g'(x) = u/(1+u) >= 0
    dg_u = sp.simplify(dg.subs(x, sp.log(1 + u)))
    ok = g.subs(x, 0) == 0 and sp.simplify(dg_u - u / (1 + u)) == 0 and (u / (1 + u)).is_nonnegative
    return check(
        ok,
        "1 - x <= e^{-x} for x >= 0 (g = e^{-x} - 1 + x, g(0) = 0, g'(log(1+u)) = u/(1+u) >= 0), "
        "so Π_t (1 - λ_t δ) <= exp(-δ Σλ_t) → 0 when Σλ_t = ∞ (C5(b), C2(c))",
    )


@certificate("dichotomy:product-lower-bound", claims=("C5(a)", "C5(c)", "C8(c)"))
def product_lower_bound() -> Check:
    """1 - x >= e^{-x/(1-x)} on [0, 1): with x = u/(1+u), h = log(1-x) + x/(1-x) = u - log(1+u) >= 0."""
    u = sp.Symbol("u", nonnegative=True)  # x = u/(1+u) ranges over [0, 1)
    x = u / (1 + u)
    h = sp.log(1 - x) + x / (1 - x)  # = u - log(1+u)
    dh = sp.simplify(sp.diff(h, u))
    ok = sp.simplify(h.subs(u, 0)) == 0 and sp.simplify(dh - u / (1 + u)) == 0 and (u / (1 + u)).is_nonnegative
    return check(
        ok,
        "1 - x >= e^{-x/(1-x)} on [0, 1) (with x = u/(1+u): h = log(1-x) + x/(1-x) = u - log(1+u), "
        "h(0) = 0, h' = u/(1+u) >= 0), so Π_t (1 - λ_t δ) >= exp(-δ S/(1 - δ sup λ)) > 0 when S < ∞ "
        "(C5(a))",
    )
