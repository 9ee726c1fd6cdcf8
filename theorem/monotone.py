"""Stochastic monotonicity of the ALiBi + content kernel and its orderings (C3, C4(b), C2(b)).

With r = e^{-m} in (0, 1], D = e^d > 0, G_i = sum_{g=1}^{i} r^g, Z_i = D + G_i and
S_k = sum_{j=0}^{k} r^j, the row CDFs are (k < i)  F_i(k) = r^{i-k} S_k / Z_i,  F_i(k) = 1 (k >= i).

* C3(a), every slope m >= 0 and every d: for k < i,
      F_{i+1}(k) / F_i(k) = r Z_i / Z_{i+1},   1 - r Z_i / Z_{i+1} = (D (1 - r) + r) / Z_{i+1} >= 0,
  and F_{i+1}(i) = G_{i+1} / (D + G_{i+1}) <= 1 = F_i(i): rows are ≼-increasing.
  Symbolic for general i and k (certificate ``row_ratio``).
* C3(b), general i: F_i(k) = P / Q with P = sum_{a=s}^{i} r^a (s = i - k >= 1), Q = D + L + P,
  L = sum_{b=1}^{s-1} r^b. Since P'P - PP' = 0 (the exponent pairs with both ends in P cancel),
      P'Q - PQ' = D P' + sum_{a=s}^{i} sum_{b=1}^{s-1} (a - b) r^{a+b-1},
  every coefficient positive (a >= 1, a - b >= 1), so F_i(k) increases with r, i.e. decreases with m:
  steeper slopes move every row later. ``slope_order_general`` checks the decomposition and the
  signs with i, k symbolic; ``slope_order`` keeps the exact coefficient check for i <= 12.
* Head mixtures (C3(a), C3(c), C4(b) with many heads): the row CDF of sum_h w_h A_h is the
  w-mixture of the heads' row CDFs, so monotonicity and row orders survive mixing
  (``head_mixture``, symbolic number of heads H).
* C4(b), general i: dF_i(k)/dD = -F_i(k) / Z_i <= 0 (k < i), alpha_i = D / Z_i has
  d alpha_i / dd = D G_i / Z_i^2 >= 0, and A(i, j) = alpha_i [j = i] + (1 - alpha_i) r^{i-j} / G_i
  (``diag_order``).
* Dominance is preserved by monotone kernels (C2(b), C3(c), C4(b)): with g(i) = F_{K(i,·)}(k)
  non-increasing in i, Abel summation gives
      F_{mu K}(k) - F_{nu K}(k) = sum_{i < N-1} (F_mu(i) - F_nu(i)) (g(i) - g(i+1)) >= 0
  whenever mu ≼ nu (``preserves_dominance``, symbolic entries, N <= 8).
* Without monotonicity C2(b) fails: ``residual_counterexample`` is an exact N = 3, T = 2 stack
  in which more attention share at the top layer moves p *later*.

Examples
--------
>>> row_ratio().holds and diag_order().holds
True
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import sympy as sp

from posbias.theorem.alibi_row import exact_kernel, generic
from posbias.theorem.certificate import Check, certificate, check
from posbias.theorem.derivation import Derivation, Result
from posbias.theorem.exact import exact_monotone, exact_profile
from posbias.theorem.orders import exact_dominated
from posbias.theorem.params import Params, param
from posbias.theorem.sympy_types import as_expr, sum_of

NAME = "monotone"

i, j, k, g = sp.symbols("i j k g", integer=True, nonnegative=True)
r = sp.Symbol("r", positive=True)
D = sp.Symbol("D", positive=True)  # e^d
u = sp.Symbol("u", nonnegative=True)  # r = 1 / (1 + u), u >= 0  <=>  0 < r <= 1  <=>  m >= 0


def G(n) -> sp.Expr:
    """G_n = sum_{g=1}^{n} r^g (generic branch r != 1; the identities below are rational in r)."""
    return generic(sp.Sum(r**g, (g, 1, n)).doit())


def F_past(n) -> sp.Expr:
    """F_n(k) for k < n: sum_{j<=k} r^{n-j} / (D + G_n)."""
    return generic(sp.Sum(r ** (n - j), (j, 0, k)).doit()) / (D + G(n))


def nonneg_coefficients(expr: sp.Expr, gens) -> bool:
    """True if expr is a polynomial in gens whose coefficients are all >= 0 (hence expr >= 0 for gens >= 0)."""
    poly = sp.Poly(sp.expand(expr), *gens)
    return all(c >= 0 for c in poly.coeffs())


@certificate("monotone:row-ratio", claims=("C3(a)",))
def row_ratio() -> Check:
    """C3(a), general i and k < i, every d: 1 - F_{i+1}(k)/F_i(k) = (D(1-r) + r) / Z_{i+1} >= 0,
    and F_{i+1}(i) = G_{i+1}/(D + G_{i+1}) <= 1."""
    ratio = sp.simplify(F_past(i + 1) / F_past(i))
    gap = (D * (1 - r) + r) / (D + G(i + 1))
    factorised = sp.simplify(1 - ratio - gap) == 0
    ratio_form = sp.simplify(ratio - r * (D + G(i)) / (D + G(i + 1))) == 0
    # numerator of the gap is >= 0 on 0 < r <= 1: substitute r = 1/(1+u).
    num = as_expr(sp.together((D * (1 - r) + r).subs(r, 1 / (1 + u)) * (1 + u)))
    numerator_ok = nonneg_coefficients(num, (u, D))
    # k = i: F_{i+1}(i) = r S_i / Z_{i+1} and r S_i = G_{i+1}.
    diag_case = sp.simplify(r * generic(sp.Sum(r**j, (j, 0, i)).doit()) - G(i + 1)) == 0
    ok = factorised and ratio_form and numerator_ok and diag_case
    return check(
        ok,
        "ALiBi + content kernel is stochastically monotone for all m >= 0, d (symbolic, general i)",
        f"1 - F_(i+1)(k)/F_i(k) = {gap}; numerator at r = 1/(1+u) times (1+u): {num} (non-negative coefficients)",
    )


@certificate("monotone:slope-order", claims=("C3(b)", "C3(c)"))
def slope_order(max_row: int = 12) -> Check:
    """C3(b): dF_i(k)/dr has a numerator with non-negative coefficients in (r, D), all i <= max_row, k < i."""
    bad = []
    for row in range(1, max_row + 1):
        q = D + sum(r**b for b in range(1, row + 1))
        for kk in range(row):
            p = sum(r**a for a in range(row - kk, row + 1))
            num = sp.diff(p, r) * q - p * sp.diff(q, r)
            if not nonneg_coefficients(num, (r, D)):
                bad.append((row, kk))
    return check(
        not bad,
        f"F_i(k) is non-decreasing in r = e^(-m) (steeper slope => later row), exact for i <= {max_row}, all k < i, "
        "all d",
        f"failures: {bad}" if bad else "numerator of dF/dr has non-negative coefficients in every case",
    )


@certificate("monotone:diag-order", claims=("C4(b)",))
def diag_order() -> Check:
    """C4(b), general i: F_i(k) decreases in D = e^d (k < i); alpha_i increases in d; row decomposition."""
    f = F_past(i)
    dF = sp.simplify(sp.diff(f, D) + f / (D + G(i))) == 0
    d = sp.Symbol("d", real=True)
    gi = sp.Symbol("G_i", positive=True)
    alpha = sp.exp(d) / (sp.exp(d) + gi)
    dalpha = sp.simplify(sp.diff(alpha, d) - sp.exp(d) * gi / (sp.exp(d) + gi) ** 2) == 0
    # A(i,j) = alpha e_i + (1 - alpha) * (ALiBi on the strict past): r^{i-j}/Z_i = (1 - alpha) r^{i-j}/G_i
    decomposition = sp.simplify((1 - D / (D + gi)) * r ** (i - j) / gi - r ** (i - j) / (D + gi)) == 0
    ok = dF and dalpha and decomposition
    return check(
        ok,
        "raising d moves every row later, alpha_i(d) increases in d, A(i,.) = alpha_i e_i + (1-alpha_i) past "
        "(symbolic, general i)",
        "dF_i(k)/dD = -F_i(k)/Z_i; d alpha_i/dd = e^d G_i/(e^d+G_i)^2",
    )


@certificate("monotone:preserves-dominance", claims=("C2(b)", "C3(c)", "C4(b)", "C8(b)"))
def preserves_dominance(max_tokens: int = 8) -> Check:
    """Abel summation: sum_i mu_i g_i = sum_{i<N-1} F_mu(i)(g_i - g_{i+1}) + F_mu(N-1) g_{N-1}, N <= max_tokens.
    Hence mu ≼ nu and g non-increasing give sum_i (mu_i - nu_i) g_i >= 0: monotone K preserves ≼."""
    ok = True
    for n in range(1, max_tokens + 1):
        mu = sp.symbols(f"mu0:{n}")
        gg = sp.symbols(f"g0:{n}")
        cdf = [sum(mu[: a + 1]) for a in range(n)]
        lhs = sum(a * b for a, b in zip(mu, gg))
        rhs = sum(cdf[a] * (gg[a] - gg[a + 1]) for a in range(n - 1)) + cdf[n - 1] * gg[n - 1]
        ok = ok and sp.expand(lhs - rhs) == 0
    # a convex combination (1 - lam) I + lam A has row CDFs (1 - lam)[i <= k] + lam F_A(i)(k):
    lam = sp.Symbol("lam")
    n = 4
    a = sp.Matrix(n, n, lambda p, q: sp.Symbol(f"a{p}{q}") if q <= p else 0)
    rmat = (1 - lam) * sp.eye(n) + lam * a
    a_cdf = lambda p, kk: sp.Add(*[as_expr(a[p, q]) for q in range(kk + 1)])  # noqa: E731
    mix = all(
        sp.expand(sum(rmat[p, q] for q in range(kk + 1)) - ((1 - lam) * (1 if p <= kk else 0) + lam * a_cdf(p, kk)))
        == 0
        for p in range(n)
        for kk in range(n)
    )
    return check(
        ok and mix,
        f"Abel summation identity (N <= {max_tokens}) and residual row-CDF mixture: monotone kernels and their "
        "residual mixtures preserve ≼",
        "F_{muK}(k) - F_{nuK}(k) = sum_{i<N-1} (F_mu(i) - F_nu(i)) (g_i - g_{i+1}), g_i = F_{K(i,.)}(k)",
    )


@certificate("monotone:residual-counterexample", claims=("C2(b)",))
def residual_counterexample() -> Check:
    """C2(b) needs monotonicity: N = 3, T = 2, A^(1)(2,.) = e_1, A^(0) rows e_0, e_1, e_0 (not monotone),
    lambda_0 = 1. Then p = (1 - lambda_1) e_0 + lambda_1 e_1 moves *later* as lambda_1 grows."""
    top = sp.Matrix([[1, 0, 0], [1, 0, 0], [0, 1, 0]])
    bottom = sp.Matrix([[1, 0, 0], [0, 1, 0], [1, 0, 0]])
    low = exact_profile([bottom, top], [1, sp.Rational(1, 4)])
    high = exact_profile([bottom, top], [1, sp.Rational(3, 4)])
    violated = exact_dominated(low, high) and not exact_dominated(high, low)
    return check(
        violated and not exact_monotone(bottom) and exact_monotone(top),
        "without monotonicity C2(b) fails: raising lambda_1 from 1/4 to 3/4 gives a strictly later p (exact)",
        f"p(1/4) = {low}, p(3/4) = {high}",
    )


GRID_R = (sp.Integer(1), sp.Rational(9, 10), sp.Rational(1, 2), sp.Rational(1, 5))
GRID_D = (sp.Rational(1, 5), sp.Integer(1), sp.Integer(5))


@certificate("monotone:alibi-grid", claims=("C2(b)", "C3(a)", "C3(b)", "C3(c)", "C4(b)"))
def alibi_grid(n: int = 7) -> Check:
    """Exact rational grid (r = e^{-m} in {1, 9/10, 1/2, 1/5}, D = e^d in {1/5, 1, 5}, N = n):
    kernels monotone (C3(a)), slope and diagonal orders row-wise (C3(b), C4(b)), and the profile
    orders of C2(b), C3(c), C4(b) for a T = 3 stack."""
    half, third = sp.Rational(1, 2), sp.Rational(1, 3)
    ker: dict[tuple, sp.Matrix] = {(rv, dv): exact_kernel(n, rv, dv) for rv in GRID_R for dv in GRID_D}
    rows = lambda mat: [list(mat.row(a)) for a in range(mat.rows)]  # noqa: E731
    fails = []
    for (rv, dv), a in ker.items():
        if not exact_monotone(a):
            fails.append(f"C3(a) r={rv} D={dv}")
    for dv in GRID_D:
        for r1, r2 in zip(GRID_R, GRID_R[1:]):  # r decreasing = slope increasing
            if not all(exact_dominated(x, y) for x, y in zip(rows(ker[r1, dv]), rows(ker[r2, dv]))):
                fails.append(f"C3(b) D={dv} r {r1}->{r2}")
    for rv in GRID_R:
        for d1, d2 in zip(GRID_D, GRID_D[1:]):
            if not all(exact_dominated(x, y) for x, y in zip(rows(ker[rv, d1]), rows(ker[rv, d2]))):
                fails.append(f"C4(b) r={rv} D {d1}->{d2}")
    base = [ker[GRID_R[1], 1], ker[GRID_R[2], GRID_D[0]], ker[GRID_R[0], GRID_D[2]]]
    lams = [half, third, half]
    p0 = exact_profile(base, lams)
    for t in range(3):
        more = list(lams)
        more[t] = sp.Rational(9, 10)
        if not exact_dominated(exact_profile(base, more), p0):
            fails.append(f"C2(b) layer {t}")
        steeper = list(base)
        steeper[t] = ker[sp.Rational(1, 5), 1]
        flatter = list(base)
        flatter[t] = ker[sp.Integer(1), 1]
        if not exact_dominated(exact_profile(flatter, lams), exact_profile(steeper, lams)):
            fails.append(f"C3(c) layer {t}")
        lo = list(base)
        lo[t] = ker[sp.Rational(1, 2), sp.Rational(1, 5)]
        hi = list(base)
        hi[t] = ker[sp.Rational(1, 2), 5]
        if not exact_dominated(exact_profile(lo, lams), exact_profile(hi, lams)):
            fails.append(f"C4(b) profile layer {t}")
    return check(
        not fails,
        f"exact rational grid, N = {n}: monotone kernels, slope/diagonal row orders, profile orders (C2(b), C3, C4(b))",
        "; ".join(fails) if fails else f"{len(ker)} kernels, 3 layers x 3 perturbations",
    )


@dataclass(frozen=True)
class MonotoneParams(Params):
    """How far the exact slope-order check (C3(b)) goes."""

    name = NAME
    max_row: int = param(
        8,
        meaning="check the coefficient signs of dF_i(k)/dr exactly for every row i <= this",
        example="10",
        minimum=1,
        maximum=16,
    )
    bias: str | None = param(
        None,
        meaning="C7(b) mode: any relative bias b(g), an expression in g with parameters "
        "or weights:W0,W1,... (see the examples below)",
        example="'-r1*log(1+r2*g)'",
        default_text="ALiBi (C3)",
    )
    ranges: str | None = param(
        None,
        meaning="--bias mode: parameter ranges, e.g. 'm>=0, 0<=a<=2' (unnamed: >= 0)",
        example="'m>=1, 0<=a<=1'",
        default_text="every parameter >= 0",
    )
    at: str | None = param(
        None,
        meaning="--bias mode: check only this rational point, e.g. 'm=1/2'",
        example="'m=1/2'",
        default_text="a grid inside the ranges",
    )
    up_to: int = param(
        32, meaning="--bias mode: exact (certified) check of every N <= this", example="64", minimum=2, maximum=256
    )
    diag: Fraction = param(
        Fraction(0),
        meaning="--bias mode: content diagonal d of the exact check (the proof holds for every d)",
        example="1/2",
    )


def compute(params: MonotoneParams = MonotoneParams()) -> Result:
    """C3(a) (symbolic, general i), C3(b) (exact for i <= max_row), C4(b) (symbolic), and the exact grid;
    with ``bias``: C7(b) on that bias (``posbias.theorem.bias_queries.monotone_result``)."""
    if params.bias is not None:
        from posbias.theorem.bias_queries import MonotoneBias, monotone_result

        return monotone_result(MonotoneBias(params.bias, params.ranges, params.at, params.up_to, params.diag))
    checks = [row_ratio(), slope_order_general(), slope_order(params.max_row), diag_order(), alibi_grid(6)]
    lines = [
        "ALiBi + content kernel (r = e^{-m}, D = e^d, Z_i = D + G_i, G_i = sum_{g=1}^i r^g):",
        "  C3(a) for k < i:  F_{i+1}(k)/F_i(k) = r Z_i / Z_{i+1},  1 - ratio = (D(1-r) + r) / Z_{i+1} >= 0   "
        "[symbolic, general i]",
        "  C3(b): dF_i(k)/dr = (P'Q - PQ')/Q^2 with non-negative-coefficient numerator"
        f"   [symbolic, general i (monotone:slope-order-general); exact coefficients for i <= {params.max_row}]",
        "  C4(b): dF_i(k)/dD = -F_i(k)/Z_i <= 0,  d alpha_i/dd = e^d G_i / Z_i^2 >= 0   [symbolic, general i]",
    ]
    lines += [f"  [{'PASS' if c.holds else 'FAIL'}] {c.name}: {c.description}" for c in checks]
    latex = (
        r"1 - \frac{F_{i+1}(k)}{F_i(k)} = \frac{e^{d}(1-r) + r}{e^{d} + \sum_{g=1}^{i+1} r^g} \ge 0,\quad "
        r"\frac{\partial F_i(k)}{\partial e^{d}} = -\frac{F_i(k)}{Z_i} \le 0"
    )
    data = {
        "claims": ["C3(a)", "C3(b)", "C4(b)"],
        "checks": {c.name: c.holds for c in checks},
        "gap": str((D * (1 - r) + r) / (D + G(i + 1))),
    }
    return Result(NAME, "\n".join(lines), latex, data)


def _bias_parser():
    from posbias.theorem.bias_queries import parser_for

    return parser_for(MonotoneParams)


def _bias_examples() -> str:
    from posbias.theorem.bias_queries import MONOTONE_EXAMPLES

    return MONOTONE_EXAMPLES


DERIVATION = Derivation(
    name=NAME,
    summary="ALiBi kernel is stochastically monotone for all m >= 0; slopes and d order rows (C3(a), C3(b), C4(b)); "
    "--bias EXPR: any relative bias, proved / refuted / undecided (C7(b))",
    claims=("C3(a)", "C3(b)", "C4(b)", "C7(b)"),
    params=MonotoneParams,
    compute=compute,
    limits="--max-row <= 16 (exact coefficient-sign checks of dF_i(k)/dr for every row up to it); about 3 s at the "
    "maximum; "
    "--bias mode: --up-to <= 256, at most 81 grid points and 4 parameters",
    examples=_bias_examples(),
    parse=lambda argv: _bias_parser()(argv),
)


def _closed(expr: sp.Expr) -> sp.Expr:
    """A finite sum's closed form from ``Sum.doit`` (generic branch r != 1 of any Piecewise)."""
    return generic(expr.doit())


@certificate("monotone:slope-order-general", claims=("C3(b)", "C3(c)"))
def slope_order_general() -> Check:
    """C3(b) for every row i, symbolic: with s = i - k >= 1 and i = s + x (x = k >= 0 symbolic),
    P = sum_{a=s}^{i} r^a, Q = D + Q1, Q1 = sum_{b=1}^{i} r^b = L + P, L = sum_{b=1}^{s-1} r^b:

        P'Q - PQ' = D P' + (P'L - PL') = D sum_{a=s}^{i} a r^{a-1} + sum_{a=s}^{i} sum_{b=1}^{s-1} (a - b) r^{a+b-1}

    (the pairs with both exponents in P cancel: P'P - PP' = 0), and every coefficient is positive:
    a = s + x' >= 1 and a - b = x' + y' + 1 with a = s + x', b = s - 1 - y' (x', y' >= 0). So
    dF_i(k)/dr = (P'Q - PQ')/Q^2 >= 0. The identities are checked on the closed forms of the sums
    (r != 1); both sides are polynomials in r, so they hold at r = 1 too."""
    a, b = sp.symbols("a b", integer=True)
    s = sp.Symbol("s", integer=True, positive=True)  # s = i - k >= 1
    x, xp, yp = sp.symbols("x x' y'", integer=True, nonnegative=True)
    row = s + x  # i
    P = sum_of(r**a, (a, s, row))
    L = sum_of(r**b, (b, 1, s - 1))
    Q1 = sum_of(r**b, (b, 1, row))
    dP = sum_of(sp.diff(r**a, r), (a, s, row))
    dL = sum_of(sp.diff(r**b, r), (b, 1, s - 1))
    dQ1 = sum_of(sp.diff(r**b, r), (b, 1, row))
    cP, cL, cQ1, cdP, cdL, cdQ1 = (_closed(e) for e in (P, L, Q1, dP, dL, dQ1))
    split = sp.simplify(cQ1 - cL - cP) == 0  # Q1 = L + P
    derivatives = all(sp.simplify(sp.diff(c, r) - dc) == 0 for c, dc in ((cP, cdP), (cL, cdL), (cQ1, cdQ1)))
    numerator = cdP * (D + cQ1) - cP * cdQ1  # P'Q - PQ'
    pairs = sum_of(sp.Sum((a - b) * r ** (a + b - 1), (b, 1, s - 1)), (a, s, row))
    decomposition = sp.simplify(numerator - D * cdP - _closed(pairs)) == 0
    quotient = sp.simplify(sp.diff(cP / (D + cQ1), r) - numerator / (D + cQ1) ** 2) == 0
    signs = bool((a - b).subs({a: s + xp, b: s - 1 - yp}).is_positive) and bool((s + xp).is_positive)
    ok = split and derivatives and decomposition and quotient and signs
    return check(
        ok,
        "C3(b) for every row i (symbolic i, k < i, r, D): P'Q - PQ' = D P' + sum_{a>=s>b} (a - b) r^{a+b-1} has only "
        "positive coefficients, so F_i(k) is non-decreasing in r = e^(-m): a steeper slope moves every row later",
        f"Q1 = L + P: {split}; derivatives of the sums: {derivatives}; decomposition of P'Q - PQ': {decomposition}; "
        f"dF/dr = (P'Q - PQ')/Q^2: {quotient}; coefficients a >= 1, a - b = x' + y' + 1 > 0: {signs}",
    )


@certificate("monotone:head-mixture", claims=("C3(a)", "C3(c)", "C4(b)"))
def head_mixture() -> Check:
    """A layer with H heads, A = sum_h w_h A_h (w_h >= 0, sum w_h = 1), symbolic H:
    (1) its row CDF is the w-mixture of the heads' row CDFs (exchange of the finite sums over j <= k and h);
    (2) so F_A(i, k) - F_A(i', k) = sum_h w_h (F_{A_h}(i, k) - F_{A_h}(i', k)), a sum of non-negative terms
        when every head is monotone (i <= i'), and likewise F_A(i, k) - F_{A'}(i, k) >= 0 when every head is
        row-wise dominated A_h ≼ A'_h: mixtures keep stochastic monotonicity (C3(a)) and the slope / diagonal
        row orders (C3(b), C4(b)), hence the profile orders of C3(c) and C4(b) with many heads.
    Exact cross-check: three ALiBi + content heads (r = 1, 1/2, 1/5), weights 1/2, 1/3, 1/6, N = 6."""
    h, H = sp.symbols("h H", integer=True, positive=True)
    row, col, kk = sp.symbols("i j k", integer=True, nonnegative=True)
    w = sp.Function("w", nonnegative=True)
    K = sp.Function("K")
    gap = sp.Function("g", nonnegative=True)  # g(h) = F_{A_h}(i, k) - F_{A_h}(i', k) >= 0 (hypothesis: head h monotone)
    mix_cdf = lambda i_: sum_of(sp.Sum(w(h) * K(h, i_, col), (h, 1, H)), (col, 0, kk))  # noqa: E731
    head_cdfs = lambda i_: sum_of(w(h) * sp.Sum(K(h, i_, col), (col, 0, kk)), (h, 1, H))  # noqa: E731
    swapped = mix_cdf(row).reorder((0, 1))
    # SymPy annotates Sum.limits as a 1-tuple; a double sum has two (pyright is wrong here)
    nested = sp.Sum(sp.factor_terms(sum_of(swapped.function, swapped.limits[0])), swapped.limits[1])  # pyright: ignore[reportGeneralTypeIssues]
    exchange = nested == head_cdfs(row)
    i2 = sp.Symbol("i'", integer=True, nonnegative=True)
    per_head = sum_of(w(h) * (sum_of(K(h, row, col), (col, 0, kk)) - sum_of(K(h, i2, col), (col, 0, kk))), (h, 1, H))
    linear = sp.simplify(head_cdfs(row) - head_cdfs(i2) - per_head) == 0
    nonneg = bool(sp.Sum(w(h) * gap(h), (h, 1, H)).is_nonnegative)
    # exact cross-check
    weights = (sp.Rational(1, 2), sp.Rational(1, 3), sp.Rational(1, 6))
    flat = [
        exact_kernel(6, rv, dv) for rv, dv in ((1, 1), (sp.Rational(1, 2), sp.Rational(1, 5)), (sp.Rational(1, 5), 5))
    ]
    steep = [
        exact_kernel(6, rv, dv)
        for rv, dv in ((sp.Rational(1, 2), 1), (sp.Rational(1, 5), sp.Rational(1, 5)), (sp.Rational(1, 10), 5))
    ]
    mixed, mixed_steep = sp.zeros(6, 6), sp.zeros(6, 6)
    for wt, a, a_steep in zip(weights, flat, steep):
        mixed, mixed_steep = mixed + wt * a, mixed_steep + wt * a_steep
    rows = lambda mat: [list(mat.row(q)) for q in range(mat.rows)]  # noqa: E731
    exact_ok = (
        exact_monotone(mixed)
        and exact_monotone(mixed_steep)
        and all(exact_dominated(p, q) for p, q in zip(rows(mixed), rows(mixed_steep)))
    )
    lams = [sp.Rational(1, 2), sp.Rational(1, 3)]
    exact_ok = exact_ok and exact_dominated(
        exact_profile([mixed, mixed], lams), exact_profile([mixed_steep, mixed], lams)
    )
    ok = exchange and linear and nonneg and exact_ok
    return check(
        ok,
        "a convex combination of stochastically monotone kernels is monotone, and of row-ordered kernels row-ordered "
        "(symbolic number of heads H): C3(a), C3(c), C4(b) hold for multi-head layers",
        f"CDF exchange: {exchange}; per-head linearity: {linear}; sum_h w_h g_h >= 0: {nonneg}; exact 3-head check: "
        f"{exact_ok}",
    )
