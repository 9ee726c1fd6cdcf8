"""Mixing-coefficient schedules lambda_t, t = 0..T-1 (THEORY.md, Notation).

lambda_t is the share of attention in layer t: R^(t) = (1 - lambda_t) I + lambda_t A^(t).
Every schedule is clipped to [0, 1] as the reference implementation does; the
layers that were clipped are reported so callers can warn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Constant:
    """lambda_t = value."""

    value: float

    def values(self, num_layers: int) -> np.ndarray:
        return np.full(num_layers, float(self.value))


@dataclass(frozen=True)
class PowerDecay:
    """lambda_t = lambda_0 / (t + 1)^beta."""

    lambda_0: float
    beta: float

    def values(self, num_layers: int) -> np.ndarray:
        t = np.arange(num_layers, dtype=np.float64)
        return self.lambda_0 / (t + 1.0) ** self.beta


@dataclass(frozen=True)
class Custom:
    """lambda_t given layer by layer."""

    lambdas: tuple[float, ...]

    def values(self, num_layers: int) -> np.ndarray:
        if len(self.lambdas) != num_layers:
            raise ValueError(
                f"custom schedule has {len(self.lambdas)} values, expected num_layers = {num_layers}"
            )
        return np.asarray(self.lambdas, dtype=np.float64)


Schedule = Constant | PowerDecay | Custom


def evaluate(schedule: Schedule, num_layers: int) -> tuple[np.ndarray, list[int]]:
    """(lambda clipped to [0, 1], indices of the layers that needed clipping)."""
    raw = schedule.values(num_layers)
    if not np.all(np.isfinite(raw)):
        raise ValueError("schedule produced a non-finite lambda")
    clipped = np.clip(raw, 0.0, 1.0)
    return clipped, [int(t) for t in np.flatnonzero(clipped != raw)]


def parse(spec: str) -> Schedule:
    """Parse ``constant:L``, ``power_decay:L0,BETA`` or ``custom:L0,L1,...``."""
    kind, sep, args = spec.partition(":")
    if not sep:
        raise ValueError(
            f"schedule {spec!r}: expected constant:L, power_decay:L0,BETA or custom:L0,L1,..."
        )
    try:
        numbers = [float(a) for a in args.split(",")] if args.strip() else []
    except ValueError:
        raise ValueError(f"schedule {spec!r}: parameters must be numbers") from None
    if not all(np.isfinite(numbers)):
        raise ValueError(f"schedule {spec!r}: parameters must be finite")
    if kind == "constant" and len(numbers) == 1:
        return Constant(numbers[0])
    if kind == "power_decay" and len(numbers) == 2:
        return PowerDecay(*numbers)
    if kind == "custom" and numbers:
        return Custom(tuple(numbers))
    raise ValueError(
        f"schedule {spec!r}: expected constant:L, power_decay:L0,BETA or custom:L0,L1,..."
    )
