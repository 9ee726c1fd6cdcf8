"""``posbias derive dichotomy``: does Σλ_t converge, and does the rollout collapse as T -> ∞ (C5)?

The derivation reads a schedule (theorem.schedule_expr, through theorem.expr_guard's
bounded parser) and δ (a number in [0, 1), a δ_t schedule, or by default a symbol
0 < δ < 1), analyses it (theorem.dichotomy_analysis: the series tests, SymPy's
``is_convergent`` within deterministic size limits, the bounds on the last-token atom
Π_t (1 - λ_t δ_t) of C2(c) and C5(a)) and shows the result (theorem.dichotomy_format). The
certificates behind the analysis live in theorem.dichotomy_certificates; the JAX view of a
schedule in theorem.lambdify_jax.

Examples
--------
>>> compute(DichotomyParams("power_decay:0.5,1.5")).data["verdict"]
'no collapse'
>>> compute(DichotomyParams("constant:0.3", delta=0.5)).data["status"]
'diverges'
>>> compute(DichotomyParams("constant:0.3", delta=0)).data["verdict"]
'no collapse'
"""

from __future__ import annotations

from dataclasses import dataclass

from posbias.theorem import dichotomy_format
from posbias.theorem.derivation import Derivation, Result
from posbias.theorem.dichotomy_analysis import LIMITS, Delta, analyse, parse_delta
from posbias.theorem.params import Params, param
from posbias.theorem.schedule_expr import SPECS, Schedule, parse_schedule

NAME = "dichotomy"


@dataclass(frozen=True)
class DichotomyParams(Params):
    """The schedule λ_t (t = 0, 1, 2, ...) and δ = 1 - A[N-1, N-1] of the last row."""

    name = NAME
    schedule: Schedule = param(
        meaning=f"the λ schedule: {SPECS}",
        example="0.5/(t+1)**1.5",
        positional=True,
        convert=parse_schedule,
        metavar="SCHEDULE",
    )
    delta: Delta | None = param(
        None,
        meaning="δ = 1 - A[N-1, N-1], the off-diagonal mass of the last row: a number "
        "0 <= δ < 1 read exactly (0.3 is 3/10; δ = 1 is outside C5(c)'s uniform bounds), or a "
        "δ_t schedule in t with sup δ_t < 1 (non-increasing)",
        example="1/2",
        convert=parse_delta,
        metavar="DELTA",
        default_text="symbolic δ with 0 < δ < 1",
    )

    def __post_init__(self):
        if self.delta is not None and not isinstance(self.delta, (Delta, str)):
            object.__setattr__(self, "delta", parse_delta(self.delta))  # numbers from Python callers
        super().__post_init__()


def compute(params: DichotomyParams) -> Result:
    """Σλ_t < ∞ or = ∞ (or undecided, or a condition on named parameters), the verdict (C5) and the
    last-token atom Π_t (1 - λ_t δ_t): its limit, a certified lower bound when the series converges
    (C5(a)), and its numerical value with a certified bracket of the tail."""
    analysis = analyse(params.schedule, params.delta)
    return Result(
        NAME, dichotomy_format.text(analysis), dichotomy_format.latex(analysis), dichotomy_format.data(analysis)
    )


DERIVATION = Derivation(
    name=NAME,
    summary="does Σλ_t converge? collapse or not as T → ∞ (C5), with the last-token atom bound (C2(c))",
    claims=("C5", "C2"),
    params=DichotomyParams,
    compute=compute,
    limits=LIMITS,
)
