"""The λ schedule of the exact Cesàro rollout as exact fractions (THEORY.md, "An exact closed form").

The closed form p = e_{N-1} H(mu), mu_k = prod_t (1 - λ_t k/(k+1)) (posbias.theorem.cesaro_exact)
is exact only if every λ_t is. A schedule's parameters are read as the decimals they were written
as (0.3 -> 3/10); a λ_t that is irrational (power decay with a fractional exponent, a symbolic
schedule) is rounded to ``ROUND_DIGITS`` decimals, from 20 more digits in mpmath, and counted,
so the l1 error of the profile is bounded by ``ExactSchedule.rounding_bound``. ``layer_bits``
bounds the bits of each λ_t's denominator from the parameters alone, before anything is built.

Examples
--------
>>> parse_schedule("geometric:0.5,0.5", 3).lambdas
(Fraction(1, 2), Fraction(1, 4), Fraction(1, 8))
>>> layer_count(schedules.parse("custom:0.1,0.2"), None)
2
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import sympy as sp

from posbias.numerics import schedules
from posbias.theorem.derivation import DeriveError

MAX_LAYERS = 4096  # T; the λ_t are built in O(T) Fraction / mpmath steps, never a SymPy call per layer
ROUND_DIGITS = 40  # irrational λ_t are rounded to this many decimals (error bound reported)
DEFAULT_LAYERS = 32  # T when --layers is not given (custom schedules: their length)


@dataclass(frozen=True)
class ExactSchedule:
    """λ_0..λ_{T-1} as exact fractions; ``rounded`` counts layers rounded to ROUND_DIGITS decimals."""

    spec: str  # the schedule's canonical spec (posbias.numerics.schedules)
    formula: str
    lambdas: tuple[Fraction, ...]
    rounded: int

    @property
    def rounding_bound(self) -> Fraction:
        """Bound on the l1 distance between the profile of ``lambdas`` and of the true schedule.

        e_{N-1} P is a product of row-stochastic matrices; changing λ_t by ε changes
        R^(t) by ε (C - I), whose rows have l1 norm < 2, so ||Δp||_1 <= 2 Σ_t |Δλ_t|.
        """
        return Fraction(2 * self.rounded, 10**ROUND_DIGITS)


def _to_fraction(x: sp.Rational) -> Fraction:
    return Fraction(int(x.p), int(x.q))


def layer_count(schedule: schedules.Schedule, num_layers: int | None) -> int:
    """T: a custom schedule's length, else ``num_layers``, else ``DEFAULT_LAYERS``."""
    if isinstance(schedule, schedules.Custom):
        return len(schedule.lambdas)
    return DEFAULT_LAYERS if num_layers is None else num_layers


def _formula(schedule: schedules.Schedule) -> str:
    t = sp.Symbol("t", integer=True, nonnegative=True)
    if isinstance(schedule, schedules.Custom):
        return "λ_t given layer by layer"
    if isinstance(schedule, schedules.PowerDecay):
        lam0, beta = (sp.Rational(repr(float(x))) for x in (schedule.lambda_0, schedule.beta))
        return f"λ_t = ({lam0})/(t+1)^({beta})"
    return f"λ_t = {schedule.symbolic(t)}"


def exact_schedule(schedule: schedules.Schedule, num_layers: int | None = None) -> ExactSchedule:
    """λ_0..λ_{T-1} of ``schedule`` as exact fractions, from its symbolic view (parameters read as the
    decimals they were written as: 0.3 -> 3/10); irrational values are rounded to ROUND_DIGITS
    decimals and counted in ``rounded``. T = ``num_layers``, else the custom length, else 32.

    >>> exact_schedule(schedules.parse("power_decay:0.5,1"), 3).lambdas
    (Fraction(1, 2), Fraction(1, 4), Fraction(1, 6))
    """
    spec = schedule.spec
    if isinstance(schedule, schedules.Custom):
        if num_layers is not None and num_layers != len(schedule.lambdas):
            raise DeriveError(
                f"--schedule {spec!r}: {len(schedule.lambdas)} values but --layers {num_layers}; expected equal"
            )
        num_layers = len(schedule.lambdas)
    t_count = DEFAULT_LAYERS if num_layers is None else num_layers
    if t_count > MAX_LAYERS:
        raise DeriveError(f"--layers {t_count}: expected at most {MAX_LAYERS}")
    values, rounded = _layer_values(schedule, t_count)
    for layer, v in enumerate(values):
        if not 0 <= v <= 1:
            raise DeriveError(f"--schedule {spec!r}: λ_{layer} = {v} lies outside [0, 1]; expected 0 <= λ_t <= 1")
    return ExactSchedule(spec, _formula(schedule), tuple(values), rounded)


def _dec(x: float) -> Fraction:
    return Fraction(repr(float(x)))


def _integer_root(x: int, q: int) -> int | None:
    """The integer r with r^q = x, if there is one (x >= 1)."""
    if x == 1:
        return 1
    if q > x.bit_length():  # 2^q > x: no integer q-th root above 1
        return None
    r = round(x ** (1.0 / q))
    for c in (r - 1, r, r + 1):
        if c >= 1 and c**q == x:
            return c
    return None


def _layer_values(schedule: schedules.Schedule, t_count: int) -> tuple[list[Fraction], int]:
    """λ_0..λ_{T-1} exactly (Fractions; parameters read as the decimals they print as), irrational
    values rounded to ROUND_DIGITS decimals (from 20 more digits in mpmath); (values, rounded count)."""
    if isinstance(schedule, schedules.Custom):
        return [_dec(x) for x in schedule.lambdas], 0
    if isinstance(schedule, schedules.Constant):
        return [_dec(schedule.value)] * t_count, 0
    if isinstance(schedule, schedules.Geometric):
        lam0, q = _dec(schedule.lambda_0), _dec(schedule.q)
        out, v = [], lam0
        for _ in range(t_count):
            out.append(v)
            v *= q
        return out, 0
    if isinstance(schedule, schedules.PowerDecay):
        lam0, beta = _dec(schedule.lambda_0), _dec(schedule.beta)
        if beta.denominator == 1:
            return [lam0 / Fraction(t + 1) ** int(beta) for t in range(t_count)], 0
        import mpmath

        scale = 10**ROUND_DIGITS
        out = []
        with mpmath.workdps(ROUND_DIGITS + 20):
            b = mpmath.mpf(beta.numerator) / beta.denominator
            l0 = mpmath.mpf(lam0.numerator) / lam0.denominator
            rounded = 0
            for t in range(t_count):
                root = _integer_root(t + 1, beta.denominator)
                if root is not None:  # (t+1)^(-p/q) is rational when t+1 is a q-th power
                    out.append(lam0 / Fraction(root) ** beta.numerator)
                    continue
                out.append(Fraction(int(mpmath.nint(l0 * mpmath.power(t + 1, -b) * scale)), scale))
                rounded += 1
        return out, rounded
    t = sp.Symbol("t", integer=True, nonnegative=True)
    expr = schedule.symbolic(t)
    values, rounded = [], 0
    for layer in range(t_count):
        v = expr.subs(t, layer)
        if not v.is_Rational:
            v = sp.Rational((v * 10**ROUND_DIGITS).evalf(ROUND_DIGITS + 20).round(), 10**ROUND_DIGITS)
            rounded += 1
        values.append(_to_fraction(v))
    return values, rounded


def layer_bits(schedule: schedules.Schedule, t_count: int) -> list[int]:
    """Upper bounds on the bits of each λ_t's denominator, from the parameters alone (nothing built)."""
    rounded = ROUND_DIGITS * 4  # a rounded λ_t: denominator 10^40 < 2^133
    if isinstance(schedule, schedules.Custom):
        return [_dec(x).denominator.bit_length() for x in schedule.lambdas]
    if isinstance(schedule, schedules.Constant):
        return [_dec(schedule.value).denominator.bit_length()] * t_count
    if isinstance(schedule, schedules.Geometric):
        b0, bq = _dec(schedule.lambda_0).denominator.bit_length(), _dec(schedule.q).denominator.bit_length()
        return [b0 + bq * t for t in range(t_count)]
    if isinstance(schedule, schedules.PowerDecay):
        beta = _dec(schedule.beta)
        b0 = _dec(schedule.lambda_0).denominator.bit_length()
        if beta.denominator == 1:
            return [b0 + int(beta) * (t + 1).bit_length() for t in range(t_count)]
        return [rounded] * t_count
    return [rounded] * t_count


def parse_schedule(spec: str, num_layers: int | None = None) -> ExactSchedule:
    """``constant:L``, ``power_decay:L0,BETA`` (λ_t = L0/(t+1)^BETA), ``geometric:L0,Q`` or
    ``custom:L0,L1,...`` (posbias.numerics.schedules.parse), evaluated exactly by ``exact_schedule``."""
    return exact_schedule(_parse(spec), num_layers)


def _parse(spec: str) -> schedules.Schedule:
    try:
        return schedules.parse(spec)
    except ValueError as exc:
        raise DeriveError(f"--schedule: {exc}") from None
