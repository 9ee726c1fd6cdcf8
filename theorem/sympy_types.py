"""SymPy results typed as what they are, checked at run time.

SymPy annotates several constructors and methods loosely: ``Sum(...)`` as a union with
relationals and ``NaN``, ``Basic.doit()`` / ``xreplace`` / ``piecewise_fold`` as ``Basic``.
The values theorem/ builds with them are expressions (``Expr``; an unevaluated sum is a
``Sum``). These helpers check that with ``isinstance`` and return the value with that type, so
the modules using them type-check (pyright, basic) without ignoring anything; a value of any
other type is a ``TypeError`` naming it, never a silent wrong type. Nothing is computed here:
no float arithmetic, no limits.

Examples
--------
>>> import sympy as sp
>>> n = sp.Symbol("n", integer=True, nonnegative=True)
>>> as_expr(sum_of(n, (n, 0, 3)).doit())
6
>>> as_expr(sp.Eq(n, 1))
Traceback (most recent call last):
...
TypeError: expected a SymPy expression, got Equality
"""

from __future__ import annotations

from typing import Any

import sympy as sp


def as_expr(value: object) -> sp.Expr:
    """``value`` typed as ``sp.Expr`` (a ``TypeError`` if it is not one)."""
    if not isinstance(value, sp.Expr):
        raise TypeError(f"expected a SymPy expression, got {type(value).__name__}")
    return value


def sum_of(term: object, *limits: tuple) -> sp.Sum:
    """The unevaluated ``sp.Sum(term, *limits)``, typed as ``sp.Sum`` (a ``TypeError`` if SymPy
    evaluated it on construction)."""
    out = sp.Sum(term, *limits)
    if not isinstance(out, sp.Sum):
        raise TypeError(f"Sum(...) evaluated on construction to {type(out).__name__}")
    return out


def summed(term: object, *limits: tuple) -> sp.Expr:
    """``sp.Sum(term, *limits).doit()`` typed as ``sp.Expr`` (the closed form SymPy finds, or the sum)."""
    return as_expr(sp.Sum(term, *limits).doit())


def as_symbol(value: object) -> sp.Symbol:
    """``value`` typed as ``sp.Symbol`` (a ``TypeError`` if it is not one): a free symbol of a parsed expression."""
    if not isinstance(value, sp.Symbol):
        raise TypeError(f"expected a SymPy symbol, got {type(value).__name__}")
    return value


def as_rational(value: object) -> sp.Rational:
    """``value`` typed as ``sp.Rational`` (a ``TypeError`` if it is not one, e.g. ``nan`` or ``zoo``)."""
    if not isinstance(value, sp.Rational):
        raise TypeError(f"expected a SymPy rational, got {type(value).__name__}")
    return value


def indexed_base(name: str, **assumptions: Any) -> sp.IndexedBase:
    """``sp.IndexedBase(name, **assumptions)`` typed as ``sp.IndexedBase`` (SymPy annotates it as ``Basic``)."""
    out = sp.IndexedBase(name, **assumptions)
    if not isinstance(out, sp.IndexedBase):
        raise TypeError(f"IndexedBase({name!r}) gave {type(out).__name__}")
    return out
