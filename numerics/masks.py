"""Attention masks: which tokens j a token i may read (THEORY.md, Notation).

Every mask here is described by two numbers, which is all the structured
engine needs (and one capability flag, ``reads_future``, derived from them):

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
from typing import ClassVar, Literal, TypeAlias

import numpy as np

MaskName: TypeAlias = Literal["causal", "sliding_window", "prefix", "full"]  # each mask's ``name``


@dataclass(frozen=True)
class Causal:
    """j <= i: the decoder mask. Kernels are lower triangular (C1 applies)."""

    name: ClassVar[MaskName] = "causal"
    spec = "causal"
    past_window: int | None = None
    reads_future = False

    def bidirectional_length(self, num_tokens: int) -> int:
        return 0


@dataclass(frozen=True)
class SlidingWindow:
    """i - width + 1 <= j <= i: causal with a finite look-back of ``width`` tokens."""

    width: int
    name: ClassVar[MaskName] = "sliding_window"
    reads_future = False

    def __post_init__(self):
        if int(self.width) < 1:
            raise ValueError(f"sliding window width must be >= 1, got {self.width}")

    @property
    def past_window(self) -> int:
        return int(self.width)

    @property
    def spec(self) -> str:
        return f"window:{int(self.width)}"

    def bidirectional_length(self, num_tokens: int) -> int:
        return 0


@dataclass(frozen=True)
class Prefix:
    """Bidirectional among the first ``length`` tokens, causal after them."""

    length: int
    name: ClassVar[MaskName] = "prefix"
    past_window: int | None = None

    def __post_init__(self):
        if int(self.length) < 0:
            raise ValueError(f"prefix length must be >= 0, got {self.length}")

    @property
    def reads_future(self) -> bool:
        return int(self.length) > 1

    @property
    def spec(self) -> str:
        return f"prefix:{int(self.length)}"

    def bidirectional_length(self, num_tokens: int) -> int:
        return min(int(self.length), num_tokens)


@dataclass(frozen=True)
class Full:
    """Every token reads every token."""

    name: ClassVar[MaskName] = "full"
    spec = "full"
    past_window: int | None = None
    reads_future = True

    def bidirectional_length(self, num_tokens: int) -> int:
        return num_tokens


Mask = Causal | SlidingWindow | Prefix | Full

MASK_SPECS = "causal, full, window:W or prefix:K"


def parse(spec: str) -> Mask:
    """``causal``, ``full``, ``window:W`` (W >= 1) or ``prefix:K`` (K >= 0).

    >>> parse("window:64")
    SlidingWindow(width=64)
    """
    kind, _, arg = spec.strip().partition(":")
    if kind in ("causal", "full") and not arg:
        return Causal() if kind == "causal" else Full()
    if kind in ("window", "prefix") and arg.strip().isdigit():
        value = int(arg)
        if kind == "window" and value >= 1:
            return SlidingWindow(value)
        if kind == "prefix":
            return Prefix(value)
    raise ValueError(f"mask {spec!r}: expected {MASK_SPECS}")


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
    """True when every N-token kernel under this mask is causal (lower triangular).

    Unlike ``mask.reads_future`` this depends on N: ``Full()`` at N = 1 is lower triangular.
    """
    return mask.bidirectional_length(num_tokens) <= 1


def structured_refuses(mask) -> str | None:
    """Why the structured routes (O(T H N) scans, native kernels) cannot take ``mask``, or None: a past
    window together with reading later tokens (``Prefix(k, past_window=w)``, k > 1), which only the
    dense engines compute."""
    if mask.past_window is not None and mask.reads_future:
        return "a sliding window cannot be combined with a bidirectional prefix (the dense engine computes it)"
    return None
