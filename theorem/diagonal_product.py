"""C5(a), C2(c): lower-triangular products multiply diagonals.

For lower-triangular A^(t) and R^(t) = (1 - lambda_t) I + lambda_t A^(t), the product
P = R^(T-1) ... R^(0) is lower-triangular with
    P[i, i] = prod_t (1 - lambda_t (1 - A^(t)[i, i]))            (i = N-1: the last-token atom, C2(c)),
and, when 1 - A^(t)[i, i] <= delta_t and 0 <= lambda_t delta_t <= 1,
    P[i, i] >= prod_t (1 - lambda_t delta_t),
by the telescoping identity  prod x_t - prod y_t = sum_t (prod_{s<t} y_s)(x_t - y_t)(prod_{s>t} x_s)
with x_t = 1 - lambda_t (1 - A^(t)_ii) >= y_t = 1 - lambda_t delta_t >= 0.

Examples
--------
>>> diagonal_identity(3, 3).holds
True
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from posbias.theorem.certificate import Check, certificate, check
from posbias.theorem.derivation import Derivation, Result
from posbias.theorem.params import Params, param

NAME = "diagonal-product"


def lower_triangular(t: int, n: int) -> sp.Matrix:
    """A^(t) with free entries a<t>_<ij> on and below the diagonal, 0 above (causal)."""
    return sp.Matrix(n, n, lambda a, b: sp.Symbol(f"a{t}_{a}{b}") if b <= a else 0)


def latex_names(lams, kernels) -> dict[sp.Symbol, str]:
    """LaTeX for the symbols of ``product``: lambda<t> -> \\lambda_{t}, a<t>_<ij> -> A^{(t)}_{ij}.

    >>> _, lams, kernels = product(1, 2)
    >>> print(sp.latex(diagonal_formula(lams, kernels, 1), symbol_names=latex_names(lams, kernels)))
    - \\lambda_{0} \\left(1 - A^{(0)}_{11}\\right) + 1
    """
    names = {lm: rf"\lambda_{{{t}}}" for t, lm in enumerate(lams)}
    for t, a in enumerate(kernels):
        for row in range(a.rows):
            for col in range(row + 1):
                names[a[row, col]] = rf"A^{{({t})}}_{{{row}{col}}}"
    return names


def product(layers: int, tokens: int):
    """(P, lambdas, kernels) with symbolic entries; P = R^(T-1) ... R^(0)."""
    lams = sp.symbols(f"lambda0:{layers}")
    kernels = [lower_triangular(t, tokens) for t in range(layers)]
    p = sp.eye(tokens)
    for a, lm in zip(kernels, lams):
        p = ((1 - lm) * sp.eye(tokens) + lm * a) * p
    return p, lams, kernels


def diagonal_formula(lams, kernels, row: int) -> sp.Expr:
    """prod_t (1 - lambda_t (1 - A^(t)[row, row])) (C5(a), C2(c) at row = N-1)."""
    return sp.Mul(*[1 - lm * (1 - a[row, row]) for lm, a in zip(lams, kernels)])


@certificate("diagonal-product:diagonal-identity", claims=("C2(c)", "C5(a)", "C5(c)", "C8(c)"))
def diagonal_identity(max_layers: int = 5, max_tokens: int = 5) -> Check:
    """P[i,i] = prod_t (1 - lambda_t (1 - A^(t)_ii)) and P lower-triangular, symbolic, T, N <= the maxima."""
    ok = True
    for t in range(1, max_layers + 1):
        for n in range(1, max_tokens + 1):
            p, lams, kernels = product(t, n)
            ok = ok and all(sp.expand(p[q, q] - diagonal_formula(lams, kernels, q)) == 0 for q in range(n))
            ok = ok and all(p[a, b] == 0 for a in range(n) for b in range(a + 1, n))
    return check(
        ok,
        "C5(a)/C2(c): lower-triangular products: P_ii = prod_t (1 - lambda_t (1 - A^(t)_ii)), symbolic, T, N <= "
        f"{max_layers}, {max_tokens}",
    )


@certificate("diagonal-product:telescoping-bound", claims=("C5(a)",))
def telescoping_bound(max_layers: int = 5) -> Check:
    """prod x_t - prod y_t = sum_t (prod_{s<t} y_s)(x_t - y_t)(prod_{s>t} x_s), symbolic, T <= max_layers;
    every term is >= 0 when x_t >= y_t >= 0, giving P_ii >= prod_t (1 - lambda_t delta_t)."""
    ok = True
    for t in range(1, max_layers + 1):
        xs, ys = sp.symbols(f"x0:{t}"), sp.symbols(f"y0:{t}")
        lhs = sp.Mul(*xs) - sp.Mul(*ys)
        rhs = sum(sp.Mul(*ys[:s]) * (xs[s] - ys[s]) * sp.Mul(*xs[s + 1 :]) for s in range(t))
        ok = ok and sp.expand(lhs - rhs) == 0
    lm, a_ii, delta = sp.symbols("lambda a_ii delta")
    factor_gap = sp.expand((1 - lm * (1 - a_ii)) - (1 - lm * delta) - lm * (delta - (1 - a_ii))) == 0
    return check(
        ok and factor_gap,
        f"C5(a): prod_t x_t - prod_t y_t telescopes into non-negative terms (T <= {max_layers}); x_t - y_t = lambda_t "
        "(delta_t - (1 - A_ii)) >= 0",
    )


@dataclass(frozen=True)
class DiagonalProductParams(Params):
    """Size of the symbolic product R^(T-1) ... R^(0)."""

    name = NAME
    layers: int = param(3, meaning="the number of layers T of the symbolic product", example="5", minimum=1, maximum=5)
    tokens: int = param(3, meaning="the number of tokens N of the symbolic product", example="5", minimum=1, maximum=5)


def compute(params: DiagonalProductParams = DiagonalProductParams()) -> Result:
    """P_ii = prod_t (1 - lambda_t (1 - A^(t)_ii)) for a symbolic T x N causal stack, and the
    telescoping bound P_ii >= prod_t (1 - lambda_t delta_t) (C2(c), C5(a))."""
    t, n = params.layers, params.tokens
    prod, lams, kernels = product(t, n)
    diag_ok = all(sp.expand(prod[q, q] - diagonal_formula(lams, kernels, q)) == 0 for q in range(n))
    bound = telescoping_bound(t)
    last = diagonal_formula(lams, kernels, n - 1)
    lines = [
        f"Lower-triangular product of T = {t} residual layers on N = {n} tokens (symbolic entries a<t>_<ij>):",
        f"  P[{n - 1},{n - 1}] = {last}",
        "  P[i,i] = prod_t (1 - lambda_t (1 - A^(t)[i,i]))  for every i: " + ("verified" if diag_ok else "FAILED"),
        "  P[i,i] >= prod_t (1 - lambda_t delta_t),  delta_t = 1 - min_i A^(t)[i,i]: "
        + ("telescoping identity verified" if bound.holds else "FAILED"),
    ]
    latex = (
        r"P_{ii} = \prod_{t=0}^{T-1}\bigl(1 - \lambda_t (1 - A^{(t)}_{ii})\bigr) \ge \prod_{t=0}^{T-1} (1 - \lambda_t "
        r"\delta_t),"
        r"\quad P_{N-1,N-1} = " + sp.latex(last, symbol_names=latex_names(lams, kernels))
    )
    data = {
        "claims": ["C2(c)", "C5(a)"],
        "layers": t,
        "tokens": n,
        "last_diagonal": str(last),
        "diagonal_identity": bool(diag_ok),
        "bound": bound.holds,
    }
    return Result(NAME, "\n".join(lines), latex, data)


DERIVATION = Derivation(
    name=NAME,
    summary="P_ii = prod_t (1 - lambda_t (1 - A^(t)_ii)) >= prod_t (1 - lambda_t delta_t) for causal stacks (C2(c), "
    "C5(a))",
    claims=("C2(c)", "C5(a)"),
    params=DiagonalProductParams,
    compute=compute,
    limits="--layers <= 5 and --tokens <= 5 (a fully symbolic product of T N x N causal matrices); under 1 s at the "
    "maximum",
)
