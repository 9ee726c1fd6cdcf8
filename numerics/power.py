"""The power engine: profiles of periodic stacks at any depth by exponentiation by squaring.

THEORY.md, Notation. For a stack whose layers repeat with period p (``PeriodicStack``:
T = q p + r, block product B = R^(p-1) ... R^(0), top layers R_top on the r remaining
layers),

    p = e_{N-1}^T R_top^(r-1) ... R_top^(0) · B^q,

and B^q is never formed: with q = sum_k b_k 2^k, v <- v · B^(2^k) for every set bit and
B^(2^(k+1)) = (B^(2^k))^2 (powers of one matrix commute, so the order of the bit products
does not matter; the block and the top are kept in their layer order).

Method and cost. B and the top row come from the masked-softmax kernels of
numerics/kernels.py and N x N products: O((p + r) (H N^2 + N^3)). Then floor(log2 q)
squarings and popcount(q) vector products: O(N^3 log q) time, about 6 N x N float64
arrays of memory. Under a causal mask every power is lower triangular and each square
is computed by 2 x 2 block recursion (zero blocks are never multiplied, triangular factors
recurse): about N^3 / 6 multiply-adds instead of N^3.

Extended range. Entries of B^(2^k) span far more than float64's range (the diagonal is
prod_t (1 - lambda_t (1 - A_ii)) to the power 2^k, C5(a)). Each matrix is kept as
M = M~ diag(e^c): a float64 mantissa matrix whose columns have maximum 1 and a log scale
c_j per column. A product X Y scales Y's rows by e^{c^X_l} in log space, factors the
column maxima g_j out, and multiplies the mantissas with BLAS:
X Y = M~^X exp(c^X + log M~^Y - g) diag(e^{g + c^Y}). The row vector is kept in log
space (log-sum-exp products, O(N^2) per product). Every matrix and the vector carry a
rigorous per-column bound on the absolute error from entries lost below 2^-1022 (the
mantissas' underflow, the terms dropped by the scaling, and what earlier products
passed on, with structural zeros of causal kernels exact); an entry of p whose bound
exceeds 1e-12 of its value is reported unresolved (log p = -inf), every other entry
has a finite log p however far below 1e-308 it lies. Rounding is relative, as in any
float64 product of non-negative numbers (bounded by q N eps, observed far smaller).

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

from dataclasses import dataclass

import numpy as np

from posbias.numerics.engine import Engine, Profile
from posbias.numerics.periodic import PeriodicStack, detect
from posbias.numerics.stack import AlibiStack

MAX_TOKENS = 8192  # 6 matrices of 8192^2 float64: 3 GiB
TINY = float(np.finfo(np.float64).tiny)  # 2^-1022: below it a float64 entry has no relative accuracy
LOG_TINY = float(np.log(TINY))
SUSPECT = TINY / float(np.finfo(np.float64).eps)  # x N: entries above it lose at most eps to underflow
RESOLVED = float(np.log(1e-12))  # an entry is resolved when its loss bound is below 1e-12 of it
TRIANGULAR_BASE = 256  # below this size triangular products are plain matmuls


@dataclass(frozen=True)
class Scaled:
    """M = mant · diag(exp(scale)); |error of M[i, j]| <= exp(err[j]) for every i (from lost entries)."""

    mant: np.ndarray
    scale: np.ndarray
    err: np.ndarray


def _weighted_logsumexp(w: np.ndarray, log_m: np.ndarray) -> np.ndarray:
    """log sum_l exp(w[l] + log_m[l, j]) per column (-inf where nothing contributes); skipped rows w = -inf."""
    rows = np.isfinite(w)
    if not rows.any():
        return np.full(log_m.shape[1], -np.inf)
    return _logsumexp_cols(w[rows, None] + log_m[rows])


def _logsumexp_cols(x: np.ndarray) -> np.ndarray:
    """log sum_l exp(x[l, j]) per column, -inf for an all -inf column."""
    top = np.max(x, axis=0)
    safe = np.where(np.isfinite(top), top, 0.0)
    return safe + np.log(np.sum(np.exp(x - safe), axis=0))


def _tail_logsumexp(x: np.ndarray) -> np.ndarray:
    """t[j] = log sum_{l >= j} exp(x[l])."""
    return np.logaddexp.accumulate(x[::-1])[::-1]


def _support_sums(x: np.ndarray, causal: bool) -> np.ndarray:
    """log of sum over the rows l that column j of a kernel product may use: l >= j when causal, all l otherwise."""
    return _tail_logsumexp(x) if causal else np.full(x.shape, np.logaddexp.reduce(x))


def _suspect(mant: np.ndarray, causal: bool) -> np.ndarray:
    """(N,) columns holding an entry below ``SUSPECT`` where the product may be non-zero (lower triangle
    when causal): only such entries can have lost more than float64 rounding (to underflow of the
    mantissa or to terms scaled below 2^-1022, at most (N + 1) 2^-1022 of the column scale)."""
    low = mant < SUSPECT * mant.shape[0]
    if causal:
        low &= np.tri(mant.shape[0], dtype=bool)
    return np.any(low, axis=0)


def scaled(matrix: np.ndarray, abs_err: float, *, causal: bool) -> Scaled:
    """The scaled form of a non-negative float64 matrix whose entries below 1e-290 are exact to ``abs_err``
    absolutely (the others to float64 relative accuracy); columns without such entries carry no loss."""
    top = matrix.max(axis=0)
    ok = top > 0
    with np.errstate(divide="ignore"):
        scale = np.where(ok, np.log(np.where(ok, top, 1.0)), -np.inf)
    mant = matrix / np.where(ok, top, 1.0)
    near = matrix < 1e-290
    if causal:
        near &= np.tri(matrix.shape[0], dtype=bool)
    err = np.where(np.any(near, axis=0), np.logaddexp(np.log(abs_err), scale + LOG_TINY), -np.inf)
    return Scaled(mant, scale, err)


def tri_matmul(x: np.ndarray, y: np.ndarray, base: int = TRIANGULAR_BASE) -> np.ndarray:
    """x @ y for lower-triangular x, y by 2 x 2 blocks: [[A, 0], [C, D]] [[E, 0], [F, G]] =
    [[A E, 0], [C E + D F, D G]], recursing on every triangular factor (C E and D F too):
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


def multiply(x: Scaled, y: Scaled, log_y: np.ndarray, *, causal: bool) -> Scaled:
    """x · y in scaled form with its loss bound; ``log_y`` = log(y.mant) (shared with the vector product)."""
    n = log_y.shape[0]
    g_full = x.scale[:, None] + log_y  # log of diag(e^{c^x}) y~
    g = np.max(g_full, axis=0)
    g_safe = np.where(np.isfinite(g), g, 0.0)
    np.subtract(g_full, g_safe, out=g_full)
    np.exp(g_full, out=g_full)
    prod = tri_matmul(x.mant, g_full) if causal else x.mant @ g_full
    del g_full
    top = prod.max(axis=0)
    ok = top > 0
    mant = prod / np.where(ok, top, 1.0)
    del prod
    scale = np.where(ok & np.isfinite(g), g_safe + y.scale + np.log(np.where(ok, top, 1.0)), -np.inf)
    # Loss bound (absolute, per column j), each term an upper bound and charged only where
    # something fell below 2^-1022 (earlier, or in this product):
    lost_x = _weighted_logsumexp(x.err, log_y) + y.scale            # sum_l |dX_il| Y_lj
    x_mass = _support_sums(np.logaddexp(x.scale, x.err), causal)           # sum_{l in supp j} (X_il + |dX_il|)
    lost_y = x_mass + y.err                                                # sum_l (X_il + |dX_il|) |dY_lj|
    # terms scaled below 2^-1022 (each <= 2^-1022 of the scale) and mantissas below 2^-1022 matter only
    # for entries below N 2^-1022 / eps of their column's scale (elsewhere they are within rounding):
    suspect = np.where(_suspect(mant, causal), np.log(n + 1.0) + LOG_TINY + scale, -np.inf)
    err = np.logaddexp.reduce([lost_x, lost_y, suspect], axis=0)
    return Scaled(mant, scale, err)


def vector_times(logv: np.ndarray, errv: np.ndarray, m: Scaled, log_m: np.ndarray, *, causal: bool):
    """(log(v M), loss bound) for a row vector v = exp(logv) with per-entry loss bounds exp(errv)."""
    n = logv.shape[0]
    logw = _weighted_logsumexp(logv, log_m) + m.scale
    lost_v = _weighted_logsumexp(errv, log_m) + m.scale
    lost_m = _support_sums(np.logaddexp(logv, errv), causal) + m.err
    rounding = np.log(n) + LOG_TINY + logw  # terms the log-sum-exp drops below 2^-1022 of the largest
    return logw, np.logaddexp.reduce([lost_v, lost_m, rounding], axis=0)


def block_product(stack: AlibiStack, num_tokens: int, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """(R^(p-1) ... R^(0), self-weights (p, N)) of a stack's layers: kernels by masked softmax
    (numerics/kernels.py), one layer at a time, products by BLAS (triangular when causal)."""
    from posbias.numerics.kernels import alibi_kernels

    product, diagonals = None, []
    for t in range(stack.num_layers):
        layer = AlibiStack(stack.lambdas[t:t + 1], stack.slopes[t:t + 1], stack.diagonal[t:t + 1],
                           stack.head_weights[t:t + 1], stack.temperature, stack.mask)
        kernel = np.array(alibi_kernels(layer, num_tokens)[0], np.float64)  # a writable copy
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
    return product, np.array(diagonals)


@dataclass(frozen=True)
class Power(Engine):
    """Periodic stacks (and ordinary stacks through their detected period), any mask, N <= ``max_tokens``."""

    name = "power"
    max_tokens: int = MAX_TOKENS

    def supports(self, stack, num_tokens: int) -> str | None:
        if not isinstance(stack, (PeriodicStack, AlibiStack)):
            return f"expected a PeriodicStack or an ALiBi + content stack, got {type(stack).__name__}"
        if num_tokens > self.max_tokens:
            return (f"N = {num_tokens} is too large for the dense power route (N x N products, at most "
                    f"{self.max_tokens} tokens)")
        return None

    def needs_jax(self, stack, dtype) -> bool:
        return True  # the block is built by the dense engine's kernels

    def memory_bytes(self, num_layers: int, num_heads: int, num_tokens: int) -> int:
        """Six N x N float64 matrices (block build, mantissas, their logs, the scaled factor, the product);
        independent of T: the stack is compact."""
        return 8 * 6 * num_tokens**2 + 64 * num_tokens + 64 * num_heads

    def compute(self, stack, num_tokens: int, *, dtype, progress=None) -> Profile:
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
        logv = np.log(np.maximum(v, 0.0))
        m = scaled(np.maximum(block, 0.0), 4.0 * p * n * TINY, causal=causal)
        del block
        squarings, products, done = q.bit_length() - 1, bin(q).count("1"), 0
        total = squarings + products
        bits = q
        while bits:
            log_m = np.log(m.mant)
            if bits & 1:
                logv, errv = vector_times(logv, errv, m, log_m, causal=causal)
                done += 1
            bits >>= 1
            if bits:
                m = multiply(m, m, log_m, causal=causal)
                done += 1
            del log_m
            if progress is not None:
                progress(done, total)
        lost = ~(errv - logv <= RESOLVED)
        logp = np.where(lost, -np.inf, logv)
        note = (f"power: B = R^({p - 1})...R^(0) ({p} layer{'s' if p > 1 else ''}) to the power q = {q} by "
                f"{squarings} squarings and {products} vector products ({'triangular' if causal else 'full'} "
                f"N x N), per-column scale exponents (extended range)"
                + (f"; {compact.top.num_layers} top layers first" if compact.top is not None else "")
                + (f"; {int(lost.sum())} entries unresolved" if lost.any() else ""))
        mins, lasts = np.concatenate(mins), np.concatenate(lasts)
        if not isinstance(stack, PeriodicStack):  # an ordinary stack gets its (T,) per-layer arrays back
            mins, lasts = (np.concatenate([np.tile(a[:p], q), a[p:]]) for a in (mins, lasts))
        return Profile(np.exp(logp), logp, mins, lasts, self.name, "power-scaled", notes=(note,))
