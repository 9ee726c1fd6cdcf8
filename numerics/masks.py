"""Attention masks: which tokens j a token i may read (THEORY.md, Notation).

Every mask here is described by two numbers, which is all the structured
engine needs:

* ``past_window`` w: token i reads past tokens j with i - j <= w - 1
  (``None`` means no limit, i.e. every j <= i);
* ``bidirectional_length(N)`` K: tokens i < K also read *later* tokens j < K.

=================  ===============  =========================
mask               past_window      bidirectional_length(N)
=================  ===============  =========================
Causal             None             0
SlidingWindow(w)   w                0
Prefix(k)          None             min(k, N)
Full               None             N
=================  ===============  =========================

Bidirectional ALiBi uses the symmetric distance -m |i - j| (a deliberate
difference from the reference implementation, which rewards reading far
into the future with +m (j - i); see README).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Causal:
    """j <= i: the decoder mask. Kernels are lower triangular (C1 applies)."""

    name = "causal"
    past_window: int | None = None

    def bidirectional_length(self, num_tokens: int) -> int:
        return 0


@dataclass(frozen=True)
class SlidingWindow:
    """i - width + 1 <= j <= i: causal with a finite look-back of ``width`` tokens."""

    width: int
    name = "sliding_window"

    def __post_init__(self):
        if int(self.width) < 1:
            raise ValueError(f"sliding window width must be >= 1, got {self.width}")

    @property
    def past_window(self) -> int:
        return int(self.width)

    def bidirectional_length(self, num_tokens: int) -> int:
        return 0


@dataclass(frozen=True)
class Prefix:
    """Bidirectional among the first ``length`` tokens, causal after them."""

    length: int
    name = "prefix"
    past_window: int | None = None

    def __post_init__(self):
        if int(self.length) < 0:
            raise ValueError(f"prefix length must be >= 0, got {self.length}")

    def bidirectional_length(self, num_tokens: int) -> int:
        return min(int(self.length), num_tokens)


@dataclass(frozen=True)
class Full:
    """Every token reads every token."""

    name = "full"
    past_window: int | None = None

    def bidirectional_length(self, num_tokens: int) -> int:
        return num_tokens


Mask = Causal | SlidingWindow | Prefix | Full


def allowed(mask: Mask, num_tokens: int) -> np.ndarray:
    """Dense boolean matrix M[i, j] = token i may read token j (for dense engines and tests)."""
    i = np.arange(num_tokens)[:, None]
    j = np.arange(num_tokens)[None, :]
    past = j <= i
    if mask.past_window is not None:
        past &= i - j <= mask.past_window - 1
    k = mask.bidirectional_length(num_tokens)
    future = (j > i) & (i < k) & (j < k)
    return past | future


def is_lower_triangular(mask: Mask, num_tokens: int) -> bool:
    """True when every kernel under this mask is causal (lower triangular)."""
    return mask.bidirectional_length(num_tokens) <= 1
