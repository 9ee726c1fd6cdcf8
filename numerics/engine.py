"""The one interface every profile engine implements, and the result it returns.

An engine computes the profile of a stack (THEORY.md, Notation):

    p = e_{N-1}^T R^(T-1) ... R^(0),   R^(t) = (1 - lambda_t) I + lambda_t A^(t),

the last row of the rollout P: how much each input position feeds the last token.

* ``supports(stack, num_tokens)`` returns ``None`` when the engine can compute this
  profile exactly, else one line saying why not (a capability check, no work done).
* ``profile(stack, num_tokens, dtype=..., progress=...)`` checks ``supports``
  (raising ``Unsupported`` with that line), runs the engine's ``compute`` with JAX's
  64-bit mode switched on for this call only (the caller's JAX state is left as it
  was), and returns a ``Profile`` recording which engine and which path ran.
* ``profiles(stacks, num_tokens, ...)``: the profiles of a batch of stacks of one shape,
  each what ``profile`` gives it. The base class has no batch route (``batched`` leaves
  every stack to ``profile``, so it loops); an engine with one (the structured engine's
  C kernel and XLA paths) overrides ``batched``, and ``Auto`` delegates a batch to the
  engine it would run first. The checks of ``profile`` are written once
  (``check``, ``implausible_rows``) and run by both routes.

Engines are small frozen dataclasses (their fields are options such as the number
system or whether the native CPU kernel may be used); ``posbias.numerics.engines``
holds the one table from names to engine instances, and ``Auto`` there wraps the
others the way a wrapper solver wraps any solver.
"""

from __future__ import annotations

import abc
import contextlib
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import numpy as np
from numpy.typing import DTypeLike

from posbias.numerics.arrays import PerLayer, Vector

if TYPE_CHECKING:  # the stack types import nothing of the engines, but engines need not load them
    from posbias.numerics.boundary import Stack

Progress = Callable[[int, int], None]  # (layers done, total layers)


class Unsupported(ValueError):
    """The chosen engine cannot compute this profile; the message says why, in one line."""


def float64(fn):
    """Run ``fn`` with JAX's 64-bit types enabled for the duration of the call only.

    posbias computes in float64 by default without switching the caller's global
    JAX configuration (``jax.enable_x64`` is a context manager).
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _x64(True):
            return fn(*args, **kwargs)

    return wrapper


@dataclass(frozen=True)
class Profile:
    """The profile p of a stack and what the engine saw on the way.

    probabilities:     (N,) float64 p, as computed (not renormalised); entries that
                       underflowed the float64 range are exactly 0
    log_probabilities: (N,) log p; finite everywhere when the engine ran in an
                       extended-range number system (``log`` ring, native extended
                       mode), else log of ``probabilities`` (-inf where those are 0)
    min_self_weight:   (T,) min_i A^(t)[i, i]  (delta_t = 1 - this; C5(a))
    last_self_weight:  (T,) A^(t)[N-1, N-1]    (the last-token atom, C2(c))
    engine:            name of the engine that produced the numbers
    path:              how it ran: "native" / "native-extended" (C kernel on the CPU),
                       "xla", "xla-log", "fft", "dense", "measured", "power-scaled"
                       (squaring of a periodic stack's block; its self-weights are then
                       one per distinct layer, shape (p + r,), not (T,))
    resolution:        absolute error bound of the entries relative to max p (0: every
                       entry carries float64 relative accuracy). The FFT route's error is
                       absolute (~1e-16 of the largest entries), so entries below
                       ``resolution * max(p)`` are not resolved by it
    notes:             what a wrapper engine decided (fallbacks), one line each
    """

    probabilities: Vector
    log_probabilities: Vector
    min_self_weight: PerLayer
    last_self_weight: PerLayer
    engine: str
    path: str
    resolution: float = 0.0
    notes: tuple[str, ...] = field(default=())

    @property
    def num_tokens(self) -> int:
        return int(self.probabilities.shape[0])

    @property
    def extended_range(self) -> bool:
        """True when log_probabilities is finite everywhere (nothing was lost to underflow)."""
        return bool(np.all(np.isfinite(self.log_probabilities)))

    def unresolved(self) -> np.ndarray:
        """Boolean mask of entries whose value this profile does not determine to relative accuracy:
        below the float64 range (< 1e-280, when log p is not finite there) or below the
        engine's absolute resolution."""
        return unresolved_rows(self.probabilities[None], self.log_probabilities[None], np.array([self.resolution]))[0]


def unresolved_rows(probabilities: np.ndarray, log_probabilities: np.ndarray, resolution: np.ndarray) -> np.ndarray:
    """``Profile.unresolved`` of B profiles at once: (B, N) p and log p, (B,) resolutions -> (B, N) bool."""
    p, logp = probabilities, log_probabilities
    finite = np.isfinite(logp)
    lost = ~finite | ((p < UNDERFLOW) & ~finite.all(axis=1, keepdims=True))
    coarse = resolution > 0
    if coarse.any():
        lost |= coarse[:, None] & (p <= resolution[:, None] * np.max(p, axis=1, keepdims=True))
    return lost


UNDERFLOW = 1e-280  # below this an ordinary float64 profile has lost relative accuracy


def linear_profile(v: np.ndarray, mins, lasts, *, engine: str, path: str, resolution: float = 0.0) -> Profile:
    """A Profile from linear values (negative round-off of order -1e-17 clipped to 0)."""
    p = np.maximum(np.asarray(v, np.float64), 0.0)
    with np.errstate(divide="ignore"):
        logp = np.log(p)
    return Profile(p, logp, np.asarray(mins, np.float64), np.asarray(lasts, np.float64), engine, path, resolution)


def log_profile(logv: np.ndarray, mins, lasts, *, engine: str, path: str) -> Profile:
    """A Profile from log values (extended range)."""
    logv = np.asarray(logv, np.float64)
    return Profile(np.exp(logv), logv, np.asarray(mins, np.float64), np.asarray(lasts, np.float64), engine, path)


class Engine(abc.ABC):
    """Base of every engine: ``supports`` then ``compute``, with float64 scoped to the call."""

    name: str = "engine"

    def supports(self, stack: Stack, num_tokens: int) -> str | None:
        """None if this engine computes the profile exactly, else the reason it cannot."""
        return None

    def memory_bytes(self, num_layers: int, num_heads: int, num_tokens: int) -> int:
        """A conservative count of the bytes a profile of this shape holds at once."""
        return 64 * num_tokens + 64 * num_layers * num_heads

    @abc.abstractmethod
    def compute(self, stack: Stack, num_tokens: int, *, dtype: np.dtype, progress: Progress | None) -> Profile:
        """The profile; called by ``profile`` after ``supports`` said yes, inside float64 scope."""

    def uses_native(self, dtype: DTypeLike) -> bool:
        """Whether ``compute`` runs on a C kernel for this dtype here, using no JAX device (a sweep then
        lists no devices). Engines with a C route override it."""
        return False

    def needs_jax(self, stack: Stack, dtype: np.dtype) -> bool:
        """Whether ``compute`` runs JAX for this stack (then it runs under ``jax.enable_x64``)."""
        return True

    def supported(self, stacks: Sequence, num_tokens: int) -> np.ndarray:
        """(B,) bool: ``supports(stack, num_tokens) is None`` for each stack (engines with a batch
        route answer it vectorised)."""
        return np.array([self.supports(s, int(num_tokens)) is None for s in stacks], dtype=bool)

    def check(self, stack, num_tokens: int, count: int = 1, *, capability: bool = True) -> None:
        """Raise ``Unsupported`` (one line) unless this engine computes ``stack`` at ``num_tokens``:
        N >= 1, ``supports`` (unless ``capability`` is False: a batch route asks ``supported``),
        and the memory of ``count`` such profiles held at once."""
        if int(num_tokens) < 1:
            raise Unsupported(f"{self.name} engine: num_tokens must be >= 1, got {num_tokens}")
        reason = self.supports(stack, int(num_tokens)) if capability else None
        if reason is None:
            from posbias.numerics import budget

            heads = getattr(stack, "num_heads", None) or 1
            what = f"T = {stack.num_layers}, H = {heads}, N = {num_tokens}"
            reason = budget.check(
                what if count == 1 else f"a batch of {count} stacks of {what}",
                count * self.memory_bytes(stack.num_layers, heads, int(num_tokens)),
            )
        if reason is not None:
            raise Unsupported(f"{self.name} engine: {reason}")

    def profile(
        self, stack: Stack, num_tokens: int, *, dtype: DTypeLike = np.float64, progress: Progress | None = None
    ) -> Profile:
        """``check`` (raise ``Unsupported``), then compute in float64 scope, then refuse an implausible result."""
        self.check(stack, num_tokens)
        dtype = np.dtype(dtype)
        with _x64(self.needs_jax(stack, dtype)):
            with np.errstate(all="ignore"):  # an engine's floating-point notes are not the caller's business
                result = self.compute(stack, int(num_tokens), dtype=dtype, progress=progress)
        broken = implausible(result, dtype)
        if broken:
            raise Unsupported(f"{self.name} engine: {broken}; this input is beyond what it computes reliably")
        return result

    def batched(
        self,
        stacks: Sequence,
        num_tokens: int,
        *,
        dtype: DTypeLike = np.float64,
        workers: int | None = None,
        devices=None,
    ) -> list[Profile | None]:
        """The profiles this engine's batch route computes for ``stacks`` (one shape (T, H, mask)),
        in order, None for each stack it leaves to ``profile`` (every one here: no batch route).
        An override returns for a stack exactly what ``profile`` would (or None), having run the
        same checks: ``check`` for the batch, the capability per stack, ``implausible_rows``."""
        return [None] * len(stacks)

    def profiles(
        self,
        stacks: Sequence,
        num_tokens: int,
        *,
        dtype: DTypeLike = np.float64,
        progress: Progress | None = None,
        workers: int | None = None,
        devices=None,
    ) -> list[Profile]:
        """The profile of every stack of ``stacks`` (one shape): ``batched``, then ``profile`` for
        each stack it left. ``progress(done, total)`` counts stacks; ``workers``: threads of a
        native batch route; ``devices``: JAX devices an XLA batch route shards the batch over."""
        total = len(stacks)
        out = self.batched(stacks, num_tokens, dtype=dtype, workers=workers, devices=devices)
        batched = sum(r is not None for r in out)
        if progress is not None:
            for done in range(1, batched + 1):
                progress(done, total)
        done = batched
        for i, result in enumerate(out):
            if result is None:
                out[i] = self.profile(stacks[i], num_tokens, dtype=dtype)
                done += 1
                if progress is not None:
                    progress(done, total)
        return cast(list[Profile], out)  # every entry filled above


def _x64(enabled: bool):
    """``jax.enable_x64(True)`` when the engine runs JAX; nothing (and no JAX import) otherwise."""
    if not enabled:
        return contextlib.nullcontext()
    import jax

    return jax.enable_x64(True)


def _broken_entries(p: np.ndarray, logp: np.ndarray) -> np.ndarray:
    """Where p or log p cannot be a probability's: non-finite or negative p, NaN log p, log p > 0."""
    return ~np.isfinite(p) | (p < 0) | np.isnan(logp) | (logp > 1e-6)


def _mass_slack(dtype) -> float:
    """How far the total mass may stray from 1 before a profile is refused."""
    return 1e-6 if np.dtype(dtype) == np.float64 else 1e-2


def implausible(profile: Profile, dtype: DTypeLike = np.float64) -> str | None:
    """Why ``profile`` cannot be a profile (non-finite or negative entries, log p > 0, mass
    far from 1), or None: a last guard that turns an engine failure on extreme input into
    a refusal (or, under ``auto``, a fallback) instead of a wrong answer."""
    p, logp = profile.probabilities, profile.log_probabilities
    bad = np.flatnonzero(_broken_entries(p, logp))
    if bad.size:
        j = int(bad[0])
        return f"it returned p({j}) = {float(p[j])!r} (log p = {float(logp[j])!r}), not a probability"
    if profile.extended_range:
        top = float(np.max(logp))
        total = float(np.exp(top) * np.sum(np.exp(logp - top)))
    else:
        total = float(np.sum(p))
    if not abs(total - 1.0) <= _mass_slack(dtype):
        return f"its profile sums to {total!r}, expected 1"
    return None


def implausible_rows(
    probabilities: np.ndarray, log_probabilities: np.ndarray, dtype: DTypeLike = np.float64
) -> np.ndarray:
    """(B,) bool: the rows of (B, N) profiles that ``implausible`` would refuse, by the same tests
    (the mass from log p where a row's log p is finite everywhere, else from p)."""
    p, logp = probabilities, log_probabilities
    broken = _broken_entries(p, logp).any(axis=1)
    finite = np.isfinite(logp).all(axis=1)
    with np.errstate(all="ignore"):
        top = np.max(logp, axis=1, keepdims=True)
        from_logs = np.exp(top[:, 0]) * np.sum(np.exp(logp - top), axis=1)
        total = np.where(finite, from_logs, np.sum(p, axis=1))
    return broken | ~(np.abs(total - 1.0) <= _mass_slack(dtype))
