"""ALiBi slopes generated from a head count.

Two named conventions (they agree whenever H is a power of two):

* ``paper``: m_h = 2^(-8h/H), h = 1..H: what the reference configs contain.
* ``hf``: the construction of the transformers library for BLOOM/Falcon: with
  H' the largest power of two <= H, the H' slopes 2^(-8h/H'), h = 1..H', then
  the odd-indexed slopes of 2H', 2^(-4(2k-1)/H'), k = 1..H-H'.
  For H = 112 this is 2^(-h/8), h = 1..64, then 2^(-(2k-1)/16), k = 1..48.
"""

from __future__ import annotations

import numpy as np

CONVENTIONS = ("paper", "hf")


def alibi_slopes(num_heads: int, convention: str = "paper") -> np.ndarray:
    """Return the (H,) float64 slopes of ``num_heads`` heads under ``convention``."""
    if num_heads < 1:
        raise ValueError(f"num_heads must be >= 1, got {num_heads}")
    h = np.arange(1, num_heads + 1, dtype=np.float64)
    if convention == "paper":
        return 2.0 ** (-8.0 * h / num_heads)
    if convention == "hf":
        base = 1 << (num_heads.bit_length() - 1)
        first = 2.0 ** (-8.0 * np.arange(1, base + 1, dtype=np.float64) / base)
        k = np.arange(1, num_heads - base + 1, dtype=np.float64)
        extra = 2.0 ** (-4.0 * (2.0 * k - 1.0) / base)
        return np.concatenate([first, extra])
    raise ValueError(f"unknown slope convention {convention!r}; expected one of {CONVENTIONS}")
