"""Batched profiles: many stacks of one shape (T, H, N, mask) in one call.

``profiles(stacks, num_tokens)`` returns, in order, the ``Profile`` that
``posbias.numerics.profile`` gives for each stack (the same engine choice, the same
numbers): p = e_{N-1}^T R^(T-1) ... R^(0) per stack (THEORY.md, Notation). It is the
engine of ``posbias sweep`` and of property-based runs.

Routes:

* CPU with the native kernel (what ``auto`` picks there): the whole batch goes to the C
  kernel in one call (``numerics.native.profile_batch``: worker threads take the stacks in
  turn, one thread per stack, which beats splitting a small stack's heads; no Python runs
  per stack), with the capability checks done once, vectorised over the batch. ``auto``'s
  extended-range engine runs the kernel's guarded linear mode there: a stack whose entries
  all stay >= 2^-900 is done (the single-profile result to the bit, which starts the same
  way); a stack the guard stops is computed by the single-profile call (linear, then block
  floating point from where it was needed).
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
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import numpy as np

from posbias.numerics.engine import Engine, Profile, Progress
from posbias.numerics.stack import AlibiStack

if TYPE_CHECKING:
    from posbias.numerics.boundary import EngineName


def shape_key(stack: AlibiStack) -> tuple:
    """What stacks batched together must share: (T, H, mask)."""
    return stack.num_layers, stack.num_heads, stack.mask


def profiles(stacks: Sequence[AlibiStack], num_tokens: int, *, engine: EngineName | Engine = "auto", dtype=np.float64,
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
        for i, result in _native_batch(route, stacks, int(num_tokens), workers, note):
            out[i] = result
            tick()
    for i, stack in enumerate(stacks):
        if out[i] is None:
            out[i] = profile(stack, int(num_tokens), engine=chosen, dtype=dtype)
            tick()
    return cast(list[Profile], out)  # the loop above filled every slot left None


def _native_batch(route, stacks, num_tokens: int, workers: int | None, note=None):
    """(index, Profile) for the stacks the C kernel computes in one batch call, in the mode of
    ``route`` (a native ``Structured``: linear, or guarded linear when it is the extended-range
    engine), each what ``linear_profile`` makes of the kernel's row, with ``note(profile)`` as its
    note when given. Stacks the kernel refuses (slopes m/tau > 700, a clipped diagonal that
    matters: ``native_refuses``, vectorised), that the guard stops, or whose profile has an entry
    ``Profile.unresolved`` would flag (in linear mode: an exact zero) are left out. The clipping
    and logs run once on the (B, N) batch (elementwise, so the same values as row by row)."""
    from posbias.numerics import native
    from posbias.numerics.structured import LINEAR_MAX_SLOPE, NATIVE_CLIP_SAFE_SLOPE

    if not all(type(s) is AlibiStack for s in stacks):
        return []
    tau = np.array([s.temperature for s in stacks], dtype=np.float64)[:, None, None]
    slopes = np.stack([s.slopes for s in stacks]) / tau
    diagonal = np.stack([s.diagonal for s in stacks]) / tau
    fine = ~((slopes > LINEAR_MAX_SLOPE) | ((diagonal < -native.D_CLIP) & (slopes >= NATIVE_CLIP_SAFE_SLOPE)))
    ok = np.flatnonzero(fine.reshape(len(stacks), -1).all(axis=1))
    if ok.size == 0:
        return []
    mask = stacks[0].mask
    res = native.profile_batch(
        np.stack([stacks[i].lambdas for i in ok]), slopes[ok], diagonal[ok],
        np.stack([stacks[i].head_weights for i in ok]), num_tokens=num_tokens, past_window=mask.past_window,
        bidirectional_length=mask.bidirectional_length(num_tokens), guarded=route.extended,
        threads=workers or os.cpu_count() or 1)
    prob = np.maximum(res.probabilities, 0.0)
    with np.errstate(divide="ignore"):
        logp = np.log(prob)
    keep = (res.codes == 0) & np.all(prob > 0, axis=1)  # a linear profile with a zero is unresolved there
    out = []
    notes: tuple[str, ...] | None = None
    for k in np.flatnonzero(keep):
        result = Profile(prob[k], logp[k], res.min_self_weight[k], res.last_self_weight[k], route.name, "native",
                         notes=notes or ())
        if note and notes is None:  # the note names the engine and path, the same for every row
            notes = (note(result),)
            result = dataclasses.replace(result, notes=notes)
        out.append((int(ok[k]), result))
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
