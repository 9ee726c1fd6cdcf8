"""The infinite-depth dichotomy for a λ schedule: collapse iff Σ_t λ_t = ∞ (C5).

THEORY.md C5. For a causal stack with δ_t = 1 - min_i A^(t)[i, i] <= δ the last-token
atom is p(N-1) = Π_t (1 - λ_t (1 - A^(t)[N-1, N-1])) (C2(c)), bracketed by

    Π_t (1 - λ_t δ)  >=  exp(-Σ_t λ_t δ / (1 - λ_t δ))  >=  exp(-δ S / (1 - δ sup_t λ_t))
    Π_t (1 - λ_t δ)  <=  exp(-δ Σ_t λ_t)

from 1 - x >= e^{-x/(1-x)} (0 <= x < 1) and 1 - x <= e^{-x}, with S = Σ_t λ_t. So the
atom stays positive when S < ∞ (C5(a)) and tends to 0 when S = ∞ and δ > 0. Under
uniform bounds (every allowed entry >= ε > 0) C5(c) gives: collapse onto token 0
iff S = ∞.

``analyse`` decides S < ∞ for the named families by the classical tests (constant:
S = ∞ unless λ = 0; power decay λ_0 (t+a)^(-β): S < ∞ iff β > 1; geometric λ_0 q^t:
S < ∞ iff q < 1), for other closed-form schedules by SymPy's ``is_convergent`` under
a time limit, and says "undecided" with SymPy's reason when it cannot decide. It
never guesses.

Examples
--------
>>> analyse(parse_schedule("power_decay:0.5,1.5")).verdict
'no collapse'
>>> analyse(parse_schedule("constant:0.3")).verdict
'collapse'
"""

from __future__ import annotations

import math
import re
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import sympy as sp
from sympy.parsing.sympy_parser import (
    convert_xor,
    parse_expr,
    rationalize,
    standard_transformations,
)

from posbias.theorem.certificate import Cert
from posbias.theorem.params import ArgParser, exact_number
from posbias.theorem.derivation import Derivation, DeriveError, Result

T = sp.Symbol("t", integer=True, nonnegative=True)
TIME_LIMIT_S = 2.5  # SymPy's convergence tests can run for a long time; say "undecided" instead
TOTAL_S = 3.5  # all SymPy/mpmath work of one analysis (tests, sums, sup, product) shares this budget
CHECKED_TERMS = 200  # λ_t ∈ [0, 1] is checked exactly for t < CHECKED_TERMS on general expressions

_FUNCTIONS = {
    "exp": sp.exp, "log": sp.log, "sqrt": sp.sqrt, "sin": sp.sin, "cos": sp.cos, "tan": sp.tan,
    "atan": sp.atan, "Abs": sp.Abs, "abs": sp.Abs, "pi": sp.pi, "E": sp.E,
    "factorial": sp.factorial, "gamma": sp.gamma, "floor": sp.floor, "ceiling": sp.ceiling,
}
_ALLOWED_TEXT = re.compile(r"^[A-Za-z0-9_+\-*/^(). ]+$")
_ATTRIBUTE = re.compile(r"[A-Za-z_)\]]\s*\.")


# ------------------------------------------------------------------------------ parsing
@dataclass(frozen=True)
class Schedule:
    """λ_t as a SymPy expression in t >= 0; ``family`` names a recognised closed family."""

    text: str
    expr: sp.Expr
    family: str  # "constant", "power_decay", "geometric" or "expression"
    params: dict  # family parameters (SymPy values)

    @property
    def parameters(self) -> list[sp.Symbol]:
        return sorted((s for s in self.expr.free_symbols if s != T), key=str)


def parse_expression(text: str, where: str) -> sp.Expr:
    """A SymPy expression in ``t`` and named parameters (assumed positive), decimals exact."""
    src = text.strip()
    if not src or len(src) > 200 or not _ALLOWED_TEXT.match(src) or "__" in src or _ATTRIBUTE.search(src):
        raise DeriveError(
            f"{where}: {text!r} is not an expression in t (expected e.g. 0.5/(t+1)**1.5, letters, digits, "
            "+-*/^() and . in decimals only)"
        )
    global_dict = {"__builtins__": {}, "Integer": sp.Integer, "Float": sp.Float,
                   "Rational": sp.Rational, "Symbol": sp.Symbol, **_FUNCTIONS}
    try:
        expr = parse_expr(src, local_dict={"t": T}, global_dict=global_dict,
                          transformations=standard_transformations + (convert_xor, rationalize))
    except Exception as exc:  # tokenizer, syntax and evaluation errors alike
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DeriveError(f"{where}: cannot parse {text!r} ({reason}); expected an expression in t") from None
    if not isinstance(expr, sp.Expr) or expr.has(sp.zoo, sp.nan, sp.I):
        raise DeriveError(f"{where}: {text!r} is not a real expression in t")
    positive = {s: sp.Symbol(s.name, positive=True) for s in expr.free_symbols if s != T}
    return expr.xreplace(positive)


def parse_schedule(text: str) -> Schedule:
    """``constant:L``, ``power_decay:L0,BETA``, ``geometric:L0,Q`` or an expression in t.

    Family parameters may be numbers (exact: 0.3 -> 3/10) or names (positive symbols).
    """
    kind, sep, rest = text.partition(":")
    if sep and kind in ("constant", "power_decay", "geometric"):
        args = [parse_expression(a, f"schedule {text!r}") if re.search(r"[A-Za-z]", a)
                else exact_number(a, f"schedule {text!r}") for a in rest.split(",")]
        want = {"constant": 1, "power_decay": 2, "geometric": 2}[kind]
        if len(args) != want:
            raise DeriveError(f"schedule {text!r}: {kind} takes {want} parameter(s), got {len(args)}")
        if any(T in arg.free_symbols for arg in args):
            raise DeriveError(f"schedule {text!r}: {kind} parameters must not depend on t; "
                              "expected numbers or parameter names")
        if kind == "constant":
            return Schedule(text, args[0], kind, {"lambda": args[0]})
        if kind == "power_decay":
            lam0, beta = args
            return Schedule(text, lam0 * (T + 1) ** (-beta), kind, {"lambda_0": lam0, "beta": beta, "a": 1})
        lam0, q = args
        return Schedule(text, lam0 * q**T, kind, {"lambda_0": lam0, "q": q})
    expr = parse_expression(text, "schedule")
    if T not in expr.free_symbols:
        return Schedule(text, expr, "constant", {"lambda": expr})
    c, a, p = (sp.Wild(n, exclude=[T]) for n in "cap")
    m = expr.match(c * (T + a) ** p)
    if m and m.get(a) is not None and m[a].is_positive and m[p].is_real and (m[p] != 0):
        return Schedule(text, expr, "power_decay", {"lambda_0": m[c], "beta": -m[p], "a": m[a]})
    m = expr.match(c * p**T)
    if m and m[p].is_positive:
        return Schedule(text, expr, "geometric", {"lambda_0": m[c], "q": m[p]})
    return Schedule(text, expr, "expression", {})


# ----------------------------------------------------------------------------- analysis
def jax_schedule(s: Schedule, **values) -> Callable:
    """lambda_t as a JAX function of t (``sympy.lambdify(..., modules="jax")``); symbolic
    parameters are substituted from ``values`` first."""
    missing = [p.name for p in s.parameters if p.name not in values]
    if missing:
        raise DeriveError(f"jax_schedule: give values for {', '.join(missing)}")
    expr = s.expr.subs({p: values[p.name] for p in s.parameters})
    return sp.lambdify(T, expr, modules="jax")


def jax_partial_atom(s: Schedule, delta, **values) -> Callable:
    """T -> prod_{t<T} (1 - lambda_t delta) (C2(c) with A[N-1, N-1] = 1 - delta), in JAX."""
    lam = jax_schedule(s, **values)

    def atom(num_layers: int):
        import jax.numpy as jnp

        t = jnp.arange(num_layers, dtype=jnp.float64)
        return jnp.prod(1.0 - lam(t) * float(delta))

    return atom


class _Timeout(BaseException):
    """Raised by the alarm; BaseException so SymPy's ``except Exception`` cannot swallow it."""


class _Clock:
    """The time left of one analysis' budget."""

    def __init__(self, total: float):
        self.end = time.monotonic() + total

    def left(self, cap: float = math.inf) -> float:
        return min(cap, self.end - time.monotonic())


@contextmanager
def _time_limit(seconds: float):
    if seconds <= 0.05:
        raise _Timeout
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise _Timeout

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass(frozen=True)
class Analysis:
    """Convergence of S = Σ_t λ_t, the last-token atom, and the C5(c) verdict.

    ``converges``: True, False, a SymPy condition on the parameters (S < ∞ iff it holds),
    or None (undecided; ``reason`` says why). ``verdict``: "collapse", "no collapse",
    "collapse iff <cond>" or "undecided".
    """

    schedule: Schedule
    delta: sp.Expr
    converges: object
    how: str
    reason: str
    total: sp.Expr | None  # S in closed form when known
    atom: str  # the limit or lower bound of Π_t (1 - λ_t δ), in words
    atom_bound: sp.Expr | None  # a certified positive lower bound when S < ∞
    atom_numeric: float | None  # numerical value of the infinite product (mpmath), not a proof
    verdict: str
    notes: tuple[str, ...]


def _series_test(s: Schedule) -> tuple[object, str, sp.Expr | None]:
    """(converges, how, closed-form S or None) for the recognised families."""
    pr = s.params
    if s.family == "constant":
        lam = pr["lambda"]
        if lam.is_zero:
            return True, "λ ≡ 0: every partial sum is 0", sp.Integer(0)
        if lam.is_positive:
            return False, f"constant λ = {lam} > 0: partial sums T·λ -> ∞", sp.oo
        return sp.Eq(lam, 0), "constant λ: S < ∞ iff λ = 0", None
    if s.family == "power_decay":
        lam0, beta, a = pr["lambda_0"], pr["beta"], pr["a"]
        cond = sp.simplify(beta > 1)
        total = lam0 * sp.zeta(beta, a) if cond is not sp.false else sp.oo
        how = f"p-series: Σ (t+{a})^(-β) < ∞ iff β > 1 (here β = {beta})"
        if lam0.is_zero:
            return True, "λ_0 = 0", sp.Integer(0)
        if cond in (sp.true, sp.false):
            return bool(cond), how, (total if cond is sp.true else sp.oo)
        return cond, how, sp.Piecewise((lam0 * sp.zeta(beta, a), cond), (sp.oo, True))
    if s.family == "geometric":
        lam0, q = pr["lambda_0"], pr["q"]
        cond = sp.simplify(q < 1)
        how = f"geometric series: Σ q^t < ∞ iff q < 1 (here q = {q})"
        if lam0.is_zero:
            return True, "λ_0 = 0", sp.Integer(0)
        if cond in (sp.true, sp.false):
            return bool(cond), how, (lam0 / (1 - q) if cond is sp.true else sp.oo)
        return cond, how, sp.Piecewise((lam0 / (1 - q), cond), (sp.oo, True))
    return None, "", None


def _general_test(expr: sp.Expr, clock: _Clock) -> tuple[object, str, str]:
    """SymPy's ``Sum.is_convergent`` under a time limit: (True/False/None, how, reason)."""
    series = sp.Sum(expr, (T, 0, sp.oo))
    limit = clock.left(TIME_LIMIT_S)
    try:
        with _time_limit(limit):
            answer = series.is_convergent()
    except _Timeout:
        return None, "", f"SymPy's convergence tests did not finish within {max(limit, 0):.2g} s"
    except Exception as exc:  # SymPy raises NotImplementedError, TypeError, ... when it cannot decide
        msg = " ".join(str(exc).split()) or "no message"
        return None, "", f"SymPy's is_convergent failed ({type(exc).__name__}: {msg})"
    if answer is sp.true or answer is True:
        return True, "SymPy Sum.is_convergent: convergent", ""
    if answer is sp.false or answer is False:
        return False, "SymPy Sum.is_convergent: divergent", ""
    return None, "", f"SymPy's is_convergent returned {answer!r}"


def _closed_sum(expr: sp.Expr, clock: _Clock) -> sp.Expr | None:
    try:
        with _time_limit(clock.left()):
            total = sp.summation(expr, (T, 0, sp.oo))
    except (_Timeout, Exception):
        return None
    return None if total.has(sp.Sum) else total


def _sup_lambda(s: Schedule, clock: _Clock | None = None) -> sp.Expr | None:
    """sup_t λ_t when it is provably λ_0 (non-increasing schedule), else None."""
    pr = s.params
    if s.family == "constant":
        return pr["lambda"]
    if s.family == "power_decay" and (pr["beta"].is_nonnegative and pr["lambda_0"].is_nonnegative):
        return s.expr.subs(T, 0)
    if s.family == "geometric" and (pr["q"] <= 1) is sp.true and pr["lambda_0"].is_nonnegative:
        return pr["lambda_0"]
    if not s.parameters and clock is not None:
        x = sp.Symbol("x", nonnegative=True)
        try:
            with _time_limit(clock.left()):
                dec = sp.is_decreasing(s.expr.subs(T, x), sp.Interval(0, sp.oo), x)
        except (_Timeout, Exception):
            dec = None
        if dec is True:
            return s.expr.subs(T, 0)
    return None


def _check_range(s: Schedule) -> list[str]:
    """λ_t ∈ [0, 1]: proved for the families, checked exactly for t < CHECKED_TERMS otherwise."""
    if s.parameters:
        return ["λ_t ∈ [0, 1] is assumed for the symbolic parameters"]
    if s.family in ("constant", "power_decay", "geometric"):
        sup = _sup_lambda(s)
        lows = [s.expr.subs(T, 0)] if s.family == "constant" else [s.params["lambda_0"]]
        if sup is not None and all(v.is_nonnegative for v in lows) and (sup <= 1) is sp.true:
            return []
    for t in range(CHECKED_TERMS):
        v = s.expr.subs(T, t)
        approx = v.evalf(30)
        if approx.is_real and approx.is_Float and sp.Float(1e-20) < approx < 1 - sp.Float(1e-20):
            continue  # clearly inside (30 significant digits)
        ok = (v >= 0) & (v <= 1) if v.is_real else sp.false
        if ok is not sp.true:
            raise DeriveError(f"schedule {s.text!r}: λ_{t} = {v} is not in [0, 1]; expected 0 <= λ_t <= 1")
    return [f"λ_t ∈ [0, 1] checked exactly for t < {CHECKED_TERMS} only"]


def _numeric_atom(s: Schedule, delta: sp.Expr, bound: sp.Expr | None, clock: _Clock) -> float | None:
    """Π_t (1 - λ_t δ) numerically: exp of mpmath's Euler–Maclaurin sum of log(1 - λ_t δ).

    Not a proof. Dropped (None) unless it lies between the certified lower bound (when
    known) and the product of the first 1000 factors (the partial products decrease).
    """
    if s.parameters:
        return None
    import mpmath

    f = sp.lambdify(T, sp.log(1 - delta * s.expr), modules="mpmath")
    g = sp.lambdify(T, 1 - delta * s.expr, modules="mpmath")
    try:
        with mpmath.workdps(30), _time_limit(clock.left()):
            value = mpmath.exp(mpmath.nsum(f, [0, mpmath.inf], method="euler-maclaurin"))
            partial = mpmath.fprod(g(t) for t in range(1000))
    except (_Timeout, Exception):
        return None
    if not mpmath.isfinite(value) or value > partial * (1 + mpmath.mpf(10) ** -12):
        return None
    if bound is not None and value < float(bound) * (1 - 1e-12):
        return None
    return float(value)


def _first_full_layer(s: Schedule, delta: sp.Expr) -> int | None:
    """The first t < CHECKED_TERMS with λ_t δ = 1 (the atom is 0 from there on), if any."""
    if s.parameters:
        return None
    for t in range(CHECKED_TERMS):
        v = s.expr.subs(T, t) * delta
        if abs(v.evalf(30) - 1) < 1e-20 and sp.simplify(v - 1) == 0:
            return t
    return None


def analyse(s: Schedule, delta=1) -> Analysis:
    """Decide Σλ_t < ∞ and the C5(c) verdict; bound the last-token atom Π_t (1 - λ_t δ)."""
    delta = sp.sympify(delta)
    notes = _check_range(s)
    clock = _Clock(TOTAL_S)
    converges, how, total = _series_test(s)
    reason = ""
    if s.family == "expression":
        if s.parameters:
            reason = ("free parameters " + ", ".join(map(str, s.parameters))
                      + " in an expression outside the recognised families (constant, c (t+a)^(-β), c q^t)")
        else:
            converges, how, reason = _general_test(s.expr, clock)
            total = _closed_sum(s.expr, clock) if converges is True else (sp.oo if converges is False else None)

    sup = _sup_lambda(s, clock)
    bound = None
    atom_numeric = None
    if converges is None:
        verdict = "undecided"
        atom = "undecided (convergence of Σλ_t undecided)"
    elif converges is False:
        verdict = "collapse"
        atom = ("→ 0: Π_t (1 - λ_t δ) <= exp(-δ Σ_{t<T} λ_t) → 0" if delta.is_positive
                else "≡ 1 (δ = 0)")
        if delta.is_positive:
            atom_numeric = 0.0
    elif converges is True:
        verdict = "no collapse"
        if delta.is_zero or (total is not None and total.is_zero):
            bound, atom = sp.Integer(1), "≡ 1"
        elif sup is not None and total is not None and (sup * delta < 1) is sp.true:
            bound = sp.exp(-delta * total / (1 - delta * sup))
            atom = f">= exp(-δ S/(1 - δ sup λ)) = {bound} ≈ {float(bound):.6g} > 0   (C5(a))"
        elif sup is not None and (sup * delta >= 1) is sp.true:
            atom = "= 0 from the first layer with λ_t δ = 1 (C5(a)'s hypothesis λ_t δ < 1 fails)"
        else:
            full = _first_full_layer(s, delta)
            if full is not None:
                atom = f"= 0 from layer t = {full} on (λ_t δ = 1; C5(a)'s hypothesis λ_t δ < 1 fails)"
            else:
                atom = ("> 0 provided every λ_t δ < 1 (C5(a): Σλ_t δ < ∞; λ_t δ < 1 checked for "
                        f"t < {CHECKED_TERMS}); no closed-form bound: sup λ_t or S not found symbolically")
        atom_numeric = _numeric_atom(s, delta, bound, clock) if bound is None or bound != 1 else 1.0
    else:
        cond = converges
        verdict = f"collapse iff {sp.Not(cond).simplify()}"
        if sup is None and s.family == "geometric":
            sup = s.params["lambda_0"]  # under the condition q < 1 the schedule is non-increasing
        if sup is not None and total is not None:
            pos_total = total.args[0][0] if isinstance(total, sp.Piecewise) else total
            bound = sp.exp(-delta * pos_total / (1 - delta * sup))
            atom = (f"→ 0 if {sp.Not(cond).simplify()}; >= {bound} > 0 if {cond} "
                    f"(and {sp.simplify(delta * sup)} < 1)")
        else:
            atom = f"→ 0 if {sp.Not(cond).simplify()}; > 0 if {cond} (C5(a))"
    return Analysis(s, delta, converges, how, reason, total, atom, bound, atom_numeric, verdict, tuple(notes))


# -------------------------------------------------------------------------- certificates
def _cert_constant() -> Cert:
    c = sp.Symbol("c", positive=True)
    ok = sp.summation(c, (T, 0, sp.oo)) is sp.oo
    return Cert("dichotomy:constant-diverges", ok,
                "Σ_t c = ∞ for every constant c > 0 (C5: constant λ > 0 collapses)")


def _cert_power() -> Cert:
    beta, x = sp.Symbol("beta", positive=True), sp.Symbol("x", positive=True)
    integral = sp.integrate(x ** (-beta), (x, 1, sp.oo))  # integral test
    converges_beyond_1 = (isinstance(integral, sp.Piecewise) and integral.args[0][1] == (beta > 1)
                          and sp.simplify(integral.args[0][0] - 1 / (beta - 1)) == 0)
    harmonic = sp.summation(1 / (T + 1), (T, 0, sp.oo)) is sp.oo
    # β <= 1: (t+1)^(-β) >= (t+1)^(-1) since (t+1)^(1-β) >= 1; compare with the harmonic series.
    gamma = sp.Symbol("gamma", nonnegative=True)  # 1 - β = γ >= 0
    comparison = (sp.powsimp((T + 1) ** (-(1 - gamma)) / (T + 1) ** (-1)) - 1).subs(T, 0) == 0 and \
        sp.diff((T + 1) ** gamma, T).is_nonnegative
    zeta_sum = sp.summation(1 / (T + 1) ** beta, (T, 0, sp.oo))
    zeta_ok = isinstance(zeta_sum, sp.Piecewise) and zeta_sum.args[0] == (sp.zeta(beta), beta > 1)
    ok = bool(converges_beyond_1 and harmonic and comparison and zeta_ok)
    return Cert("dichotomy:power-decay-threshold", ok,
                "∫_1^∞ x^(-β) dx = 1/(β-1) iff β > 1 (integral test), Σ (t+1)^(-β) = ζ(β) for β > 1, "
                "Σ 1/(t+1) = ∞ and (t+1)^(-β) >= (t+1)^(-1) for β <= 1: λ_0 (t+1)^(-β) collapses iff β <= 1")


def _cert_geometric() -> Cert:
    q = sp.Symbol("q", positive=True)
    total = sp.summation(q**T, (T, 0, sp.oo))
    ok = isinstance(total, sp.Piecewise) and total.args[0] == (1 / (1 - q), q < 1)
    ok = ok and sp.summation(sp.Integer(1) ** T, (T, 0, sp.oo)) is sp.oo
    return Cert("dichotomy:geometric-threshold", bool(ok),
                "Σ q^t = 1/(1-q) for 0 < q < 1 and = ∞ for q = 1: λ_0 q^t never collapses for q < 1")


def _cert_upper() -> Cert:
    x, u = sp.Symbol("x", nonnegative=True), sp.Symbol("u", nonnegative=True)
    g = sp.exp(-x) - (1 - x)
    dg = sp.diff(g, x)
    # x = log(1+u) ranges over [0, ∞) as u does; there g'(x) = u/(1+u) >= 0
    dg_u = sp.simplify(dg.subs(x, sp.log(1 + u)))
    ok = g.subs(x, 0) == 0 and sp.simplify(dg_u - u / (1 + u)) == 0 and (u / (1 + u)).is_nonnegative
    return Cert("dichotomy:product-upper-bound", bool(ok),
                "1 - x <= e^{-x} for x >= 0 (g = e^{-x} - 1 + x, g(0) = 0, g'(log(1+u)) = u/(1+u) >= 0), "
                "so Π_t (1 - λ_t δ) <= exp(-δ Σλ_t) → 0 when Σλ_t = ∞ (C5(b), C2(c))")


def _cert_lower() -> Cert:
    u = sp.Symbol("u", nonnegative=True)  # x = u/(1+u) ranges over [0, 1)
    x = u / (1 + u)
    h = sp.log(1 - x) + x / (1 - x)  # = u - log(1+u)
    dh = sp.simplify(sp.diff(h, u))
    ok = sp.simplify(h.subs(u, 0)) == 0 and sp.simplify(dh - u / (1 + u)) == 0 and (u / (1 + u)).is_nonnegative
    return Cert("dichotomy:product-lower-bound", bool(ok),
                "1 - x >= e^{-x/(1-x)} on [0, 1) (with x = u/(1+u): h = log(1-x) + x/(1-x) = u - log(1+u), "
                "h(0) = 0, h' = u/(1+u) >= 0), so Π_t (1 - λ_t δ) >= exp(-δ S/(1 - δ sup λ)) > 0 when S < ∞ (C5(a))")


def certificates() -> dict[str, Callable[[], Cert]]:
    """The checks behind C5's dichotomy, by name (each returns a ``Cert``)."""
    return {
        "dichotomy:constant-diverges": _cert_constant,
        "dichotomy:power-decay-threshold": _cert_power,
        "dichotomy:geometric-threshold": _cert_geometric,
        "dichotomy:product-upper-bound": _cert_upper,
        "dichotomy:product-lower-bound": _cert_lower,
    }


# ---------------------------------------------------------------------------- derivation
USAGE = ('posbias derive dichotomy SCHEDULE [--delta D]   SCHEDULE: constant:L | power_decay:L0,BETA | geometric:L0,Q | '
         'an expression in t, e.g. "0.5/(t+1)**1.5" or "lambda_0/(t+1)**beta"')


def _status(converges) -> str:
    if converges is True:
        return "converges"
    if converges is False:
        return "diverges"
    return "undecided" if converges is None else "conditional"


def run(args: list[str]) -> Result:
    p = ArgParser("dichotomy")
    p.add_argument("schedule")
    p.add_argument("--delta", default="1")
    ns = p.parse(args)
    delta = exact_number(ns.delta, "dichotomy --delta")
    if not 0 <= delta <= 1:
        raise DeriveError(f"dichotomy --delta {ns.delta}: expected 0 <= δ <= 1")
    s = parse_schedule(ns.schedule)
    a = analyse(s, delta)
    status = _status(a.converges)
    conv_word = {"converges": "converges", "diverges": "diverges", "undecided": "undecided"}.get(
        status, f"converges iff {a.converges}")
    lines = [
        f"dichotomy: λ_t = {s.expr}   (t = 0, 1, 2, ...; δ = {delta})",
        f"family: {s.family}" + (f" ({', '.join(f'{k} = {v}' for k, v in s.params.items())})" if s.params else ""),
        f"Σ_t λ_t: {conv_word}" + (f" — {a.how}" if a.how else "") + (f" — {a.reason}" if a.reason else ""),
    ]
    if a.total is not None and a.converges is not None:
        lines.append(f"S = Σ_t λ_t = {a.total}" + (f" ≈ {float(a.total):.6g}" if a.total.is_number and a.total.is_finite else ""))
    lines.append(f"last-token atom Π_t (1 - λ_t δ) (C2(c), C5(a)): {a.atom}")
    if a.atom_numeric is not None and a.converges is True:
        lines.append(f"  numerical value of the infinite product (mpmath Euler–Maclaurin, not a proof): {a.atom_numeric:.6g}")
    lines.append(f"verdict under C5(c) (uniform bounds): {a.verdict}")
    lines += [f"note: {n}" for n in a.notes]
    latex_conv = {"converges": r"<\infty", "diverges": r"=\infty", "undecided": r"\;\text{undecided}"}.get(
        status, r"<\infty\iff " + sp.latex(a.converges))
    latex = (r"\lambda_t=" + sp.latex(s.expr) + r",\quad\sum_{t\ge0}\lambda_t" + latex_conv
             + (r",\quad\prod_t(1-\lambda_t\delta)\ge " + sp.latex(a.atom_bound) if a.atom_bound is not None else "")
             + r"\quad\text{(" + a.verdict + ")}")
    data = {
        "schedule": s.text,
        "expr": str(s.expr),
        "family": s.family,
        "params": {k: str(v) for k, v in s.params.items()},
        "delta": str(delta),
        "converges": {"converges": True, "diverges": False, "undecided": None}.get(status, str(a.converges)),
        "status": status,
        "how": a.how,
        "reason": a.reason,
        "sum": None if a.total is None else str(a.total),
        "atom": a.atom,
        "atom_lower_bound": None if a.atom_bound is None else str(a.atom_bound),
        "atom_numeric": a.atom_numeric,
        "verdict": a.verdict,
        "notes": list(a.notes),
    }
    return Result("dichotomy", "\n".join(lines), latex, data)


DERIVATION = Derivation(
    name="dichotomy",
    summary="does Σλ_t converge? collapse or not as T → ∞ (C5), with the last-token atom bound (C2(c))",
    claims=("C5", "C2"),
    usage=USAGE,
    run=run,
)
