"""C4(a): a row-constant background cancels from a masked row softmax.

For logits x_0, ..., x_{N-1}, a 0/1 mask M and any background b,

    softmax_j(x + b) = M_j e^{x_j + b} / sum_l M_l e^{x_l + b}
                     = e^b M_j e^{x_j} / (e^b sum_l M_l e^{x_l}) = softmax_j(x),

for symbolic N: e^{x_l + b} = e^b e^{x_l} and the constant e^b leaves the sum.
So in the logits b 𝟙𝟙ᵀ + d I - m (i - j) only d and m shape the kernel.

Examples
--------
>>> background_cancels().holds
True
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from posbias.theorem.certificate import Check, certificate, check
from posbias.theorem.derivation import Derivation, Result
from posbias.theorem.params import Params
from posbias.theorem.sympy_types import as_expr, indexed_base, sum_of

NAME = "softmax-shift"

b = sp.Symbol("b", real=True)
N = sp.Symbol("N", integer=True, positive=True)
j, ell = sp.symbols("j l", integer=True, nonnegative=True)  # ell: the summation index l
x = indexed_base("x", real=True)
M = indexed_base("M", nonnegative=True)


def masked_softmax(shift) -> sp.Expr:
    """Entry j of the masked row softmax of x + shift, for symbolic N."""
    return M[j] * sp.exp(x[j] + shift) / sum_of(M[ell] * sp.exp(x[ell] + shift), (ell, 0, N - 1))


def factored(expr: sp.Expr) -> sp.Expr:
    """Split e^{x + b} = e^b e^x and pull e^b out of the sum."""
    return sp.factor_terms(sp.expand(expr, power_exp=True))


def row_expressions(n: int, mask: list[int] | None = None):
    """Concrete N = n: (logit symbols, shifted softmax row, unshifted row), for lambdify."""
    xs = sp.symbols(f"x0:{n}", real=True)
    mask = [1] * n if mask is None else list(mask)
    den_b = sum(mk * sp.exp(xi + b) for mk, xi in zip(mask, xs))
    den = sum(mk * sp.exp(xi) for mk, xi in zip(mask, xs))
    shifted = [mk * sp.exp(xi + b) / den_b for mk, xi in zip(mask, xs)]
    plain = [mk * sp.exp(xi) / den for mk, xi in zip(mask, xs)]
    return xs, shifted, plain


def difference() -> sp.Expr:
    """softmax_j(x + b) - softmax_j(x) after factoring e^b out, simplified (expected: 0)."""
    return sp.simplify(factored(masked_softmax(b)) - masked_softmax(0))


@certificate("softmax-shift:background-cancels", claims=("C4(a)",))
def background_cancels() -> Check:
    """softmax(x + b) - softmax(x) simplifies to 0 for symbolic N, mask and b,
    and for every row of a causal mask with N <= 6."""
    diff = difference()
    ok = diff == 0
    for n in range(1, 7):
        for row in range(n):  # causal mask of row `row`: tokens 0..row allowed
            _, shifted, plain = row_expressions(n, mask=[1] * (row + 1) + [0] * (n - row - 1))
            ok = ok and all(sp.simplify(sp.expand(s - p, power_exp=True)) == 0 for s, p in zip(shifted, plain))
    return check(
        ok,
        "masked row softmax is invariant under a row-constant shift b (symbolic N; every causal row, N = 1..6)",
        f"softmax(x+b) - softmax(x) -> {diff}",
    )


@dataclass(frozen=True)
class SoftmaxShiftParams(Params):
    """``posbias derive softmax-shift`` takes no parameters (N, the mask and b stay symbolic)."""

    name = NAME


def compute(params: SoftmaxShiftParams = SoftmaxShiftParams()) -> Result:
    """C4(a): factor e^b out of numerator and denominator of the masked row softmax of x + b."""
    num = as_expr(M[j] * sp.exp(x[j] + b))
    den = sum_of(M[ell] * sp.exp(x[ell] + b), (ell, 0, N - 1))
    den_f = factored(den)
    verified = background_cancels()
    diff = difference()
    text = "\n".join(
        [
            "C4(a): a row-constant background cancels from a masked row softmax (symbolic N).",
            f"  numerator    {num}  =  {factored(num)}",
            f"  denominator  {den}  =  {den_f}",
            f"  softmax_j(x + b) - softmax_j(x)  simplifies to  {diff}",
            f"  verified: {'yes' if verified.holds else 'NO'} (symbolic N; every causal row for N = 1..6 explicitly)",
        ]
    )
    latex = (
        r"\frac{M_j e^{x_j+b}}{\sum_{l=0}^{N-1} M_l e^{x_l+b}}"
        r" = \frac{e^{b} M_j e^{x_j}}{e^{b}\sum_{l=0}^{N-1} M_l e^{x_l}}"
        r" = \frac{M_j e^{x_j}}{\sum_{l=0}^{N-1} M_l e^{x_l}}"
    )
    data = {
        "claims": ["C4(a)"],
        "numerator": str(factored(num)),
        "denominator": str(den_f),
        "difference": str(diff),
        "holds": verified.holds,
    }
    return Result(NAME, text, latex, data)


DERIVATION = Derivation(
    name=NAME,
    summary="row-constant background b cancels from a masked row softmax, symbolic N (C4(a))",
    claims=("C4(a)",),
    params=SoftmaxShiftParams,
    compute=compute,
    limits="no parameters; a fixed symbolic check, about 2 s",
)
