"""Bias specifications (``--bias SPEC``, the config's ``bias:`` key) -> ``posbias.numerics.bias.Bias`` (C7).

One head's bias b(g) on distances g >= 0:

  alibi:M                       -M g (M >= 0)
  kerple-log:R1,R2              -R1 log(1 + R2 g)
  kerple-power:R1,R2            -R1 g^R2
  t5:NB,MD:V0,...,V(NB-1)       T5's relative buckets (decoder, unidirectional), one value per bucket
  t5-bidirectional:NB,MD:V...   T5's bidirectional buckets: the first NB/2 values for the past, the rest
                                for the future (a two-sided bias by itself)
  table:V0,...,V(L-1)           b(g) = V_g, constant V(L-1) beyond L
  window-table:V0,...,V(L-1)    b(g) = V_g, no weight beyond L (a window of L tokens)
  expr:EXPR[;NAME=VALUE,...]    an expression in g with parameters, e.g. expr:-r1*log(1+r2*g);r1=1,r2=0.5
  EXPR[;NAME=VALUE,...]         the same without the prefix (a bare formula, as ``posbias derive --bias``
                                takes it): any spec that does not start with a family name and a colon

``PAST|FUTURE`` (two specs) gives a two-sided bias for masks that read later tokens (full, prefix);
a single spec is the symmetric b(|i - j|). Several heads: specs separated by ``/`` (one per head); a
``/`` starts a new head only before a family name and a colon (``expr:1/(1+g)/alibi:0.5`` is two heads,
the bare ``-g/2`` one).

Expressions go through the project's safe parser (posbias.theorem.expr_guard, with g as the
variable): numbers, g, parameter names, + - * / ** ^ and the functions it allows; every
parameter must be given a value. An expression that is linear in g with a non-positive
slope (c - m g, m >= 0) is recognised as ALiBi (the constant cancels in every row) and
becomes ``Alibi(m)``, so the structured O(T H N) engine computes it; any other is lambdified
with NumPy (``sympy.lambdify``) and handed to numerics/ as a callable (numerics imports no SymPy).

Examples
--------
>>> parse_bias("kerple-log:1,0.5")
Bias(past=KerpleLog(r1=1.0, r2=0.5), future=None)
>>> parse_bias("expr:3 - m*g;m=0.25")
Bias(past=Alibi(slope=0.25), future=None)
>>> parse_bias("expr:-log(1+g)^2").values(3)[0].round(4).tolist()
[-0.0, -0.4805, -1.2069]
>>> parse_bias("-m*g;m=0.25")
Bias(past=Alibi(slope=0.25), future=None)
>>> parse_bias("alibi:-1")
Traceback (most recent call last):
...
posbias.errors.UserError: --bias 'alibi:-1': alibi slope: -1 is below 0, expected a value >= 0
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import sympy as sp

from posbias.errors import UserError
from posbias.numerics.bias import Alibi, Bias, Function, KerpleLog, KerplePower, T5Buckets, Table, finite_number
from posbias.numerics.stack import StackError
from posbias.theorem.bias_expr import family_name, named_values

G = sp.Symbol("g", integer=True, nonnegative=True)
KINDS = ("alibi", "kerple-log", "kerple-power", "t5", "t5-bidirectional", "table", "window-table", "expr")
SPECS = (
    "alibi:M | kerple-log:R1,R2 | kerple-power:R1,R2 | t5:NB,MD:V0,... | t5-bidirectional:NB,MD:V0,... | "
    "table:V0,... | window-table:V0,... | expr:EXPR[;NAME=VALUE,...] | a formula in g such as -0.5*log(1+g); "
    "PAST|FUTURE for two sides"
)
EXPECTED_EXPR = "expected an expression in g such as -0.5*log(1+g)"


def parse_biases(text: str, where: str = "--bias") -> list[Bias]:
    """One ``Bias`` per head from specs separated by ``/``."""
    parts = _split_heads(str(text))
    if not parts or any(not p for p in parts):
        raise UserError(f"{where} {text!r}: an empty head spec; expected {SPECS}, one per head separated by /")
    return [parse_bias(p, where) for p in parts]


def _split_heads(text: str) -> list[str]:
    """Split at ``/`` that start a new head spec: before a family name and a colon (an expression may
    divide: expr:1/(1+g), -g/2)."""
    heads, current = [], ""
    for piece in text.split("/"):
        if current and family_name(piece) in KINDS:
            heads.append(current)
            current = piece
        else:
            current = piece if not current else current + "/" + piece
    heads.append(current)
    return [h.strip() for h in heads]


def parse_bias(text: str, where: str = "--bias") -> Bias:
    """One head's ``Bias`` from a spec (module docstring); a one-line ``UserError`` otherwise."""
    spec = str(text).strip()
    try:
        if "|" in spec:
            past_text, _, future_text = spec.partition("|")
            if "|" in future_text:
                raise UserError(f"{where} {text!r}: more than one '|'; expected PAST|FUTURE")
            past, future = _side(past_text.strip(), where, text), _side(future_text.strip(), where, text)
            if isinstance(past, Bias) or isinstance(future, Bias):
                raise UserError(f"{where} {text!r}: t5-bidirectional is two-sided by itself; expected it alone")
            return Bias(past, future)
        side = _side(spec, where, text)
        return side if isinstance(side, Bias) else Bias(side)
    except StackError as exc:
        raise UserError(f"{where} {text!r}: {exc}") from None


def _numbers(args: str, where: str, text: str, count: int | None = None) -> list[float]:
    try:
        values = [float(a) for a in args.split(",")]
    except ValueError:
        raise UserError(
            f"{where} {text!r}: {args!r} is not a comma-separated list of numbers; expected {SPECS}"
        ) from None
    if count is not None and len(values) != count:
        raise UserError(f"{where} {text!r}: expected {count} numbers, got {len(values)}")
    return values


def _side(spec: str, where: str, text: str):
    kind = family_name(spec)
    if kind is None:  # a bare formula in g: the same as expr:
        if not spec.strip():
            raise UserError(f"{where} {text!r}: an empty bias; expected {SPECS}")
        return expression(spec, where=f"{where} {text!r}")
    if kind not in KINDS:
        raise UserError(f"{where} {text!r}: unknown bias {spec!r}; expected {SPECS}")
    args = spec.partition(":")[2]
    if kind == "expr":
        return expression(args, where=f"{where} {text!r}")
    if kind in ("t5", "t5-bidirectional"):
        shape, sep, values = args.partition(":")
        nb, md = _numbers(shape, where, text, 2)
        if not sep or not (nb.is_integer() and md.is_integer()):
            raise UserError(
                f"{where} {text!r}: expected {kind}:NUM_BUCKETS,MAX_DISTANCE:V0,... with integer "
                "bucket count and distance"
            )
        vals = tuple(_numbers(values, where, text))
        bidirectional = kind == "t5-bidirectional"
        past = T5Buckets(int(nb), int(md), vals, bidirectional)
        if bidirectional:
            return Bias(past, T5Buckets(int(nb), int(md), vals, True, future=True))
        return past
    values = _numbers(args, where, text)
    if kind == "alibi":
        (m,) = _numbers(args, where, text, 1)
        return Alibi(m)
    if kind in ("kerple-log", "kerple-power"):
        r1, r2 = _numbers(args, where, text, 2)
        return KerpleLog(r1, r2) if kind == "kerple-log" else KerplePower(r1, r2)
    return Table(tuple(values), window=kind == "window-table")


def symbolic(text: str, *, where: str = "--bias", values: dict[str, float] | None = None) -> tuple[sp.Expr, str]:
    """``EXPR[;NAME=VALUE,...]`` as a SymPy expression in ``G`` with every parameter substituted, and
    its canonical spec text; a one-line ``UserError`` for anything the safe parser refuses.

    Every parameter is given once, with a finite value (NaN and +-inf are refused, as ``alibi:nan``
    is), and the substituted expression must still be finite and real: no infinity, NaN or
    non-real constant in it (``-g/a;a=0``, ``-g*log(a);a=-1`` and ``(-g)^(1/3)``, which SymPy
    writes (-1)^(1/3) g^(1/3), are refused; ``Bias.values`` refuses a complex value at any
    distance it evaluates)."""
    from posbias.theorem import expr_guard
    from posbias.theorem.errors import DeriveError

    body, _, assignments = str(text).partition(";")
    try:
        given = {**(values or {}), **named_values(assignments, where, lambda _, v: float(v))}
    except DeriveError as exc:
        raise UserError(str(exc)) from None
    for name, value in given.items():
        try:
            given[name] = finite_number(f"parameter {name}", value)
        except StackError as exc:
            raise UserError(f"{where}: {exc}") from None
    try:
        expr = expr_guard.parse(body, where, positive_names=False, variable=G, expected=EXPECTED_EXPR)
    except DeriveError as exc:
        raise UserError(str(exc)) from None
    params = sorted((s for s in expr.free_symbols if isinstance(s, sp.Symbol) and s != G), key=lambda s: s.name)
    missing = [p.name for p in params if p.name not in given]
    if missing:
        raise UserError(f"{where}: give values for {', '.join(missing)} (EXPR;NAME=VALUE,...)")
    unknown = sorted(set(given) - {p.name for p in params})
    if unknown:
        raise UserError(f"{where}: {', '.join(unknown)} does not appear in the expression")
    shown = body.strip() + (";" + ",".join(f"{k}={given[k]!r}" for k in sorted(given)) if given else "")
    try:
        expr = expr.subs({p: sp.Float(given[p.name], 17) for p in params})
    except (ArithmeticError, ValueError, TypeError):  # e.g. factorial(a) at a pole, a = -1
        expr = sp.nan
    constants = (a for a in sp.preorder_traversal(expr) if isinstance(a, sp.Expr) and not a.free_symbols)
    if expr.has(sp.zoo, sp.nan, sp.I, sp.oo, -sp.oo) or any(a.is_extended_real is False for a in constants):
        raise UserError(f"{where}: {shown!r} is not a finite real expression; {EXPECTED_EXPR}")
    return expr, f"expr:{shown}"


def expression(text: str, *, where: str = "--bias", values: dict[str, float] | None = None):
    """``EXPR[;NAME=VALUE,...]`` as an ``Alibi`` (linear in g, slope <= 0) or a NumPy ``Function``."""
    expr, spec = symbolic(text, where=where, values=values)
    poly = sp.Poly(expr, G) if expr.is_polynomial(G) else None
    if poly is not None and poly.degree() <= 1:
        try:
            slope = float(poly.coeff_monomial(G))
        except TypeError:  # a coefficient SymPy cannot show to be real
            shown = spec.partition(":")[2]
            raise UserError(f"{where}: {shown!r} is not a finite real expression; {EXPECTED_EXPR}") from None
        if slope <= 0:
            return Alibi(-slope)
    return Function(spec, sp.lambdify(G, expr, modules=[{"gamma": _gamma, "factorial": _factorial}, "numpy"]))


def jax_function(text: str, **values) -> Callable:
    """A bias expression in g (``EXPR[;NAME=VALUE,...]``; ``values`` give parameters too) as a JAX function
    of an array of distances (``sympy.lambdify(..., modules="jax")``): the same expression that ``expr:``
    hands to the engines as a NumPy callable. JAX is imported when the function runs."""
    expr, _ = symbolic(text, where="jax_function", values=values)
    return sp.lambdify(G, expr, modules="jax")


def _gamma_scalar(x: float) -> float:
    try:
        return math.gamma(x)
    except OverflowError:  # beyond float64 (x > 171.6): inf, which the stack reports as b(g) = inf
        return math.inf
    except ValueError:  # a pole (0, -1, -2, ...)
        return math.nan


_gamma_ufunc = np.frompyfunc(_gamma_scalar, 1, 1)


def _gamma(x) -> np.ndarray:
    """Gamma(x) elementwise in float64 (``math.gamma``, about 1e-15 relative): inf past float64's
    range, NaN at the poles; NumPy has no gamma function, and ``lambdify`` would call SymPy's."""
    return np.asarray(_gamma_ufunc(np.asarray(x, np.float64)), np.float64)


def _factorial(x) -> np.ndarray:
    """x! = Gamma(x + 1), elementwise, as ``_gamma``."""
    return _gamma(np.asarray(x, np.float64) + 1.0)
