"""The infinite-depth dichotomy for a λ schedule: collapse iff Σ_t λ_t = ∞ (C5).

THEORY.md C5. For a causal stack whose last row has off-diagonal mass δ_t = 1 - A^(t)[N-1, N-1]
the last-token atom is p(N-1) = Π_t (1 - λ_t δ_t) (C2(c)), bracketed by

    Π_t (1 - λ_t δ_t)  >=  exp(-Σ_t λ_t δ_t / (1 - λ_t δ_t))  >=  exp(-δ S / (1 - δ sup_t λ_t))
    Π_t (1 - λ_t δ_t)  <=  exp(-Σ_t λ_t δ_t)

from 1 - x >= e^{-x/(1-x)} (0 <= x < 1) and 1 - x <= e^{-x} (certificates in
theorem.dichotomy_certificates), with S = Σ_t λ_t (the middle form for a constant δ).

**δ is explicit.** C5(c)'s uniform bounds (every allowed entry >= ε > 0) give
ε <= A[N-1, N-1] <= 1 - (N-1) ε, i.e. 0 < δ < 1; δ = 1 (a last row with no self-weight) is
outside them and refused. ``delta`` is one of

* ``None`` (the default): a symbol δ with 0 < δ < 1, the whole range C5(c) allows;
* a number 0 <= δ < 1; δ = 0 is allowed and means the last token never moves (atom ≡ 1,
  no collapse whatever Σλ_t does);
* a δ_t schedule (an expression in t) with 0 <= δ_t and sup_t δ_t < 1 proved; the verdict is
  then about Σ_t λ_t δ_t, the series that decides the atom.

Because every λ_t δ_t <= sup δ < 1, the atom is never 0 at finite depth, and the verdict and
the atom always agree: "collapse" iff the atom → 0 iff the analysed series diverges.

**Deterministic limits.** Nothing here reads a clock. ``analyse`` decides convergence for
the recognised families by the classical tests (constant: S = ∞ unless λ = 0; power decay
λ_0 (t+a)^(-β): S < ∞ iff β > 1; geometric λ_0 q^t: S < ∞ iff q < 1), for other closed forms
by SymPy's ``Sum.is_convergent`` only when the expression has at most ``MAX_OPS`` operations
(else "undecided", with that reason), and never guesses. λ_t ∈ [0, 1] is proved for the
families and where SymPy's assumptions and ``is_decreasing`` prove it; otherwise it is checked
at ``SAMPLE_POINTS`` (t < 200 and t = 2^k, 10^k up to 10^18) by a magnitude-capped evaluator
and the output says plainly that only a finite check was possible. The numerical atom is the
product of the first ``NUMERIC_TERMS`` factors in mpmath times the tail, bracketed by the two
product bounds. The command line adds a last-resort wall-clock guard that can only refuse
(posbias.cli.derive, ``--time-budget``).

Examples
--------
>>> from posbias.theorem.schedule_expr import parse_schedule
>>> analyse(parse_schedule("power_decay:0.5,1.5")).verdict
<Verdict.NO_COLLAPSE: 'no collapse'>
>>> analyse(parse_schedule("constant:0.3")).verdict
<Verdict.COLLAPSE: 'collapse'>
>>> analyse(parse_schedule("lambda_0/(t+1)**beta")).verdict_text
'collapse iff beta <= 1'
>>> analyse(parse_schedule("constant:0.3"), 0).verdict  # δ = 0: the last token never moves
<Verdict.NO_COLLAPSE: 'no collapse'>
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from fractions import Fraction

import mpmath
import sympy as sp

from posbias.theorem import bounded_eval, expr_guard
from posbias.theorem.errors import DeriveError
from posbias.theorem.schedule_expr import Family, Schedule, T, family_of, parameters_of, recognise
from posbias.theorem.sympy_types import as_expr, sum_of

MAX_OPS = 30  # SymPy's general tests (is_convergent, summation, is_decreasing) only on λ_t this small
CHECKED_TERMS = 200  # every t < CHECKED_TERMS is a sample point (checked exactly near 0 and 1)
SAMPLE_POINTS = tuple(range(CHECKED_TERMS)) + tuple(
    sorted({2**k for k in range(8, 61)} | {10**k for k in range(3, 19)} | {3 * 10**k for k in range(2, 18)})
)
NUMERIC_TERMS = 2000  # the numerical atom multiplies this many factors, then brackets the tail
NUMERIC_DPS = 30
DELTA = sp.Symbol("delta", positive=True)  # the default δ: 0 < δ < 1 (C5(c)'s uniform bounds)
LIMITS = (
    f"expressions: at most {expr_guard.MAX_TEXT} characters and {expr_guard.MAX_NODES} syntax nodes, "
    f"literals of at most {expr_guard.MAX_DIGITS} digits with decimal exponents within "
    f"±{expr_guard.MAX_EXPONENT}, "
    f"numeric powers <= {expr_guard.MAX_POWER}, numeric factorial/gamma arguments <= {expr_guard.MAX_FACTORIAL}, "
    f"no nested factorial/gamma, constants within 10^±{expr_guard.MAX_CONSTANT_LOG10}; SymPy's general "
    f"convergence test only for λ_t with at most {MAX_OPS} operations (else 'undecided'); λ_t ∈ [0, 1] proved "
    f"or checked at {len(SAMPLE_POINTS)} points t (said so); numerical atom from {NUMERIC_TERMS} factors; "
    "δ in [0, 1) (δ = 1 is outside C5(c)); typically under 3 s"
)


class Verdict(enum.Enum):
    """C5's answer for a schedule: does the rollout collapse onto token 0 as T -> ∞?

    COLLAPSE: the analysed series diverges (atom → 0); NO_COLLAPSE: it converges, or δ = 0
    (atom > 0); UNDECIDED: convergence could not be decided (``Analysis.reason`` says why);
    CONDITIONAL: named parameters, collapse iff ``Analysis.collapse_condition``.
    """

    COLLAPSE = "collapse"
    NO_COLLAPSE = "no collapse"
    UNDECIDED = "undecided"
    CONDITIONAL = "conditional"


@dataclass(frozen=True)
class Delta:
    """δ of the last row: ``kind`` "symbolic" (0 < δ < 1), "constant" (0 <= δ < 1) or "schedule"
    (δ_t, an expression in t with sup δ_t = ``sup`` < 1); ``text`` is what was given."""

    text: str
    expr: sp.Expr
    kind: str
    sup: sp.Expr

    @property
    def spec(self) -> str:
        return self.text

    def __str__(self) -> str:
        return self.text


def symbolic_delta() -> Delta:
    """The default: a symbol δ with 0 < δ < 1."""
    return Delta("delta (symbolic, 0 < delta < 1: C5(c)'s uniform bounds)", DELTA, "symbolic", DELTA)


def parse_delta(value) -> Delta:
    """δ from a number (0 <= δ < 1, exact), a string (a number or an expression in t), a ``Delta`` or None."""
    if value is None:
        return symbolic_delta()
    if isinstance(value, Delta):
        return value
    where = "dichotomy: --delta"
    if isinstance(value, bool):
        raise DeriveError(f"{where} expects a number in [0, 1) or an expression in t, got {value!r}")
    if isinstance(value, (int, float, Fraction, sp.Rational)):
        if isinstance(value, float):
            value = Fraction(repr(value))
        frac = Fraction(int(value.p), int(value.q)) if isinstance(value, sp.Rational) else Fraction(value)
        return _constant_delta(str(frac), sp.Rational(frac.numerator, frac.denominator))
    if not isinstance(value, str):
        raise DeriveError(f"{where} expects a number in [0, 1) or an expression in t, got {value!r}")
    try:
        frac = expr_guard.exact_number(value, where)
    except DeriveError:
        frac = None
    if frac is not None:
        return _constant_delta(value.strip(), sp.Rational(frac.numerator, frac.denominator))
    expr = expr_guard.parse(value, where)
    if expr.free_symbols - {T}:
        raise DeriveError(f"{where}: {value!r} has names other than t; expected a number or an expression in t")
    if T not in expr.free_symbols:
        return _constant_delta(value.strip(), expr)
    sup = _sup_if_nonincreasing(expr, recognise(expr))
    low = _is_nonnegative(expr)
    if sup is None or not low or (sup < 1) is not sp.true:
        raise DeriveError(
            f"{where}: δ_t = {expr}: could not prove 0 <= δ_t and sup_t δ_t < 1 (proved only for "
            "non-increasing schedules); expected a number in [0, 1) or such a δ_t"
        )
    return Delta(value.strip(), expr, "schedule", sup)


def _constant_delta(text: str, value: sp.Expr) -> Delta:
    inside = (value >= 0) & (value < 1)
    if inside is not sp.true:
        extra = (
            " (δ = 1 means A[N-1, N-1] = 0, outside C5(c)'s uniform bounds, which give δ <= 1 - ε)"
            if value == 1
            else ""
        )
        raise DeriveError(f"dichotomy: --delta {text}: expected 0 <= δ < 1{extra}")
    return Delta(text, value, "constant", value)


@dataclass(frozen=True)
class Analysis:
    """Convergence of the analysed series, the last-token atom, and the verdict.

    ``series``: "Σ_t λ_t" (constant or symbolic δ) or "Σ_t λ_t δ_t" (a δ_t schedule).
    ``converges``: True, False, a SymPy condition on the parameters, or None (undecided;
    ``reason`` says why). ``range_proved``: whether λ_t ∈ [0, 1] was proved for every t
    (else ``notes`` say what was only checked or assumed).
    """

    schedule: Schedule
    expr: sp.Expr  # λ_t in T
    family: Family
    delta: Delta
    series: str
    converges: bool | sp.Basic | None
    how: str
    reason: str
    total: sp.Expr | None  # the analysed series' sum in closed form when known
    atom: str  # the limit or lower bound of Π_t (1 - λ_t δ_t), in words
    atom_bound: sp.Expr | None  # a certified positive lower bound when the series converges
    atom_numeric: float | None  # the numerical value (mpmath; tail bracketed), or None
    atom_numeric_error: float | None  # half-width of the tail bracket
    verdict: Verdict
    verdict_basis: str
    collapse_condition: sp.Basic | None
    range_proved: bool
    notes: tuple[str, ...]

    @property
    def verdict_text(self) -> str:
        """ "collapse", "no collapse", "undecided" or "collapse iff <condition>"."""
        if self.verdict is Verdict.CONDITIONAL:
            return f"collapse iff {self.collapse_condition}"
        return self.verdict.value


def series_test(family: Family) -> tuple[bool | sp.Basic | None, str, sp.Expr | None]:
    """(converges, how, closed-form S or None) for the recognised families; (None, "", None) else.

    >>> from posbias.theorem.schedule_expr import Family
    >>> series_test(Family("geometric", {"lambda_0": sp.Rational(1, 2), "q": sp.Rational(9, 10)}))[::2]
    (True, 5)
    """
    pr = family.params
    if family.kind == "constant":
        lam = pr["lambda"]
        if lam.is_zero:
            return True, "λ ≡ 0: every partial sum is 0", sp.Integer(0)
        if lam.is_positive:
            return False, f"constant λ = {lam} > 0: partial sums T·λ -> ∞", sp.oo
        return sp.Eq(lam, 0), "constant λ: S < ∞ iff λ = 0", None
    if family.kind == "power_decay":
        lam0, beta, a = pr["lambda_0"], pr["beta"], pr["a"]
        cond = sp.simplify(beta > 1)
        how = f"p-series: Σ (t+{a})^(-β) < ∞ iff β > 1 (here β = {beta})"
        if lam0.is_zero:
            return True, "λ_0 = 0", sp.Integer(0)
        if cond in (sp.true, sp.false):
            return bool(cond), how, (lam0 * sp.zeta(beta, a) if cond is sp.true else sp.oo)
        return cond, how, sp.Piecewise((lam0 * sp.zeta(beta, a), cond), (sp.oo, True))
    if family.kind == "geometric":
        lam0, q = pr["lambda_0"], pr["q"]
        cond = sp.simplify(q < 1)
        how = f"geometric series: Σ q^t < ∞ iff q < 1 (here q = {q})"
        if lam0.is_zero:
            return True, "λ_0 = 0", sp.Integer(0)
        if cond in (sp.true, sp.false):
            return bool(cond), how, (lam0 / (1 - q) if cond is sp.true else sp.oo)
        return cond, how, sp.Piecewise((lam0 / (1 - q), cond), (sp.oo, True))
    return None, "", None


def _small(expr: sp.Expr) -> bool:
    return sp.count_ops(expr) <= MAX_OPS


def general_test(expr: sp.Expr) -> tuple[bool | None, str, str]:
    """SymPy's ``Sum.is_convergent`` on a small expression (<= MAX_OPS operations): (True/False/None, how, reason)."""
    ops = sp.count_ops(expr)
    if ops > MAX_OPS:
        return (
            None,
            "",
            (
                f"λ_t has {ops} operations; SymPy's general convergence test is run only up to {MAX_OPS} "
                "(a deterministic work limit)"
            ),
        )
    try:
        answer = sum_of(expr, (T, 0, sp.oo)).is_convergent()
    except Exception as exc:  # SymPy raises NotImplementedError, TypeError, ... when it cannot decide
        msg = " ".join(str(exc).split()) or "no message"
        return None, "", f"SymPy's is_convergent failed ({type(exc).__name__}: {msg[:200]})"
    if answer is sp.true or answer is True:
        return True, "SymPy Sum.is_convergent: convergent", ""
    if answer is sp.false or answer is False:
        return False, "SymPy Sum.is_convergent: divergent", ""
    return None, "", f"SymPy's is_convergent returned {answer!r}"


def _closed_sum(expr: sp.Expr) -> sp.Expr | None:
    if not _small(expr):
        return None
    try:
        total = sp.summation(expr, (T, 0, sp.oo))
    except Exception:
        return None
    return None if total.has(sp.Sum) or not total.is_finite else as_expr(total)


def _is_nonnegative(expr: sp.Expr) -> bool:
    try:
        return bool(expr.is_nonnegative)
    except Exception:
        return False


def _sup_if_nonincreasing(expr: sp.Expr, family: Family) -> sp.Expr | None:
    """sup_t λ_t = λ_0 when λ is provably non-increasing (families, or SymPy's is_decreasing), else None."""
    pr = family.params
    if family.kind == "constant":
        return pr["lambda"]
    if family.kind == "power_decay" and (pr["beta"].is_nonnegative and pr["lambda_0"].is_nonnegative):
        return expr.subs(T, 0)
    if family.kind == "geometric" and (pr["q"] <= 1) is sp.true and pr["lambda_0"].is_nonnegative:
        return pr["lambda_0"]
    if not (expr.free_symbols - {T}) and _small(expr) and not expr.has(sp.floor, sp.ceiling, sp.factorial):
        x = sp.Symbol("x", nonnegative=True)
        try:
            dec = sp.is_decreasing(expr.subs(T, x), sp.Interval(0, sp.oo), x)
        except Exception:
            dec = None
        if dec is True:
            return expr.subs(T, 0)
    return None


def _exact_in_unit(expr: sp.Expr, t: int) -> bool:
    v = expr.subs(T, t)
    if not v.is_real:
        return False
    return ((v >= 0) & (v <= 1)) is sp.true


def check_range(schedule: Schedule, expr: sp.Expr, family: Family) -> tuple[bool, list[str]]:
    """λ_t ∈ [0, 1]: (proved for every t?, notes). A value found outside [0, 1] is a DeriveError.

    Proved for the families and where SymPy's assumptions (λ_t >= 0) and is_decreasing (sup = λ_0 <= 1)
    prove it; otherwise checked at SAMPLE_POINTS with bounded_eval.approx (exactly near 0 and 1 for
    t < CHECKED_TERMS), and the note says that only a finite check was possible.
    """
    name = getattr(schedule, "spec", schedule)
    if expr.free_symbols - {T}:
        return False, ["λ_t ∈ [0, 1] is assumed for the symbolic parameters"]
    sup = _sup_if_nonincreasing(expr, family)
    if family.kind in ("constant", "power_decay", "geometric"):
        lows = [expr.subs(T, 0)] if family.kind == "constant" else [family.params["lambda_0"]]
        if sup is not None and all(v.is_nonnegative for v in lows) and (sup <= 1) is sp.true:
            return True, []
    proved_low = _is_nonnegative(expr)
    proved = proved_low and sup is not None and (sup <= 1) is sp.true
    skipped, undecided = 0, 0
    tiny = mpmath.mpf(10) ** -25
    for t in SAMPLE_POINTS:
        try:
            v = bounded_eval.approx(expr, t)
        except bounded_eval.TooLarge:
            skipped += 1
            continue
        except (bounded_eval.Unevaluable, ZeroDivisionError, ValueError):
            raise DeriveError(
                f"schedule {name!r}: λ_{t} is not a real number (a pole or a complex value); expected 0 <= λ_t <= 1"
            ) from None
        if tiny < v < 1 - tiny:
            continue
        if -tiny <= v <= tiny or 1 - tiny <= v <= 1 + tiny:
            if t < CHECKED_TERMS:
                if not _exact_in_unit(expr, t):
                    raise DeriveError(
                        f"schedule {name!r}: λ_{t} = {expr.subs(T, t)} is not in [0, 1]; expected 0 <= λ_t <= 1"
                    )
            else:
                undecided += 1
            continue
        raise DeriveError(f"schedule {name!r}: λ_{t} ≈ {mpmath.nstr(v, 6)} is not in [0, 1]; expected 0 <= λ_t <= 1")
    if proved:
        return True, []
    note = (
        f"λ_t ∈ [0, 1] could not be proved symbolically; only a finite check was possible: checked at "
        f"{len(SAMPLE_POINTS) - skipped - undecided} points (t < {CHECKED_TERMS}, and t = 2^k, 10^k, 3·10^k up "
        f"to 2^60); the verdict assumes it for every t"
    )
    if skipped or undecided:
        note += f" ({skipped + undecided} sample points too large or too close to 0 or 1 to decide were skipped)"
    return False, [note]


def _exp(arg: sp.Expr) -> sp.Expr:
    """exp(arg), unevaluated when SymPy's low-precision evaluation fails (ζ(β) for β just above 1 is
    evaluated at a few bits by is_comparable, where β rounds to 1: "zeta(1) pole")."""
    try:
        return sp.exp(arg)
    except (ValueError, ArithmeticError):
        return sp.exp(arg, evaluate=False)


def _num(expr: sp.Expr) -> bounded_eval.MpReal | None:
    """A closed-form number to NUMERIC_DPS digits, or None (never raises: zeta near its pole included)."""
    try:
        v = sp.N(expr, NUMERIC_DPS + 10)
        if not (v.is_real and v.is_finite):
            return None
        return mpmath.mpf(str(v))
    except Exception:
        return None


def approx_text(expr: sp.Expr) -> str:
    """ " ≈ <6 digits>" of a closed-form number (mpmath, any magnitude), or "" when it cannot be evaluated."""
    v = _num(expr)
    return "" if v is None else f" ≈ {mpmath.nstr(v, 6)}"


def numeric_atom(expr: sp.Expr, c: sp.Expr, total: sp.Expr | None, nonincreasing: bool) -> tuple[float, float] | None:
    """(value, half-width) of Π_t (1 - c λ_t): the first NUMERIC_TERMS factors in mpmath times the tail
    Π_{t>=M} (1 - c λ_t), which lies in [exp(-c S_M/(1 - c λ_M)), exp(-c S_M)] (S_M = S - Σ_{t<M} λ_t,
    λ non-increasing). None when S or any factor cannot be evaluated (deterministic: no clock)."""
    if expr.free_symbols - {T} or total is None or not nonincreasing:
        return None
    s = _num(total)
    cv = _num(c)
    if s is None or cv is None:
        return None
    with mpmath.workdps(NUMERIC_DPS):
        prod, partial = mpmath.mpf(1), mpmath.mpf(0)
        try:
            for t in range(NUMERIC_TERMS):
                lam = bounded_eval.approx(expr, t, NUMERIC_DPS)
                prod *= 1 - cv * lam
                partial += lam
            lam_m = bounded_eval.approx(expr, NUMERIC_TERMS, NUMERIC_DPS)
        except (bounded_eval.TooLarge, bounded_eval.Unevaluable, ZeroDivisionError, ValueError):
            return None
        tail = s - partial
        if tail < -(mpmath.mpf(10) ** -(NUMERIC_DPS - 8)) or cv * lam_m >= 1:
            return None
        tail = max(tail, mpmath.mpf(0))
        hi = prod * mpmath.exp(-cv * tail)
        lo = prod * mpmath.exp(-cv * tail / (1 - cv * lam_m))
        return float((hi + lo) / 2), float((hi - lo) / 2)


def analyse(  # noqa: C901 (split the atom bound from the verdict; issue 20 §4)
    schedule: Schedule,
    delta=None,
) -> Analysis:
    """Decide convergence and the verdict; bound the last-token atom Π_t (1 - λ_t δ_t) (C2(c), C5(a)).

    ``delta``: None (symbolic 0 < δ < 1), a number 0 <= δ < 1, a δ_t expression string or a ``Delta``.
    """
    dl = parse_delta(delta)
    lam_expr = schedule.symbolic(T)
    family = family_of(schedule)
    params = parameters_of(schedule)
    range_proved, notes = check_range(schedule, lam_expr, family)
    lam_sup = _sup_if_nonincreasing(lam_expr, family)

    if dl.kind == "schedule":
        series = "Σ_t λ_t δ_t"
        expr = sp.simplify(lam_expr * dl.expr) if _small(lam_expr * dl.expr) else lam_expr * dl.expr
        fam = recognise(expr)
        notes.append(
            "with a δ_t schedule the verdict is about Σ_t λ_t δ_t, the series that decides the atom; "
            "under C5(c)'s uniform bounds (inf δ_t > 0) it is the verdict of Σ_t λ_t"
        )
    else:
        series = "Σ_t λ_t"
        expr, fam = lam_expr, family
    converges, how, total = series_test(fam)
    reason = ""
    if fam.kind == "expression":
        if params:
            reason = (
                "free parameters "
                + ", ".join(map(str, params))
                + " in an expression outside the recognised families (constant, c (t+a)^(-β), c q^t)"
            )
        else:
            converges, how, reason = general_test(expr)
            total = _closed_sum(expr) if converges is True else (sp.oo if converges is False else None)
    sup = _sup_if_nonincreasing(expr, fam) if dl.kind == "schedule" else lam_sup

    bound, numeric, numeric_err, condition = None, None, None, None
    d = dl.expr
    if dl.kind == "constant" and d == 0:
        verdict = Verdict.NO_COLLAPSE
        basis = "δ = 0: the last row keeps all its mass on itself, so p = e_{N-1} at every depth (whatever Σλ_t does)"
        bound, numeric, numeric_err = sp.Integer(1), 1.0, 0.0
        atom = "≡ 1 (δ = 0)"
        return Analysis(
            schedule,
            lam_expr,
            family,
            dl,
            series,
            converges,
            how,
            reason,
            total,
            atom,
            bound,
            numeric,
            numeric_err,
            verdict,
            basis,
            condition,
            range_proved,
            tuple(notes),
        )
    basis = (
        "C5(c) (uniform bounds, 0 < δ < 1): collapse iff Σλ_t = ∞"
        if dl.kind != "schedule"
        else "C5(a)/(b) on the atom: collapse iff Σ_t λ_t δ_t = ∞ (every λ_t δ_t <= sup δ_t < 1)"
    )
    # the largest step x_t = λ_t δ_t: δ sup λ (sup λ <= 1 by the range check) or sup δ_t
    if dl.kind == "schedule":
        x_sup, c_series = dl.sup, sp.Integer(1)  # λ_t δ_t <= sup δ_t < 1
    else:
        x_sup, c_series = d * (lam_sup if lam_sup is not None else sp.Integer(1)), d
    if converges is None:
        verdict = Verdict.UNDECIDED
        atom = "undecided (convergence of the series undecided)"
    elif converges is False:
        verdict = Verdict.COLLAPSE
        atom = (
            f"→ 0: Π_t (1 - λ_t δ_t) <= exp(-{series.replace('Σ_t', 'Σ_{t<T}')}"
            + ("" if dl.kind == "schedule" else " δ")
            + ") → 0"
        )
        numeric = 0.0
    elif converges is True:
        verdict = Verdict.NO_COLLAPSE
        if total is not None and total.is_zero:
            bound, atom = sp.Integer(1), "≡ 1"
            numeric, numeric_err = 1.0, 0.0
        elif total is not None:
            bound = _exp(-c_series * total / (1 - x_sup))
            what = "exp(-δ S/(1 - δ sup λ))" if dl.kind != "schedule" else "exp(-S_δ/(1 - sup δ_t))"
            atom = f">= {what} = {bound}{approx_text(bound)} > 0   (C5(a))"
            if dl.kind == "constant":
                got = numeric_atom(expr, d, total, lam_sup is not None)
                if got is not None:
                    numeric, numeric_err = got
        else:
            atom = (
                f"> 0 (C5(a): {series} < ∞ and every λ_t δ_t <= {x_sup} < 1); no closed-form bound: "
                f"{series} not found in closed form"
            )
    else:
        cond = converges
        verdict = Verdict.CONDITIONAL
        condition = sp.Not(cond).simplify()
        if sup is None and fam.kind == "geometric":
            sup = fam.params["lambda_0"]  # under the condition q < 1 the schedule is non-increasing
        if total is not None:
            pos_total = as_expr(total.args[0].args[0]) if isinstance(total, sp.Piecewise) else total
            x = dl.sup if dl.kind == "schedule" else d * (sup if sup is not None else sp.Integer(1))
            bound = _exp(-c_series * pos_total / (1 - x))
            atom = f"→ 0 if {condition}; >= {bound} > 0 if {cond} (and {sp.simplify(x)} < 1)"
        else:
            atom = f"→ 0 if {condition}; > 0 if {cond} (C5(a))"
    if not range_proved and verdict in (Verdict.COLLAPSE, Verdict.NO_COLLAPSE):
        basis += "; assumes λ_t ∈ [0, 1] for every t (only a finite check was possible)"
    return Analysis(
        schedule,
        lam_expr,
        family,
        dl,
        series,
        converges,
        how,
        reason,
        total,
        atom,
        bound,
        numeric,
        numeric_err,
        verdict,
        basis,
        condition,
        range_proved,
        tuple(notes),
    )
