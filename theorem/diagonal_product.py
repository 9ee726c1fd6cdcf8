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

import sympy as sp

from posbias.theorem.certificate import Check
from posbias.theorem.derivation import Derivation, Result
from posbias.theorem.params import Param, parse

NAME = "diagonal-product"


def lower_triangular(t: int, n: int) -> sp.Matrix:
    return sp.Matrix(n, n, lambda a, b: sp.Symbol(f"a{t}_{a}{b}") if b <= a else 0)


def product(layers: int, tokens: int):
    """(P, lambdas, kernels) with symbolic entries; P = R^(T-1) ... R^(0)."""
    lams = sp.symbols(f"lambda0:{layers}")
    kernels = [lower_triangular(t, tokens) for t in range(layers)]
    p = sp.eye(tokens)
    for a, lm in zip(kernels, lams):
        p = ((1 - lm) * sp.eye(tokens) + lm * a) * p
    return p, lams, kernels


def diagonal_formula(lams, kernels, row: int) -> sp.Expr:
    return sp.Mul(*[1 - lm * (1 - a[row, row]) for lm, a in zip(lams, kernels)])


def diagonal_identity(max_layers: int = 5, max_tokens: int = 5) -> Check:
    """P[i,i] = prod_t (1 - lambda_t (1 - A^(t)_ii)) and P lower-triangular, symbolic, T, N <= the maxima."""
    ok = True
    for t in range(1, max_layers + 1):
        for n in range(1, max_tokens + 1):
            p, lams, kernels = product(t, n)
            ok = ok and all(sp.expand(p[q, q] - diagonal_formula(lams, kernels, q)) == 0 for q in range(n))
            ok = ok and all(p[a, b] == 0 for a in range(n) for b in range(a + 1, n))
    return Check(
        "diagonal-product:diagonal-identity",
        bool(ok),
        f"C5(a)/C2(c): lower-triangular products: P_ii = prod_t (1 - lambda_t (1 - A^(t)_ii)), symbolic, T, N <= {max_layers}, {max_tokens}",
    )


def telescoping_bound(max_layers: int = 5) -> Check:
    """prod x_t - prod y_t = sum_t (prod_{s<t} y_s)(x_t - y_t)(prod_{s>t} x_s), symbolic, T <= max_layers;
    every term is >= 0 when x_t >= y_t >= 0, giving P_ii >= prod_t (1 - lambda_t delta_t)."""
    ok = True
    for t in range(1, max_layers + 1):
        xs, ys = sp.symbols(f"x0:{t}"), sp.symbols(f"y0:{t}")
        lhs = sp.Mul(*xs) - sp.Mul(*ys)
        rhs = sum(sp.Mul(*ys[:s]) * (xs[s] - ys[s]) * sp.Mul(*xs[s + 1:]) for s in range(t))
        ok = ok and sp.expand(lhs - rhs) == 0
    lm, a_ii, delta = sp.symbols("lambda a_ii delta")
    factor_gap = sp.expand((1 - lm * (1 - a_ii)) - (1 - lm * delta) - lm * (delta - (1 - a_ii))) == 0
    return Check(
        "diagonal-product:telescoping-bound",
        bool(ok and factor_gap),
        f"C5(a): prod_t x_t - prod_t y_t telescopes into non-negative terms (T <= {max_layers}); x_t - y_t = lambda_t (delta_t - (1 - A_ii)) >= 0",
    )


def certificates() -> dict:
    return {
        "diagonal-product:diagonal-identity": diagonal_identity,
        "diagonal-product:telescoping-bound": telescoping_bound,
    }


SPEC = {
    "layers": Param(int, 3, minimum=1, maximum=5),
    "tokens": Param(int, 3, minimum=1, maximum=5),
}


def run(args: list[str]) -> Result:
    p = parse(NAME, args, SPEC)
    t, n = p["layers"], p["tokens"]
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
        r"P_{ii} = \prod_{t=0}^{T-1}\bigl(1 - \lambda_t (1 - A^{(t)}_{ii})\bigr) \ge \prod_{t=0}^{T-1} (1 - \lambda_t \delta_t),"
        r"\quad P_{N-1,N-1} = " + sp.latex(last)
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
    summary="P_ii = prod_t (1 - lambda_t (1 - A^(t)_ii)) >= prod_t (1 - lambda_t delta_t) for causal stacks (C2(c), C5(a))",
    claims=("C2(c)", "C5(a)"),
    usage="posbias derive diagonal-product [--layers T<=5] [--tokens N<=5]",
    run=run,
)
