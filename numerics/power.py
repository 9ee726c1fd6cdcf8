"""The power engine: profiles of periodic stacks at any depth by exponentiation by squaring.

THEORY.md, Notation. For a stack whose layers repeat with period p (``PeriodicStack``:
T = q p + r, block product B = R^(p-1) ... R^(0), top layers R_top on the r remaining
layers),

    p = e_{N-1}^T R_top^(r-1) ... R_top^(0) · B^q,

and B^q is never formed: with q = sum_k b_k 2^k, v <- v · B^(2^k) for every set bit and
B^(2^(k+1)) = (B^(2^k))^2 (powers of one matrix commute, so the order of the bit products
does not matter; the block and the top are kept in their layer order).

Extended range: each matrix is kept in block-scaled form (numerics/scaled.py: float64 mantissas,
a log scale per block of b consecutive rows and column, b chosen before each squaring) and
multiplied by numerics/scaled_product.py; the row vector is kept in log space. (Blocks as tall
as the matrix while the powers are shallow; at N = 4096 the squarings up to 2^19 layers end
with 64 and 32 rows, those up to 2^29 with 16.)

Layers. The block and the top rows come from numerics/block_product.py: ALiBi + content
(``AlibiStack``) or any relative positional bias (``BiasStack``, C7), each layer's kernel formed
densely; from there on, products, scales and loss bounds are the same for both.

Cost and memory. B and the top row come from the masked-softmax kernels of
numerics/kernels.py and N x N products: O((p + r) (H N^2 + N^3)). Then floor(log2 q)
squarings and popcount(q) vector products. A squaring takes about N^3 / 6 multiply-adds
in BLAS (causal masks: every power is lower triangular; only the lower triangle of each
W panel is formed and only the non-zero blocks are multiplied) plus about N^3 / (6 b)
elementwise operations on W, among them as many exponentials (N^3 / b without a causal
mask): with b = 32 at N = 4096 about 4e8 per squaring, which is most of its time. A vector
product is O(N^2). Memory: three N x N float64 arrays (the mantissas, log M, the product)
and a W panel of N x ``PANEL`` while squaring, whatever T is; building B takes more (the
kernels come from JAX). N = 4096, H = 32 on 2 cores: T = 10^6 in about 20 s and 0.8 GB,
T = 10^9 in about 35 s (2026-12-04, with the C panel kernel; about 30 s and 90 s before it).
Measured again (issue 21, benchmarks/bench_depth.py, the 2 cores shared
with other work, load average 9 to 12): T = 10^6 at N = 4096 took 214 s whole process, T = 10^9 304 s,
both 10.1 times the BLAS limit (squarings N^3 / 3 flops each at the GEMM rate measured beside them,
about 21 GFLOP/s). In process at T = 10^6 (load average 8 to 9): 108 s, the squarings 83 s of it
against their BLAS limit of 12 s (GEMM 35 GFLOP/s then), building B 7 s, the logs, block heights,
re-blocking and vector products 16 s. Per W panel (K = 4096, 256 columns, b = 32) forming W
(the add, the maximum, the cut, the exponential) costs several times its product, so reaching the
BLAS limit needs fewer elementwise operations per entry of W (or larger blocks), not faster products.
Since then the panels are formed by a C kernel (numerics/native_panel.py: two passes instead of six)
and the O(N^2) passes run on the engine's threads; the measured effect, the phases and what remains
are on docs/benchmarks.md (benchmarks/bench_depth.py --with-numpy-panels --phases).

Threads. The engine sets the BLAS libraries' thread count itself (numerics/blas_threads.py) for
the duration of ``compute``: ``Power(threads=k)``, else the environment variable
``POSBIAS_BLAS_THREADS``, else the number of cores this process may run on, so it never
oversubscribes them whatever OPENBLAS_NUM_THREADS says. B is built with BLAS on those threads; the
squarings run BLAS on one thread and share their row blocks (or, with one block, W panels) among
that many Python threads instead. Their products are small (b x K x ``PANEL``): measured at
N = 2048, T = 10^6 on the 2 shared cores (load average 8), BLAS on two threads took 145 s, on one
28 s, one BLAS thread under two Python threads 24 s. Every block and panel is computed as
serially, so results do not depend on the thread count.

Rounding. B and each of its powers are row-stochastic, so after each squaring (and once for B) every
row is divided by its sum (``scaled.normalise_rows``): a squaring squares its factor's relative error,
so without this the rounding of the row sums doubled with every squaring (2^30 layers: entries and
the mass off by about 1e-7, found by an audit, tests/numerics/test_power_drift.py). The rounding
left is that of each product, a few ulps of every entry per squaring (measured: N = 2 at 10^12 layers
within 5e-13 of log p's closed form).

Rigorous loss bounds (numerics/scaled_product.py): every matrix carries, per block-column, a
bound on the absolute error of its entries, and the vector one per entry, from what float64 lost
below 2^-1022. An entry of p whose bound exceeds 1e-12 of its value is reported unresolved
(log p = -inf); every other entry has a finite log p however far below 1e-308 it lies.

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

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import DTypeLike

from posbias.numerics.blas_threads import blas_limit, blas_threads
from posbias.numerics.block_product import block_product
from posbias.numerics.engine import Engine, Profile, Progress
from posbias.numerics.periodic import PeriodicStack, detect
from posbias.numerics.scaled import MIN_ROWS, TINY, block_rows, log_entries, normalise_rows, reblock, scaled
from posbias.numerics.scaled_product import PANEL, RESOLVED, multiply, vector_times
from posbias.numerics.stack import AlibiStack

if TYPE_CHECKING:
    from posbias.numerics.boundary import Stack

MAX_TOKENS = 8192  # three 8192^2 float64 arrays while squaring: 1.5 GiB, more while B is built


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
            return (
                f"N = {num_tokens} is too large for the dense power route (N x N products, at most "
                f"{self.max_tokens} tokens)"
            )
        return None

    def needs_jax(self, stack: Stack, dtype: DTypeLike) -> bool:
        return True  # the block is built by the dense engine's kernels

    def memory_bytes(self, num_layers: int, num_heads: int, num_tokens: int) -> int:
        """Five N x N float64 arrays at the peak (building B: a kernel, the product and the next one;
        squaring: the mantissas, log M, the product and a re-blocked copy) and two W panels per thread
        (``blas_threads``); independent of T: the stack is compact."""
        panels = 2 * PANEL * num_tokens * blas_threads(self.threads)
        return 8 * (5 * num_tokens**2 + panels) + 64 * num_tokens + 64 * num_heads

    def compute(
        self, stack: PeriodicStack | AlibiStack, num_tokens: int, *, dtype: Any, progress: Progress | None = None
    ) -> Profile:
        threads = blas_threads(self.threads)
        with blas_limit(threads):
            return self._compute(stack, num_tokens, threads, progress)

    def _compute(
        self, stack: PeriodicStack | AlibiStack, num_tokens: int, threads: int, progress: Progress | None
    ) -> Profile:
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
        m = normalise_rows(m, causal=causal)  # B is row-stochastic: its rows sum to 1 exactly
        del block
        squarings, products, done = q.bit_length() - 1, bin(q).count("1"), 0
        total = squarings + products
        heights = []
        bits = q
        with blas_limit(1), ThreadPoolExecutor(threads) as executor:
            pool = None if threads == 1 else executor
            while bits:
                log_m = log_entries(m, causal=causal, pool=pool)
                if bits & 1:
                    logv, errv = vector_times(logv, errv, m, log_m, causal=causal, pool=pool)
                    done += 1
                bits >>= 1
                if bits:
                    rows = block_rows(log_m, pool)
                    m = reblock(m, rows, causal=causal)  # the same entries: log_m holds for it too
                    heights.append(min(rows, n))
                    m = normalise_rows(multiply(m, m, log_m, causal=causal, pool=pool), causal=causal, pool=pool)
                    done += 1
                del log_m
                if progress is not None:
                    progress(done, total)
        lost = ~(errv - logv <= RESOLVED)
        logp = np.where(lost, -np.inf, logv)
        blocks = (
            ""
            if not heights
            else (
                f"; blocks of {heights[0]} rows"
                if min(heights) == max(heights)
                else f"; blocks of {min(heights)} to {max(heights)} rows"
            )
        )
        note = (
            f"power: B = R^({p - 1})...R^(0) ({p} layer{'s' if p > 1 else ''}) to the power q = {q} by "
            f"{squarings} squarings and {products} vector products ({'triangular' if causal else 'full'} "
            f"N x N), a scale exponent per block of rows and column (extended range{blocks})"
            + (f"; {compact.top.num_layers} top layers first" if compact.top is not None else "")
            + (f"; {int(lost.sum())} entries unresolved" if lost.any() else "")
        )
        mins, lasts = np.concatenate(mins), np.concatenate(lasts)
        if not isinstance(stack, PeriodicStack):  # an ordinary stack gets its (T,) per-layer arrays back
            mins, lasts = (np.concatenate([np.tile(a[:p], q), a[p:]]) for a in (mins, lasts))
        return Profile(np.exp(logp), logp, mins, lasts, self.name, "power-scaled", notes=(note,))
