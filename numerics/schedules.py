"""Mixing-coefficient schedules lambda_t, t = 0..T-1 (THEORY.md, Notation; C5).

lambda_t is the share of attention in layer t: R^(t) = (1 - lambda_t) I + lambda_t A^(t).
Every schedule has two views of the same sequence:

* ``values(T)``: the float64 numbers lambda_0 .. lambda_{T-1} the engines use;
* ``symbolic(t)``: a SymPy expression in the integer symbol t, with every
  parameter read as the exact decimal it was written as (0.6 -> 3/5), which the
  derivations of posbias.theorem analyse (the dichotomy of C5(c)).

SymPy is imported only inside ``symbolic``; this module needs NumPy alone.

``evaluate`` clips to [0, 1] as the reference implementation does and reports the
layers that were clipped, so callers can warn.

Examples
--------
>>> parse("power_decay:0.6,0.5").values(3).round(4)
array([0.6   , 0.4243, 0.3464])
>>> parse("geometric:0.5,0.5").spec
'geometric:0.5,0.5'
>>> import sympy as sp
>>> parse("constant:0.25").symbolic(sp.Symbol("t"))
1/4
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SPECS = "constant:L, power_decay:L0,BETA, geometric:L0,Q or custom:L0,L1,..."


def _exact(x: float):
    """The float x as the exact rational its shortest decimal repr denotes (0.1 -> 1/10)."""
    import sympy as sp

    return sp.Rational(repr(float(x)))


def _fmt(x: float) -> str:
    return repr(float(x)).removesuffix(".0") if float(x).is_integer() and abs(x) < 1e16 else repr(float(x))


@dataclass(frozen=True)
class Constant:
    """lambda_t = value."""

    value: float

    def values(self, num_layers: int) -> np.ndarray:
        return np.full(num_layers, float(self.value))

    def symbolic(self, t):
        return _exact(self.value)

    @property
    def spec(self) -> str:
        return f"constant:{_fmt(self.value)}"


@dataclass(frozen=True)
class PowerDecay:
    """lambda_t = lambda_0 / (t + 1)^beta."""

    lambda_0: float
    beta: float

    def values(self, num_layers: int) -> np.ndarray:
        t = np.arange(num_layers, dtype=np.float64)
        return self.lambda_0 / (t + 1.0) ** self.beta

    def symbolic(self, t):
        return _exact(self.lambda_0) * (t + 1) ** (-_exact(self.beta))

    @property
    def spec(self) -> str:
        return f"power_decay:{_fmt(self.lambda_0)},{_fmt(self.beta)}"


@dataclass(frozen=True)
class Geometric:
    """lambda_t = lambda_0 q^t."""

    lambda_0: float
    q: float

    def values(self, num_layers: int) -> np.ndarray:
        return self.lambda_0 * float(self.q) ** np.arange(num_layers, dtype=np.float64)

    def symbolic(self, t):
        return _exact(self.lambda_0) * _exact(self.q) ** t

    @property
    def spec(self) -> str:
        return f"geometric:{_fmt(self.lambda_0)},{_fmt(self.q)}"


@dataclass(frozen=True)
class Custom:
    """lambda_t given layer by layer (T values)."""

    lambdas: tuple[float, ...]

    def values(self, num_layers: int) -> np.ndarray:
        if len(self.lambdas) != num_layers:
            raise ValueError(f"custom schedule has {len(self.lambdas)} values, expected num_layers = {num_layers}")
        return np.asarray(self.lambdas, dtype=np.float64)

    def symbolic(self, t):
        """A Piecewise in t over the given layers (0 beyond them: a finite stack)."""
        import sympy as sp

        pieces = [(_exact(v), sp.Eq(t, k)) for k, v in enumerate(self.lambdas)]
        return sp.Piecewise(*pieces, (0, True))

    @property
    def spec(self) -> str:
        return "custom:" + ",".join(_fmt(v) for v in self.lambdas)


Schedule = Constant | PowerDecay | Geometric | Custom


def evaluate(schedule: Schedule, num_layers: int) -> tuple[np.ndarray, list[int]]:
    """(lambda clipped to [0, 1], indices of the layers that needed clipping)."""
    with np.errstate(all="ignore"):  # overflow shows up as a non-finite lambda, refused below
        raw = schedule.values(num_layers)
    if not np.all(np.isfinite(raw)):
        raise ValueError(f"schedule {schedule.spec}: produced a non-finite lambda")
    clipped = np.clip(raw, 0.0, 1.0)
    return clipped, [int(t) for t in np.flatnonzero(clipped != raw)]


def parse(spec: str) -> Schedule:
    """Parse ``constant:L``, ``power_decay:L0,BETA``, ``geometric:L0,Q`` or ``custom:L0,L1,...``."""
    kind, sep, args = spec.partition(":")
    if not sep:
        raise ValueError(f"schedule {spec!r}: expected {SPECS}")
    try:
        numbers = [float(a) for a in args.split(",")] if args.strip() else []
    except ValueError:
        raise ValueError(f"schedule {spec!r}: parameters must be numbers") from None
    if not all(np.isfinite(numbers)):
        raise ValueError(f"schedule {spec!r}: parameters must be finite")
    kind = kind.strip()
    if kind == "constant" and len(numbers) == 1:
        return Constant(numbers[0])
    if kind == "power_decay" and len(numbers) == 2:
        return PowerDecay(*numbers)
    if kind == "geometric" and len(numbers) == 2:
        return Geometric(*numbers)
    if kind == "custom" and numbers:
        return Custom(tuple(numbers))
    raise ValueError(f"schedule {spec!r}: expected {SPECS}")


def clip_warning(clipped: list[int]) -> str:
    """The warning naming the layers whose lambda a schedule put outside [0, 1] (the first ten)."""
    shown = ", ".join(map(str, clipped[:10])) + (" ..." if len(clipped) > 10 else "")
    return f"lambda clipped to [0, 1] in layer(s) {shown}"
