"""Relative positional biases b(g) on distances g = |i - j| >= 0 (THEORY.md, C7).

A head whose logits are b(i - j) (past, j <= i) or b_future(j - i) (future, j > i, where
the mask lets a token read later ones) has weights w(g) = e^{b(g)} and cumulative weights
W(n) = sum_{g <= n} w(g); C7(a) gives its row CDF F_i(k) = 1 - W(i - k - 1) / W(i).

A ``Bias`` is a past side and, optionally, a separate future side (``future=None``: the
symmetric b(|i - j|), as ALiBi's -m |i - j| under ``Full``). Each side is one of:

==================  ==============================================  =========================
side                b(g)                                            spec (posbias/bias_spec.py)
==================  ==============================================  =========================
``Alibi(m)``        -m g, m >= 0                                    ``alibi:M``
``KerpleLog``       -r1 log(1 + r2 g), r2 >= 0                      ``kerple-log:R1,R2``
``KerplePower``     -r1 g^r2, r2 >= 0 (0^0 = 1)                     ``kerple-power:R1,R2``
``T5Buckets``       values[bucket(g)], T5's relative buckets        ``t5:NB,MD:V0,...``
``Table``           values[g] for g < L; beyond: values[L-1], or    ``table:V0,...`` /
                    -inf (a window of L tokens)                     ``window-table:V0,...``
``Function``        a vectorised callable g -> b(g) (an expression  ``expr:...``
                    in g lambdified on the product side)
==================  ==============================================  =========================

``Bias.values(n)`` evaluates both sides at g = 0 .. n-1 in float64 (-inf only where a
window table gives no weight) and refuses (``StackError``) a value that is NaN, not real,
or +-inf where it must be finite: b(0) is always finite, so every row keeps its own position.
No SymPy here: expressions are parsed and lambdified in posbias/bias_spec.py and
arrive as NumPy callables.

Examples
--------
>>> Bias(KerpleLog(1.0, 1.0)).values(3)[0].round(4).tolist()
[-0.0, -0.6931, -1.0986]
>>> Bias(Alibi(0.5)).alibi_slope
0.5
>>> t5_buckets(np.arange(10), num_buckets=8, max_distance=16, bidirectional=False).tolist()
[0, 1, 2, 3, 4, 4, 5, 5, 6, 6]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from posbias.numerics.stack import StackError


def finite_number(name: str, value, *, minimum: float | None = None) -> float:
    """``value`` as a float, refused (one line naming ``name``) unless finite and at least ``minimum``."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise StackError(f"{name}: expected a number, got {value!r}") from None
    if not math.isfinite(x):
        raise StackError(f"{name}: {x!r} is not finite, expected a finite number")
    if minimum is not None and x < minimum:
        raise StackError(f"{name}: {x:g} is below {minimum:g}, expected a value >= {minimum:g}")
    return x


@dataclass(frozen=True)
class Alibi:
    """b(g) = -m g (ALiBi), m >= 0."""

    slope: float

    def __post_init__(self):
        object.__setattr__(self, "slope", finite_number("alibi slope", self.slope, minimum=0.0))

    @property
    def spec(self) -> str:
        return f"alibi:{self.slope!r}"

    def __call__(self, g: np.ndarray) -> np.ndarray:
        return -self.slope * g


@dataclass(frozen=True)
class KerpleLog:
    """b(g) = -r1 log(1 + r2 g) (Kerple's logarithmic variant), r2 >= 0."""

    r1: float
    r2: float

    def __post_init__(self):
        object.__setattr__(self, "r1", finite_number("kerple-log r1", self.r1))
        object.__setattr__(self, "r2", finite_number("kerple-log r2", self.r2, minimum=0.0))

    @property
    def spec(self) -> str:
        return f"kerple-log:{self.r1!r},{self.r2!r}"

    def __call__(self, g: np.ndarray) -> np.ndarray:
        return -self.r1 * np.log1p(self.r2 * g)


@dataclass(frozen=True)
class KerplePower:
    """b(g) = -r1 g^r2 (Kerple's power variant), r2 >= 0, with 0^0 = 1 (r2 = 0: a constant)."""

    r1: float
    r2: float

    def __post_init__(self):
        object.__setattr__(self, "r1", finite_number("kerple-power r1", self.r1))
        object.__setattr__(self, "r2", finite_number("kerple-power r2", self.r2, minimum=0.0))

    @property
    def spec(self) -> str:
        return f"kerple-power:{self.r1!r},{self.r2!r}"

    def __call__(self, g: np.ndarray) -> np.ndarray:
        return -self.r1 * np.power(g, self.r2)


def t5_buckets(
    distance: np.ndarray, *, num_buckets: int, max_distance: int, bidirectional: bool, future: bool = False
) -> np.ndarray:
    """T5's relative-position bucket of each distance g >= 0 (past: memory j = i - g; ``future``:
    j = i + g), transcribed from T5's ``_relative_position_bucket`` with relative position
    j - i, including its float32 arithmetic (log of a float32 quotient, divided by the float32
    of log(max_distance / max_exact), times the float32 bucket count, truncated):

    * bidirectional: half the buckets per direction, the future half offset by num_buckets // 2;
    * unidirectional (decoders): every future position falls in bucket 0;
    * with n = num_buckets (halved if bidirectional) and max_exact = n // 2: distances below
      max_exact are their own bucket, larger ones max_exact + floor(log(g / max_exact) /
      log(max_distance / max_exact) (n - max_exact)), at most n - 1.

    Float32 arithmetic can put a distance on an exact bucket boundary one bucket lower than
    real arithmetic would (e.g. n = 17, max_distance = 27, g = 12, where (12/8)^9 = (27/8)^3);
    T5's own code does the same, so trained T5 biases are indexed this way.
    """
    g = np.asarray(distance, dtype=np.int64)
    n = int(num_buckets)
    offset = np.zeros_like(g)
    if bidirectional:
        n //= 2
        if future:
            offset = np.where(g > 0, n, 0)
    elif future:
        g = np.zeros_like(g)  # -min(j - i, 0) = 0 for every later j
    max_exact = n // 2
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = g.astype(np.float32) / np.float32(max_exact)
        scaled = np.log(ratio) / np.float32(math.log(max_distance / max_exact)) * np.float32(n - max_exact)
        large = max_exact + np.where(g >= max_exact, scaled, 0).astype(np.int64)
    large = np.minimum(large, n - 1)
    return offset + np.where(g < max_exact, g, large)


@dataclass(frozen=True)
class T5Buckets:
    """b(g) = values[bucket(g)] with T5's bucketing (``t5_buckets``); ``values`` has one entry per
    bucket (num_buckets of them; the future half used only by ``future=True`` sides)."""

    num_buckets: int
    max_distance: int
    values: tuple[float, ...]
    bidirectional: bool = False
    future: bool = False

    def __post_init__(self):
        nb, md = int(self.num_buckets), int(self.max_distance)
        if nb != self.num_buckets or nb < (4 if self.bidirectional else 2):
            raise StackError(
                f"t5 num_buckets: expected an integer >= {4 if self.bidirectional else 2}, got {self.num_buckets!r}"
            )
        half = (nb // 2 if self.bidirectional else nb) // 2
        if md != self.max_distance or md <= half:
            raise StackError(
                f"t5 max_distance: expected an integer > {half} (the exact buckets), got {self.max_distance!r}"
            )
        values = tuple(finite_number(f"t5 bucket {k} value", v) for k, v in enumerate(self.values))
        if len(values) != nb:
            raise StackError(f"t5 values: expected {nb} bucket values (one per bucket), got {len(values)}")
        object.__setattr__(self, "num_buckets", nb)
        object.__setattr__(self, "max_distance", md)
        object.__setattr__(self, "values", values)

    @property
    def spec(self) -> str:
        kind = "t5-bidirectional" if self.bidirectional else "t5"
        return f"{kind}:{self.num_buckets},{self.max_distance}:" + ",".join(repr(v) for v in self.values)

    def __call__(self, g: np.ndarray) -> np.ndarray:
        buckets = t5_buckets(
            g,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
            bidirectional=self.bidirectional,
            future=self.future,
        )
        return np.asarray(self.values, dtype=np.float64)[buckets]


@dataclass(frozen=True)
class Table:
    """b(g) = values[g] for g < L = len(values); beyond L: values[L - 1] (``window=False``) or
    -inf (``window=True``: a head that reads only the L nearest positions)."""

    values: tuple[float, ...]
    window: bool = False

    def __post_init__(self):
        values = tuple(finite_number(f"bias table entry {k}", v) for k, v in enumerate(self.values))
        if not values:
            raise StackError("bias table: expected at least one value b(0), got none")
        object.__setattr__(self, "values", values)

    @property
    def spec(self) -> str:
        return ("window-table:" if self.window else "table:") + ",".join(repr(v) for v in self.values)

    def __call__(self, g: np.ndarray) -> np.ndarray:
        table = np.asarray(self.values, dtype=np.float64)
        inside = g < table.shape[0]
        beyond = -np.inf if self.window else table[-1]
        return np.where(inside, table[np.minimum(g, table.shape[0] - 1)], beyond)


@dataclass(frozen=True)
class Function:
    """b(g) = function(g) for a vectorised callable of float64 distances (``spec`` names it; two
    functions are the same bias when their specs are equal). A complex result is returned as it
    is (never cast to real, which would drop its imaginary part): ``Bias.values`` refuses one
    with a non-zero imaginary part at any distance it evaluates."""

    spec: str
    function: Callable[[np.ndarray], np.ndarray] = field(compare=False, repr=False)

    def __call__(self, g: np.ndarray) -> np.ndarray:
        out = np.asarray(self.function(g.astype(np.float64)))
        out = out if np.iscomplexobj(out) else out.astype(np.float64)
        return np.broadcast_to(out, g.shape)  # a constant expression returns a scalar


def _t5_future(side) -> T5Buckets | None:
    """The future side that goes with a bidirectional T5 past side (None for any other side)."""
    if isinstance(side, T5Buckets) and side.bidirectional and not side.future:
        return T5Buckets(side.num_buckets, side.max_distance, side.values, True, future=True)
    return None


Side = Alibi | KerpleLog | KerplePower | T5Buckets | Table | Function


@dataclass(frozen=True)
class Bias:
    """A relative bias: ``past`` b(g) for j = i - g and ``future`` (None: the same b(g)) for j = i + g."""

    past: Side
    future: Side | None = None

    @property
    def spec(self) -> str:
        if self.future is None or self.future == _t5_future(self.past):
            return self.past.spec  # t5-bidirectional:... names both sides
        return f"{self.past.spec}|{self.future.spec}"

    @property
    def alibi_slope(self) -> float | None:
        """m when b(g) = -m g on both sides (an ALiBi head: posbias.numerics.bias_stack recognises it)."""
        if not isinstance(self.past, Alibi):
            return None
        if self.future is None or (isinstance(self.future, Alibi) and self.future.slope == self.past.slope):
            return self.past.slope
        return None

    def alibi_slope_at(self, num_tokens: int) -> float | None:
        """m >= 0 when b(g) = b(0) - m g at every distance g < ``num_tokens`` on both sides, else None.

        ``Alibi`` sides give their slope exactly (``alibi_slope``). Any other side (Kerple-power
        with r2 = 1, a constant, a linear table or expression) is evaluated at g = 0 .. n-1; the
        constant b(0) cancels in every row (C4(a)), so softmax sees only the differences
        d(g) = b(g) - b(0), and the side is accepted when d lies within 4 ulp of max |d| of the
        line -m g through d(0) = 0 and d(n-1) (the tolerance covers the rounding of forming d and
        the line). The ALiBi engines then compute with -m g instead of the given values, a logit
        difference of at most 4 ulp of max |d|, i.e. a relative change of at most about that size
        in each weight, however large b(0) is. A window table shorter than n, NaN or infinite
        values or differences, or a rising line are not ALiBi."""
        exact = self.alibi_slope
        if exact is not None:
            return exact
        n = int(num_tokens)
        past, future = self.values(n)
        if self.future is not None and not np.array_equal(past, future):
            return None
        if not np.all(np.isfinite(past)):
            return None
        if n == 1:
            return 0.0
        with np.errstate(over="ignore", invalid="ignore"):
            d = past - past[0]
        if not np.all(np.isfinite(d)):
            return None
        m = -float(d[-1]) / (n - 1)
        if not (math.isfinite(m) and m >= 0.0):
            return None
        line = -m * np.arange(n, dtype=np.float64)
        tolerance = 4.0 * np.finfo(np.float64).eps * float(np.max(np.abs(d)))
        return m if float(np.max(np.abs(d - line))) <= tolerance else None

    def values(self, num_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """(past b(g), future b(g)) at g = 0 .. n-1, float64; future[0] is not a future distance
        (set equal to past[0]). Refuses values that are NaN, +inf, -inf outside a window, or not
        real (a complex value with a non-zero imaginary part, e.g. expr:(-g)^(1/3) at g >= 1)."""
        g = np.arange(int(num_tokens), dtype=np.int64)
        past = self._side(self.past, g, "past")
        future = past if self.future is None else self._side(self.future, g, "future")
        future = future.copy()
        future[0] = past[0]
        return past, future

    def _side(self, side: Side, g: np.ndarray, name: str) -> np.ndarray:
        with np.errstate(all="ignore"):
            try:
                values = np.asarray(side(g))
                if np.iscomplexobj(values):
                    unreal = np.imag(values) != 0  # NaN imaginary parts included
                    if unreal.any():
                        k = int(np.flatnonzero(unreal)[0])
                        raise StackError(
                            f"bias {side.spec!r}: {name} b({k}) = {complex(values[k])!r} is not real, "
                            "expected a finite real expression"
                        )
                    values = np.real(values)
                values = values.astype(np.float64)
            except StackError:
                raise
            except (ArithmeticError, ValueError, TypeError) as exc:
                raise StackError(f"bias {side.spec!r}: {name} side cannot be evaluated ({exc})") from None
        windowed = isinstance(side, Table) and side.window
        bad = np.isnan(values) | (values == np.inf) | ((values == -np.inf) & (not windowed or g == 0))
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise StackError(f"bias {side.spec!r}: {name} b({k}) = {float(values[k])!r}, expected a finite value")
        return values
