"""What a verification run costs, estimated before anything is drawn or allocated: the
bytes it holds at once and the seconds it takes, refused in one line beyond the limits.

* Memory: the limit of ``posbias.numerics.budget`` (``POSBIAS_MEMORY_LIMIT``, else 80% of
  physical memory).
* Time: ``POSBIAS_TIME_LIMIT`` seconds when set, else ``TIME_LIMIT`` (eight hours: the
  deep profile's full run is estimated at about 4 h). The
  seconds are work divided by the stated rates below (measured on two busy cores and
  rounded down, so the estimate errs long); a run estimated beyond the limit is refused
  before it starts.

A built-in run costs (examples per property) x (seconds per drawn example at the profile's
sizes, ``EXAMPLE_SECONDS``) x ``SHRINK_ALLOWANCE``. Model mode (``plan_model``) decides what
it forms: the dense ALiBi kernels only while T H N^2 <= ``DENSE_ENTRIES``, the dense product
P (T N^3 multiply-adds) only while that is <= ``DENSE_WORK``, the self-weights A^(t)[i, i]
one layer at a time (XLA: at most 2^31 - 1 elements per array); every drawn perturbation
costs one engine profile (T H N) or, for measured kernels, two last rows (2 T N^2).

>>> plan = plan_model(kind="kernels", layers=2, heads=1, tokens=3000, causal=True, examples=25)
>>> plan.dense_product, plan.dense_product_reason
(False, 'the dense product P needs T N^3 = 5.4e+10 multiply-adds, above the 1e+10 a verify run spends on it')
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from posbias.errors import UserError
from posbias.numerics import budget

TIME_LIMIT = 8 * 3600.0
"""Default limit (seconds) of an estimated run."""

EXAMPLE_SECONDS = {"ci": 0.05, "dev": 0.15, "deep": 0.3}
"""Seconds per drawn example of a built-in property (and a user claim) at the profile's sizes
(measured on two busy cores: ci 0.01-0.1 s per evaluation, deep 0.1-0.35 s)."""

SHRINK_ALLOWANCE = 1.5
"""Evaluations per example, shrinking included (a search shrinks its counterexample)."""

ENGINE_RATE = 4e7
"""T H N elements per second of one structured-engine profile (measured 9e7/s idle, 3.5e7/s with
the machine's two cores shared)."""

VECTOR_RATE = 5e8
"""Kernel entries per second of a vector-kernel product (NumPy, memory bound)."""

DENSE_RATE = 2e9
"""Multiply-adds per second of dense N x N products (NumPy BLAS)."""

DIAGONAL_RATE = 1e7
"""H N elements per second of the XLA self-weights of one layer (compilation included)."""

EXAMPLE_OVERHEAD = 0.01
"""Seconds hypothesis itself spends per drawn example (drawing, bookkeeping), whatever the model."""

DENSE_ENTRIES = 4e7
"""Dense ALiBi kernels are formed only while T H N^2 is at most this."""

DENSE_WORK = 1e10
"""The dense product P (C5(a)'s identity on P itself) is formed only while T N^3 is at most this."""

XLA_MAX_ELEMENTS = 2**31 - 1
"""XLA's array size limit (elements); the self-weights of one layer hold H x N."""


def time_limit() -> float:
    """Seconds a run may be estimated to take: ``POSBIAS_TIME_LIMIT`` or ``TIME_LIMIT``."""
    text = os.environ.get("POSBIAS_TIME_LIMIT")
    if not text:
        return TIME_LIMIT
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):  # inf and nan parse as floats: refused too
        raise UserError(f"POSBIAS_TIME_LIMIT: expected a positive number of seconds, got {text!r}")
    return value


def describe_seconds(seconds: float) -> str:
    """'42 s', '3.5 h', '12 days', '3e+08 years'."""
    for unit, size in (("years", 3.15e7), ("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            value = seconds / size
            return f"{value:.3g} {unit}"
    return f"{seconds:.2g} s"


def check_time(what: str, seconds: float) -> None:
    """Refuse (UserError, one line) a run estimated beyond ``time_limit()``."""
    limit = time_limit()
    if seconds > limit:
        raise UserError(
            f"{what} takes about {describe_seconds(seconds)} by estimate, more than the limit of "
            f"{describe_seconds(limit)} (set POSBIAS_TIME_LIMIT, in seconds, to change it)"
        )


def check_memory(what: str, nbytes: float) -> None:
    """Refuse (UserError, one line) a run needing more than the memory limit."""
    reason = budget.check(what, int(min(nbytes, 2**80)))
    if reason:
        raise UserError(reason)


def _count(n: int) -> float:
    """An example count as a float (counts beyond 10^18 are all far beyond any limit)."""
    return float(min(int(n), 10**18))


def examples_per_property(profile: str, examples: int | None, multiplier: float = 1.0) -> int:
    """What ``run_property`` asks hypothesis for: the profile's count (or ``examples``) times the
    property's multiplier, at least 1."""
    from posbias.verify.lazy import ps

    base = examples if examples is not None else ps.settings_for(profile).max_examples
    return max(1, round(_count(base) * multiplier))


def run_seconds(props, profile: str, examples: int | None) -> float:
    """Estimated seconds of a built-in run over ``props`` (see the module text)."""
    count = sum(_count(examples_per_property(profile, examples, p.examples)) for p in props)
    return count * EXAMPLE_SECONDS[profile] * SHRINK_ALLOWANCE


def check_run(props, profile: str, examples: int | None) -> None:
    """Refuse a built-in run estimated beyond the time limit (before anything is drawn)."""
    seconds = run_seconds(props, profile, examples)
    count = sum(_count(examples_per_property(profile, examples, p.examples)) for p in props)
    check_time(
        f"{len(props)} properties with {count:.3g} examples in all (~{EXAMPLE_SECONDS[profile]} s each at "
        f"profile {profile})",
        seconds,
    )


@dataclass(frozen=True)
class ModelPlan:
    """What model mode forms for a model of ``kind`` ("alibi" / "kernels"), and what it costs.
    dense_kernels: the (T, N, N) ALiBi kernels are formed; dense_product: P is formed
    (C5(a)'s identity checked on P itself); the reasons say why not, with the numbers."""

    kind: str
    layers: int
    heads: int
    tokens: int
    dense_kernels: bool
    dense_kernels_reason: str
    dense_product: bool
    dense_product_reason: str
    memory_bytes: float
    seconds: float

    def check(self) -> None:
        """Refuse (one line) a plan beyond the memory or time limit, or beyond XLA's array size."""
        what = f"verify of T = {self.layers}, H = {self.heads}, N = {self.tokens}"
        if self.kind == "alibi" and not self.dense_kernels and self.heads * self.tokens > XLA_MAX_ELEMENTS:
            raise UserError(
                f"{what}: the self-weights of one layer hold H N = {self.heads * self.tokens:.3g} "
                f"elements, beyond XLA's {XLA_MAX_ELEMENTS} per array"
            )
        check_memory(what, self.memory_bytes)
        check_time(what, self.seconds)


def plan_model(
    *, kind: str, layers: int, heads: int, tokens: int, causal: bool, examples: int, engine_bytes: float = 0.0
) -> ModelPlan:
    """The plan of ``verify_model`` for T = layers, H = heads, N = tokens; ``examples`` drawn per
    property; ``engine_bytes`` the engine's own estimate of one profile (ALiBi)."""
    t, h, n = int(layers), int(heads), int(tokens)
    evals = _count(examples) * SHRINK_ALLOWANCE
    vectors = 16 * 8 * n  # p, q, CDFs
    if kind == "alibi":
        entries = t * h * n * n
        dense = entries <= DENSE_ENTRIES
        dense_reason = (
            ""
            if dense
            else (f"dense kernels need T H N^2 = {entries:.3g} entries, above the {DENSE_ENTRIES:.0e} verify forms")
        )
        work = t * n**3
        product = dense and causal and work <= DENSE_WORK
        profile_s = t * h * n / ENGINE_RATE
        memory = engine_bytes + vectors
        seconds = profile_s + 3 * evals * (profile_s + EXAMPLE_OVERHEAD)  # p, then C2(b), C3(c), C4(b) draws
        if dense:
            memory += 8 * (t + 6) * n * n + (24 * n * n if product else 0)
            seconds += entries / ENGINE_RATE + evals * (n * n / VECTOR_RATE + EXAMPLE_OVERHEAD)  # forming; C1
        elif causal:
            memory += 24 * h * n + 8 * t * n  # one layer's XLA self-weights; the (T, N) result
            seconds += t * h * n / DIAGONAL_RATE
    else:
        dense, dense_reason = True, ""
        work = t * n**3
        product = causal and work <= DENSE_WORK
        memory = 8 * 3 * n * n + (24 * n * n if product else 0) + vectors  # one layer's CDF and tests; P
        seconds = t * n * n / VECTOR_RATE + evals * ((2 * t + 1) * n * n / VECTOR_RATE + 2 * EXAMPLE_OVERHEAD)
    if product:
        seconds += work / DENSE_RATE
    if not causal:
        product_reason = "the kernels read later tokens"
    elif not dense:
        product_reason = dense_reason
    elif not product:
        product_reason = (
            f"the dense product P needs T N^3 = {work:.3g} multiply-adds, above the "
            f"{DENSE_WORK:.0e} a verify run spends on it"
        )
    else:
        product_reason = ""
    return ModelPlan(kind, t, h, n, dense, dense_reason, product, product_reason, float(memory), float(seconds))
