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
   below the float64 range, the bias engine's log-space mode (``BiasEngine(extended=True)``:
   the C kernel's, 12 to 14 times slower, or XLA's without it: ``bias_extended_seconds``) computes it: in place of
   a refused stack when estimated at most ``bias_extended_max_seconds``, as a re-run for lost
   entries when estimated at most ``bias_retry_seconds``; otherwise the refusal or the notes say
   so, with the estimate.
   Large N: causal / sliding-window bias stacks go first to the bias FFT engine
   (numerics/bias_fft.py, O(T (U + 1) N log N), absolute resolution) when the exact engine is
   estimated at ``bias_fft_from_seconds`` or more (``bias_seconds``: T H N (L + 1) multiply-adds
   at ``bias_seconds_per_unit``) and the FFT at most a quarter of it (``bias_fft_seconds``).
   When the FFT leaves entries unresolved, the whole stack is re-run on the exact bias engine if
   that is estimated at most ``bias_retry_seconds``; otherwise the notes say how many entries
   are unresolved and summaries report them as such. Measured on the 2-core machine (native,
   2 threads; NumPy's FFT): exact 2.5e-10 s per T H N^2 unit, FFT 4e-9 s per P log2 P per
   distinct bias and layer (P = 2^ceil(log2 2N)) plus 1.2e-7 s per head and token per layer
   (an upper estimate: the engine reuses a layer's weights when the next layer has the same heads).
   Crossover (set by the 2 s floor: below it the exact engine's full relative accuracy is cheap):
   T = 12 layers of H = U = 4 Kerple heads, exact 0.8 s at N = 8192 and 3.2 s at N = 16384 (FFT
   0.1 s, 0.2 s), so the FFT from N of about 13,000; with H = U = 32 from about 4,600.
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
   A periodic stack of relative-bias layers (C7) takes the same choice, with the bias engine's
   O(T H N^2) for the per-layer scan and no re-run (the bias engine has no extended range);
   one whose every layer is ALiBi (``PeriodicStack.as_alibi``) is computed as the ALiBi stack.

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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import DTypeLike

from posbias.numerics.bias_stack import BiasStack
from posbias.numerics.engine import Engine, Profile, Progress, Unsupported
from posbias.numerics.native import HEAD_GROUP, NativeError
from posbias.numerics.periodic import EXPAND_MAX_LAYERS, PeriodicStack
from posbias.numerics.stack import AlibiStack, KernelStack
from posbias.numerics.structured import Structured
from posbias.numerics.summary import exact_zeros

if TYPE_CHECKING:
    from posbias.numerics.boundary import Stack


@dataclass(frozen=True)
class Auto(Engine):
    name = "auto"
    fft_from_tokens: int = 16384
    log_retry_max_work: int = 200_000_000
    # native scan per layer x head x token (2 shared cores: T = 10^4, H = 32, N = 4096 in ~2 s)
    scan_seconds_per_unit: float = 1e-9
    power_seconds_per_flop: float = 4e-11  # BLAS multiply-add in an N x N product
    periodic_retry_seconds: float = 60.0  # re-run an unresolved power profile on the scan when this fast
    extended_scan_factor: float = 20.0  # extended-range scan (single-token blocks) against the plain rate
    bias_seconds_per_unit: float = 2.5e-10  # exact bias engine per layer x head x token x reach (native, 2 threads)
    bias_fft_seconds_per_unit: float = 4e-9  # bias FFT per P log2 P per distinct bias and layer
    bias_fft_seconds_per_head: float = 1.2e-7  # bias FFT per head and token per layer (weights, normalisers)
    bias_fft_from_seconds: float = 2.0  # the exact bias engine is used below this estimate
    bias_retry_seconds: float = 60.0  # re-run an FFT profile with unresolved entries exactly when this fast
    bias_extended_factor: float = 14.0  # the bias engine's log-space mode against its linear rate (12-14x measured)
    bias_xla_extended_factor: float = 40.0  # its XLA log-space mode (no C kernel), same rate: 28-36x measured
    bias_extended_max_seconds: float = 600.0  # the log-space mode where the linear mode refuses, when this fast

    def bias_seconds(self, stack: BiasStack, num_tokens: int) -> float:
        """Estimated time of the exact bias engine: T H N (L + 1) multiply-adds (L the window's reach)."""
        window = stack.mask.past_window
        reach = num_tokens - 1 if window is None else min(num_tokens - 1, int(window) - 1)
        return self.bias_seconds_per_unit * stack.num_layers * stack.num_heads * num_tokens * (reach + 1)

    def bias_extended_seconds(self, stack: BiasStack, num_tokens: int) -> float:
        """Estimated time of the bias engine's log-space (extended) mode: ``bias_extended_factor`` times
        ``bias_seconds`` in the C kernel (measured 12 to 14 times at T = 4, H = 8, N = 512 and 2048, one
        thread), ``bias_xla_extended_factor`` times in XLA (measured 28 to 36 times at N = 512, 1024)."""
        from posbias.numerics.bias_engine import BiasEngine

        native = BiasEngine(extended=True).uses_native(np.float64)
        factor = self.bias_extended_factor if native else self.bias_xla_extended_factor
        return factor * self.bias_seconds(stack, num_tokens)

    def bias_fft_seconds(self, stack: BiasStack, num_tokens: int) -> float:
        """Estimated time of the bias FFT engine: per layer one transform per distinct bias plus the inverse,
        and O(H N) elementwise work."""
        from posbias.numerics.bias_fft import fft_length

        length = fft_length(num_tokens)
        per_layer = np.array([len(np.unique(row)) + 1 for row in stack.bias_index], np.float64)
        return (
            self.bias_fft_seconds_per_unit * length * np.log2(length) * float(per_layer.sum())
            + self.bias_fft_seconds_per_head * stack.num_layers * stack.num_heads * num_tokens
        )

    def bias_fft_first(self, stack: BiasStack, num_tokens: int) -> bool:
        """Whether the bias FFT engine goes before the exact one (module docstring, 4)."""
        exact = self.bias_seconds(stack, num_tokens)
        return exact >= self.bias_fft_from_seconds and 4 * self.bias_fft_seconds(stack, num_tokens) <= exact

    def scan_seconds(self, stack: PeriodicStack, num_tokens: int) -> float:
        """Estimated time of the per-layer scan over all T layers: O(T H N) for ALiBi layers, the bias
        engine's O(T H N^2) for relative-bias layers (C7)."""
        work = stack.num_layers * stack.num_heads * num_tokens
        return self.scan_seconds_per_unit * work * (num_tokens if stack.is_bias else 1)

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

    def profile(
        self, stack: Stack, num_tokens: int, *, dtype: DTypeLike = np.float64, progress: Progress | None = None
    ) -> Profile:
        """As ``Engine.profile``; a ``PeriodicStack`` takes the route of ``periodic_profile``."""
        if isinstance(stack, PeriodicStack):
            return self.periodic_profile(stack, int(num_tokens), dtype=dtype, progress=progress)
        return super().profile(stack, num_tokens, dtype=dtype, progress=progress)

    def periodic_profile(self, stack: PeriodicStack, num_tokens: int, *, dtype, progress=None) -> Profile:
        """The power engine, or the expanded stack's ordinary route where that is estimated faster.
        A relative-bias stack whose every layer is ALiBi at this N (``PeriodicStack.as_alibi``) takes
        the ALiBi route; other relative-bias stacks are not re-run when entries are unresolved (the
        bias engine has no extended range)."""
        from posbias.numerics.power import Power

        alibi = stack.as_alibi(num_tokens)
        if alibi is not None:
            result = self.periodic_profile(alibi, num_tokens, dtype=dtype, progress=progress)
            note = "auto: every head's bias is -m|i-j| (linear in g) with no sink: an ALiBi stack"
            return dataclasses.replace(result, notes=(note,) + result.notes)
        power = Power()
        scan, pow_ = self.scan_seconds(stack, num_tokens), self.power_seconds(stack, num_tokens)
        expandable = stack.num_layers <= EXPAND_MAX_LAYERS
        if power.supports(stack, num_tokens) is None and (pow_ <= scan or not expandable):
            result = power.profile(stack, num_tokens, dtype=dtype, progress=progress)
            choice = (
                f"auto: power ({result.path}) for a periodic stack of T = {stack.num_layers} "
                f"(period {stack.period}, estimated {pow_:.3g} s against {scan:.3g} s for the per-layer scan)"
            )
            lost = int(result.unresolved().sum())
            if lost and stack.is_bias:
                choice += f"; {lost} entries unresolved, not re-run (relative biases have no extended-range scan)"
            if not (lost and expandable) or stack.is_bias:
                return dataclasses.replace(result, notes=result.notes + (choice,))
            retry = self.extended_scan_seconds(stack, num_tokens)
            if retry > self.periodic_retry_seconds:
                choice += (
                    f"; {lost} entries unresolved, not re-run (the extended-range scan is estimated "
                    f"{retry:.3g} s > {self.periodic_retry_seconds:g} s)"
                )
                return dataclasses.replace(result, notes=result.notes + (choice,))
            choice += (
                f"; {lost} entries unresolved, re-ran on the per-layer scan with extended range "
                f"(estimated {retry:.3g} s <= {self.periodic_retry_seconds:g} s)"
            )
            return self.expanded(stack, num_tokens, dtype=dtype, progress=progress, notes=result.notes + (choice,))
        if not expandable:
            raise Unsupported(
                f"auto engine: {power.supports(stack, num_tokens)}, and T = {stack.num_layers} layers "
                f"is too deep for the per-layer scan (at most {EXPAND_MAX_LAYERS})"
            )
        return self.expanded(
            stack,
            num_tokens,
            dtype=dtype,
            progress=progress,
            notes=(
                f"auto: periodic stack of T = {stack.num_layers} expanded to the per-layer scan "
                f"(estimated {scan:.3g} s against {pow_:.3g} s for the power engine)",
            ),
        )

    def expanded(self, stack: PeriodicStack, num_tokens: int, *, dtype, progress, notes) -> Profile:
        """The ordinary route on the expanded stack, self-weights compressed back to the distinct layers."""
        result = super().profile(stack.expand(), num_tokens, dtype=dtype, progress=progress)
        return dataclasses.replace(
            result,
            min_self_weight=stack.compress(result.min_self_weight),
            last_self_weight=stack.compress(result.last_self_weight),
            notes=tuple(notes) + result.notes,
        )

    def batched(
        self,
        stacks: Sequence,
        num_tokens: int,
        *,
        dtype: DTypeLike = np.float64,
        workers: int | None = None,
        devices=None,
    ) -> list[Profile | None]:
        """A batch of ALiBi stacks goes to the batch route of the engine ``compute`` would try first
        (``alibi_order``); a stack it computes with every entry resolved is done (with the note
        ``compute`` records), every other one is left to ``profile`` (this engine's fallbacks).
        Other stacks (relative-bias, periodic, measured) have no batch route here."""
        from posbias.numerics.batch import AlibiBatch
        from posbias.numerics.engine import unresolved_rows

        batch = AlibiBatch.of(stacks)
        if batch is None:
            return [None] * len(stacks)
        first = next(self.alibi_order(num_tokens, dtype))
        out = first.batched(batch, num_tokens, dtype=dtype, workers=workers, devices=devices)
        done = [(i, r) for i, r in enumerate(out) if r is not None]
        if not done:
            return out
        lost = np.asarray(
            unresolved_rows(
                np.stack([r.probabilities for _, r in done]),
                np.stack([r.log_probabilities for _, r in done]),
                np.array([r.resolution for _, r in done]),
            ).any(axis=1),
            dtype=bool,
        )
        for (i, result), dropped in zip(done, lost.tolist()):
            out[i] = None if dropped else dataclasses.replace(result, notes=(self.route_note(result),))
        return out

    def supports(self, stack, num_tokens: int) -> str | None:
        if isinstance(stack, KernelStack):
            from posbias.numerics.measured import Measured

            return Measured().supports(stack, num_tokens)
        if isinstance(stack, (AlibiStack, BiasStack)):
            return None
        return f"expected an AlibiStack, BiasStack or KernelStack, got {type(stack).__name__}"

    def uses_native(self, dtype) -> bool:
        """Whether the engine tried first runs on a C kernel here: the structured engine's for ALiBi
        stacks (``alibi_order``), the bias engine's for relative biases, both on the CPU in float64."""
        return Structured().uses_native(dtype)

    def needs_jax(self, stack: Stack, dtype) -> bool:
        return False  # each engine it runs scopes its own JAX use

    def memory_bytes(self, num_layers: int, num_heads: int, num_tokens: int) -> int:
        """What its first route needs (the engines it falls back to check their own)."""
        return Structured().memory_bytes(num_layers, num_heads, num_tokens)

    def candidates(self, stack: Stack, num_tokens: int, dtype):
        """The engines to try, in order, that say they support this stack (imported lazily, so
        the native CPU route never imports JAX)."""
        if isinstance(stack, KernelStack):
            from posbias.numerics.measured import Measured

            yield Measured()
            return
        if isinstance(stack, BiasStack):
            from posbias.numerics.bias_engine import BiasEngine
            from posbias.numerics.bias_fft import BiasFFT
            from posbias.numerics.dense import Dense

            first = BiasEngine()  # linear first; its extended (log-space) mode where it refuses the deficit
            order: list[Engine] = [
                first,
                BiasEngine(extended=True),
                *([BiasEngine(native=False)] if first.uses_native(dtype) else []),
                Dense(),
            ]
            if self.bias_fft_first(stack, num_tokens):
                order.insert(0, BiasFFT())
            yield from (e for e in order if e.supports(stack, num_tokens) is None)
            return

        for engine in self.alibi_order(num_tokens, dtype):
            if engine.supports(stack, num_tokens) is None:
                yield engine

    def alibi_order(self, num_tokens: int, dtype):
        """The engines tried, in order, for an ALiBi stack (before each says whether it supports it):
        the native extended-range engine on the CPU, else the FFT engine at N >= ``fft_from_tokens``;
        then the structured XLA path, the log ring, dense. A generator: an engine's module (JAX for
        the FFT and dense ones) is imported only when it is reached, so the native route never imports JAX."""
        if Structured().uses_native(dtype):
            yield Structured(extended=True)
        elif num_tokens >= self.fft_from_tokens:
            from posbias.numerics.fft import FFT

            yield FFT()
        yield Structured(native=False)
        yield Structured(ring="log")
        from posbias.numerics.dense import Dense

        yield Dense()

    def extended_route(self, stack: Stack, num_tokens: int, dtype, *, native_ok: bool = True) -> Engine | None:
        """An exact engine that keeps entries below 1e-308 (or None if none fits)."""
        if isinstance(stack, KernelStack):
            return None
        if isinstance(stack, BiasStack):
            from posbias.numerics.bias_engine import BiasEngine

            ext = BiasEngine(extended=True, native=native_ok)  # the C kernel's, else XLA's log-space mode
            fits = np.dtype(dtype) == np.float64 and ext.supports(stack, num_tokens) is None
            return ext if fits and self.bias_extended_seconds(stack, num_tokens) <= self.bias_retry_seconds else None
        ext = Structured(extended=True)
        if native_ok and ext.uses_native(dtype) and ext.supports(stack, num_tokens) is None:
            return ext
        log = Structured(ring="log")
        work = stack.num_layers * stack.num_heads * num_tokens
        if log.supports(stack, num_tokens) is None and work <= self.log_retry_max_work:
            return log
        return None

    def exact_bias(self, stack: BiasStack, num_tokens: int, *, dtype, progress, notes: list) -> Profile | None:
        """The first exact route of a bias stack that computes it (bias engine, its XLA path, dense),
        or None; appends what happened to ``notes``."""
        for engine in self.candidates(stack, num_tokens, dtype):
            if engine.name == "bias-fft":
                continue
            try:
                result = engine.profile(stack, num_tokens, dtype=dtype, progress=progress)
            except (NativeError, Unsupported) as exc:
                notes.append(f"auto: {engine.name} refused ({exc}); trying the next route")
                continue
            notes.append(self.route_note(result))
            return result
        return None

    @staticmethod
    def route_note(result: Profile) -> str:
        """The note recording which engine and path produced ``result``."""
        return f"auto: {result.engine} ({result.path})"

    def compute(self, stack: Stack, num_tokens: int, *, dtype, progress=None) -> Profile:
        alibi = stack.as_alibi(num_tokens) if isinstance(stack, BiasStack) else None
        if alibi is not None:
            result = self.compute(alibi, num_tokens, dtype=dtype, progress=progress)
            note = "auto: every head's bias is -m|i-j| (linear in g) with no sink: an ALiBi stack"
            return dataclasses.replace(result, notes=(note,) + result.notes)
        notes = []
        native_ok = True
        result = None
        for engine in self.candidates(stack, num_tokens, dtype):
            if getattr(engine, "extended", False) and isinstance(stack, BiasStack):
                seconds = self.bias_extended_seconds(stack, num_tokens)
                if seconds > self.bias_extended_max_seconds:
                    notes.append(
                        f"auto: bias (extended) skipped: estimated {seconds:.3g} s > "
                        f"{self.bias_extended_max_seconds:g} s"
                    )
                    continue
            try:
                result = engine.profile(stack, num_tokens, dtype=dtype, progress=progress)
                break
            except (NativeError, Unsupported) as exc:
                native_ok = native_ok and not isinstance(exc, NativeError)
                notes.append(f"auto: {engine.name} refused ({exc}); trying the next route")
        if result is None:
            raise Unsupported(
                f"auto engine: no engine computes this stack exactly at N = {num_tokens}"
                + (f" ({'; '.join(_last_and_skipped(notes))})" if notes else " (the dense engine stops at N = 8192)")
            )
        notes.append(self.route_note(result))
        structural = exact_zeros(stack, num_tokens)  # zeros by the mask's reach are exact, not lost
        lost = int((result.unresolved() & ~structural).sum())
        if lost and result.path == "fft" and Structured(native=False).supports(stack, num_tokens) is None:
            notes.append(f"auto: {lost} entries below the FFT's resolution; re-ran on the exact recurrence")
            result = Structured().profile(stack, num_tokens, dtype=dtype, progress=progress)
            notes.append(self.route_note(result))
            lost = int((result.unresolved() & ~structural).sum())
        if lost and result.engine == "bias-fft" and isinstance(stack, BiasStack):  # bias-fft: BiasStacks only
            exact = self.bias_seconds(stack, num_tokens)
            if exact > self.bias_retry_seconds:
                notes.append(
                    f"auto: {lost} entries below the FFT's resolution, not re-run (the exact bias engine "
                    f"is estimated {exact:.3g} s > {self.bias_retry_seconds:g} s)"
                )
                return dataclasses.replace(result, notes=tuple(notes))
            notes.append(
                f"auto: {lost} entries below the FFT's resolution; re-running on the exact bias engine "
                f"(estimated {exact:.3g} s)"
            )
            exact_result = self.exact_bias(stack, num_tokens, dtype=dtype, progress=progress, notes=notes)
            if exact_result is None:
                notes.append(f"auto: no exact engine computes this stack; {lost} entries stay unresolved")
                return dataclasses.replace(result, notes=tuple(notes))
            result = exact_result
            lost = int((result.unresolved() & ~structural).sum())
        if lost:
            route = self.extended_route(stack, num_tokens, dtype, native_ok=native_ok)
            ran = route == engine  # the extended route itself left them: a second run would too
            if route is None or ran:
                why = (
                    "it ran"
                    if ran
                    else f"the bias engine's log-space mode is float64 only and is re-run when estimated at most "
                    f"{self.bias_retry_seconds:g} s; here {self.bias_extended_seconds(stack, num_tokens):.3g} s"
                    if isinstance(stack, BiasStack)
                    else f"T*H*N > {self.log_retry_max_work:.0e} or sliding window without the native kernel"
                )
                notes.append(f"auto: {lost} entries below the float64 range and no extended-range route fits ({why})")
            else:
                notes.append(
                    f"auto: {lost} entries below the float64 range or the path's resolution; re-ran with extended range"
                )
                result = route.profile(stack, num_tokens, dtype=dtype, progress=progress)
                notes.append(self.route_note(result))
        return dataclasses.replace(result, notes=tuple(notes))


def _last_and_skipped(notes: list[str]) -> list[str]:
    """The notes a refusal quotes: routes skipped for their estimated time, then the last refusal."""
    skipped = [n for n in notes[:-1] if " skipped: estimated " in n]
    return skipped + notes[-1:]
