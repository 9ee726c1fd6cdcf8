"""The bridge from SymPy schedules to JAX: λ_t and the partial last-token atom as JAX functions.

``sympy.lambdify(..., modules="jax")`` turns the symbolic view of a schedule
(posbias.numerics.schedules or theorem.schedule_expr) into a function of a JAX
array of layer indices, so tests can compare the symbolic side with the numerics
engines. JAX is imported only when these functions run (and by the functions they
return), never when this module is imported.

Examples
--------
>>> from posbias.theorem.schedule_expr import parse_schedule
>>> import numpy as np
>>> lam = jax_schedule(parse_schedule("lambda_0/(t+1)**beta"), lambda_0=0.8, beta=1.5)
>>> [round(float(v), 4) for v in lam(np.arange(3.0))]
[0.8, 0.2828, 0.154]
"""

from __future__ import annotations

from collections.abc import Callable

import sympy as sp

from posbias.theorem.errors import DeriveError
from posbias.theorem.schedule_expr import Schedule, T, parameters_of


def jax_schedule(schedule: Schedule, **values) -> Callable:
    """λ_t as a JAX function of t (``sympy.lambdify(..., modules="jax")``); named parameters are
    substituted from ``values`` first (every one must be given)."""
    params = parameters_of(schedule)
    missing = [p.name for p in params if p.name not in values]
    if missing:
        raise DeriveError(f"jax_schedule: give values for {', '.join(missing)}")
    expr = schedule.symbolic(T).subs({p: values[p.name] for p in params})
    return sp.lambdify(T, expr, modules="jax")


def jax_partial_atom(schedule: Schedule, delta, **values) -> Callable:
    """T -> Π_{t<T} (1 - λ_t δ) in JAX: the last-token atom p(N-1) of C2(c) when every layer has
    A[N-1, N-1] = 1 - δ (e.g. δ = 1 - 1/N for uniform causal attention)."""
    lam = jax_schedule(schedule, **values)

    def atom(num_layers: int):
        import jax.numpy as jnp

        t = jnp.arange(num_layers, dtype=jnp.float64)
        return jnp.prod(1.0 - lam(t) * float(delta))

    return atom
