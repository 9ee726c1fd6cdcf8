"""The one table from engine names to engines, and the profile entry point.

===========  ==========================================================  ============================
name         what                                                        when it applies
===========  ==========================================================  ============================
auto         picks one of the below, re-runs on an exact route when      always (the default)
             entries were lost (numerics/auto.py)
structured   exact O(T H N) recurrence; native C kernel on the CPU,      ALiBi + content, any mask
             XLA elsewhere (numerics/structured.py)
log          the same recurrence in log space (extended range)           no sliding windows
fft          saturation split + FFT, O(N log L) per layer                causal / sliding window
             (numerics/fft.py); absolute error ~1e-16 of max p
dense        full P by N x N products (numerics/dense.py)                N <= 8192
measured     given (T, N, N) kernels (numerics/measured.py)              a KernelStack
===========  ==========================================================  ============================

Examples
--------
>>> from posbias.numerics.stack import AlibiStack
>>> from posbias.numerics.masks import Full
>>> stack = AlibiStack.build([0.5] * 4, [0.5, 0.125])
>>> p = profile(stack, 64)
>>> round(float(p.probabilities.sum()), 12), p.engine
(1.0, 'structured')
>>> get("fft").supports(AlibiStack.build([0.5], [0.5], mask=Full()), 8)
'handles causal and sliding-window masks only (mask full reads later tokens)'
"""

from __future__ import annotations

import jax.numpy as jnp

from posbias.numerics.auto import Auto
from posbias.numerics.dense import Dense
from posbias.numerics.engine import Engine, Profile, Progress
from posbias.numerics.fft import FFT
from posbias.numerics.measured import Measured
from posbias.numerics.structured import Structured

ENGINES: dict[str, Engine] = {
    "auto": Auto(),
    "structured": Structured(),
    "log": Structured(ring="log"),
    "fft": FFT(),
    "dense": Dense(),
    "measured": Measured(),
}


def get(engine: str | Engine) -> Engine:
    """The engine of that name (or the engine itself)."""
    if isinstance(engine, Engine):
        return engine
    try:
        return ENGINES[engine]
    except KeyError:
        raise ValueError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}") from None


def profile(stack, num_tokens: int | None = None, *, engine: str | Engine = "auto", dtype=jnp.float64,
            progress: Progress | None = None) -> Profile:
    """The profile p = e_{N-1}^T R^(T-1) ... R^(0) of ``stack`` over ``num_tokens`` tokens (THEORY.md, Notation).

    ``engine``: a name from ``ENGINES`` or an ``Engine``; the default ``auto`` chooses an
    exact engine and falls back to extended range where entries underflow.
    ``num_tokens`` may be omitted for measured kernels (their N). Float64 unless ``dtype``
    says otherwise; the caller's JAX configuration is not changed.
    """
    if num_tokens is None:
        num_tokens = getattr(stack, "num_tokens", None)
        if num_tokens is None:
            raise ValueError("num_tokens: required for an ALiBi stack")
    return get(engine).profile(stack, num_tokens, dtype=dtype, progress=progress)
