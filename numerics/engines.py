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
power        periodic stacks by squaring the block product, O(N^3 log T)  N <= 8192, any depth
             with scale exponents per row block and column (power.py)
measured     given (T, N, N) kernels (numerics/measured.py)              a KernelStack
bias         relative biases b(i - j) + d [i = j] + s [j = 0] by          a BiasStack (C7)
             cumulative weights, O(T H N^2); native C kernel on the CPU,
             XLA elsewhere (numerics/bias_engine.py)
bias-fft     relative biases by FFT Toeplitz correlation, O(T U N log N)  a causal / sliding-window
             (numerics/bias_fft.py); absolute error bound in resolution  BiasStack, large N
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

import importlib
from typing import TYPE_CHECKING

import numpy as np

from posbias.numerics.engine import Engine, Profile, Progress

if TYPE_CHECKING:
    from posbias.numerics.boundary import EngineName, Stack

_TABLE: dict[EngineName, tuple[str, str, dict]] = {  # name -> (module, class, options): imported on first use
    "auto": ("auto", "Auto", {}),
    "structured": ("structured", "Structured", {}),
    "log": ("structured", "Structured", {"ring": "log"}),
    "fft": ("fft", "FFT", {}),
    "dense": ("dense", "Dense", {}),
    "bias": ("bias_engine", "BiasEngine", {}),
    "bias-fft": ("bias_fft", "BiasFFT", {}),
    "power": ("power", "Power", {}),
    "measured": ("measured", "Measured", {}),
}
NAMES = tuple(_TABLE)
CHOOSABLE = tuple(n for n in _TABLE if n != "measured")  # what --engine and a sweep's engine accept
# (``measured`` is the engine of measured kernels, picked by the stack type, not by name)


def get(engine: EngineName | Engine) -> Engine:
    """The engine of that name (or the engine itself)."""
    if isinstance(engine, Engine):
        return engine
    if engine not in _TABLE:
        raise ValueError(f"unknown engine {engine!r}; expected one of {', '.join(NAMES)}")
    module, cls, options = _TABLE[engine]
    return getattr(importlib.import_module(f"posbias.numerics.{module}"), cls)(**options)


def __getattr__(name: str):
    if name == "ENGINES":  # the whole table, every engine constructed
        return {key: get(key) for key in _TABLE}
    raise AttributeError(name)


def profile(
    stack: Stack,
    num_tokens: int | None = None,
    *,
    engine: EngineName | Engine = "auto",
    dtype=np.float64,
    progress: Progress | None = None,
) -> Profile:
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
