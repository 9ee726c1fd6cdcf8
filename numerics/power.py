"""The power engine: profiles of periodic stacks at any depth by exponentiation by squaring.

THEORY.md, Notation. For a stack whose layers repeat with period p (``PeriodicStack``:
T = q p + r, block product B = R^(p-1) ... R^(0), top layers R_top on the r remaining
layers),

    p = e_{N-1}^T R_top^(r-1) ... R_top^(0) · B^q,

and B^q is never formed: with q = sum_k b_k 2^k, v <- v · B^(2^k) for every set bit and
B^(2^(k+1)) = (B^(2^k))^2 (powers of one matrix commute, so the order of the bit products
does not matter; the block and the top are kept in their layer order).

Extended range: a scale per block of rows and column. Entries of B^(2^k) span far more than
float64's range along a row (the diagonal's powers, C5(a): prod_t (1 - lambda_t (1 - A_ii))
to the power 2^k) and down a column too: at N = 4096 and 2^19 layers (H = 32, lambda = 0.5)
columns span up to 13,000 nats, blocks of 32 consecutive rows at most 252. So each matrix is
kept as M[i, j] = M~[i, j] e^{c[I, j]}: a log scale c[I, j] per block I of b consecutive rows
and column j, float64 mantissas M~ whose block-column maxima are 1. A product Z = X Y is
formed one row block I of Z at a time: with g_j = max_l (c^X[I, l] + log Y[l, j]),

    Z[i, j] = e^{g_j} sum_l M~^X[i, l] W[l, j],   W[l, j] = exp(c^X[I, l] + log Y[l, j] - g_j) <= 1,

one exponential per entry of W and the sum by BLAS; then the block is normalised to its
column maxima. The row vector is kept in log space (log-sum-exp products). The block height
b is chosen before each squaring from the matrix at hand: the largest power of two (at
least ``MIN_ROWS``) whose blocks span at most ``SPAN_BUDGET`` nats in every column, so that
a block of X and the same block of Z together stay inside float64's range. (Blocks as tall
as the matrix while the powers are shallow; at N = 4096 the squarings up to 2^19 layers end
with 64 and 32 rows, those up to 2^29 with 16: there blocks of 32 rows gain about 21 nats
per squaring.)

Layers. The layers of a block are ALiBi + content (``AlibiStack``) or carry any relative
positional bias (``BiasStack``, C7): each layer's kernel A^(t) is formed densely by the
kernel-forming function of its type (``kernels.layer_kernels``: the masked row softmax of
(b(i - j) + d [i = j] + s [j = 0]) / tau, i.e. weights e^{b(g)/tau} normalised per row); from
there on, products, scales and loss bounds are the same for both.

Cost and memory. B and the top row come from the masked-softmax kernels of
numerics/kernels.py and N x N products: O((p + r) (H N^2 + N^3)). Then floor(log2 q)
squarings and popcount(q) vector products. A squaring takes about N^3 / 6 multiply-adds
in BLAS (causal masks: every power is lower triangular; only the lower triangle of each
W panel is formed and only the non-zero blocks are multiplied) plus about N^3 / (6 b)
elementwise operations on W, among them as many exponentials (N^3 / b without a causal
mask): with b = 32 at N = 4096 about 4e8 per squaring, which is most of its time. A vector
product is O(N^2). Memory: three N x N float64 arrays (the mantissas, log M, the product)
and a W panel of N x ``PANEL`` while squaring, whatever T is; building B takes more (the
kernels come from JAX). N = 4096, H = 32 on 2 cores: T = 10^6 in about 33 s and 0.8 GB,
T = 10^9 in about 90 s. Measured again (issue 21, benchmarks/bench_depth.py, the 2 cores shared,
load average 10 to 13): T = 10^6 at N = 4096 took 154 s whole process, 7.3 times the BLAS limit
(squarings N^3 / 3 flops each at the GEMM rate measured in the same run); per W panel (K = 4096,
256 columns, b = 32) forming W (the add, the maximum, the cut, the exponential) costs about four
times its product, so reaching the BLAS limit needs fewer elementwise operations per entry of W,
not faster products.

Threads. The engine sets the BLAS libraries' thread count itself (threadpoolctl) for the duration
of ``compute``: ``Power(threads=k)``, else the environment variable ``POSBIAS_BLAS_THREADS``, else
the number of cores this process may run on (os.sched_getaffinity), so it never oversubscribes
them whatever OPENBLAS_NUM_THREADS says. B is built with BLAS on those threads; the squarings run
BLAS on one thread and share their row blocks (or, with one block, W panels) among that many Python
threads instead. Their products are small (b x K x ``PANEL``): measured at N = 2048, T = 10^6 on the
2 shared cores (load average 8), BLAS on two threads took 145 s, on one 28 s, one BLAS thread under
two Python threads 24 s. Every block and panel is computed as serially, so results do not depend on
the thread count.

Rigorous loss bounds. Every matrix carries, per block-column, a bound on the absolute
error of its entries, and the vector one per entry, from what float64 lost below 2^-1022:
W entries below 2^-1022 / m_l are dropped (m_l the smallest non-zero mantissa of column l
in the block, so that no product in the BLAS call is subnormal, which would make it slow;
columns with mantissas below ``FLOOR`` keep W down to 2^-1022 and may underflow instead),
mantissas below 2^-1022 are flushed, and the errors of the factors propagate (|dX| Y +
(X + |dX|) |dY|, the causal supports exact). A block-column is charged what its products
dropped only when one of its entries lies below that / eps (elsewhere the loss is within
rounding). An entry of p whose bound exceeds 1e-12 of its value is reported unresolved
(log p = -inf); every other entry has a finite log p however far below 1e-308 it lies.
Rounding is relative, as in any float64 product of non-negative numbers (bounded by q N
eps, observed far smaller), and log-scale arithmetic carries the float64 resolution of
log p itself (about 1e-16 of |log p|).

Examples
--------
>>> from posbias.numerics.stack import AlibiStack
>>> from posbias.numerics.periodic import PeriodicStack
>>> s = PeriodicStack.build(AlibiStack.build([0.5], [0.5, 0.125]), 10**9)
>>> prof = Power().profile(s, 8)
>>> round(float(prof.probabilities[0]), 12), bool(prof.extended_range), prof.path
(1.0, True, 'power-scaled')
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from posbias.errors import UserError
from posbias.numerics.bias_stack import BiasStack
from posbias.numerics.engine import Engine, Profile
from posbias.numerics.periodic import PeriodicStack, detect, layer_range
from posbias.numerics.stack import AlibiStack

if TYPE_CHECKING:
    from posbias.numerics.boundary import Stack

MAX_TOKENS = 8192  # three 8192^2 float64 arrays while squaring: 1.5 GiB, more while B is built
TINY = float(np.finfo(np.float64).tiny)  # 2^-1022: below it a float64 entry has no relative accuracy
LOG_TINY = float(np.log(TINY))
EPS = float(np.finfo(np.float64).eps)
RESOLVED = float(np.log(1e-12))  # an entry is resolved when its loss bound is below 1e-12 of it
TRIANGULAR_BASE = 256  # below this size triangular products are plain matmuls
MIN_ROWS = 8  # the smallest block height
SPAN_BUDGET = 300.0  # nats a block may span in a column before squaring (X's and X^2's together: < ~660)
PANEL = 256  # columns of W formed at a time
FLOOR = 2.0**-511  # W is cut at 2^-1022 / m_l only while m_l >= FLOOR (the cut stays below 2^-511)
SMALL_LOSS = RESOLVED - 100.0  # vector rows lost at most this (log, relative) are bounded together
THREADS_ENV = "POSBIAS_BLAS_THREADS"  # overrides the default thread count (the cores this process may use)


def blas_threads(requested: int | None = None) -> int:
    """Threads for the engine: ``requested`` if given, else ``POSBIAS_BLAS_THREADS``, else the number of
    cores this process may run on (os.sched_getaffinity), so that BLAS never oversubscribes them."""
    if requested is None:
        raw = os.environ.get(THREADS_ENV)
        if raw is None:
            return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        try:
            requested = int(raw)
        except ValueError:
            requested = 0
        if requested < 1:
            raise UserError(f"environment variable {THREADS_ENV}={raw!r}: expected a positive integer (threads)")
    if requested < 1:
        raise UserError(f"power engine threads = {requested}: expected a positive integer")
    return requested


@lru_cache(maxsize=1)
def _controller():
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _blas_limit(threads: int):
    """A context in which the BLAS libraries loaded in this process use ``threads`` threads."""
    return _controller().limit(limits=threads, user_api="blas")


@dataclass(frozen=True)
class Scaled:
    """M[i, j] = mant[i, j] exp(scale[i // rows, j]), mant in {0} u [2^-1022, 1] with block-column
    maxima 1 (or an all-zero block-column, scale -inf); |error of M[i, j]| <= exp(err[i // rows, j])
    for every entry of the block-column that the product may make non-zero (i >= j when causal)."""

    mant: np.ndarray
    scale: np.ndarray
    err: np.ndarray
    rows: int


def _starts(n: int, rows: int) -> np.ndarray:
    return np.arange(0, n, rows)


def _block_reduce(a: np.ndarray, rows: int, ufunc: np.ufunc, where=None, **initial) -> np.ndarray:
    """(nb, ...) ``ufunc`` over each block of ``rows`` consecutive rows of ``a`` (the last may be short),
    over the entries where ``where`` holds (a boolean array like a; all when None)."""
    full = a.shape[0] // rows * rows
    shape = (-1, rows) + a.shape[1:]
    mask = (lambda part, sh: True) if where is None else (lambda part, sh: where[part].reshape(sh))
    out = [ufunc.reduce(a[:full].reshape(shape), axis=1, where=mask(slice(None, full), shape), **initial)]
    if full < a.shape[0]:
        tail = a[full:]
        out.append(ufunc.reduce(tail, axis=0, keepdims=True, where=mask(slice(full, None), tail.shape), **initial))
    return np.concatenate(out)


def _divide_blocks(a: np.ndarray, rows: int, values: np.ndarray) -> np.ndarray:
    """a / values[i // rows] row by row: every block of rows divided by its own (N,) values."""
    out = np.empty_like(a)
    for blk, start in enumerate(_starts(a.shape[0], rows)):
        np.divide(a[start:start + rows], values[blk], out=out[start:start + rows])
    return out


def _support(n: int, rows: int, causal: bool) -> np.ndarray:
    """(nb, N) block-columns that may hold non-zero entries: block I reaches column j when causal
    iff j < its last row + 1."""
    ends = np.minimum(_starts(n, rows) + rows, n)
    if not causal:
        return np.ones((ends.size, n), dtype=bool)
    return np.arange(n)[None, :] < ends[:, None]


def _weighted_logsumexp(w: np.ndarray, log_m: np.ndarray) -> np.ndarray:
    """log sum_l exp(w[l] + log_m[l, j]) per column (-inf where nothing contributes); rows w = -inf skipped."""
    rows = np.isfinite(w)
    if not rows.any():
        return np.full(log_m.shape[1], -np.inf)
    x = w[rows, None] + log_m[rows]
    top = np.max(x, axis=0)
    safe = np.where(np.isfinite(top), top, 0.0)
    x -= safe
    np.exp(x, out=x)
    with np.errstate(divide="ignore"):
        return safe + np.log(np.sum(x, axis=0))


def _mass_times_err(mass: np.ndarray, err: np.ndarray, rows: int, causal: bool) -> np.ndarray:
    """log of sum_l exp(mass[r, l]) exp(err[L(l), j]) for a per-block-column bound ``err`` (blocks of
    ``rows``), over the l that column j may use: l >= j when causal. (R, N) for mass (R, N)."""
    n = mass.shape[1]
    out = np.full(mass.shape, -np.inf)
    for blk, a in enumerate(_starts(n, rows)):
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


def scaled(matrix: np.ndarray, abs_err: float, *, causal: bool, rows: int) -> Scaled:
    """The scaled form (blocks of ``rows``) of a non-negative float64 matrix whose entries below
    1e-290 are exact to ``abs_err`` absolutely (the others to float64 relative accuracy); mantissas
    below 2^-1022 are flushed (losing less than 2^-1022 e^{scale} each)."""
    n = matrix.shape[0]
    top = _block_reduce(matrix, rows, np.maximum)
    ok = top > 0
    with np.errstate(divide="ignore"):
        scale = np.where(ok, np.log(np.where(ok, top, 1.0)), -np.inf)
    mant = _divide_blocks(matrix, rows, np.where(ok, top, 1.0))
    near = (matrix < 1e-290) | (mant < TINY)
    mant[mant < TINY] = 0.0
    if causal:
        near &= np.tri(n, dtype=bool)
    touched = _block_reduce(near, rows, np.logical_or)
    err = np.where(touched, np.logaddexp(np.log(abs_err), scale + LOG_TINY), -np.inf)
    return Scaled(mant, scale, err, rows)


def log_entries(m: Scaled) -> np.ndarray:
    """log M (N x N, -inf at zeros)."""
    with np.errstate(divide="ignore"):
        out = np.log(m.mant)
    for blk, a in enumerate(_starts(out.shape[0], m.rows)):
        out[a:a + m.rows] += m.scale[blk]
    return out


def block_rows(log_m: np.ndarray) -> int:
    """The largest power-of-two block height (>= ``MIN_ROWS``; one block per column once it covers N)
    whose blocks span at most ``SPAN_BUDGET`` nats in every column (non-zero entries)."""
    n = log_m.shape[0]
    hi = _block_reduce(log_m, MIN_ROWS, np.maximum)
    lo = _block_reduce(log_m, MIN_ROWS, np.minimum, where=log_m > -np.inf, initial=np.inf)
    rows = MIN_ROWS
    while rows < n:
        hi, lo = (_block_reduce(x, 2, f) if x.shape[0] > 1 else x for x, f in ((hi, np.maximum), (lo, np.minimum)))
        if np.max(np.where(hi > lo, hi - lo, 0.0)) > SPAN_BUDGET:
            break
        rows *= 2
    return rows


def reblock(m: Scaled, rows: int, *, causal: bool) -> Scaled:
    """The same matrix with blocks of ``rows`` (a power-of-two multiple or divisor of m.rows).
    Splitting is exact up to rounding (mantissas only grow); merging may flush mantissas below
    2^-1022, each losing less than 2^-1022 e^{scale} (charged to its block-column)."""
    n = m.mant.shape[0]
    if rows == m.rows:
        return m
    if rows < m.rows:  # split: each sub-block normalised to its own maxima
        parent = _starts(n, rows) // m.rows
        top = _block_reduce(m.mant, rows, np.maximum)
        ok = top > 0
        mant = _divide_blocks(m.mant, rows, np.where(ok, top, 1.0))
        with np.errstate(divide="ignore"):
            scale = np.where(ok, m.scale[parent] + np.log(np.where(ok, top, 1.0)), -np.inf)
        err = np.where(_support(n, rows, causal), m.err[parent], -np.inf)
        return Scaled(mant, scale, err, rows)
    group = rows // m.rows  # merge: old blocks rescaled to the largest scale among them
    scale = _block_reduce(m.scale, group, np.maximum)
    parent = np.arange(m.scale.shape[0]) // group
    with np.errstate(invalid="ignore"):
        factor = np.where(np.isfinite(m.scale), np.exp(m.scale - scale[parent]), 0.0)
    mant = m.mant.copy()
    for blk, a in enumerate(_starts(n, m.rows)):
        mant[a:a + m.rows] *= factor[blk]
    flushed = (mant < TINY) & (m.mant > 0)
    mant[mant < TINY] = 0.0
    err = _block_reduce(m.err, group, np.maximum)
    charged = _block_reduce(flushed, rows, np.logical_or)
    err = np.where(charged, np.logaddexp(err, LOG_TINY + scale), err)
    return Scaled(mant, scale, err, rows)


def _panel_product(x_rows: np.ndarray, w: np.ndarray, skip: int, causal: bool) -> np.ndarray:
    """x_rows @ w, where under a causal mask x_rows = M~[r0:c, l0:c] with M~[i, l] = 0 for l > i and
    ``skip`` = r0 - l0 >= 0: its columns from ``skip`` on form a lower-triangular square, multiplied by
    triangular recursion (``_lower``) when large."""
    if not causal or x_rows.shape[0] <= TRIANGULAR_BASE:
        return np.ascontiguousarray(x_rows) @ w
    out = _lower(x_rows[:, skip:], w[skip:], True, False, TRIANGULAR_BASE)
    if skip:
        out += x_rows[:, :skip] @ w[:skip]
    return out


def multiply(x: Scaled, y: Scaled, log_y: np.ndarray, *, causal: bool,
             pool: ThreadPoolExecutor | None = None) -> Scaled:
    """x · y in x's blocks, with its loss bound; ``log_y`` = log of y's entries (``log_entries``).
    With a ``pool``, its threads take one row block at a time (or, with one block, one W panel at a
    time): every block and panel is computed exactly as serially, so the result is the same; NumPy and
    BLAS release the GIL. Call it with BLAS on one thread: these products are small (b x K x ``PANEL``)
    and BLAS's own threads, spinning on a busy machine, made a squaring several times slower."""
    n, rows = log_y.shape[0], x.rows
    nb = len(_starts(n, rows))
    out = Scaled(np.zeros((n, n)), np.full((nb, n), -np.inf), np.full((nb, n), -np.inf), rows)
    lost_x = np.full((nb, n), -np.inf)  # sum_l |dX_il| Y_lj
    if pool is not None and nb > 1:  # the largest blocks (the last, under a causal mask) first, for balance
        list(pool.map(lambda blk: _row_block(x, log_y, blk, causal, out, lost_x), range(nb)[::-1]))
    else:
        for blk in range(nb):
            _row_block(x, log_y, blk, causal, out, lost_x, pool)
    lost_y = _mass_times_err(np.logaddexp(x.scale, x.err), y.err, y.rows, causal)  # (X + |dX|) |dY|
    err = np.logaddexp(np.logaddexp(lost_x, lost_y), out.err)
    err[~_support(n, rows, causal)] = -np.inf
    return Scaled(out.mant, out.scale, err, rows)


def _row_block(x: Scaled, log_y: np.ndarray, blk: int, causal: bool, out: Scaled, lost_x: np.ndarray,
               pool: ThreadPoolExecutor | None = None) -> None:
    """Row block ``blk`` of x · y into ``out`` (mantissas, scales, and in ``out.err`` what the products
    dropped below 2^-1022) and sum_l |dX_il| Y_lj into ``lost_x``; its W panels on ``pool`` if given."""
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
        w = log_y[l0:lim, j0:j1] + s[l0:lim, None]
        g = np.max(w, axis=0)
        w -= np.where(np.isfinite(g), g, 0.0)
        w[w < keep_from[l0:lim, None]] = -np.inf
        np.exp(w, out=w)
        prod[r0 - a:, j0:j1] = _panel_product(x.mant[r0:c, l0:lim], w, r0 - l0, causal)
        shift[j0:j1] = g

    if pool is None:
        for j0 in range(0, lim, PANEL):
            panel(j0)
    else:  # the largest panels (the first, under a causal mask) first
        list(pool.map(panel, range(0, lim, PANEL)))
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


def vector_times(logv: np.ndarray, errv: np.ndarray, m: Scaled, log_m: np.ndarray, *, causal: bool):
    """(log(v M), loss bound) for a row vector v = exp(logv) with per-entry loss bounds exp(errv)."""
    n = logv.shape[0]
    logw = _weighted_logsumexp(logv, log_m)
    lost_v = _lost_times(logv, errv, log_m, logw)
    lost_m = _mass_times_err(np.logaddexp(logv, errv)[None, :], m.err, m.rows, causal)[0]
    rounding = np.log(n) + LOG_TINY + logw  # terms the log-sum-exp drops below 2^-1022 of the largest
    return logw, np.logaddexp.reduce([lost_v, lost_m, rounding], axis=0)


def _lost_times(logv: np.ndarray, errv: np.ndarray, log_m: np.ndarray, logw: np.ndarray) -> np.ndarray:
    """log sum_l exp(errv[l]) M[l, j] (|dv| M), bounded: the rows whose relative loss
    d_l = errv[l] - logv[l] is at most ``SMALL_LOSS`` contribute at most exp(max d_l) (v M)_j = exp(max d_l
    + logw[j]); the other rows are summed exactly."""
    with np.errstate(invalid="ignore"):
        rel = errv - logv
    small = rel <= SMALL_LOSS
    exact = _weighted_logsumexp(np.where(small, -np.inf, errv), log_m)
    return np.logaddexp(exact, rel[small].max() + logw) if small.any() else exact


def tri_matmul(x: np.ndarray, y: np.ndarray, base: int = TRIANGULAR_BASE) -> np.ndarray:
    """x @ y for lower-triangular x, y by 2 x 2 blocks: ``[[A, 0], [C, D]] [[E, 0], [F, G]] =
    [[A E, 0], [C E + D F, D G]]``, recursing on every triangular factor (C E and D F too):
    N^3 / 6 multiply-adds instead of N^3."""
    return _lower(x, y, True, True, base)


def _lower(x: np.ndarray, y: np.ndarray, x_tri: bool, y_tri: bool, base: int) -> np.ndarray:
    """x @ y where x (m x n) and / or y (n x k) are square lower triangular as flagged."""
    n = x.shape[1]
    if n <= base or not (x_tri or y_tri):
        return x @ y
    h = n // 2
    if x_tri and y_tri:
        out = np.zeros((n, n))
        out[:h, :h] = _lower(x[:h, :h], y[:h, :h], True, True, base)
        out[h:, h:] = _lower(x[h:, h:], y[h:, h:], True, True, base)
        out[h:, :h] = _lower(x[h:, :h], y[:h, :h], False, True, base)
        out[h:, :h] += _lower(x[h:, h:], y[h:, :h], True, False, base)
        return out
    if y_tri:  # [F1 F2] [[L11, 0], [L21, L22]] = [F1 L11 + F2 L21, F2 L22]
        out = np.empty((x.shape[0], n))
        out[:, :h] = _lower(x[:, :h], y[:h, :h], False, True, base)
        out[:, :h] += x[:, h:] @ y[h:, :h]
        out[:, h:] = _lower(x[:, h:], y[h:, h:], False, True, base)
        return out
    out = np.empty((n, y.shape[1]))  # [[L11, 0], [L21, L22]] [F1; F2] = [L11 F1; L21 F1 + L22 F2]
    out[:h] = _lower(x[:h, :h], y[:h], True, False, base)
    out[h:] = _lower(x[h:, h:], y[h:], True, False, base)
    out[h:] += x[h:, :h] @ y[:h]
    return out


def block_product(stack: AlibiStack | BiasStack, num_tokens: int, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """(R^(p-1) ... R^(0), self-weights (p, N)) of a stack's layers: kernels by masked softmax of their
    logits (``kernels.layer_kernels``: ALiBi + content, or relative biases, C7), one layer at a time,
    products by BLAS (triangular when causal)."""
    from posbias.numerics.kernels import layer_kernels

    product, diagonals = None, []
    for t in range(stack.num_layers):
        kernel = np.array(layer_kernels(layer_range(stack, t, t + 1), num_tokens)[0], np.float64)  # writable
        diagonals.append(np.diagonal(kernel).copy())
        lam = float(stack.lambdas[t])
        if product is None:  # R^(0) = (1 - lambda) I + lambda A
            kernel *= lam
            kernel[np.diag_indices(num_tokens)] += 1.0 - lam
            product = kernel
        else:  # R^(t) P = (1 - lambda) P + lambda A P
            moved = tri_matmul(kernel, product) if causal else kernel @ product
            del kernel
            moved *= lam
            product *= 1.0 - lam
            product += moved
            del moved
    assert product is not None  # a stack holds at least one layer (its build refuses none)
    return product, np.array(diagonals)


@dataclass(frozen=True)
class Power(Engine):
    """Periodic stacks (ALiBi + content or relative-bias layers; ordinary ALiBi stacks through their
    detected period), any mask, N <= ``max_tokens``."""

    name = "power"
    max_tokens: int = MAX_TOKENS
    threads: int | None = None  # None: POSBIAS_BLAS_THREADS, else the cores this process may use

    def supports(self, stack: Stack, num_tokens: int) -> str | None:
        if not isinstance(stack, (PeriodicStack, AlibiStack)):
            return f"expected a PeriodicStack or an ALiBi + content stack, got {type(stack).__name__}"
        if num_tokens > self.max_tokens:
            return (f"N = {num_tokens} is too large for the dense power route (N x N products, at most "
                    f"{self.max_tokens} tokens)")
        return None

    def needs_jax(self, stack: Stack, dtype) -> bool:
        return True  # the block is built by the dense engine's kernels

    def memory_bytes(self, num_layers: int, num_heads: int, num_tokens: int) -> int:
        """Five N x N float64 arrays at the peak (building B: a kernel, the product and the next one;
        squaring: the mantissas, log M, the product and a re-blocked copy) and two W panels per thread
        (``blas_threads``); independent of T: the stack is compact."""
        panels = 2 * PANEL * num_tokens * blas_threads(self.threads)
        return 8 * (5 * num_tokens**2 + panels) + 64 * num_tokens + 64 * num_heads

    def compute(self, stack: Stack, num_tokens: int, *, dtype, progress=None) -> Profile:
        threads = blas_threads(self.threads)
        with _blas_limit(threads):
            return self._compute(stack, num_tokens, threads, progress)

    def _compute(self, stack, num_tokens: int, threads: int, progress) -> Profile:
        """``compute`` with BLAS on ``threads`` threads while B is built, on one while squaring (the
        squarings' ``threads`` share row blocks and panels instead, ``multiply``)."""
        compact = stack if isinstance(stack, PeriodicStack) else detect(stack)
        n, q, p = num_tokens, compact.repeats, compact.period
        causal = compact.causal(n)
        block, diag_block = block_product(compact.block, n, causal)
        mins, lasts = [diag_block.min(axis=1)], [diag_block[:, -1]]
        if compact.top is not None:
            top, diag_top = block_product(compact.top, n, causal)
            r = compact.top.num_layers
            v = top[-1]
            errv = np.where(v < 1e-290, np.log(4.0 * r * n * TINY), -np.inf)
            mins.append(diag_top.min(axis=1))
            lasts.append(diag_top[:, -1])
            del top
        else:
            v, errv = np.zeros(n), np.full(n, -np.inf)
            v[-1] = 1.0
        with np.errstate(divide="ignore"):
            logv = np.log(np.maximum(v, 0.0))
        m = scaled(np.maximum(block, 0.0, out=block), 4.0 * p * n * TINY, causal=causal, rows=MIN_ROWS)
        del block
        squarings, products, done = q.bit_length() - 1, bin(q).count("1"), 0
        total = squarings + products
        heights = []
        bits = q
        with _blas_limit(1), ThreadPoolExecutor(threads) as executor:
            pool = None if threads == 1 else executor
            while bits:
                log_m = log_entries(m)
                if bits & 1:
                    logv, errv = vector_times(logv, errv, m, log_m, causal=causal)
                    done += 1
                bits >>= 1
                if bits:
                    rows = block_rows(log_m)
                    m = reblock(m, rows, causal=causal)  # the same entries: log_m holds for it too
                    heights.append(min(rows, n))
                    m = multiply(m, m, log_m, causal=causal, pool=pool)
                    done += 1
                del log_m
                if progress is not None:
                    progress(done, total)
        lost = ~(errv - logv <= RESOLVED)
        logp = np.where(lost, -np.inf, logv)
        blocks = "" if not heights else (f"; blocks of {heights[0]} rows" if min(heights) == max(heights)
                                         else f"; blocks of {min(heights)} to {max(heights)} rows")
        note = (f"power: B = R^({p - 1})...R^(0) ({p} layer{'s' if p > 1 else ''}) to the power q = {q} by "
                f"{squarings} squarings and {products} vector products ({'triangular' if causal else 'full'} "
                f"N x N), a scale exponent per block of rows and column (extended range{blocks})"
                + (f"; {compact.top.num_layers} top layers first" if compact.top is not None else "")
                + (f"; {int(lost.sum())} entries unresolved" if lost.any() else ""))
        mins, lasts = np.concatenate(mins), np.concatenate(lasts)
        if not isinstance(stack, PeriodicStack):  # an ordinary stack gets its (T,) per-layer arrays back
            mins, lasts = (np.concatenate([np.tile(a[:p], q), a[p:]]) for a in (mins, lasts))
        return Profile(np.exp(logp), logp, mins, lasts, self.name, "power-scaled", notes=(note,))
