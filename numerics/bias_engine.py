"""The bias engine: exact profiles of stacks with any relative positional bias (``BiasStack``, C7).

The walk vector runs top-down, v <- (1 - lambda_t) v + lambda_t v A^(t), each layer without
forming A^(t): every row of every head is normalised by the head's cumulative weights W
(C7(a)), and v A is a Toeplitz correlation of the row-scaled v with the head's weights
(numerics/_bias_scan.py states the formulas). O(T H N^2) work (O(T H N L) with a window of
L tokens), O(H N) memory. Two paths, same mathematics:

* ``native`` (CPU, float64): the C kernel numerics/native/bias_layer.c, heads split across
  threads, each thread accumulating into its own (N,) buffer;
* ``xla``: a jit-compiled layer scan with blocked Toeplitz matmuls (GPU/TPU, or where no C
  compiler exists).

Both compute in linear float64 with one shift per head (its largest logit): terms below
2^-1022 of that scale are lost, so a row whose own largest logit lies D nats below its
head's largest keeps weights down to e^-D of the row. Stacks with D > ``MAX_DEFICIT`` = 600
(a bias rising with distance by more than 600 nats, or a sink / diagonal 600 nats above
the rest) are refused with one line naming the layer; otherwise ``Profile.resolution``
states the absolute error bound T (e^D + N) N 2^-1022 relative to max p (about 1e-300 for
ordinary biases). Float64 only.

``extended=True`` (path ``native-extended``, or ``xla-extended`` below): the same recursion in log
space, log v <- logaddexp(log(1 - lambda) + log v, log lambda + log(vA)), each log (vA)_j a
log-sum-exp over i of log u_i + l(i - j) and each log Z_i a running log-sum-exp of the row's
logits (numerics/native/bias_layer.c). No deficit limit and no underflow: the Profile
carries log p, finite on every entry the mask reaches, each with absolute error
O(T eps (N + |log p|)) (the relative error of p: every layer rounds log values of size
|log p|; 1.5e-11 measured at T = 300, log p = -923), and its ``resolution`` is 0. It costs
O(T H N^2) exponentials (four-lane polynomial exp in the kernel), 12 to 14 times the linear
mode (measured: T = 4, H = 8, N = 512 and 2048, one thread), so ``auto`` runs the linear mode
first and this only for stacks that it refuses or leaves unresolved. Without the native kernel
(a GPU, no C compiler) the same log-space recursion runs in XLA (numerics/_bias_log_scan.py,
path ``xla-extended``), each head's (N, N) log-kernel formed in turn: O(N^2) memory per head
(checked against the memory budget), the same accuracy.

Examples
--------
>>> from posbias.numerics.bias import Bias, KerpleLog
>>> from posbias.numerics.bias_stack import BiasStack
>>> stack = BiasStack.build([1.0], Bias(KerpleLog(0.0, 1.0)))  # r1 = 0: uniform causal attention
>>> [round(x, 12) for x in BiasEngine(native=False).profile(stack, 4).probabilities.tolist()]
[0.25, 0.25, 0.25, 0.25]
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from posbias.numerics.bias_stack import BiasStack
from posbias.numerics.engine import Engine, Profile, Unsupported, linear_profile, log_profile
from posbias.numerics.masks import structured_refuses

if TYPE_CHECKING:
    from posbias.numerics.boundary import Stack

MAX_DEFICIT = 600.0
TINY = float(np.finfo(np.float64).tiny)


@dataclass(frozen=True)
class BiasEngine(Engine):
    """native: use the C kernel where it runs (CPU, float64); threads: native path, worker
    threads (default: all cores, at most one per head); chunk: XLA path, block length C;
    extended: the log-space mode (extended range): the C kernel's, or XLA's without it."""

    name = "bias"
    native: bool = True
    threads: int | None = None
    chunk: int | None = None
    extended: bool = False

    def supports(self, stack: Stack, num_tokens: int) -> str | None:
        if not isinstance(stack, BiasStack):
            return f"expected a relative-bias stack (BiasStack), got {type(stack).__name__}"
        reason = structured_refuses(stack.mask)
        if reason is not None:
            return reason
        if self.chunk is not None and not (isinstance(self.chunk, int) and self.chunk >= 1):
            return f"chunk must be a positive integer, got {self.chunk!r}"
        return None

    def uses_native(self, dtype) -> bool:
        from posbias.numerics import native_bias
        from posbias.numerics.structured import cpu_backend

        return self.native and np.dtype(dtype) == np.float64 and cpu_backend() and native_bias.available()

    def needs_jax(self, stack: Stack, dtype) -> bool:
        return not self.uses_native(dtype)

    def memory_bytes(self, num_layers: int, num_heads: int, num_tokens: int) -> int:
        params = 8 * 8 * num_layers * num_heads
        tables = 8 * 2 * num_heads * num_tokens  # one distinct bias per head; ``compute`` checks the actual count
        if self.uses_native(np.float64):
            threads = self.threads or os.cpu_count() or 2
            return 8 * num_tokens * (10 * threads + 4) + tables + params
        if self.extended:  # XLA log space: a head's (N, N) logits, log-kernel and the two sums' temporaries
            return 8 * 4 * num_tokens * num_tokens + tables + params
        c = min(128, 1 << max(0, (num_tokens - 1).bit_length())) if self.chunk is None else self.chunk
        return 8 * num_heads * (12 * (num_tokens + 2 * c) + 3 * c * c) + tables + params

    def compute(self, stack: BiasStack, num_tokens: int, *, dtype, progress=None) -> Profile:
        if np.dtype(dtype) != np.float64:
            raise Unsupported(
                f"{self.name} engine: computes in float64 only (its range bound and resolution are "
                f"float64's), not {np.dtype(dtype).name}"
            )
        from posbias.numerics import budget

        reason = budget.check(
            f"the logit tables of {len(stack.biases)} distinct biases at N = {num_tokens}",
            8 * 2 * len(stack.biases) * num_tokens,
        )
        if reason is not None:
            raise Unsupported(f"{self.name} engine: {reason}")
        past, future = stack.tables(num_tokens)
        tau = stack.temperature
        layers = (stack.lambdas, stack.bias_index, stack.diagonal / tau, stack.sink / tau, stack.head_weights)
        if self.extended and self.uses_native(dtype):
            from posbias.numerics import native_bias

            logv, mins, lasts, _ = native_bias.profile(
                layers,
                past,
                future,
                num_tokens=num_tokens,
                mask=stack.mask,
                threads=self.threads,
                progress=progress,
                extended=True,
            )
            return log_profile(logv, mins, lasts, engine=self.name, path="native-extended")
        if self.extended:
            reason = budget.check(
                f"the XLA log-space kernels of one head at N = {num_tokens}", 8 * 4 * num_tokens * num_tokens
            )
            if reason is not None:
                raise Unsupported(f"{self.name} engine: {reason}")
            logv, mins, lasts = self._xla_log(layers, past, future, num_tokens, stack.mask, progress)
            return log_profile(logv, mins, lasts, engine=self.name, path="xla-extended")
        if self.uses_native(dtype):
            from posbias.numerics import native_bias

            v, mins, lasts, deficits = native_bias.profile(
                layers, past, future, num_tokens=num_tokens, mask=stack.mask, threads=self.threads, progress=progress
            )
            path = "native"
        else:
            v, mins, lasts, deficits = self._xla(layers, past, future, num_tokens, stack.mask, dtype, progress)
            path = "xla"
        worst = int(np.argmax(deficits))
        if not deficits[worst] <= MAX_DEFICIT:
            raise Unsupported(
                f"{self.name} engine: layer {worst} has a row whose largest logit lies "
                f"{deficits[worst]:.4g} nats below its head's largest (beyond {MAX_DEFICIT:g}: "
                "outside float64's range in linear arithmetic; the dense engine computes it)"
            )
        resolution = stack.num_layers * (math.exp(float(deficits[worst])) + num_tokens) * num_tokens * TINY
        return linear_profile(v, mins, lasts, engine=self.name, path=path, resolution=resolution)

    def _xla_log(self, layers, past, future, num_tokens, mask, progress):
        """The log-space recursion in XLA (numerics/_bias_log_scan.py), in ~20 chunks of layers with progress."""
        import jax.numpy as jnp

        from posbias.numerics import _bias_log_scan as scan

        n = int(num_tokens)
        window = mask.past_window
        reach = n - 1 if window is None else min(n - 1, int(window) - 1)
        k = mask.bidirectional_length(n)
        logv = np.full(n, -np.inf)
        logv[-1] = 0.0
        logv = jnp.asarray(logv, jnp.float64)
        tables = jnp.asarray(past, jnp.float64), jnp.asarray(future, jnp.float64)
        t_total = layers[0].shape[0]
        step = t_total if progress is None else max(1, -(-t_total // 20))
        mins, lasts = [], []
        top = t_total
        while top > 0:
            low = max(0, top - step)
            part = tuple(jnp.asarray(a[low:top]) for a in layers)
            logv, (mn, last) = scan.run(logv, part, *tables, n, reach, k if k > 1 else 0)
            mins.insert(0, np.asarray(mn))
            lasts.insert(0, np.asarray(last))
            top = low
            if progress is not None:
                progress(t_total - low, t_total)
        return np.asarray(logv, np.float64), np.concatenate(mins), np.concatenate(lasts)

    def _xla(self, layers, past, future, num_tokens, mask, dtype, progress):
        import jax.numpy as jnp

        from posbias.numerics import _bias_scan as scan

        geo = scan.geometry(num_tokens, mask, self.chunk)
        v = np.zeros(geo.padded)
        v[num_tokens - 1] = 1.0
        v = jnp.asarray(v, dtype)
        t_total = layers[0].shape[0]
        step = t_total if progress is None else max(1, -(-t_total // 20))
        tables = jnp.asarray(past, dtype), jnp.asarray(future, dtype)
        mins, lasts, deficits = [], [], []
        top = t_total
        while top > 0:
            low = max(0, top - step)
            part = tuple(jnp.asarray(a[low:top]) for a in layers)
            v, (mn, last, deficit) = scan.run(v, part, *tables, geo)
            mins.insert(0, np.asarray(mn))
            lasts.insert(0, np.asarray(last))
            deficits.insert(0, np.asarray(deficit))
            top = low
            if progress is not None:
                progress(t_total - low, t_total)
        return (
            np.asarray(v, np.float64)[:num_tokens],
            np.concatenate(mins),
            np.concatenate(lasts),
            np.concatenate(deficits),
        )
