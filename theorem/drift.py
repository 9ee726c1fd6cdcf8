"""One-step drift identities behind C1 and C2(a), and the expected-position drift.

* C1 (causal K, row-stochastic, any mu): for every k,
      F_{mu K}(k) - F_mu(k) = sum_{i > k} mu(i) F_{K(i,·)}(k)  >= 0,
  because F_{K(i,·)}(k) = 1 for i <= k (causal rows put all mass on j <= i).
  Verified with symbolic entries (K[i,i] = 1 - sum_{j<i} K[i,j]) for every N <= 8.
* C2(a): R_lambda = (1 - lambda) I + lambda A gives F_{mu R_lambda} = (1 - lambda) F_mu + lambda F_{mu A}
  (linearity), so with C1 mu A ≼ mu R_lambda ≼ mu and mu R_lambda is ≼-decreasing in lambda.
* ALiBi + content row i under R_lambda: the expected position moves by
      Delta_i = lambda (E_i - i) = -lambda (sum_{g=1}^{i} g r^g) / (e^d + sum_{g=1}^{i} r^g)  <= 0
  for every m >= 0 and d (< 0 when i >= 1, lambda > 0): the drift is always towards the start
  (primacy). Its size falls as d grows (d Delta_i / d d = -Delta_i alpha_i >= 0) and as m grows
  (sum g^2 r^g (D + G) - (sum g r^g)^2 >= 0 after pairing; exact for i <= 12).
* C5(b), one step: for causal R_lambda with A[i, 0] >= eps and any distribution v,
      1 - (v R)(0) = (1 - lambda eps)(1 - v(0)) - lambda sum_{i>=1} v(i)(A[i, 0] - eps) <= (1 - lambda eps)(1 - v(0)),
  so the mass off token 0 shrinks by at least the factor (1 - lambda_t eps_t) per layer.

Examples
--------
>>> causal_cdf_identity(4).holds
True
"""

from __future__ import annotations

from dataclasses import dataclass

import mpmath
import sympy as sp

from posbias.theorem.alibi_row import EXPANDED_ROWS, MAX_LOGIT, MAX_ROW, VALUE_DPS, generic
from posbias.theorem.certificate import Check, certificate, check
from posbias.theorem.derivation import Derivation, Result
from posbias.theorem.orders import exact_cdf
from posbias.theorem.params import Params, param

NAME = "drift"

lam = sp.Symbol("lambda", nonnegative=True)
r = sp.Symbol("r", positive=True)
D = sp.Symbol("D", positive=True)
d = sp.Symbol("d", real=True)
m = sp.Symbol("m", nonnegative=True)
i, g = sp.symbols("i g", integer=True, nonnegative=True)


def causal_kernel(n: int) -> sp.Matrix:
    """Symbolic causal row-stochastic K: free entries below the diagonal, K[i,i] = 1 - row sum."""
    rows = []
    for a in range(n):
        free = [sp.Symbol(f"K{a}_{b}") for b in range(a)]
        rows.append(free + [1 - sum(free)] + [0] * (n - a - 1))
    return sp.Matrix(rows)


@certificate("drift:causal-cdf-identity", claims=("C1", "C2(a)", "C2(b)"))
def causal_cdf_identity(max_tokens: int = 8) -> Check:
    """F_{muK}(k) - F_mu(k) = sum_{i>k} mu(i) F_{K(i,.)}(k), symbolic, every N <= max_tokens."""
    ok = True
    for n in range(1, max_tokens + 1):
        kmat = causal_kernel(n)
        mu = sp.symbols(f"mu0:{n}")
        muk = [sum(mu[a] * kmat[a, b] for a in range(n)) for b in range(n)]
        for kk in range(n):
            rhs = sum(mu[a] * exact_cdf(list(kmat.row(a)))[kk] for a in range(kk + 1, n))
            ok = ok and sp.expand(exact_cdf(muk)[kk] - exact_cdf(mu)[kk] - rhs) == 0
    return check(
        ok,
        f"C1: F_(muK)(k) - F_mu(k) = sum_(i>k) mu(i) F_(K(i,.))(k) >= 0 for causal K (symbolic, N <= {max_tokens})",
    )


@certificate("drift:residual-cdf-mixture", claims=("C2(a)", "C2(b)"))
def residual_cdf_mixture(max_tokens: int = 8) -> Check:
    """F_{mu R_lambda} = (1 - lambda) F_mu + lambda F_{mu A}, symbolic A, mu, lambda, every N <= max_tokens."""
    ok = True
    for n in range(1, max_tokens + 1):
        amat = sp.Matrix(n, n, lambda a, b: sp.Symbol(f"A{a}_{b}"))
        mu = sp.Matrix([sp.symbols(f"mu0:{n}")])
        left = list(mu * ((1 - lam) * sp.eye(n) + lam * amat))
        mua = list(mu * amat)
        for kk in range(n):
            rhs = (1 - lam) * exact_cdf(mu[q] for q in range(n))[kk] + lam * exact_cdf(mua)[kk]
            ok = ok and sp.expand(exact_cdf(left)[kk] - rhs) == 0
    return check(
        ok,
        f"C2(a): F_(mu R_lambda) = (1 - lambda) F_mu + lambda F_(mu A) (symbolic, N <= {max_tokens})",
    )


@certificate("drift:absorption-step", claims=("C5(b)", "C5(c)", "C8(c)"))
def absorption_step(max_tokens: int = 6) -> Check:
    """C5(b) one step: for causal R = (1 - lambda) I + lambda A with A[i, 0] = eps + e_i (e_i >= 0) and a
    distribution v, 1 - (vR)(0) = (1 - lambda eps)(1 - v(0)) - lambda sum_{i>=1} v(i) e_i, symbolic, N <= max_tokens."""
    ok = True
    eps = sp.Symbol("epsilon", nonnegative=True)
    for n in range(2, max_tokens + 1):
        excess = sp.symbols(f"e1:{n}")
        kmat = causal_kernel(n)
        kmat = kmat.subs({kmat[a, 0]: eps + excess[a - 1] for a in range(1, n)})
        v = list(sp.symbols(f"v1:{n}"))
        v = [1 - sum(v)] + v
        rmat = (1 - lam) * sp.eye(n) + lam * kmat
        out0 = sum(v[a] * rmat[a, 0] for a in range(n))
        rhs = (1 - lam * eps) * (1 - v[0]) - lam * sum(v[a] * excess[a - 1] for a in range(1, n))
        ok = ok and sp.expand(1 - out0 - rhs) == 0
    return check(
        ok,
        "C5(b): one causal residual step keeps at most (1 - lambda eps) of the mass off token 0 (symbolic, N <= "
        f"{max_tokens})",
        "1 - (vR)(0) = (1 - lambda eps)(1 - v(0)) - lambda sum_{i>=1} v(i)(A[i,0] - eps)",
    )


FIRST_MOMENT = sp.Sum(g * r**g, (g, 1, i))
G_SUM = sp.Sum(r**g, (g, 1, i))
DRIFT = -lam * FIRST_MOMENT / (D + G_SUM)
DRIFT_CLOSED = -lam * (r * (1 - (i + 1) * r**i + i * r ** (i + 1)) / (1 - r) ** 2) / (D + (r - r ** (i + 1)) / (1 - r))


@certificate("drift:expected-drift", claims=("C4(b)",))
def expected_drift_identity() -> Check:
    """Delta_i = lambda (E_i - i) with E_i from the row's definition equals -lambda M1 / (D + G), general i;
    d Delta / d d = -Delta * alpha_i (so |Delta| falls with d); numerator of d(M1/(D+G))/dr has
    non-negative coefficients for every i <= 12 (so |Delta| falls with m)."""
    e_i = (i * D + generic(sp.Sum((i - g) * r**g, (g, 1, i)).doit())) / (D + generic(G_SUM.doit()))
    delta = lam * (e_i - i)
    closed = -lam * generic(FIRST_MOMENT.doit()) / (D + generic(G_SUM.doit()))
    ident = sp.simplify(delta - closed) == 0
    gi, m1 = sp.symbols("G_i M_1", positive=True)
    dd = sp.exp(d)
    delta_d = -lam * m1 / (dd + gi)
    deriv = sp.simplify(sp.diff(delta_d, d) + delta_d * dd / (dd + gi)) == 0
    slope_ok = True
    for row in range(1, 13):
        q = D + sum(r**b for b in range(1, row + 1))
        p = sum(b * r**b for b in range(1, row + 1))
        num = sp.Poly(sp.expand(sp.diff(p, r) * q - p * sp.diff(q, r)), r, D)
        slope_ok = slope_ok and all(c >= 0 for c in num.coeffs())
    return check(
        ident and deriv and slope_ok,
        "ALiBi + content row: Delta_i = -lambda sum g r^g / (e^d + sum r^g) <= 0; |Delta_i| decreasing in d (general "
        "i) and in m (i <= 12)",
    )


def drift_float(row: int, slope: float, diag: float, lam_val: float) -> float:
    """Delta_row in float64 from an mpmath evaluation (``VALUE_DPS`` digits), O(row) work."""
    with mpmath.workdps(VALUE_DPS):
        rr = mpmath.exp(-mpmath.mpf(slope))
        powers = [rr**b for b in range(row + 1)]
        num = mpmath.fsum(b * powers[b] for b in range(1, row + 1))
        den = mpmath.exp(mpmath.mpf(diag)) + mpmath.fsum(powers[1:])
        return float(-mpmath.mpf(lam_val) * num / den)


@dataclass(frozen=True)
class DriftParams(Params):
    """The row, slope, diagonal and mixing coefficient of the drift (each left out stays symbolic),
    and the largest N of the symbolic C1 / C2(a) identities."""

    name = NAME
    row: int | None = param(
        None,
        meaning="the row i of the ALiBi + content kernel",
        example="6",
        minimum=0,
        maximum=MAX_ROW,
        default_text="symbolic i",
    )
    slope: float | None = param(
        None,
        meaning="the ALiBi slope m >= 0 (r = e^-m)",
        example="0.3",
        minimum=0.0,
        maximum=MAX_LOGIT,
        default_text="symbolic m",
    )
    diag: float | None = param(
        None,
        meaning="the content diagonal d",
        example="1.5",
        minimum=-MAX_LOGIT,
        maximum=MAX_LOGIT,
        default_text="symbolic d",
    )
    lam: float | None = param(
        None,
        meaning="the mixing coefficient lambda of R = (1 - lambda) I + lambda A",
        example="0.4",
        minimum=0.0,
        maximum=1.0,
        default_text="symbolic lambda",
    )
    tokens: int = param(
        8,
        meaning="check the C1 and C2(a) identities symbolically for every N <= this",
        example="6",
        minimum=1,
        maximum=8,
    )


def compute(params: DriftParams = DriftParams()) -> Result:
    """C1 and C2(a) identities (symbolic, N <= tokens) and the expected-position drift Delta_i
    (its value when row, slope, diag and lam are all set)."""
    p = params
    c1 = causal_cdf_identity(p.tokens)
    c2 = residual_cdf_mixture(p.tokens)
    c3 = expected_drift_identity()
    expr = DRIFT.subs(D, sp.exp(d))
    if p.row is not None and p.row <= EXPANDED_ROWS:
        expr = expr.subs(i, p.row).doit()
    elif p.row is not None:  # the closed form (r != 1), O(1) in the row: never a 4096-term sum
        expr = DRIFT_CLOSED.subs({D: sp.exp(d), i: p.row})
    subs = {}  # r and d stay symbolic in the expression (e^1 would print as SymPy's E); values below
    if p.lam is not None:
        subs[lam] = sp.nsimplify(p.lam)
    shown = expr.subs(subs)
    lines = [
        "One-step drift identities:",
        "  C1    F_{muK}(k) - F_mu(k) = sum_{i>k} mu(i) F_{K(i,.)}(k) >= 0   (causal K)",
        "  C2(a) F_{mu R_lambda} = (1 - lambda) F_mu + lambda F_{mu A}",
        "  Expected-position drift of the ALiBi + content row under R_lambda (r = e^{-m}):",
        f"    Delta_i = {shown}",
        "    sign: <= 0 for every m >= 0 and d (strictly < 0 for i >= 1, lambda > 0): always primacy;",
        "    |Delta_i| decreases as d grows (d > 0: recency relative to d = 0) and as m grows.",
    ]
    lines += [f"  [{'PASS' if c.holds else 'FAIL'}] {c.name}: {c.description}" for c in (c1, c2, c3)]
    data = {"claims": ["C1", "C2(a)", "C4(b)"], "drift": str(shown), "checks": {c.name: c.holds for c in (c1, c2, c3)}}
    if p.row is not None and p.slope is not None and p.diag is not None and p.lam is not None:
        val = drift_float(p.row, p.slope, p.diag, p.lam)
        lines.append(f"    at m = {p.slope:g}, d = {p.diag:g}, lambda = {p.lam:g}:  Delta_i = {val:.6g}")
        data["value"] = val
        data["sign"] = int((val > 0) - (val < 0))
    latex = (
        r"F_{\mu K}(k) - F_\mu(k) = \sum_{i>k} \mu(i) F_{K(i,\cdot)}(k),\quad "
        r"F_{\mu R_\lambda} = (1-\lambda) F_\mu + \lambda F_{\mu A},\quad \Delta_i = " + sp.latex(shown)
    )
    return Result(NAME, "\n".join(lines), latex, data)


DERIVATION = Derivation(
    name=NAME,
    summary="one-step CDF identities behind C1 and C2(a); sign of the expected-position drift of an ALiBi + "
    "content row",
    claims=("C1", "C2(a)", "C4(b)"),
    params=DriftParams,
    compute=compute,
    limits=(
        f"--row <= {MAX_ROW} (rows above {EXPANDED_ROWS} shown by the closed form, value in O(i) work), "
        f"0 <= --slope <= {MAX_LOGIT:g}, |--diag| <= {MAX_LOGIT:g}, --tokens <= 8 (symbolic identities); "
        "about 3 s at the maximum"
    ),
)
