"""Batched profiles: many stacks of one shape (T, H, N, mask) in one call.

``profiles(stacks, num_tokens)`` returns the same ``Profile`` objects as calling
``posbias.numerics.profile`` on each stack, in order. It is the engine of
``posbias sweep`` and of property-based runs.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from posbias.numerics.engine import Profile, Progress
from posbias.numerics.stack import AlibiStack


def shape_key(stack: AlibiStack) -> tuple:
    """What stacks batched together must share: (T, H, mask)."""
    return stack.num_layers, stack.num_heads, stack.mask


def profiles(stacks: Sequence[AlibiStack], num_tokens: int, *, engine: str = "auto", dtype=np.float64,
             progress: Progress | None = None) -> list[Profile]:
    """Profiles of ``stacks`` (all of one shape, see ``shape_key``) over ``num_tokens`` tokens."""
    from posbias.numerics.engines import profile

    stacks = list(stacks)
    if not stacks:
        return []
    keys = {shape_key(s) for s in stacks}
    if len(keys) > 1:
        raise ValueError(f"stacks: expected one shape (T, H, mask) per batch, got {len(keys)}")
    out = []
    for i, stack in enumerate(stacks, start=1):
        out.append(profile(stack, num_tokens, engine=engine, dtype=dtype))
        if progress is not None:
            progress(i, len(stacks))
    return out
