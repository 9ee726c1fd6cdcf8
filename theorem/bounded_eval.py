"""Bounded evaluation of a parsed expression at one integer t (the symbolic side's hostile-input guard).

``approx(expr, t)``: λ_t at ``T = t`` in mpmath (``DPS`` digits) with a cap on magnitudes
(``LOG_CAP``, on the natural log of every intermediate value): values too large to represent
cheaply raise ``TooLarge`` instead of computing a billion-digit integer; poles, complex values
and constructs it does not know raise ``Unevaluable``. A deterministic *work limit*: it gives up
by the size of the values, never by the clock. The result carries ``DPS`` significant digits (an
mpmath float, not exact); callers that decide exactly use SymPy and treat this as a numeric check.

Examples
--------
>>> import sympy as sp
>>> float(approx(1 / sp.factorial(T), 3))
0.16666666666666666
>>> approx(sp.exp(sp.exp(T)), 20)
Traceback (most recent call last):
...
posbias.theorem.bounded_eval.TooLarge: exp too large
"""

from __future__ import annotations

from typing import Any

import mpmath
import sympy as sp

T = sp.Symbol("t", integer=True, nonnegative=True)
# An mpmath real (a value of mpmath.mpf): mpmath makes that class per context at run time, so pyright
# cannot name it; Any is the honest type of approx()'s results.
MpReal = Any

LOG_CAP = 10**6  # approx(): natural log of the largest magnitude it computes (about 10^434294)
DPS = 40  # approx(): working precision in decimal digits


class TooLarge(ArithmeticError):
    """A value's magnitude is beyond what ``approx`` computes (``LOG_CAP``)."""


class Unevaluable(ArithmeticError):
    """``approx`` cannot give a real number here (a pole, a complex value, an unknown function)."""


def _check(v):
    if isinstance(v, mpmath.mpc):
        if v.imag != 0:
            raise Unevaluable("complex value")
        v = v.real
    if not mpmath.isfinite(v):
        raise Unevaluable("not finite")
    if v != 0 and abs(mpmath.log(abs(v))) > LOG_CAP:
        raise TooLarge("magnitude beyond the cap")
    return v


def approx(expr: sp.Basic, t: int | None, dps: int = DPS) -> MpReal:
    """``expr`` at ``T = t`` in mpmath with ``dps`` digits, every intermediate magnitude capped.

    Raises ``TooLarge`` when a value's natural log exceeds ``LOG_CAP`` in absolute value,
    ``Unevaluable`` for poles, complex values, undefined names or functions it does not know.
    """
    with mpmath.workdps(dps):
        return _approx(expr, t)


def _approx(e: sp.Basic, t: int | None):  # noqa: C901 - one branch per node type
    if e is T:
        if t is None:
            raise Unevaluable("t has no value")
        return mpmath.mpf(t)
    if isinstance(e, sp.Integer):
        if e.p.bit_length() > 4000:
            raise TooLarge("integer too large")
        return mpmath.mpf(int(e.p))
    if isinstance(e, sp.Rational):
        if max(e.p.bit_length(), e.q.bit_length()) > 4000:
            raise TooLarge("rational too large")
        return mpmath.mpf(int(e.p)) / int(e.q)
    if isinstance(e, sp.Float):
        return mpmath.mpf(e._mpf_)
    if e is sp.pi:
        return +mpmath.pi
    if e is sp.E:
        return +mpmath.e
    if isinstance(e, sp.Add):
        return _check(mpmath.fsum(_approx(a, t) for a in e.args))
    if isinstance(e, sp.Mul):
        out = mpmath.mpf(1)
        for a in e.args:
            out = _check(out * _approx(a, t))
        return out
    if isinstance(e, sp.Pow):
        base, ex = _approx(e.base, t), _approx(e.exp, t)
        if base == 0:
            if ex > 0:
                return mpmath.mpf(0)
            raise Unevaluable("0 to a non-positive power")
        if base < 0 and ex != mpmath.floor(ex):
            raise Unevaluable("negative base, non-integer exponent")
        if abs(ex * mpmath.log(abs(base))) > LOG_CAP:
            raise TooLarge("power too large")
        return _check(mpmath.power(base, ex))
    if isinstance(e, sp.exp):
        x = _approx(e.args[0], t)
        if abs(x) > LOG_CAP:
            raise TooLarge("exp too large")
        return _check(mpmath.exp(x))
    if isinstance(e, sp.log):
        if len(e.args) != 1:
            raise Unevaluable("log with a base")
        x = _approx(e.args[0], t)
        if x <= 0:
            raise Unevaluable("log of a non-positive number")
        return _check(mpmath.log(x))
    if isinstance(e, (sp.factorial, sp.gamma)):
        x = _approx(e.args[0], t) + (1 if isinstance(e, sp.factorial) else 0)
        if x <= 0 and x == mpmath.floor(x):
            raise Unevaluable("pole of gamma")
        if x > 2 and mpmath.loggamma(x).real > LOG_CAP:
            raise TooLarge("factorial too large")
        return _check(mpmath.gamma(x))
    if isinstance(e, (sp.floor, sp.ceiling)):
        x = _approx(e.args[0], t)
        if abs(x) > mpmath.mpf(10) ** (mpmath.mp.dps - 10):
            raise Unevaluable("floor of a number beyond the working precision")
        return mpmath.floor(x) if isinstance(e, sp.floor) else mpmath.ceil(x)
    if isinstance(e, sp.Abs):
        return abs(_approx(e.args[0], t))
    simple = {sp.sin: mpmath.sin, sp.cos: mpmath.cos, sp.tan: mpmath.tan, sp.atan: mpmath.atan}
    for cls, fn in simple.items():
        if isinstance(e, cls):
            x = _approx(e.args[0], t)
            if abs(x) > mpmath.mpf(10) ** 30:
                raise Unevaluable("trigonometric function of a huge argument")
            return _check(fn(x))
    raise Unevaluable(f"no bounded evaluation for {type(e).__name__}")
