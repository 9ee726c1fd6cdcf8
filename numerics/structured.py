"""The structured engine: exact O(T H N) profiles of ALiBi + content stacks, any mask.

The walk starts at token N-1 in the top layer and moves down,
v <- v R^(t) for t = T-1, ..., 0, each layer applied in O(H N) by the geometric-tail
recurrences of numerics/_recurrence.py (their math is stated there), never forming
an N x N matrix. Three paths, same mathematics:

* ``native`` (CPU, float64, linear arithmetic): the C kernel of numerics/native.py,
  heads split across threads; with ``extended=True`` its block-floating-point mode,
  which keeps every entry representable far below 1e-308 (finite log p everywhere),
  entered only where needed: the kernel runs in linear mode while every entry of the
  support stays >= 2^-900 and continues from the last such layer in block floating point
  (``numerics.native.profile``'s ``adaptive``; path "native" when it never switched).
* ``xla``: a jit-compiled ``lax.scan`` over layers; what runs on GPU/TPU and where no C
  compiler exists. Each layer is the chunked formulation of numerics/_chunked.py,
  parallel in positions and heads: one matmul of all chunks and heads with stacked
  Toeplitz blocks of r^{k-q}, an associative scan over the chunk carries, a small
  matmul for the carries (cost and memory stated there). All heads run at once while
  H x N fits ``group_budget`` elements, else in as few groups as fit. Windows of
  w - 1 <= 256 tokens run as two banded matmuls without subtraction (relative
  accuracy); longer windows subtract the part leaving the window, so the error is
  absolute there (``Profile.resolution``); the native kernel avoids the subtraction
  (segment recurrences) and stays relative. ``xla_scan="blocked"`` selects the earlier
  formulation (a sequential scan over head groups, inside it a sequential scan over
  ~sqrt N offsets), kept for comparison.
* ``xla-log`` (``ring="log"``): the XLA path in log space (logaddexp, +): extended
  range without the C kernel; sliding windows are refused (log space cannot subtract).
  It keeps the blocked formulation: a chunk matmul in log space is a log-sum-exp
  contraction, which has no exact matmul form once a chunk spans more than float64's range.

Examples
--------
>>> from posbias.numerics.stack import AlibiStack
>>> stack = AlibiStack.build([1.0], [0.0])  # one uniform causal layer, lambda = 1
>>> Structured(native=False).profile(stack, 4).probabilities.tolist()
[0.25, 0.25, 0.25, 0.25]
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from posbias.numerics import native
from posbias.numerics.engine import Engine, Profile, Unsupported, linear_profile, log_profile
from posbias.numerics.masks import Mask, structured_refuses
from posbias.numerics.stack import AlibiStack

if TYPE_CHECKING:
    from posbias.numerics.batch import AlibiBatch
    from posbias.numerics.boundary import RingName, Stack, XlaScan

RINGS = ("linear", "log")  # the number systems of numerics/semiring.py
XLA_SCANS = ("chunked", "blocked")  # formulations of the XLA path in linear arithmetic

SHARED_NORMALISER_MAX = 1 << 24  # elements (128 MiB in float64)
BLOCKED_BUDGET = 1 << 22  # the blocked formulation holds ~10 (group, P) arrays: at most this many elements per group
LINEAR_MAX_SLOPE = 700.0  # e^{-700} = 1e-304: steeper slopes underflow r in linear arithmetic
NATIVE_CLIP_SAFE_SLOPE = 560.0  # the C kernel clips d >= -600: c exact while e^{m - 600} < 1e-17 (``clip_inexact``)


ACCELERATOR_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin", "jax_rocm7_plugin", "libtpu")


@functools.cache
def accelerator_plugin_installed() -> bool:
    """Whether a JAX accelerator plugin is installed (looked up once per process)."""
    import importlib.util

    return any(importlib.util.find_spec(p) for p in ACCELERATOR_PLUGINS)


def cpu_backend() -> bool:
    """Whether JAX computes on the CPU here, answered without importing JAX when it is not
    imported yet and no accelerator plugin is installed (the native path never needs it)."""
    import sys

    if "jax" not in sys.modules and not accelerator_plugin_installed():
        return True
    import jax

    return jax.default_backend() == "cpu"


def native_refuses(stack: AlibiStack) -> str | None:
    """Why the C kernel would not be exact for this stack (None: it is): it accepts slopes m/tau up
    to 700 and clips the content diagonal to |d/tau| <= 600, which is exact only where
    ``clip_inexact`` says so."""
    slopes, diagonal = stack.scaled()
    if np.max(slopes, initial=0.0) > LINEAR_MAX_SLOPE:
        return f"the native kernel accepts slopes m/tau up to {LINEAR_MAX_SLOPE:g}"
    bad = np.argwhere(clip_inexact(slopes, diagonal, stack.lambdas[:, None]))
    if bad.size:
        t, h = (int(i) for i in bad[0])
        return (
            f"layer {t} head {h}: content d/tau = {diagonal[t, h]:.4g} (slope m/tau = {slopes[t, h]:.4g}, "
            f"lambda = {stack.lambdas[t]:.4g}) beyond the native kernel's clip of |d/tau| to {native.D_CLIP:g}, "
            "where the clip is not exact"
        )
    return None


def clip_inexact(slopes: np.ndarray, diagonal: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """Where (elementwise; ``lambdas`` broadcast against the (..., T, H) slopes and diagonals) the C
    kernel's clip of d/tau to [-600, 600] changes a head by more than 1e-17 relatively. With q = e^{-d}
    and S_i >= e^{-m} the head's row sum off the diagonal (i >= 1; row 0 reads only itself, exactly),
    a row reads itself with alpha_i = 1 / (1 + q S_i) and a neighbour j with c_i e^{-m |i-j|},
    c_i = q alpha_i:

    * d > 600: c_i ~ e^{-d} is replaced by ~ e^{-600}, and every entry fed through the head's
      neighbours changes (by e^{d - 600}): inexact for any lambda > 0;
    * d < -600: c_i = 1 / (1/q + S_i) changes by at most e^{-600} / S_i <= e^{m - 600} relatively,
      below 1e-17 while m < 560; alpha_i <= e^{m - 600} changes by as much absolutely, against a
      self-weight of at least 1 - lambda: exact while lambda e^{m - 600} <= 1e-17 (1 - lambda), i.e.
      m < 560 + log((1 - lambda) / lambda) (never at lambda = 1)."""
    lam = np.broadcast_to(lambdas, diagonal.shape)
    with np.errstate(divide="ignore"):
        margin = np.log1p(-np.minimum(lam, 1.0)) - np.log(lam)  # log((1 - lambda) / lambda), +inf at 0
    safe_slope = NATIVE_CLIP_SAFE_SLOPE + np.minimum(margin, 0.0)
    above = (diagonal > native.D_CLIP) & (lam > 0)
    below = (diagonal < -native.D_CLIP) & (slopes >= safe_slope)
    return above | below


def native_refuses_rows(slopes: np.ndarray, diagonal: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """(B,) bool: ``native_refuses(stack) is not None`` for (B, T, H) scaled slopes and diagonals and
    (B, T) lambdas."""
    steep = slopes.max(axis=(1, 2), initial=0.0) > LINEAR_MAX_SLOPE
    return steep | clip_inexact(slopes, diagonal, lambdas[:, :, None]).any(axis=(1, 2))


@dataclass(frozen=True)
class Structured(Engine):
    """ring: "linear" or "log"; native: use the C kernel where it runs (CPU, float64, linear);
    extended: the C kernel's extended-range mode (requires the native kernel);
    group_budget: XLA path, at most this many (head x position) elements per head group
    (the blocked formulation, log ring included, caps it at ``BLOCKED_BUDGET``);
    threads: native path, worker threads (default: all cores);
    xla_scan: XLA path in linear arithmetic, "chunked" (parallel in positions and heads)
    or "blocked" (the earlier sequential formulation, for comparison);
    chunk: chunked XLA path, the chunk length C (None: the rule of ``_chunked.chunk_size``)."""

    ring: RingName = "linear"
    native: bool = True
    extended: bool = False
    group_budget: int = 1 << 27
    threads: int | None = None
    xla_scan: XlaScan = "chunked"
    chunk: int | None = None

    @property
    def name(self) -> str:
        return "structured" if self.ring == "linear" else "log"

    def supports(self, stack: Stack, num_tokens: int) -> str | None:
        if not isinstance(stack, AlibiStack):
            return f"expected an ALiBi + content stack, got {type(stack).__name__}"
        reason = self.options_refuse(stack.mask)
        if reason is not None:
            return reason
        if self.ring == "linear":
            slopes, _ = stack.scaled()
            if np.max(slopes, initial=0.0) > LINEAR_MAX_SLOPE:
                return (
                    f"slopes m/tau up to {np.max(slopes):.4g}: beyond {LINEAR_MAX_SLOPE:g}, e^(-m) leaves the "
                    "float64 range in linear arithmetic (the log engine handles any slope)"
                )
        if self.extended:
            return native_refuses(stack)
        return None

    def supported(self, stacks: Sequence, num_tokens: int) -> np.ndarray:
        """``supports`` of every stack, vectorised over an ``AlibiBatch`` (the same tests)."""
        from posbias.numerics.batch import AlibiBatch

        batch = AlibiBatch.of(stacks)
        if batch is None:
            return super().supported(stacks, num_tokens)
        return self._supported_scaled(batch.mask, *batch.scaled(), batch.lambdas)

    def _supported_scaled(
        self, mask: Mask, slopes: np.ndarray, diagonal: np.ndarray, lambdas: np.ndarray
    ) -> np.ndarray:
        """``supported`` from the batch's mask, its (B, T, H) scaled slopes and diagonals and (B, T)
        lambdas."""
        if self.options_refuse(mask) is not None:
            return np.zeros(slopes.shape[0], dtype=bool)
        refused = (
            native_refuses_rows(slopes, diagonal, lambdas) if self.extended else np.zeros(slopes.shape[0], dtype=bool)
        )
        if self.ring == "linear":
            refused |= slopes.max(axis=(1, 2), initial=0.0) > LINEAR_MAX_SLOPE
        return ~refused

    def options_refuse(self, mask: Mask) -> str | None:
        """Why this engine's options (or the mask, shared by a batch) rule out every stack, or None."""
        if self.ring not in RINGS:
            return f"unknown number system {self.ring!r}; expected one of {sorted(RINGS)}"
        if self.xla_scan not in XLA_SCANS:
            return f"unknown XLA formulation {self.xla_scan!r}; expected one of {list(XLA_SCANS)}"
        if self.chunk is not None and not (isinstance(self.chunk, int) and self.chunk >= 1):
            return f"chunk must be a positive integer, got {self.chunk!r}"
        if self.ring == "log" and mask.past_window is not None:
            return (
                "sliding-window masks need subtraction, which log-space arithmetic cannot do "
                "(the structured engine's extended-range native mode handles them)"
            )
        if self.extended and not (self.native and native.available()):
            return "extended range needs the native CPU kernel, which is not available here"
        return structured_refuses(mask)

    def memory_bytes(self, num_layers: int, num_heads: int, num_tokens: int) -> int:
        params = 8 * 8 * num_layers * num_heads
        if self.uses_native(np.float64):  # C kernel: a few (N,) buffers per thread (float64 only)
            return 8 * num_tokens * (4 * (self.threads or os.cpu_count() or 2) + 8) + params
        from posbias.numerics import _chunked as ch
        from posbias.numerics import _recurrence as rec

        if self.chunked():
            c = ch.chunk_plan(num_tokens, num_heads, None, self.group_budget, self.chunk)
            # u and one temporary (G, P), the Toeplitz blocks, the shared normalisers when stored
            shared = 8 * num_heads * c.padded if num_heads * c.padded <= SHARED_NORMALISER_MAX else 0
            widest = max(c.chunk, min(ch.BAND_MAX, 1 << int(np.ceil(np.log2(max(num_tokens, 2))))))  # a window's C
            return 8 * (3 * c.group * c.padded + 3 * c.group * widest**2 + 12 * c.padded) + shared + params
        g = rec.plan(num_tokens, num_heads, None, min(self.group_budget, BLOCKED_BUDGET))
        return 8 * 10 * g.group * g.padded + 8 * 8 * g.padded + params

    def chunked(self) -> bool:
        """Whether the XLA path takes the chunked formulation (linear arithmetic only)."""
        return self.ring == "linear" and self.xla_scan == "chunked"

    def uses_native(self, dtype) -> bool:
        """Whether ``compute`` takes the C kernel for this dtype (decided here only)."""
        return (
            self.native
            and self.ring == "linear"
            and np.dtype(dtype) == np.float64
            and cpu_backend()
            and native.available()
        )

    def needs_jax(self, stack: AlibiStack, dtype) -> bool:  # after supports: an AlibiStack
        return not (self.uses_native(dtype) and native_refuses(stack) is None)

    def compute(self, stack: AlibiStack, num_tokens: int, *, dtype, progress=None) -> Profile:
        if self.uses_native(dtype) and native_refuses(stack) is None:
            return self._native(stack, num_tokens, progress)
        if self.extended:
            raise Unsupported(f"{self.name} engine: extended range runs in the native kernel, float64 on the CPU only")
        return self._xla(stack, num_tokens, dtype, progress)

    def _native(self, stack, num_tokens, progress) -> Profile:
        slopes, diagonal = stack.scaled()
        res = native.profile(
            stack.lambdas,
            slopes,
            diagonal,
            stack.head_weights,
            num_tokens=num_tokens,
            past_window=stack.mask.past_window,
            bidirectional_length=stack.mask.bidirectional_length(num_tokens),
            extended=self.extended,
            adaptive=self.extended,
            threads=self.threads,
            progress=progress,
        )
        if res.state.extended:
            return log_profile(
                res.log_probabilities, res.min_self_weight, res.last_self_weight, engine=self.name, path=res.path
            )
        return linear_profile(
            res.probabilities, res.min_self_weight, res.last_self_weight, engine=self.name, path=res.path
        )

    def _xla(self, stack, num_tokens, dtype, progress) -> Profile:
        import jax.numpy as jnp

        from posbias.numerics import _chunked as ch
        from posbias.numerics import _recurrence as rec
        from posbias.numerics.semiring import LOG
        from posbias.numerics.semiring import RINGS as SEMIRINGS

        ring = SEMIRINGS[self.ring]
        if self.chunked():
            moderate = bool(np.all(np.abs(stack.scaled()[1]) <= rec.D_CLIP))
            geometry = ch.chunk_plan(num_tokens, stack.num_heads, stack.mask, self.group_budget, self.chunk, moderate)
        else:
            geometry = rec.plan(num_tokens, stack.num_heads, stack.mask, min(self.group_budget, BLOCKED_BUDGET))
        heads = -(-stack.num_heads // geometry.group) * geometry.group
        t_total = stack.num_layers
        chunk = t_total if progress is None else max(1, t_total // 20)
        t_pad = -(-t_total // chunk) * chunk
        slopes, diagonal = stack.scaled()

        def arr(x):
            x = np.pad(x, ((t_pad - t_total, 0), (0, heads - x.shape[1])))
            return jnp.asarray(x, dtype=dtype)

        # Identity layers go *below* layer 0 (applied last, lambda = 0): they change nothing.
        layers = rec.LayerParams(
            jnp.asarray(np.pad(stack.lambdas, (t_pad - t_total, 0)), dtype),
            arr(slopes),
            arr(diagonal),
            arr(stack.head_weights),
        )
        shared = None
        if np.all(slopes == slopes[:1]) and heads * geometry.padded <= SHARED_NORMALISER_MAX:
            if self.chunked():
                shared = ch.chunked_normaliser(layers.slopes[-1], plan=geometry)
            else:
                shared = rec.shared_normaliser(layers.slopes[-1], geometry=geometry)
        v = np.zeros(geometry.padded)
        v[num_tokens - 1] = 1.0
        v = ring.from_linear(jnp.asarray(v, dtype=dtype))
        mins, lasts = [], []
        done = 0
        for start in range(t_pad - chunk, -1, -chunk):
            part = rec.LayerParams(*(a[start : start + chunk] for a in layers))
            if self.chunked():
                v, (mn, last) = ch.chunked_layers_scan(v, part, shared, plan=geometry)
            else:
                v, (mn, last) = rec.layers_scan(v, part, shared, ring=ring, geometry=geometry)
            mins.append(np.asarray(mn))
            lasts.append(np.asarray(last))
            done = min(t_total, done + chunk)
            if progress is not None:
                progress(done, t_total)
        mins = np.concatenate(mins[::-1])[t_pad - t_total :]
        lasts = np.concatenate(lasts[::-1])[t_pad - t_total :]
        v = np.asarray(v, dtype=np.float64)[:num_tokens]
        if ring is LOG:
            return log_profile(v, mins, lasts, engine=self.name, path="xla-log")
        # Sliding windows subtract r^w u_{j+w}: the error is then absolute (~eps of the
        # largest entries), so tiny entries are not resolved on this path.
        # The chunked path's banded windows (w - 1 <= C) subtract nothing: relative accuracy.
        subtracts = stack.mask.past_window is not None and not (self.chunked() and geometry.band)
        resolution = 16.0 * float(np.finfo(np.float64).eps) * (t_total + 1) if subtracts else 0.0
        return linear_profile(v, mins, lasts, engine=self.name, path="xla", resolution=resolution)

    def batched(
        self, stacks: Sequence, num_tokens: int, *, dtype=np.float64, workers: int | None = None, devices=None
    ) -> list[Profile | None]:
        """The batch routes (``Engine.batched``) for an ``AlibiBatch`` (or plain ALiBi stacks of one
        shape): the C kernel where ``compute`` would take it, else the XLA path, one call for the
        batch. ``check`` for the batch's memory, ``supported`` per stack, ``implausible_rows`` on the
        results; a stack refused there, one the kernel's guard stopped (extended), or (native) one
        whose linear profile has an exact zero (``Profile.unresolved`` flags it) is left to ``profile``."""
        from posbias.numerics.batch import AlibiBatch

        dtype = np.dtype(dtype)
        batch = AlibiBatch.of(stacks)
        out: list[Profile | None] = [None] * len(stacks)
        on_native = self.uses_native(dtype)
        if batch is None or (self.extended and not on_native):  # extended: native only (``compute`` refuses)
            return out
        self.check(batch[0], num_tokens, count=len(batch), capability=False)
        slopes, diagonal = batch.scaled()
        ok = self._supported_scaled(batch.mask, slopes, diagonal, batch.lambdas)
        if on_native and not self.extended:  # a stack native_refuses takes the XLA path in ``profile``
            ok &= ~native_refuses_rows(slopes, diagonal, batch.lambdas)
        rows = np.flatnonzero(ok)
        if rows.size == 0:
            return out
        sub = batch.take(rows) if rows.size < len(batch) else batch
        scaled = (slopes[rows], diagonal[rows]) if rows.size < len(batch) else (slopes, diagonal)
        with np.errstate(all="ignore"):
            if on_native:
                results = self._native_rows(sub, scaled, num_tokens, workers)
            else:
                results = self._xla_rows(sub, scaled, num_tokens, dtype, devices)
        for i, result in zip(rows, results):
            out[int(i)] = result
        return out

    def _native_rows(
        self, batch: AlibiBatch, scaled: tuple[np.ndarray, np.ndarray], num_tokens: int, workers: int | None
    ) -> list[Profile | None]:
        """The C kernel's batch entry in this engine's mode (linear, or guarded linear when
        extended); each row what ``linear_profile`` makes of it (clip and log once on (B, N):
        elementwise, the same values as row by row), None where the guard stopped it, it has an
        exact zero, or ``implausible_rows`` refuses it."""
        from posbias.numerics.engine import implausible_rows

        res = native.profile_batch(
            batch.lambdas,
            *scaled,
            batch.head_weights,
            num_tokens=num_tokens,
            past_window=batch.mask.past_window,
            bidirectional_length=batch.mask.bidirectional_length(num_tokens),
            guarded=self.extended,
            threads=workers or os.cpu_count() or 1,
        )
        prob = np.maximum(res.probabilities, 0.0)
        logp = np.log(prob)
        keep = (res.codes == 0) & np.all(prob > 0, axis=1)
        keep &= ~implausible_rows(prob, logp)
        mins, lasts = res.min_self_weight, res.last_self_weight
        return [
            Profile(prob[k], logp[k], mins[k], lasts[k], self.name, "native") if keep[k] else None
            for k in range(len(batch))
        ]

    def _xla_rows(
        self, batch: AlibiBatch, scaled: tuple[np.ndarray, np.ndarray], num_tokens: int, dtype, devices=None
    ) -> list[Profile | None]:
        """The XLA path for the whole batch in one jit-compiled call: the per-stack layer scan
        vmapped over the batch. With ``devices`` (more than one), the batch axis is sharded over
        a Mesh of them (NamedSharding); each stack's numbers do not depend on the sharding (the
        batch axis only indexes independent scans). None where ``implausible_rows`` refuses."""
        import jax
        import jax.numpy as jnp

        from posbias.numerics import _chunked as ch
        from posbias.numerics import _recurrence as rec
        from posbias.numerics.engine import implausible_rows
        from posbias.numerics.semiring import LOG
        from posbias.numerics.semiring import RINGS as SEMIRINGS

        count = len(batch)
        ring = SEMIRINGS[self.ring]
        slopes, diagonal = scaled
        if self.chunked():
            moderate = bool(np.all(np.abs(diagonal) <= rec.D_CLIP))
            geometry = ch.chunk_plan(num_tokens, batch.num_heads, batch.mask, self.group_budget, self.chunk, moderate)
        else:
            geometry = rec.plan(num_tokens, batch.num_heads, batch.mask, min(self.group_budget, BLOCKED_BUDGET))
        heads = -(-batch.num_heads // geometry.group) * geometry.group
        devices = list(devices or [])
        padded_count = -(-count // max(1, len(devices))) * max(1, len(devices))
        repeat = np.concatenate([np.arange(count), np.full(padded_count - count, count - 1)])  # pad: the last stack

        def stacked(x):  # (B_pad, T, H_pad)
            return np.pad(x[repeat], ((0, 0), (0, 0), (0, heads - x.shape[2])))

        arrays = (batch.lambdas[repeat], stacked(slopes), stacked(diagonal), stacked(batch.head_weights))
        v0 = np.zeros((padded_count, geometry.padded))
        v0[:, num_tokens - 1] = 1.0
        chunked = self.chunked()
        with jax.enable_x64(True):
            inputs = [jnp.asarray(a, dtype) for a in (ring.from_linear(v0), *arrays)]
            if len(devices) > 1:
                from jax.sharding import Mesh, NamedSharding, PartitionSpec

                mesh = Mesh(np.array(devices), ("batch",))
                inputs = [jax.device_put(a, NamedSharding(mesh, PartitionSpec("batch"))) for a in inputs]
            v, (mins, lasts) = _batched(chunked, geometry, self.ring)(*inputs)
            v = np.asarray(v, np.float64)[:count, :num_tokens]
            mins, lasts = np.asarray(mins, np.float64)[:count], np.asarray(lasts, np.float64)[:count]
        if ring is LOG:
            prob, logp, path, resolution = np.exp(v), v, "xla-log", 0.0
        else:
            prob = np.maximum(v, 0.0)
            logp = np.log(prob)
            path = "xla"
            subtracts = batch.mask.past_window is not None and not (chunked and geometry.band)
            resolution = 16.0 * float(np.finfo(np.float64).eps) * (batch.num_layers + 1) if subtracts else 0.0
        broken = implausible_rows(prob, logp, dtype)
        return [
            None if broken[k] else Profile(prob[k], logp[k], mins[k], lasts[k], self.name, path, resolution)
            for k in range(count)
        ]


@functools.cache
def _batched(chunked: bool, geometry, ring_name: str):
    """jit(vmap(the layer scan of one stack)) for this geometry (compiled once per shape)."""
    import jax

    from posbias.numerics import _chunked as ch
    from posbias.numerics import _recurrence as rec
    from posbias.numerics.semiring import RINGS as SEMIRINGS

    ring = SEMIRINGS[ring_name]

    def one(v, lam, m, d, w):
        layers = rec.LayerParams(lam, m, d, w)
        if chunked:
            return ch.chunked_layers_scan(v, layers, None, plan=geometry)
        return rec.layers_scan(v, layers, None, ring=ring, geometry=geometry)

    return jax.jit(jax.vmap(one))


def kernel_diagonals(stack: AlibiStack, num_tokens: int) -> np.ndarray:
    """(T, N) head-averaged self-weights A^(t)[i, i] = sum_h w_h alpha_{h,i}(d) in closed form (C4(b))."""
    import jax

    from posbias.numerics import _recurrence as rec

    with jax.enable_x64(True):
        slopes, diagonal = stack.scaled()
        return np.asarray(
            rec.kernel_diagonals(slopes, diagonal, stack.head_weights, num_tokens=num_tokens, mask=stack.mask)
        )


def diagonal_product(self_weights: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """P_ii = prod_t (1 - lambda_t (1 - A^(t)_ii)) for causal stacks (C5(a)); (T, N) -> (N,)."""
    return np.prod(1.0 - np.asarray(lambdas)[:, None] * (1.0 - self_weights), axis=0)
