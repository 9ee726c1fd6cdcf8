"""Block-scaled matrices: float64 mantissas with a log scale per block of rows and column.

Entries of B^(2^k) (numerics/power.py) span far more than float64's range along a row (the
diagonal's powers, C5(a): prod_t (1 - lambda_t (1 - A_ii)) to the power 2^k) and down a column
too: at N = 4096 and 2^19 layers (H = 32, lambda = 0.5) columns span up to 13,000 nats, blocks of
32 consecutive rows at most 252. So a matrix is kept as M[i, j] = M~[i, j] e^{c[I, j]}: a log
scale c[I, j] per block I of b consecutive rows and column j, float64 mantissas M~ whose
block-column maxima are 1, and per block-column a bound on the absolute error of its entries
(what float64 lost below 2^-1022; ``Scaled``).

The block height b is chosen before each squaring from the matrix at hand (``block_rows``): the
largest power of two (at least ``MIN_ROWS``) whose blocks span at most ``SPAN_BUDGET`` nats in
every column, so that a block of X and the same block of X^2 together stay inside float64's
range. ``reblock`` moves a matrix to another height: splitting is exact up to rounding, merging
may flush mantissas below 2^-1022 (each losing less than 2^-1022 e^{scale}, charged to its
block-column). The products of such matrices are in numerics/scaled_product.py.

Examples
--------
>>> import numpy as np
>>> m = scaled(np.tril(np.full((4, 4), 0.5)), 1e-300, causal=True, rows=2)
>>> m.scale.shape, float(np.exp(m.scale[1, 0]))
((2, 4), 0.5)
>>> bool(np.allclose(np.exp(log_entries(m)), np.tril(np.full((4, 4), 0.5))))
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np

TINY = float(np.finfo(np.float64).tiny)  # 2^-1022: below it a float64 entry has no relative accuracy
LOG_TINY = float(np.log(TINY))
MIN_ROWS = 8  # the smallest block height
TASK_ROWS = 256  # rows of log M a thread takes at a time (``log_entries``)
TASK_COLUMNS = 512  # columns a thread takes at a time (``block_rows``)
SPAN_BUDGET = 300.0  # nats a block may span in a column before squaring (X's and X^2's together: < ~660)


@dataclass(frozen=True)
class Scaled:
    """M[i, j] = mant[i, j] exp(scale[i // rows, j]), mant in {0} u [2^-1022, 1] with block-column
    maxima 1 (or an all-zero block-column, scale -inf); |error of M[i, j]| <= exp(err[i // rows, j])
    for every entry of the block-column that the product may make non-zero (i >= j when causal)."""

    mant: np.ndarray
    scale: np.ndarray
    err: np.ndarray
    rows: int


def each(pool: Executor | None, task: Callable[[Any], None], items: Sequence[Any]) -> None:
    """``task(item)`` for every item, in order, or on ``pool``'s threads (in the order given: put the
    largest first). The tasks write disjoint parts of their outputs, so the results are the same."""
    if pool is None:
        for item in items:
            task(item)
    else:
        list(pool.map(task, items))


def starts(n: int, rows: int) -> np.ndarray:
    """The first row of each block of ``rows`` consecutive rows of an n-row matrix."""
    return np.arange(0, n, rows)


def block_reduce(
    a: np.ndarray, rows: int, ufunc: np.ufunc, where: np.ndarray | None = None, **initial: Any
) -> np.ndarray:
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
    for blk, start in enumerate(starts(a.shape[0], rows)):
        np.divide(a[start : start + rows], values[blk], out=out[start : start + rows])
    return out


def support(n: int, rows: int, causal: bool) -> np.ndarray:
    """(nb, N) block-columns that may hold non-zero entries: block I reaches column j when causal
    iff j < its last row + 1."""
    ends = np.minimum(starts(n, rows) + rows, n)
    if not causal:
        return np.ones((ends.size, n), dtype=bool)
    return np.arange(n)[None, :] < ends[:, None]


def scaled(matrix: np.ndarray, abs_err: float, *, causal: bool, rows: int) -> Scaled:
    """The scaled form (blocks of ``rows``) of a non-negative float64 matrix whose entries below
    1e-290 are exact to ``abs_err`` absolutely (the others to float64 relative accuracy); mantissas
    below 2^-1022 are flushed (losing less than 2^-1022 e^{scale} each)."""
    n = matrix.shape[0]
    top = block_reduce(matrix, rows, np.maximum)
    ok = top > 0
    with np.errstate(divide="ignore"):
        scale = np.where(ok, np.log(np.where(ok, top, 1.0)), -np.inf)
    mant = _divide_blocks(matrix, rows, np.where(ok, top, 1.0))
    near = (matrix < 1e-290) | (mant < TINY)
    mant[mant < TINY] = 0.0
    if causal:
        near &= np.tri(n, dtype=bool)
    touched = block_reduce(near, rows, np.logical_or)
    err = np.where(touched, np.logaddexp(np.log(abs_err), scale + LOG_TINY), -np.inf)
    return Scaled(mant, scale, err, rows)


def log_entries(m: Scaled, *, causal: bool = False, pool: Executor | None = None) -> np.ndarray:
    """log M (N x N, -inf at zeros). With ``causal`` (M lower triangular, as every causal power is) the
    logarithms are taken only where a row block may be non-zero (columns up to its last row), the
    rest is -inf as it would be. With a ``pool``, its threads take the row blocks (the same values)."""
    n = m.mant.shape[0]
    out = np.full((n, n), -np.inf) if causal else np.empty((n, n))

    def rows(a: int) -> None:  # rows a .. a + TASK_ROWS - 1, within one block
        blk = a // m.rows
        c = min(a + TASK_ROWS, (blk + 1) * m.rows, n)
        lim = min((blk + 1) * m.rows, n) if causal else n  # the block's reach (its last row + 1 when causal)
        with np.errstate(divide="ignore"):
            np.log(m.mant[a:c, :lim], out=out[a:c, :lim])
        out[a:c, :lim] += m.scale[blk, :lim]

    tasks = [a for b in starts(n, m.rows) for a in range(b, min(b + m.rows, n), TASK_ROWS)]
    each(pool, rows, tasks[::-1])  # the widest (causal: the last) first
    return out


def block_rows(log_m: np.ndarray, pool: Executor | None = None) -> int:
    """The largest power-of-two block height (>= ``MIN_ROWS``; one block per column once it covers N)
    whose blocks span at most ``SPAN_BUDGET`` nats in every column (non-zero entries); the first
    reductions on ``pool``'s threads if given, by columns (maxima and minima: the same values)."""
    n = log_m.shape[0]
    hi = np.empty((len(starts(n, MIN_ROWS)), log_m.shape[1]))
    lo = np.empty_like(hi)

    def columns(j0: int) -> None:
        part = log_m[:, j0 : j0 + TASK_COLUMNS]
        hi[:, j0 : j0 + TASK_COLUMNS] = block_reduce(part, MIN_ROWS, np.maximum)
        lo[:, j0 : j0 + TASK_COLUMNS] = block_reduce(part, MIN_ROWS, np.minimum, where=part > -np.inf, initial=np.inf)

    each(pool, columns, range(0, log_m.shape[1], TASK_COLUMNS))
    rows = MIN_ROWS
    while rows < n:
        hi, lo = (block_reduce(x, 2, f) if x.shape[0] > 1 else x for x, f in ((hi, np.maximum), (lo, np.minimum)))
        if np.max(np.where(hi > lo, hi - lo, 0.0)) > SPAN_BUDGET:
            break
        rows *= 2
    return rows


def normalise_rows(m: Scaled, *, causal: bool, pool: Executor | None = None) -> Scaled:
    """M with every row divided by its sum s_i = sum_j M~[i, j] e^{c[I, j]} (rows of zeros left as they
    are), in place. The power engine's matrices are powers of a row-stochastic matrix, whose rows sum
    to 1 exactly; a squaring's rounding moves a row's sum by a few ulps, and the next squaring doubles
    that drift (B^(2^k) off by 2^k ulps: 1e-7 at 2^30 layers). Dividing it out after each squaring
    leaves each power within its own rounding of a stochastic matrix. Each block takes one BLAS
    product for its row sums (terms below 2^-1022 of the block's largest scale do not count: they are
    below the sums' rounding), then its rows are scaled and its column maxima brought back to 1 (the
    scale absorbs the change); mantissas pushed below 2^-1022 are flushed, charged to the block-column
    as in ``reblock``, and the loss bound grows by the largest factor applied. With a ``pool``, its
    threads take the blocks (the same values)."""
    n = m.mant.shape[0]

    def block(blk: int) -> None:
        a = blk * m.rows
        c = min(a + m.rows, n)
        lim = c if causal else n
        s = m.scale[blk, :lim]
        live = np.isfinite(s)
        if not live.any():
            return
        top = s[live].max()
        sums = m.mant[a:c, :lim] @ np.where(live, np.exp(np.where(live, s, 0.0) - top), 0.0)  # e^{-top} s_i
        factor = np.where(sums > 0, np.exp(-top) / np.where(sums > 0, sums, 1.0), 1.0)
        mant = m.mant[a:c, :lim]
        mant *= factor[:, None]
        col_top = mant.max(axis=0)
        ok = col_top > 0
        mant /= np.where(ok, col_top, 1.0)
        with np.errstate(divide="ignore"):
            m.scale[blk, :lim] = np.where(ok, s + np.log(np.where(ok, col_top, 1.0)), -np.inf)
        # a bound on |dM| scales with the entries: by the largest factor any row of the block took
        m.err[blk, :lim] += np.log(factor.max())
        flushed = (mant < TINY) & (mant > 0)
        if flushed.any():
            mant[flushed] = 0.0
            hit = flushed.any(axis=0)
            m.err[blk, :lim] = np.where(
                hit, np.logaddexp(m.err[blk, :lim], LOG_TINY + m.scale[blk, :lim]), m.err[blk, :lim]
            )

    each(pool, block, range(len(starts(n, m.rows)))[::-1])
    return m


def reblock(m: Scaled, rows: int, *, causal: bool) -> Scaled:
    """The same matrix with blocks of ``rows`` (a power-of-two multiple or divisor of m.rows).
    Splitting is exact up to rounding (mantissas only grow); merging may flush mantissas below
    2^-1022, each losing less than 2^-1022 e^{scale} (charged to its block-column)."""
    n = m.mant.shape[0]
    if rows == m.rows:
        return m
    if rows < m.rows:  # split: each sub-block normalised to its own maxima
        parent = starts(n, rows) // m.rows
        top = block_reduce(m.mant, rows, np.maximum)
        ok = top > 0
        mant = _divide_blocks(m.mant, rows, np.where(ok, top, 1.0))
        with np.errstate(divide="ignore"):
            scale = np.where(ok, m.scale[parent] + np.log(np.where(ok, top, 1.0)), -np.inf)
        err = np.where(support(n, rows, causal), m.err[parent], -np.inf)
        return Scaled(mant, scale, err, rows)
    group = rows // m.rows  # merge: old blocks rescaled to the largest scale among them
    scale = block_reduce(m.scale, group, np.maximum)
    parent = np.arange(m.scale.shape[0]) // group
    with np.errstate(invalid="ignore"):
        factor = np.where(np.isfinite(m.scale), np.exp(m.scale - scale[parent]), 0.0)
    mant = m.mant.copy()
    for blk, a in enumerate(starts(n, m.rows)):
        mant[a : a + m.rows] *= factor[blk]
    flushed = (mant < TINY) & (m.mant > 0)
    mant[mant < TINY] = 0.0
    err = block_reduce(m.err, group, np.maximum)
    charged = block_reduce(flushed, rows, np.logical_or)
    err = np.where(charged, np.logaddexp(err, LOG_TINY + scale), err)
    return Scaled(mant, scale, err, rows)
