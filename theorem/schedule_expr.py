"""λ schedules for the symbolic side: the numerics schedule types, and free-form expressions in t.

posbias.numerics.schedules defines the one schedule type of posbias (``Constant``,
``PowerDecay``, ``Geometric``, ``Custom``), each with a float64 view ``values(T)`` and
an exact SymPy view ``symbolic(t)``. This module adds what only the derivations
need:

* ``ExpressionSchedule``: λ_t given by an expression in t (``0.5/(t+1)**1.5``), possibly
  with named parameters (``lambda_0/(t+1)**beta``, positive symbols), with the same
  two views (``values`` by ``sympy.lambdify`` with NumPy, ``symbolic``);
* ``parse_schedule``: ``constant:L``, ``power_decay:L0,BETA``, ``geometric:L0,Q`` with
  numbers give the numerics types; with parameter names, or any expression in t,
  an ``ExpressionSchedule``;
* ``family_of``: the recognised closed family of a schedule and its exact parameters,
  constant λ, power decay λ_0 (t+a)^(-β) or geometric λ_0 q^t (C5's examples), else
  "expression".

Numbers are exact: a decimal is read as the decimal it was written as (0.3 -> 3/10),
so the convergence tests of theorem.dichotomy_analysis see rationals, not floats.

Examples
--------
>>> parse_schedule("power_decay:0.5,1.5")
PowerDecay(lambda_0=0.5, beta=1.5)
>>> family_of(parse_schedule("0.5/(t+1)**1.5"))
Family(kind='power_decay', params={'lambda_0': 1/2, 'beta': 3/2, 'a': 1})
>>> s = parse_schedule("lambda_0/(t+1)**beta")
>>> s.parameters
[beta, lambda_0]
>>> parse_schedule("exp(-t)/2").values(3).round(4)
array([0.5   , 0.1839, 0.0677])
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from posbias.numerics import schedules
from posbias.theorem import expr_guard
from posbias.theorem.bounded_eval import T
from posbias.theorem.errors import DeriveError
from posbias.theorem.expr_guard import FUNCTIONS  # noqa: F401  (re-exported: the allowed names)
from posbias.theorem.sympy_types import as_rational, as_symbol

KINDS = ("constant", "power_decay", "geometric")
SPECS = (
    "constant:L | power_decay:L0,BETA | geometric:L0,Q (numbers or parameter names) | "
    "an expression in t, e.g. 0.5/(t+1)**1.5 or lambda_0/(t+1)**beta"
)


@dataclass(frozen=True)
class Family:
    """A recognised closed family and its exact parameters (SymPy values or positive symbols).

    kind: "constant" (params ``lambda``), "power_decay" (λ_0 (t+a)^(-β): ``lambda_0``, ``beta``,
    ``a``), "geometric" (λ_0 q^t: ``lambda_0``, ``q``) or "expression" (no params).
    """

    kind: str
    params: dict[str, sp.Expr] = field(default_factory=dict)


@dataclass(frozen=True)
class ExpressionSchedule:
    """λ_t given by ``expr``, a SymPy expression in ``T`` (t = 0, 1, 2, ...) and optional
    named parameters; ``text`` is what was parsed; ``family`` the recognised family (found
    from ``expr`` when not given)."""

    text: str
    expr: sp.Expr
    family: Family | None = None

    @property
    def spec(self) -> str:
        """The text it was parsed from (as ``posbias.numerics.schedules`` types have ``spec``)."""
        return self.text

    @property
    def parameters(self) -> list[sp.Symbol]:
        """The named parameters (every free symbol but t), sorted by name."""
        return sorted((as_symbol(s) for s in self.expr.free_symbols if s != T), key=str)

    def symbolic(self, t):
        """λ_t as a SymPy expression in ``t``."""
        return self.expr if t is T else self.expr.subs(T, t)

    def values(self, num_layers: int) -> np.ndarray:
        """λ_0 .. λ_{T-1} in float64 (``sympy.lambdify`` with NumPy; term by term where NumPy
        has no counterpart, e.g. factorial). Needs every parameter to have a value."""
        if self.parameters:
            raise ValueError(f"schedule {self.text!r}: give values for {', '.join(map(str, self.parameters))} first")
        t = np.arange(num_layers, dtype=np.float64)
        try:
            out = np.asarray(sp.lambdify(T, self.expr, modules="numpy")(t), dtype=np.float64)
        except (TypeError, NameError, AttributeError, ValueError):
            out = np.array([float(self.expr.subs(T, k)) for k in range(num_layers)], dtype=np.float64)
        return np.broadcast_to(out, (num_layers,)).copy()


Schedule = schedules.Constant | schedules.PowerDecay | schedules.Geometric | ExpressionSchedule


def exact_decimal(x: float) -> sp.Rational:
    """The float ``x`` as the exact decimal it prints as (0.1 -> 1/10), the rule of the
    numerics schedules' symbolic view."""
    return as_rational(sp.Rational(repr(float(x))))


def parse_expression(text: str, where: str) -> sp.Expr:
    """A SymPy expression in ``t`` and named parameters (assumed positive), decimals exact.

    Parsed by theorem.expr_guard: an AST walk with an allow-list (numbers, ``t``, the functions
    in ``FUNCTIONS``, parameter names, ``+-*/^()``), no attribute access, bounded literals
    (at most 60 digits, decimal exponents within ±60), numeric powers at most 1000, numeric
    factorial/gamma arguments at most 1000, no nested factorial/gamma, constants within
    10^±1000. Nothing is evaluated before its size is known.

    >>> parse_expression("0.5/(t+1)^1.5", "demo")
    1/(2*(t + 1)**(3/2))
    """
    return expr_guard.parse(text, where)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def check_numbers(text: str, args: list[str]) -> None:
    """Every numeric family parameter within expr_guard's literal limits (60 digits, exponent ±60)."""
    for a in args:
        if _is_number(a):
            expr_guard.exact_number(a, f"schedule {text!r}")


def parse_schedule(text: str) -> Schedule:
    """``constant:L``, ``power_decay:L0,BETA``, ``geometric:L0,Q`` or an expression in t.

    Family parameters that are all plain numbers give the posbias.numerics.schedules types;
    names (positive symbols) or fractions give an ``ExpressionSchedule`` of that family.
    A ``custom:`` schedule is refused: it is a finite stack, and this is about T -> ∞.
    """
    kind, sep, rest = text.partition(":")
    kind = kind.strip()
    if sep and kind == "custom":
        raise DeriveError(
            f"schedule {text!r}: a custom schedule is a finite stack (Σλ_t < ∞ trivially); expected {SPECS}"
        )
    if sep and kind in KINDS:
        args = rest.split(",")
        want = {"constant": 1, "power_decay": 2, "geometric": 2}[kind]
        if len(args) != want:
            raise DeriveError(f"schedule {text!r}: {kind} takes {want} parameter(s), got {len(args)}")
        check_numbers(text, args)
        if all(_is_number(a) for a in args):
            try:
                parsed = schedules.parse(text)
            except ValueError as exc:
                raise DeriveError(str(exc)) from None
            assert not isinstance(parsed, schedules.Custom)  # kind is one of KINDS: constant, power_decay, geometric
            return parsed
        values = [parse_expression(a, f"schedule {text!r}") for a in args]
        if any(T in v.free_symbols for v in values):
            raise DeriveError(
                f"schedule {text!r}: {kind} parameters must not depend on t; expected numbers or parameter names"
            )
        if kind == "constant":
            return ExpressionSchedule(text, values[0], Family(kind, {"lambda": values[0]}))
        lam0, second = values
        if kind == "power_decay":
            expr = lam0 * (T + 1) ** (-second)
            return ExpressionSchedule(text, expr, Family(kind, {"lambda_0": lam0, "beta": second, "a": sp.Integer(1)}))
        return ExpressionSchedule(text, lam0 * second**T, Family(kind, {"lambda_0": lam0, "q": second}))
    expr = parse_expression(text, "schedule")
    return ExpressionSchedule(text, expr, recognise(expr))


def recognise(expr: sp.Expr) -> Family:
    """The closed family of λ_t = ``expr``: constant, c (t+a)^p with a > 0 (power decay, β = -p)
    or c q^t with q > 0 (geometric), else "expression"."""
    if T not in expr.free_symbols:
        return Family("constant", {"lambda": expr})
    c, a, p = (sp.Wild(n, exclude=[T]) for n in "cap")
    m = expr.match(c * (T + a) ** p)
    if m and m.get(a) is not None and m[a].is_positive and m[p].is_real and (m[p] != 0):
        return Family("power_decay", {"lambda_0": m[c], "beta": -m[p], "a": m[a]})
    m = expr.match(c * p**T)
    if m and m[p].is_positive:
        return Family("geometric", {"lambda_0": m[c], "q": m[p]})
    return Family("expression")


def family_of(schedule: Schedule) -> Family:
    """The recognised family of ``schedule`` with exact parameters (see ``Family``)."""
    if isinstance(schedule, schedules.Constant):
        return Family("constant", {"lambda": exact_decimal(schedule.value)})
    if isinstance(schedule, schedules.PowerDecay):
        return Family(
            "power_decay",
            {"lambda_0": exact_decimal(schedule.lambda_0), "beta": exact_decimal(schedule.beta), "a": sp.Integer(1)},
        )
    if isinstance(schedule, schedules.Geometric):
        return Family("geometric", {"lambda_0": exact_decimal(schedule.lambda_0), "q": exact_decimal(schedule.q)})
    if isinstance(schedule, ExpressionSchedule):
        return schedule.family if schedule.family is not None else recognise(schedule.expr)
    raise DeriveError(f"schedule {getattr(schedule, 'spec', schedule)!r}: expected {SPECS}")


def parameters_of(schedule: Schedule) -> list[sp.Symbol]:
    """The named parameters of ``schedule`` (none for the numerics types)."""
    return schedule.parameters if isinstance(schedule, ExpressionSchedule) else []
