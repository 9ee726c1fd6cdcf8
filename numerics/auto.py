"""The ``auto`` engine: picks an exact engine for the stack and re-runs when a result lost entries.

It wraps the other engines (as a wrapper solver wraps any solver) and owns every
threshold of the choice:

1. Measured kernels go to the measured engine.
2. On the CPU with the native kernel: the structured engine in its extended-range
   mode (exact, O(T H N), heads split across threads; block floating point, so
   entries far below 1e-308 keep their float64 relative accuracy and log p is finite
   everywhere) for every N and mask. It costs about 5% more than the plain native
   mode and never needs a second run.
   Elsewhere (GPU/TPU, or no C compiler): the FFT engine for causal / sliding-window
   masks at N >= ``fft_from_tokens``, else the structured engine's XLA path.
3. If the result does not determine some entries (``Profile.unresolved``: float64
   underflow below 1e-280, or FFT round-off), it re-runs on an exact route:
   the FFT's result first on the exact linear recurrence, then, for entries below
   the float64 range, on an extended-range route: the native kernel's extended mode,
   else the log-space XLA path when T * H * N <= ``log_retry_max_work``
   (sliding windows have no log-space route). What was done is recorded in
   ``Profile.notes``; a profile that still has unresolved entries says so there,
   and summaries report those entries as unresolved rather than as values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from posbias.numerics.engine import Engine, Profile, Unsupported
from posbias.numerics.native import NativeError
from posbias.numerics.stack import AlibiStack, KernelStack
from posbias.numerics.structured import Structured


@dataclass(frozen=True)
class Auto(Engine):
    name = "auto"
    fft_from_tokens: int = 16384
    log_retry_max_work: int = 200_000_000

    def supports(self, stack, num_tokens: int) -> str | None:
        if isinstance(stack, KernelStack):
            from posbias.numerics.measured import Measured

            return Measured().supports(stack, num_tokens)
        if isinstance(stack, AlibiStack):
            return None
        return f"expected an AlibiStack or KernelStack, got {type(stack).__name__}"

    def needs_jax(self, stack, dtype) -> bool:
        return False  # each engine it runs scopes its own JAX use

    def memory_bytes(self, num_layers: int, num_heads: int, num_tokens: int) -> int:
        """What its first route needs (the engines it falls back to check their own)."""
        return Structured().memory_bytes(num_layers, num_heads, num_tokens)

    def candidates(self, stack, num_tokens: int, dtype):
        """The engines to try, in order, that say they support this stack (imported lazily, so
        the native CPU route never imports JAX)."""
        if isinstance(stack, KernelStack):
            from posbias.numerics.measured import Measured

            yield Measured()
            return

        def fft():
            from posbias.numerics.fft import FFT

            return FFT()

        def dense():
            from posbias.numerics.dense import Dense

            return Dense()

        order = []
        if Structured().uses_native(dtype):
            order.append(lambda: Structured(extended=True))
        elif num_tokens >= self.fft_from_tokens:
            order.append(fft)
        order += [lambda: Structured(native=False), lambda: Structured(ring="log"), dense]
        for make in order:
            engine = make()
            if engine.supports(stack, num_tokens) is None:
                yield engine

    def extended_route(self, stack, num_tokens: int, dtype, *, native_ok: bool = True) -> Engine | None:
        """An exact engine that keeps entries below 1e-308 (or None if none fits)."""
        if isinstance(stack, KernelStack):
            return None
        ext = Structured(extended=True)
        if native_ok and ext.uses_native(dtype) and ext.supports(stack, num_tokens) is None:
            return ext
        log = Structured(ring="log")
        work = stack.num_layers * stack.num_heads * num_tokens
        if log.supports(stack, num_tokens) is None and work <= self.log_retry_max_work:
            return log
        return None

    @staticmethod
    def route_note(result: Profile) -> str:
        """The note recording which engine and path produced ``result``."""
        return f"auto: {result.engine} ({result.path})"

    def compute(self, stack, num_tokens: int, *, dtype, progress=None) -> Profile:
        notes = []
        native_ok = True
        result = None
        for engine in self.candidates(stack, num_tokens, dtype):
            try:
                result = engine.profile(stack, num_tokens, dtype=dtype, progress=progress)
                break
            except (NativeError, Unsupported) as exc:
                native_ok = native_ok and not isinstance(exc, NativeError)
                notes.append(f"auto: {engine.name} refused ({exc}); trying the next route")
        if result is None:
            raise Unsupported(f"auto engine: no engine computes this stack exactly at N = {num_tokens}"
                              + (f" ({notes[-1]})" if notes else " (the dense engine stops at N = 8192)"))
        notes.append(self.route_note(result))
        lost = int(result.unresolved().sum())
        if lost and result.path == "fft" and Structured(native=False).supports(stack, num_tokens) is None:
            notes.append(f"auto: {lost} entries below the FFT's resolution; re-ran on the exact recurrence")
            result = Structured().profile(stack, num_tokens, dtype=dtype, progress=progress)
            notes.append(self.route_note(result))
            lost = int(result.unresolved().sum())
        if lost:
            route = self.extended_route(stack, num_tokens, dtype, native_ok=native_ok)
            if route is None:
                notes.append(f"auto: {lost} entries below the float64 range and no extended-range route fits "
                             f"(T*H*N > {self.log_retry_max_work:.0e} or sliding window without the native kernel)")
            else:
                notes.append(f"auto: {lost} entries below the float64 range or the path's resolution; "
                             "re-ran with extended range")
                result = route.profile(stack, num_tokens, dtype=dtype, progress=progress)
                notes.append(self.route_note(result))
        return dataclasses.replace(result, notes=tuple(notes))
