"""Where a bias formula b(g) has a value: a bias is a kernel only if b(g) is finite and real at every
distance g >= 0 (THEORY.md C7: w(g) = e^{b(g)}, and w(0) is the weight of a token's own position).

``-log(g)`` is non-increasing on g >= 1 and would pass C7(b)'s sufficient condition, yet b(0) = +inf:
no kernel has that bias. ``require_values(bias, where, up_to)`` refuses such a formula in one line
before any verdict is given, naming the first distance without a value.

What is checked: every part of the formula that restricts its domain (a logarithm's argument must be
> 0, a divided-by expression != 0, the base of a fractional power >= 0, or > 0 for a negative
power) and holds no parameter is evaluated exactly at g = 0, 1, ..., up_to (SymPy's exact numbers,
``is_positive``/``is_zero``; a sign SymPy cannot decide is not refused), and a polynomial part also at
the integers next to its real roots and, when its leading coefficient is negative, at a g beyond them
(so ``1/(g - 100)`` and ``log(50 - g)`` are refused although the exact check stops at ``up_to``).
Parts that hold a parameter are left to ``relative_bias.where_undefined``, which states the caveat
"for the parameters where it is defined"; a part without one fails for every parameter value, so that
is a refusal, not a caveat.

Examples
--------
>>> from posbias.theorem.bias_expr import parse_bias
>>> require_values(parse_bias("-log(1+g)", "demo"), "demo", 32)
>>> require_values(parse_bias("-m*log(g)", "demo"), "demo", 32)
Traceback (most recent call last):
...
posbias.theorem.errors.DeriveError: demo: '-m*log(g)' has no value at g = 0 (log of g = 0 <= 0); a bias
must be finite and real at every distance g >= 0 (e.g. -log(1+g), not -log(g))
>>> require_values(parse_bias("1/(g-100)", "demo"), "demo", 32)
Traceback (most recent call last):
...
posbias.theorem.errors.DeriveError: demo: '1/(g-100)' has no value at g = 100 (division by g - 100 = 0);
a bias must be finite and real at every distance g >= 0 (e.g. -log(1+g), not -log(g))
"""

from __future__ import annotations

from collections.abc import Iterator

import sympy as sp

from posbias.theorem.bias_expr import Bias, G
from posbias.theorem.errors import DeriveError
from posbias.theorem.sympy_types import as_expr

HINT = "a bias must be finite and real at every distance g >= 0 (e.g. -log(1+g), not -log(g))"


def _restrictions(expr: sp.Expr) -> Iterator[tuple[sp.Expr, str, str]]:
    """(part, need, what) for each sub-expression that limits the domain: need is 'positive' (log
    argument, base of a negative fractional power), 'nonzero' (divided by) or 'nonnegative' (base of a
    positive fractional power); what names the operation for the refusal."""
    for node in sp.preorder_traversal(expr):
        if isinstance(node, sp.log):
            yield node.args[0], "positive", "log of"
        elif isinstance(node, sp.Pow):
            base, ex = node.args
            if ex.is_Integer:
                if ex.is_negative:
                    yield base, "nonzero", "division by"
            elif ex.is_Rational:  # a fractional power: real only for a non-negative base
                yield base, "positive" if ex.is_negative else "nonnegative", f"the power {ex} of"


def _fails(value: sp.Expr, need: str) -> bool:
    """Whether ``value`` (exact, no symbols) certainly breaks ``need``; an undecided sign is no failure."""
    if need == "nonzero":
        return bool(value.is_zero)
    if need == "positive":
        return bool(value.is_nonpositive)
    return bool(value.is_negative)


def _candidates(part: sp.Expr, up_to: int) -> list[int]:
    """g = 0 .. up_to, and for a polynomial part the integers beside its real roots (and one beyond
    them when the leading coefficient is negative, where the part ends up negative)."""
    found = set(range(up_to + 1))
    try:
        poly = sp.Poly(part, G)
    except sp.PolynomialError:
        return sorted(found)
    if poly.degree() < 1 or not all(c.is_Rational for c in poly.all_coeffs()):
        return sorted(found)
    roots = [float(as_expr(r)) for r in sp.real_roots(poly)]
    for r in roots:
        if r >= -1:
            found.update(g for g in (int(sp.floor(r)), int(sp.ceiling(r))) if g >= 0)
    if poly.LC() < 0:
        found.add(max([0, *[int(sp.ceiling(r)) + 1 for r in roots]]))
    return sorted(found)


def _reason(part: sp.Expr, need: str, what: str, value: sp.Expr) -> str:
    """'log of g = 0 <= 0', 'division by g - 100 = 0', 'the power 1/2 of 2 - g = -1 < 0'."""
    if need == "nonzero":
        return f"{what} {part} = 0"
    return f"{what} {part} = {value} {'<=' if need == 'positive' else '<'} 0"


def require_values(bias: Bias, where: str, up_to: int) -> None:
    """Refuse (one-line ``DeriveError``) a formula whose parameter-free domain parts fail at some distance
    g >= 0 (module docstring); a weights table has a value everywhere and passes."""
    expr = bias.expr
    if expr is None:
        return
    params = set(bias.params)
    first: tuple[int, str] | None = None
    for part, need, what in _restrictions(expr):
        if part.free_symbols & params:
            continue
        for g in _candidates(part, up_to):
            if first is not None and g >= first[0]:
                break
            value = sp.nsimplify(part.subs(G, g)) if part.has(sp.Float) else part.subs(G, g)
            if _fails(value, need):
                first = (g, _reason(part, need, what, value))
                break
    if first is not None:
        raise DeriveError(f"{where}: {bias.text!r} has no value at g = {first[0]} ({first[1]}); {HINT}")
