"""Products of block-scaled matrices (numerics/scaled.py), and of a log-space row vector by one,
each with a rigorous bound on what float64 lost below 2^-1022.

A product Z = X Y is formed one row block I of Z at a time (``multiply``): with
g_j = max_l (c^X[I, l] + log Y[l, j]),

    Z[i, j] = e^{g_j} sum_l M~^X[i, l] W[l, j],   W[l, j] = exp(c^X[I, l] + log Y[l, j] - g_j) <= 1,

one exponential per entry of W and the sum by BLAS; then the block is normalised to its column
maxima. Under a causal mask every power is lower triangular: only the lower triangle of each W
panel is formed and only the non-zero blocks are multiplied (numerics/triangular.py). A row
vector v is kept in log space and multiplied by log-sum-exp (``vector_times``).

Loss bounds. Every matrix carries, per block-column, a bound on the absolute error of its
entries, and the vector one per entry: W entries below 2^-1022 / m_l are dropped (m_l the
smallest non-zero mantissa of column l in the block, so that no product in the BLAS call is
subnormal, which would make it slow; columns with mantissas below ``FLOOR`` keep W down to
2^-1022 and may underflow instead), mantissas below 2^-1022 are flushed, and the errors of the
factors propagate (|dX| Y + (X + |dX|) |dY|, the causal supports exact). A block-column is
charged what its products dropped only when one of its entries lies below that / eps (elsewhere
the loss is within rounding). An entry whose bound exceeds 1e-12 of its value (``RESOLVED``) is
what the power engine reports unresolved. Rounding is relative, as in any float64 product of
non-negative numbers, and log-scale arithmetic carries the float64 resolution of the log itself
(about 1e-16 of its magnitude).

Cost: a row block of b rows forms about c^2 / 2 entries of W (c its last row + 1, causal), so a
squaring takes about N^3 / (6 b) exponentials beside its N^3 / 6 multiply-adds; W is formed in
panels of ``PANEL`` columns into one buffer per thread (no allocation per panel), by the C kernel of
numerics/native_panel.py where it can be built (two passes over a panel; its exponential within 2 ulps,
so profiles differ from the NumPy route's at rounding level, about 1e-15 relative), else by NumPy.

Examples
--------
>>> import numpy as np
>>> from posbias.numerics.scaled import log_entries, scaled
>>> m = scaled(np.tril(np.full((4, 4), 0.5)), 1e-300, causal=True, rows=2)
>>> z = multiply(m, m, log_entries(m), causal=True)
>>> bool(np.allclose(np.exp(log_entries(z)), np.tril(np.full((4, 4), 0.5)) @ np.tril(np.full((4, 4), 0.5))))
True
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor, ThreadPoolExecutor

import numpy as np

from posbias.numerics.native_panel import available as native_panels
from posbias.numerics.native_panel import form_w
from posbias.numerics.scaled import LOG_TINY, TINY, Scaled, each, starts, support
from posbias.numerics.triangular import TRIANGULAR_BASE, lower_matmul

EPS = float(np.finfo(np.float64).eps)
RESOLVED = float(np.log(1e-12))  # an entry is resolved when its loss bound is below 1e-12 of it
PANEL = 256  # columns of W formed at a time
LSE_COLUMNS = 512  # columns of a log-sum-exp taken at a time (a thread's task)
FLOOR = 2.0**-511  # W is cut at 2^-1022 / m_l only while m_l >= FLOOR (the cut stays below 2^-511)
SMALL_LOSS = RESOLVED - 100.0  # vector rows lost at most this (log, relative) are bounded together


def _weighted_logsumexp(w: np.ndarray, log_m: np.ndarray, pool: Executor | None = None) -> np.ndarray:
    """log sum_l exp(w[l] + log_m[l, j]) per column (-inf where nothing contributes); rows w = -inf skipped.
    With a ``pool``, its threads take chunks of ``LSE_COLUMNS`` columns: each column's terms are added
    in the same order, so the values are the same."""
    rows = np.flatnonzero(np.isfinite(w))
    out = np.full(log_m.shape[1], -np.inf)
    if rows.size == 0:
        return out

    def chunk(j0: int) -> None:
        x = w[rows, None] + log_m[rows, j0 : j0 + LSE_COLUMNS]
        top = np.max(x, axis=0)
        safe = np.where(np.isfinite(top), top, 0.0)
        x -= safe
        np.exp(x, out=x)
        with np.errstate(divide="ignore"):
            out[j0 : j0 + LSE_COLUMNS] = safe + np.log(np.sum(x, axis=0))

    each(pool, chunk, range(0, log_m.shape[1], LSE_COLUMNS))
    return out


def _mass_times_err(mass: np.ndarray, err: np.ndarray, rows: int, causal: bool) -> np.ndarray:
    """log of sum_l exp(mass[r, l]) exp(err[L(l), j]) for a per-block-column bound ``err`` (blocks of
    ``rows``), over the l that column j may use: l >= j when causal. (R, N) for mass (R, N)."""
    n = mass.shape[1]
    out = np.full(mass.shape, -np.inf)
    for blk, a in enumerate(starts(n, rows)):
        e = err[blk]
        if not np.isfinite(e).any():
            continue
        c = min(a + rows, n)
        if causal:  # tail[r, k] = log sum_{a + k <= l < c} exp(mass[r, l])
            tail = np.logaddexp.accumulate(mass[:, a:c][:, ::-1], axis=1)[:, ::-1]
            np.logaddexp(out[:, :a], tail[:, :1] + e[None, :a], out=out[:, :a])
            np.logaddexp(out[:, a:c], tail + e[None, a:c], out=out[:, a:c])
        else:
            np.logaddexp(out, np.logaddexp.reduce(mass[:, a:c], axis=1)[:, None] + e[None, :], out=out)
    return out


def _panel_product(x_rows: np.ndarray, w: np.ndarray, skip: int, causal: bool) -> np.ndarray:
    """x_rows @ w, where under a causal mask x_rows = M~[r0:c, l0:c] with M~[i, l] = 0 for l > i and
    ``skip`` = r0 - l0 >= 0: its columns from ``skip`` on form a lower-triangular square, multiplied by
    triangular recursion (``lower_matmul``) when large."""
    if not causal or x_rows.shape[0] <= TRIANGULAR_BASE:
        return np.ascontiguousarray(x_rows) @ w
    out = lower_matmul(x_rows[:, skip:], w[skip:], True, False, TRIANGULAR_BASE)
    if skip:
        out += x_rows[:, :skip] @ w[:skip]
    return out


def multiply(
    x: Scaled, y: Scaled, log_y: np.ndarray, *, causal: bool, pool: ThreadPoolExecutor | None = None
) -> Scaled:
    """x · y in x's blocks, with its loss bound; ``log_y`` = log of y's entries (``log_entries``).
    With a ``pool``, its threads take one row block at a time (or, with one block, one W panel at a
    time): every block and panel is computed exactly as serially, so the result is the same; NumPy and
    BLAS release the GIL. Call it with BLAS on one thread: these products are small (b x K x ``PANEL``)
    and BLAS's own threads, spinning on a busy machine, made a squaring several times slower."""
    n, rows = log_y.shape[0], x.rows
    nb = len(starts(n, rows))
    out = Scaled(np.zeros((n, n)), np.full((nb, n), -np.inf), np.full((nb, n), -np.inf), rows)
    lost_x = np.full((nb, n), -np.inf)  # sum_l |dX_il| Y_lj
    buffers = threading.local()  # one W panel per thread, for this product
    native = native_panels()  # the C panel kernel or NumPy, decided once per product
    outer = pool if nb > 1 else None  # the pool takes the row blocks, or (one block) its W panels

    def block(blk: int) -> None:
        _row_block(x, log_y, blk, causal, out, lost_x, buffers, native, None if outer else pool)

    each(outer, block, range(nb)[::-1])  # the largest blocks (the last, under a causal mask) first
    lost_y = _mass_times_err(np.logaddexp(x.scale, x.err), y.err, y.rows, causal)  # (X + |dX|) |dY|
    err = np.logaddexp(np.logaddexp(lost_x, lost_y), out.err)
    err[~support(n, rows, causal)] = -np.inf
    return Scaled(out.mant, out.scale, err, rows)


def _panel_buffers(buffers: threading.local, n: int, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """This thread's W panel and cut mask (height x width views of n x ``PANEL`` arrays, made once per
    thread and product): forming W in place saves the page faults of a fresh array per panel."""
    if not hasattr(buffers, "w"):
        buffers.w, buffers.cut = np.empty((n, PANEL)), np.empty((n, PANEL), dtype=bool)
    return buffers.w[:height, :width], buffers.cut[:height, :width]


def _row_block(
    x: Scaled,
    log_y: np.ndarray,
    blk: int,
    causal: bool,
    out: Scaled,
    lost_x: np.ndarray,
    buffers: threading.local,
    native: bool,
    pool: ThreadPoolExecutor | None = None,
) -> None:
    """Row block ``blk`` of x · y into ``out`` (mantissas, scales, and in ``out.err`` what the products
    dropped below 2^-1022) and sum_l |dX_il| Y_lj into ``lost_x``; its W panels on ``pool`` if given,
    formed in this thread's ``buffers`` by the C kernel if ``native``, else by NumPy."""
    n, rows = log_y.shape[0], x.rows
    a = blk * rows
    c = min(a + rows, n)
    lim = c if causal else n  # columns l of X (and j of Z) the block may reach
    xm = x.mant[a:c, :lim]
    s = x.scale[blk, :lim]
    smallest = np.min(xm, axis=0, where=xm > 0, initial=np.inf)  # m_l
    # W[l, j] is kept iff >= 2^-1022 / m_l, so that no product in the BLAS call is subnormal (slow);
    # columns whose mantissas reach below FLOOR keep W down to 2^-1022 (their products may underflow)
    wide = smallest < FLOOR
    floor = np.where(wide, 1.0, smallest)
    with np.errstate(divide="ignore"):
        keep_from = LOG_TINY - np.log(floor)
    prod = out.mant[a:c, :lim]  # the block's products, normalised in place below
    shift = np.full(lim, -np.inf)

    def panel(j0: int) -> None:
        j1 = min(j0 + PANEL, lim)
        l0 = j0 if causal else 0  # Y[l, j] = 0 for l < j when causal
        r0 = max(a, j0) if causal else a  # Z[i, j] = 0 for i < j when causal
        w, cut = _panel_buffers(buffers, n, lim - l0, j1 - j0)
        if native:  # the same g and cut in two passes (numerics/native_panel.py)
            g = form_w(log_y[l0:lim, j0:j1], s[l0:lim], keep_from[l0:lim], w)
        else:
            np.add(log_y[l0:lim, j0:j1], s[l0:lim, None], out=w)
            g = np.max(w, axis=0)
            w -= np.where(np.isfinite(g), g, 0.0)
            np.less(w, keep_from[l0:lim, None], out=cut)
            np.exp(w, out=w)  # then the cut entries are set to 0 = exp(-inf), as if cut before
            np.copyto(w, 0.0, where=cut)
        prod[r0 - a :, j0:j1] = _panel_product(x.mant[r0:c, l0:lim], w, r0 - l0, causal)
        shift[j0:j1] = g

    each(pool, panel, range(0, lim, PANEL))  # the largest panels (the first, under a causal mask) first
    top = np.max(prod, axis=0)
    ok = (top > 0) & np.isfinite(shift)
    # drops per entry, in units of e^{g_j}: the W entries dropped, sum_l M~[i, l] 2^-1022 / m_l, the
    # products that underflowed (< 2^-1022 each, wide columns only) and 2^-1022 top_j (the flush below);
    # charged to a block-column only where one of its entries lies below that / eps
    live = np.isfinite(smallest)
    if live.any():
        per_row = TINY * (xm @ np.where(live & ~wide, 1.0 / floor, 0.0) + 2.0 * np.count_nonzero(live & wide))
        low = prod < (per_row[:, None] + TINY * top[None, :]) * (4.0 / EPS)
        if causal:
            low &= np.arange(a, c)[:, None] >= np.arange(lim)[None, :]
        hit = low.any(axis=0)
        if hit.any():
            out.err[blk, :lim] = np.where(hit, shift + np.log(per_row.max() + TINY * top), -np.inf)
    top_safe = np.where(ok, top, 1.0)
    prod /= top_safe
    prod[prod < TINY] = 0.0
    out.scale[blk, :lim] = np.where(ok, shift + np.log(top_safe), -np.inf)
    if np.isfinite(x.err[blk, :lim]).any():
        lost_x[blk, :lim] = _weighted_logsumexp(x.err[blk, :lim], log_y[:lim, :lim])


def vector_times(
    logv: np.ndarray, errv: np.ndarray, m: Scaled, log_m: np.ndarray, *, causal: bool, pool: Executor | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(log(v M), loss bound) for a row vector v = exp(logv) with per-entry loss bounds exp(errv); the
    log-sum-exps on ``pool``'s threads if given (the same values)."""
    n = logv.shape[0]
    logw = _weighted_logsumexp(logv, log_m, pool)
    lost_v = _lost_times(logv, errv, log_m, logw, pool)
    lost_m = _mass_times_err(np.logaddexp(logv, errv)[None, :], m.err, m.rows, causal)[0]
    rounding = np.log(n) + LOG_TINY + logw  # terms the log-sum-exp drops below 2^-1022 of the largest
    return logw, np.logaddexp.reduce([lost_v, lost_m, rounding], axis=0)


def _lost_times(
    logv: np.ndarray, errv: np.ndarray, log_m: np.ndarray, logw: np.ndarray, pool: Executor | None = None
) -> np.ndarray:
    """log sum_l exp(errv[l]) M[l, j] (|dv| M), bounded: the rows whose relative loss
    d_l = errv[l] - logv[l] is at most ``SMALL_LOSS`` contribute at most exp(max d_l) (v M)_j = exp(max d_l
    + logw[j]); the other rows are summed exactly."""
    with np.errstate(invalid="ignore"):
        rel = errv - logv
    small = rel <= SMALL_LOSS
    exact = _weighted_logsumexp(np.where(small, -np.inf, errv), log_m, pool)
    return np.logaddexp(exact, rel[small].max() + logw) if small.any() else exact
