"""Relative-bias rollout profiles in C (numerics/native/bias_layer.c), called with ctypes.

``profile`` applies the layers of a ``BiasStack`` top-down to v = e_{N-1} in O(T H N^2)
time (O(T H N L) with a window of L tokens) and O(threads N) memory plus the (U, N) logit
tables of the distinct biases; the mathematics is stated in the C file and in
numerics/_bias_scan.py. With ``extended=True`` it runs the kernel's log-space entry
(``posbias_bias_profile_log``): v is held as log v, so no entry underflows (O(T H N^2)
exponentials instead of multiply-adds). Compiled on first use like numerics/native.py (same compiler,
cache and ``POSBIAS_NATIVE=0`` switch); float64 only; ctypes releases the GIL.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable

import numpy as np

from posbias.numerics.native import SOURCE, NativeError, compile_source, loadable

BIAS_SOURCE = SOURCE.with_name("bias_layer.c")
_I64 = ctypes.c_int64
_PD = ctypes.POINTER(ctypes.c_double)
_PI = ctypes.POINTER(ctypes.c_int64)


@functools.cache
def _library() -> ctypes.CDLL:
    handle = ctypes.CDLL(str(compile_source(BIAS_SOURCE)))
    for entry in (handle.posbias_bias_profile, handle.posbias_bias_profile_log):
        entry.restype = ctypes.c_int
        entry.argtypes = [
            _I64,
            _I64,
            _I64,
            _I64,
            _PD,
            _PI,
            _PD,
            _PD,
            _PD,
            _PD,
            _PD,
            _I64,
            _I64,
            _I64,
            _PD,
            _PD,
            _PD,
            _PD,
        ]
    return handle


def available() -> bool:
    """Compile (once per source) and load the kernel; False if disabled or impossible."""
    return loadable(_library)


def profile(
    layers,
    past: np.ndarray,
    future: np.ndarray,
    *,
    num_tokens: int,
    mask,
    threads: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    extended: bool = False,
):
    """(v (N,), min_i A[i, i] (T,), A[N-1, N-1] (T,), row deficit (T,)) after every layer; with
    ``extended``, (log v (N,), ..., zeros (T,)): the log-space kernel, which has no deficit limit.

    layers: (lambdas (T,), bias_index (T, H) int, diagonal, sink, head_weights (T, H)), diagonal
    and sink already divided by tau; past, future: (U, N) logit tables (already / tau, -inf
    where a window gives no weight). threads: default all cores, at most one per head and one
    per 2^15 N^2 H of work (2^11 in extended range). progress: called after each of ~20 chunks
    of layers.
    """
    lam, index, diag, sink, weights = layers
    lam = np.ascontiguousarray(lam, np.float64)
    index = np.ascontiguousarray(index, np.int64)
    diag, sink, weights = (np.ascontiguousarray(a, np.float64) for a in (diag, sink, weights))
    past, future = np.ascontiguousarray(past, np.float64), np.ascontiguousarray(future, np.float64)
    t_total, heads = index.shape
    n = int(num_tokens)
    window = mask.past_window
    reach = n - 1 if window is None else min(n - 1, int(window) - 1)
    k = mask.bidirectional_length(n)
    k = k if k > 1 else 0
    if threads is None:
        cost = n * n * heads * (16 if extended else 1)  # an exponential costs ~16 multiply-adds
        threads = max(1, min(os.cpu_count() or 1, heads, cost >> 15))
    v = np.full(n, -np.inf) if extended else np.zeros(n)
    v[-1] = 0.0 if extended else 1.0
    entry = _library().posbias_bias_profile_log if extended else _library().posbias_bias_profile
    mins, lasts, deficits = (np.full(t_total, np.nan) for _ in range(3))
    ptr: Callable[..., object] = lambda a, t=_PD: a.ctypes.data_as(t)  # noqa: E731
    step = t_total if progress is None else max(1, -(-t_total // 20))
    top = t_total
    while top > 0:
        low = max(0, top - step)
        sl = slice(low, top)
        parts = [np.ascontiguousarray(a[sl]) for a in (lam, index, diag, sink, weights)]
        outs = [np.full(top - low, np.nan) for _ in range(3)]
        rc = entry(
            n,
            heads,
            top - low,
            past.shape[0],
            ptr(parts[0]),
            ptr(parts[1], _PI),
            ptr(parts[2]),
            ptr(parts[3]),
            ptr(parts[4]),
            ptr(past),
            ptr(future),
            reach,
            k,
            int(threads),
            ptr(v),
            *(ptr(o) for o in outs),
        )
        if rc != 0:
            raise NativeError(int(rc), -1, -1)
        mins[sl], lasts[sl], deficits[sl] = outs
        top = low
        if progress is not None:
            progress(t_total - low, t_total)
    return v, mins, lasts, deficits
