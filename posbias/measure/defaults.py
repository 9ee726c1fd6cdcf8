"""Default sizes of a measurement, shared by ``posbias measure`` and ``posbias validate`` on every route.

Examples
--------
>>> default_lengths(64)
(32, 64)
>>> default_lengths(3)
(3,)
"""

from __future__ import annotations

DEFAULT_TOKENS = 256
"""``posbias measure --tokens`` of a Hugging Face checkpoint or GGUF file when not given (at most its context)."""

TRAINED_BATCH_MEMORY = 2**30
"""measure/validate --memory of a posbias train model when not given: the budget of one batch."""


def default_lengths(context: int) -> tuple[int, ...]:
    """The token lengths ``posbias validate`` measures when --tokens is not given: half the context and
    the whole of it (the context alone below 4 tokens)."""
    return (context // 2, context) if context >= 4 else (context,)
