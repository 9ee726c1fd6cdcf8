"""Batched profiles: many stacks of one shape (T, H, N, mask) in one call.

``profiles(stacks, num_tokens)`` returns, in order, the ``Profile`` that
``posbias.numerics.profile`` gives for each stack (the same engine choice, the same
numbers): p = e_{N-1}^T R^(T-1) ... R^(0) per stack (THEORY.md, Notation). It is the
engine of ``posbias sweep`` and of property-based runs. It is a thin call to the engine's
``Engine.profiles``: the engine's batch route (``Engine.batched``), then the single-profile
call for every stack that route left (so ``auto``'s fallbacks apply unchanged):

* the structured engine on the CPU with the native kernel (what ``auto`` picks there): the
  whole batch in one C call (``numerics.native.profile_batch``: worker threads take the
  stacks in turn, one thread per stack; no Python runs per stack), the capability checks
  vectorised over the batch. ``auto``'s extended-range engine runs the kernel's guarded linear
  mode there: a stack whose entries all stay >= 2^-900 is done (the single-profile result to
  the bit, which starts the same way); a stack the guard stops is left to the single-profile
  call (linear, then block floating point from where it was needed);
* its XLA path (accelerators, or no C compiler; what ``auto`` picks there below its FFT
  threshold): one jit(vmap) call for the batch, sharded over ``devices`` when more than one
  is given; equal to single-profile results to ~1e-16;
* every other engine has no batch route: one single-profile call per stack.

``AlibiBatch`` holds B ALiBi stacks of one shape as (B, T) and (B, T, H) arrays; it is a
sequence of ``AlibiStack`` (item b is stack b), so any engine takes it, and the batch
routes read its arrays without per-stack objects (``posbias sweep`` builds it straight
from the grid).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import DTypeLike

from posbias.numerics.engine import Engine, Profile, Progress
from posbias.numerics.masks import Causal, Mask, is_lower_triangular
from posbias.numerics.stack import AlibiStack

if TYPE_CHECKING:
    from posbias.numerics.boundary import EngineName


def shape_key(stack: AlibiStack) -> tuple:
    """What stacks batched together must share: (T, H, mask)."""
    return stack.num_layers, stack.num_heads, stack.mask


@dataclass(frozen=True)
class AlibiBatch(Sequence):
    """B ALiBi stacks of one shape: lambdas (B, T); slopes, diagonal, head_weights (B, T, H);
    temperature (B,); one mask. Item b is the ``AlibiStack`` of row b (views of these arrays),
    with the values an ``AlibiStack`` holds (already validated where they were built)."""

    lambdas: np.ndarray
    slopes: np.ndarray
    diagonal: np.ndarray
    head_weights: np.ndarray
    temperature: np.ndarray
    mask: Mask = field(default_factory=Causal)

    @staticmethod
    def of(stacks: Sequence) -> AlibiBatch | None:
        """``stacks`` as an AlibiBatch (itself if it is one); None unless every item is a plain
        ``AlibiStack`` of one shape (T, H, mask)."""
        if isinstance(stacks, AlibiBatch):
            return stacks
        stacks = list(stacks)
        if not stacks or not all(type(s) is AlibiStack for s in stacks) or len({shape_key(s) for s in stacks}) > 1:
            return None
        return AlibiBatch(
            np.stack([s.lambdas for s in stacks]),
            np.stack([s.slopes for s in stacks]),
            np.stack([s.diagonal for s in stacks]),
            np.stack([s.head_weights for s in stacks]),
            np.array([s.temperature for s in stacks], dtype=np.float64),
            stacks[0].mask,
        )

    def __len__(self) -> int:
        return int(self.lambdas.shape[0])

    def __getitem__(self, b: int | slice) -> AlibiStack | AlibiBatch:
        if isinstance(b, slice):
            return self.take(np.arange(len(self))[b])
        return AlibiStack(
            self.lambdas[b],
            self.slopes[b],
            self.diagonal[b],
            self.head_weights[b],
            float(self.temperature[b]),
            self.mask,
        )

    def take(self, rows: Sequence[int] | np.ndarray) -> AlibiBatch:
        """The batch of these rows (in this order)."""
        rows = np.asarray(rows, dtype=np.int64)
        return AlibiBatch(
            self.lambdas[rows],
            self.slopes[rows],
            self.diagonal[rows],
            self.head_weights[rows],
            self.temperature[rows],
            self.mask,
        )

    @property
    def num_layers(self) -> int:
        return int(self.lambdas.shape[1])

    @property
    def num_heads(self) -> int:
        return int(self.slopes.shape[2])

    @property
    def mask_name(self) -> str:
        return self.mask.name

    def scaled(self) -> tuple[np.ndarray, np.ndarray]:
        """(slopes / tau, diagonal / tau) of every stack, (B, T, H): elementwise, so each row is
        that stack's ``AlibiStack.scaled()`` to the bit (where every tau is 1 the arrays themselves:
        x / 1 = x exactly in IEEE arithmetic)."""
        if np.all(self.temperature == 1.0):
            return self.slopes, self.diagonal
        tau = self.temperature[:, None, None]
        return self.slopes / tau, self.diagonal / tau

    def causal(self, num_tokens: int) -> bool:
        """Whether every stack's kernels are lower triangular at this N (one mask for the batch)."""
        return is_lower_triangular(self.mask, num_tokens)


def profiles(
    stacks: Sequence[AlibiStack],
    num_tokens: int,
    *,
    engine: EngineName | Engine = "auto",
    dtype: DTypeLike = np.float64,
    progress: Progress | None = None,
    workers: int | None = None,
    devices=None,
) -> list[Profile]:
    """Profiles of ``stacks`` (all of one shape, see ``shape_key``; or an ``AlibiBatch``) over
    ``num_tokens`` tokens.

    ``engine`` as in ``posbias.numerics.profile``; ``progress(done, total)`` counts stacks;
    ``workers``: threads for the native route (default: all cores); ``devices``: JAX devices
    the XLA route shards the batch over (default: JAX's default device).
    """
    from posbias.numerics.engines import get

    if not isinstance(stacks, AlibiBatch):
        stacks = list(stacks)
        if len({shape_key(s) for s in stacks}) > 1:
            raise ValueError("stacks: expected one shape (T, H, mask) per batch, got several")
    if len(stacks) == 0:
        return []
    return get(engine).profiles(
        stacks, int(num_tokens), dtype=dtype, progress=progress, workers=workers, devices=devices
    )
