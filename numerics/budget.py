"""Memory estimates checked before any allocation, so that a run answers or refuses at once.

Every engine states how many bytes a profile needs (``Engine.memory_bytes``: a
conservative count of the float64 arrays it holds at the same time); ``Engine.profile``
refuses with the estimate when it exceeds the limit, before touching JAX.

The limit is ``POSBIAS_MEMORY_LIMIT`` (bytes, or with a K/M/G/T suffix) when set,
else 80% of the machine's physical memory.

Examples
--------
>>> parse_size("1.5G")
1610612736
>>> describe(3 * 2**30)
'3.0 GiB'
"""

from __future__ import annotations

import math
import os

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_size(text: str) -> int:
    """'1024', '512M', '1.5G' -> bytes."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = text[-1:] if text[-1:] in _UNITS and text[-1:] else ""
    number = float(text[: len(text) - len(unit)])
    if not (number > 0 and math.isfinite(number)):
        raise ValueError(f"expected a positive size, got {text!r}")
    return int(number * _UNITS[unit])


def physical_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def memory_limit() -> int:
    """Bytes a single run may use."""
    env = os.environ.get("POSBIAS_MEMORY_LIMIT")
    if env:
        try:
            return parse_size(env)
        except ValueError:
            raise ValueError(f"POSBIAS_MEMORY_LIMIT: expected a size such as 4G, got {env!r}") from None
    return int(0.8 * physical_memory())


def describe(nbytes: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{int(nbytes)} B"


def stack_bytes(num_layers: int, num_heads: int) -> int:
    """An AlibiStack holds four (T, H) float64 arrays (and building one makes a few temporaries)."""
    return 8 * 8 * int(num_layers) * int(num_heads)


def check(what: str, nbytes: int) -> str | None:
    """None if ``nbytes`` fits the limit, else the one-line reason with the estimate."""
    limit = memory_limit()
    if nbytes > limit:
        return (
            f"{what} needs about {describe(nbytes)} of memory, more than the limit of {describe(limit)} "
            "(set POSBIAS_MEMORY_LIMIT to change it)"
        )
    return None
