"""The two number systems the structured engine runs in.

``LINEAR`` is ordinary float arithmetic (+, x). ``LOG`` stores log x and uses
(logaddexp, +): values far below the float64 range (1e-308) stay
representable, which attention-only stacks need at large N and depth.
Subtraction has no stable log-space form: ``can_subtract`` says which ring
supports it (sliding-window masks need it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax.numpy as jnp


@dataclass(frozen=True)
class Semiring:
    name: str
    add: Callable
    mul: Callable
    zero: float
    from_linear: Callable  # encode a non-negative linear value
    to_linear: Callable
    sum: Callable  # reduce with ``add`` along an axis
    can_subtract: bool


LINEAR = Semiring(
    name="linear",
    add=jnp.add,
    mul=jnp.multiply,
    zero=0.0,
    from_linear=lambda x: x,
    to_linear=lambda x: x,
    sum=lambda x, axis: jnp.sum(x, axis=axis),
    can_subtract=True,
)


def _logsum(x, axis):
    top = jnp.max(x, axis=axis, keepdims=True)
    top = jnp.where(jnp.isfinite(top), top, 0.0)
    return jnp.squeeze(top, axis) + jnp.log(jnp.sum(jnp.exp(x - top), axis=axis))


LOG = Semiring(
    name="log",
    add=jnp.logaddexp,
    mul=jnp.add,
    zero=-jnp.inf,
    from_linear=jnp.log,
    to_linear=jnp.exp,
    sum=_logsum,
    can_subtract=False,
)

RINGS = {"linear": LINEAR, "log": LOG}
