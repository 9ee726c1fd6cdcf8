"""The ``auto`` engine: picks an exact engine for the stack and re-runs when a result lost entries.

It wraps the other engines (as a wrapper solver wraps any solver) and owns every
threshold of the choice:

1. Measured kernels go to the measured engine.
2. On the CPU with the native kernel: the structured engine in its extended-range
   mode (exact, O(T H N), heads split across threads; block floating point, so
   entries far below 1e-308 keep their float64 relative accuracy and log p is finite
   everywhere) for every N and mask. The kernel enters block floating point only where
   needed: it runs in linear mode (about 1.45x cheaper) while every entry of the support
   stays >= 2^-900 and continues from the last such layer in extended range, so it never
   needs a second run.
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
4. A relative-bias stack (``BiasStack``, C7) whose every head is ALiBi (b linear in g with a
   non-positive slope, no sink: ``BiasStack.as_alibi``) takes the ALiBi routes above; any other
   goes to the bias engine (native C kernel on the CPU, else XLA; O(T H N^2)), then dense.
   Where the linear mode refuses the stack (a row deficit beyond 600 nats) or leaves entries
   below the float64 range, the bias engine's log-space mode (``BiasEngine(extended=True)``,
   native kernel only, 12 to 14 times slower) computes it; without the native kernel such
   entries are reported as unresolved in the notes.
5. A compact periodic stack (``PeriodicStack``: a block of layers repeated q times, T up
   to 10^9 and beyond) goes to the power engine (numerics/power.py: O(N^3 log q), extended
   range by scale exponents per block of rows and column) when N <= 8192 and its estimated
   time is below the per-layer scan's (``power_seconds`` vs ``scan_seconds``); otherwise,
   when T is small enough to hold (T, H) arrays, the stack is expanded and takes the routes
   above. When the power profile leaves entries unresolved (what the block product lost
   below 2^-1022, e.g. kernels that underflow, or blocks of rows that still span more than
   the float64 range) and the extended-range scan is estimated at most
   ``periodic_retry_seconds`` (``extended_scan_seconds``, an upper estimate), it re-runs on
   the expanded stack. Its Profile carries one self-weight per distinct layer (block, then top).

The extended-range scan costs more than the plain one where its block floating point has
to refine (down to one exponent per token, as at great depth): measured on the 2-core
machine, single-token blocks cost 6 to 14 times the plain rate (``scan_seconds_per_unit``)
per layer, head and token, heads counted in whole groups of 8 as the kernel takes them, so
``extended_scan_seconds`` charges ``extended_scan_factor`` = 20 times that rate for every
layer: an upper estimate (T = 10^6, N = 4096, H = 32: 2620 s, no retry; the plain rate's
123 s was optimistic, that scan runs for more than 10 minutes).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from posbias.numerics.engine import Engine, Profile, Unsupported
from posbias.numerics.native import HEAD_GROUP, NativeError
from posbias.numerics.periodic import EXPAND_MAX_LAYERS, PeriodicStack
from posbias.numerics.bias_stack import BiasStack
from posbias.numerics.stack import AlibiStack, KernelStack
from posbias.numerics.structured import Structured
from posbias.numerics.summary import exact_zeros


@dataclass(frozen=True)
class Auto(Engine):
    name = "auto"
    fft_from_tokens: int = 16384
    log_retry_max_work: int = 200_000_000
    scan_seconds_per_unit: float = 1e-9     # native scan per layer x head x token (2 shared cores: T = 10^4, H = 32, N = 4096 in ~2 s)
    power_seconds_per_flop: float = 4e-11   # BLAS multiply-add in an N x N product
    periodic_retry_seconds: float = 60.0    # re-run an unresolved power profile on the scan when this fast
    extended_scan_factor: float = 20.0      # extended-range scan (single-token blocks) against the plain rate

    def scan_seconds(self, stack: PeriodicStack, num_tokens: int) -> float:
        """Estimated time of the per-layer scan over all T layers."""
        return self.scan_seconds_per_unit * stack.num_layers * stack.num_heads * num_tokens

    def extended_scan_seconds(self, stack: PeriodicStack, num_tokens: int) -> float:
        """Upper estimate of the extended-range scan over all T layers: every layer at the cost of
        single-token exponent blocks, heads rounded up to whole groups of ``HEAD_GROUP``."""
        heads = -(-stack.num_heads // HEAD_GROUP) * HEAD_GROUP
        return self.extended_scan_factor * self.scan_seconds_per_unit * stack.num_layers * heads * num_tokens

    def power_seconds(self, stack: PeriodicStack, num_tokens: int) -> float:
        """Estimated time of the power engine: the block's products and the squarings."""
        n, q = float(num_tokens), stack.repeats
        build = stack.num_layers - (q - 1) * stack.period  # the distinct layers
        steps = q.bit_length() - 1 + bin(q).count("1")
        tri = 1 / 3 if stack.causal(num_tokens) else 1.0
        return self.power_seconds_per_flop * n**3 * (build + tri * steps)

    def profile(self, stack, num_tokens: int, *, dtype=np.float64, progress=None) -> Profile:
        """As ``Engine.profile``; a ``PeriodicStack`` takes the route of ``periodic_profile``."""
        if isinstance(stack, PeriodicStack):
            return self.periodic_profile(stack, int(num_tokens), dtype=dtype, progress=progress)
        return super().profile(stack, num_tokens, dtype=dtype, progress=progress)

    def periodic_profile(self, stack: PeriodicStack, num_tokens: int, *, dtype, progress=None) -> Profile:
        """The power engine, or the expanded stack's ordinary route where that is estimated faster."""
        from posbias.numerics.power import Power

        power = Power()
        scan, pow_ = self.scan_seconds(stack, num_tokens), self.power_seconds(stack, num_tokens)
        expandable = stack.num_layers <= EXPAND_MAX_LAYERS
        if power.supports(stack, num_tokens) is None and (pow_ <= scan or not expandable):
            result = power.profile(stack, num_tokens, dtype=dtype, progress=progress)
            choice = (f"auto: power ({result.path}) for a periodic stack of T = {stack.num_layers} "
                      f"(period {stack.period}, estimated {pow_:.3g} s against {scan:.3g} s for the per-layer scan)")
            lost = int(result.unresolved().sum())
            if not (lost and expandable):
                return dataclasses.replace(result, notes=result.notes + (choice,))
            retry = self.extended_scan_seconds(stack, num_tokens)
            if retry > self.periodic_retry_seconds:
                choice += (f"; {lost} entries unresolved, not re-run (the extended-range scan is estimated "
                           f"{retry:.3g} s > {self.periodic_retry_seconds:g} s)")
                return dataclasses.replace(result, notes=result.notes + (choice,))
            choice += (f"; {lost} entries unresolved, re-ran on the per-layer scan with extended range "
                       f"(estimated {retry:.3g} s <= {self.periodic_retry_seconds:g} s)")
            return self.expanded(stack, num_tokens, dtype=dtype, progress=progress, notes=result.notes + (choice,))
        if not expandable:
            raise Unsupported(f"auto engine: {power.supports(stack, num_tokens)}, and T = {stack.num_layers} layers "
                              f"is too deep for the per-layer scan (at most {EXPAND_MAX_LAYERS})")
        return self.expanded(stack, num_tokens, dtype=dtype, progress=progress,
                             notes=(f"auto: periodic stack of T = {stack.num_layers} expanded to the per-layer scan "
                                    f"(estimated {scan:.3g} s against {pow_:.3g} s for the power engine)",))

    def expanded(self, stack: PeriodicStack, num_tokens: int, *, dtype, progress, notes) -> Profile:
        """The ordinary route on the expanded stack, self-weights compressed back to the distinct layers."""
        result = super().profile(stack.expand(), num_tokens, dtype=dtype, progress=progress)
        return dataclasses.replace(result, min_self_weight=stack.compress(result.min_self_weight),
                                   last_self_weight=stack.compress(result.last_self_weight),
                                   notes=tuple(notes) + result.notes)

    def supports(self, stack, num_tokens: int) -> str | None:
        if isinstance(stack, KernelStack):
            from posbias.numerics.measured import Measured

            return Measured().supports(stack, num_tokens)
        if isinstance(stack, (AlibiStack, BiasStack)):
            return None
        return f"expected an AlibiStack, BiasStack or KernelStack, got {type(stack).__name__}"

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
        if isinstance(stack, BiasStack):
            from posbias.numerics.bias_engine import BiasEngine
            from posbias.numerics.dense import Dense

            first = BiasEngine()  # linear first; its extended (log-space) mode where it refuses the deficit
            order = [first, BiasEngine(extended=True)] + ([BiasEngine(native=False)] if first.uses_native(dtype)
                                                          else []) + [Dense()]
            yield from (e for e in order if e.supports(stack, num_tokens) is None)
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
        if isinstance(stack, BiasStack):
            from posbias.numerics.bias_engine import BiasEngine

            ext = BiasEngine(extended=True)
            return ext if native_ok and ext.uses_native(dtype) and ext.supports(stack, num_tokens) is None else None
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
        alibi = stack.as_alibi(num_tokens) if isinstance(stack, BiasStack) else None
        if alibi is not None:
            result = self.compute(alibi, num_tokens, dtype=dtype, progress=progress)
            note = "auto: every head's bias is -m|i-j| (linear in g) with no sink: an ALiBi stack"
            return dataclasses.replace(result, notes=(note,) + result.notes)
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
        structural = exact_zeros(stack, num_tokens)  # zeros by the mask's reach are exact, not lost
        lost = int((result.unresolved() & ~structural).sum())
        if lost and result.path == "fft" and Structured(native=False).supports(stack, num_tokens) is None:
            notes.append(f"auto: {lost} entries below the FFT's resolution; re-ran on the exact recurrence")
            result = Structured().profile(stack, num_tokens, dtype=dtype, progress=progress)
            notes.append(self.route_note(result))
            lost = int((result.unresolved() & ~structural).sum())
        if lost:
            route = self.extended_route(stack, num_tokens, dtype, native_ok=native_ok)
            ran = route == engine  # the extended route itself left them: a second run would too
            if route is None or ran:
                why = ("it ran" if ran else "relative biases have one in the native kernel only"
                       if isinstance(stack, BiasStack) else
                       f"T*H*N > {self.log_retry_max_work:.0e} or sliding window without the native kernel")
                notes.append(f"auto: {lost} entries below the float64 range and no extended-range route fits ({why})")
            else:
                notes.append(f"auto: {lost} entries below the float64 range or the path's resolution; "
                             "re-ran with extended range")
                result = route.profile(stack, num_tokens, dtype=dtype, progress=progress)
                notes.append(self.route_note(result))
        return dataclasses.replace(result, notes=tuple(notes))
