"""The W panels of the power engine's block-scaled products in C (numerics/native/scaled_panel.c).

``form_w`` computes, for one row block of Z = X Y and one panel of columns (numerics/scaled_product.py),

    g[j] = max_l (log Y[l, j] + s[l]),   W[l, j] = exp(log Y[l, j] + s[l] - g~[j]) cut below keep[l],

in two passes over the panel instead of NumPy's six (the sum, the maximum, the shift, the cut mask,
the exponential, the cut). g and the cut are bit for bit NumPy's; the exponential is the C file's
(within 2 ulps of a correctly rounded one, for results in [2^-1022, 1], the only ones kept). Compiled
on first use like numerics/native.py (same compiler, cache and ``POSBIAS_NATIVE=0`` switch); where it
cannot be built the power engine forms its panels with NumPy. Float64; ctypes releases the GIL, so
the engine's threads form panels at once.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from posbias.numerics.native import SOURCE, compile_source, loadable

PANEL_SOURCE = SOURCE.with_name("scaled_panel.c")
_I64 = ctypes.c_int64
_PD = ctypes.POINTER(ctypes.c_double)


@functools.cache
def _library() -> ctypes.CDLL:
    handle = ctypes.CDLL(str(compile_source(PANEL_SOURCE)))
    handle.posbias_w_panel.restype = ctypes.c_int
    handle.posbias_w_panel.argtypes = [_I64, _I64, _PD, _I64, _PD, _PD, _PD, _I64, _PD, _PD]
    return handle


def available() -> bool:
    """Compile (once per source) and load the kernel; False if disabled or impossible."""
    return loadable(_library)


def _pointer(a: np.ndarray):
    """A (rows, cols) float64 array's first entry and its row stride in entries, after checking that its
    rows are contiguous and do not overlap (the kernel addresses entry [l, j] as first + l stride + j)."""
    rows, cols = a.shape
    rows_ok = cols <= 1 or a.strides[1] == 8
    stride_ok = rows <= 1 or (a.strides[0] % 8 == 0 and a.strides[0] >= 8 * cols)
    if a.dtype != np.float64 or not (rows_ok and stride_ok):
        raise ValueError("form_w: expected float64 arrays with contiguous rows")
    return a.ctypes.data_as(_PD), (a.strides[0] // 8 if rows > 1 else cols)


def form_w(log_y: np.ndarray, s: np.ndarray, keep: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Fill ``w`` (K x C, rows contiguous) with the cut panel for ``log_y`` (K x C, a view with contiguous
    rows), scales ``s`` (K,) and cut levels ``keep`` (K,); returns g (C,), the column maxima (-inf
    where a whole column is -inf), as NumPy's ``np.max(log_y + s[:, None], axis=0)`` gives it."""
    rows, cols = log_y.shape
    if w.shape != (rows, cols) or s.shape != (rows,) or keep.shape != (rows,):
        raise ValueError(f"form_w: shapes {log_y.shape}, {s.shape}, {keep.shape}, {w.shape} do not match")
    s, keep = np.ascontiguousarray(s, np.float64), np.ascontiguousarray(keep, np.float64)
    g, shift = np.empty(cols), np.empty(cols)
    (y_at, y_stride), (w_at, w_stride) = _pointer(log_y), _pointer(w)
    code = _library().posbias_w_panel(
        rows,
        cols,
        y_at,
        y_stride,
        s.ctypes.data_as(_PD),
        keep.ctypes.data_as(_PD),
        w_at,
        w_stride,
        g.ctypes.data_as(_PD),
        shift.ctypes.data_as(_PD),
    )
    if code != 0:
        raise ValueError(f"form_w: the kernel refused its arguments (code {code})")
    return g
