"""Batched profiles: many stacks of one shape (T, H, N, mask) in one call.

``profiles(stacks, num_tokens)`` returns, in order, the ``Profile`` that
``posbias.numerics.profile`` gives for each stack (the same engine choice, the same
numbers): p = e_{N-1}^T R^(T-1) ... R^(0) per stack (THEORY.md, Notation). It is the
engine of ``posbias sweep`` and of property-based runs.

Routes:

* CPU with the native kernel (what ``auto`` picks there): every stack goes to the C
  kernel's extended-range mode, one stack per worker thread (the kernel releases
  the GIL; one thread per stack beats splitting a small stack's heads), with the
  capability checks done once per stack and no per-call engine dispatch. The
  result of each stack is bit-for-bit the single-profile result.
* The structured engine's XLA path (accelerators, or no C compiler; what ``auto`` picks
  there below its FFT threshold): the whole batch in one jit-compiled call, the layer scan
  vmapped over the stacks (``Structured.compute_batch``), the batch axis sharded over
  ``devices`` when more than one is given. Equal to single-profile results to ~1e-16.
* Other engines: the single-profile call per stack.
  Every route gives a stack whose result has unresolved entries to the single-profile
  call, so ``auto``'s fallbacks apply unchanged.
"""

from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import numpy as np

from posbias.numerics.engine import Engine, Profile, Progress
from posbias.numerics.stack import AlibiStack


def shape_key(stack: AlibiStack) -> tuple:
    """What stacks batched together must share: (T, H, mask)."""
    return stack.num_layers, stack.num_heads, stack.mask


def profiles(stacks: Sequence[AlibiStack], num_tokens: int, *, engine: str | Engine = "auto", dtype=np.float64,
             progress: Progress | None = None, workers: int | None = None, devices=None) -> list[Profile]:
    """Profiles of ``stacks`` (all of one shape, see ``shape_key``) over ``num_tokens`` tokens.

    ``engine`` as in ``posbias.numerics.profile``; ``progress(done, total)`` counts stacks;
    ``workers``: threads for the native route (default: all cores); ``devices``: JAX devices
    the XLA route shards the batch over (default: JAX's default device).
    """
    from posbias.numerics.engines import get, profile

    stacks = list(stacks)
    if not stacks:
        return []
    if len({shape_key(s) for s in stacks}) > 1:
        raise ValueError("stacks: expected one shape (T, H, mask) per batch, got several")
    chosen = get(engine)
    native = _native_route(chosen, stacks, int(num_tokens), dtype)
    out: list[Profile | None] = [None] * len(stacks)
    done = 0

    def tick():
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, len(stacks))

    xla = None if native is not None else _xla_route(chosen, stacks, int(num_tokens), dtype)
    if xla is not None:
        route, note = xla
        results = route.compute_batch(stacks, int(num_tokens), dtype=dtype, devices=devices)
        for i, result in enumerate(results):
            if not result.unresolved().any():
                out[i] = dataclasses.replace(result, notes=(note(result),)) if note else result
                tick()
    if native is not None:
        route, note = native
        ok = [i for i, s in enumerate(stacks) if route.supports(s, int(num_tokens)) is None]
        with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
            for i, result in zip(ok, pool.map(lambda i: route.profile(stacks[i], int(num_tokens), dtype=dtype), ok)):
                if not result.unresolved().any():
                    out[i] = dataclasses.replace(result, notes=(note(result),)) if note else result
                    tick()
    for i, stack in enumerate(stacks):
        if out[i] is None:
            out[i] = profile(stack, int(num_tokens), engine=chosen, dtype=dtype)
            tick()
    return out


def _xla_route(engine: Engine, stacks, num_tokens: int, dtype):
    """(the structured engine whose XLA path runs the whole batch in one call, the note ``auto``
    would record) when this engine would take the structured XLA path first; None otherwise."""
    from posbias.numerics.auto import Auto
    from posbias.numerics.structured import Structured

    if isinstance(engine, Auto):
        first = next(engine.candidates(stacks[0], num_tokens, dtype), None)
        if isinstance(first, Structured) and not first.uses_native(dtype) and not first.extended:
            return first, Auto.route_note
        return None
    if isinstance(engine, Structured) and not engine.uses_native(dtype) and not engine.extended:
        return engine, None
    return None


def _native_route(engine: Engine, stacks, num_tokens: int, dtype):
    """(the C-kernel engine to run each stack on, the note ``auto`` would record) when this
    engine would run the native kernel first; None otherwise."""
    from posbias.numerics.auto import Auto
    from posbias.numerics.structured import Structured

    if isinstance(engine, Auto):
        first = next(engine.candidates(stacks[0], num_tokens, dtype), None)
        if isinstance(first, Structured) and first.uses_native(dtype):
            return dataclasses.replace(first, threads=1), Auto.route_note
        return None
    if isinstance(engine, Structured) and engine.uses_native(dtype):
        return dataclasses.replace(engine, threads=1), None
    return None
