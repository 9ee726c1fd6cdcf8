"""Whole-stack rollout profiles in C (numerics/native/alibi_layer.c), called with ctypes.

``profile`` computes p = e_{N-1}^T R^(T-1) ... R^(0) for an ALiBi + content stack in
O(T H N) time and O(threads N) memory: heads are split across threads (pthreads), the
row normalisers S_i are evaluated on the fly (no (H, N) array), and an optional
extended-range mode keeps v in block floating point (float64 mantissas, one integer
base-2 exponent per block of ``block_size`` tokens), so that profiles far below 1e-308
come back as finite log-probabilities. See the C file's header for the mathematics and
the error analysis. ctypes releases the GIL during the call.

The library is compiled on first use with the C compiler (``$CC``, else ``cc``/``gcc``):
``cc -O3 -shared -fPIC -pthread``, cached under ``$XDG_CACHE_HOME/posbias``
(``~/.cache/posbias``) keyed by the hash of the source and the folder's headers (``exp_taylor.h``).
``POSBIAS_NATIVE=0`` disables it (``available()`` is then False). Float64 only.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SOURCE = Path(__file__).with_name("native") / "alibi_layer.c"
D_CLIP = 600.0  # |d| clip, as in alibi_layer.c
MAX_SLOPE = 700.0  # r = e^{-m} and 1/r stay finite normal numbers
DEFAULT_BLOCK = 256  # tokens per exponent block (extended mode); refined 256 -> 32 -> 4 -> 1 on need
HEAD_GROUP = 8  # heads per SIMD group (HB in alibi_layer.c); groups are split across threads
_EMPTY = -(1 << 40)  # exponent of an all-zero block (EMPTY in alibi_layer.c)
GUARD = 2.0**-900  # guarded linear mode: smallest support entry kept (GUARD in alibi_layer.c)

_ERRORS = {
    1: "an entry would lose relative precision: its value is not 2^100 above what float64 "
    "flushed into it, i.e. the entries of a block span more than float64's exponent range; "
    "use a smaller block_size (single-token blocks do not fail)",
    2: "non-finite value",
    3: "out of memory",
    4: "invalid arguments",
    5: "could not start threads",
}


class NativeError(RuntimeError):
    """The C kernel refused or failed; ``code``, ``layer`` and ``position`` say where."""

    def __init__(self, code: int, layer: int, position: int):
        self.code, self.layer, self.position = code, layer, position
        where = f" at layer {layer}, position {position}" if layer >= 0 else ""
        super().__init__(f"native profile failed (code {code}: {_ERRORS.get(code, 'unknown')}){where}")


class NativeRangeError(NativeError):
    """Extended mode (code 1): an entry's value would lose relative precision because the
    entries of its block span more than float64's exponent range (never with block_size 1)."""


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "posbias"


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


def compile_source(path: Path = SOURCE) -> Path:
    """Compile a kernel source of numerics/native/ (cached by its hash) and return the library's path."""
    compiler = _compiler()
    if compiler is None:
        raise OSError("no C compiler found (set CC)")
    if os.environ.get("POSBIAS_NATIVE", "1") == "0":
        raise OSError("the native kernel is disabled (POSBIAS_NATIVE=0)")
    source = path.read_bytes() + b"".join(h.read_bytes() for h in sorted(path.parent.glob("*.h")))  # includes
    key = hashlib.sha256(source + compiler.encode()).hexdigest()[:16]
    stem = "posbias_native" if path == SOURCE else f"posbias_{path.stem}"
    lib = _cache_dir() / f"{stem}-{key}.so"
    if lib.exists():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:
        built = Path(tmp) / lib.name
        cmd = [compiler, "-O3", "-shared", "-fPIC", "-pthread", str(path), "-o", str(built), "-lm"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise OSError(f"compiling {path.name} failed:\n{proc.stderr}")
        os.replace(built, lib)  # atomic: a concurrent reader sees the old or the new file
    return lib


_I64 = ctypes.c_int64
_PD = ctypes.POINTER(ctypes.c_double)
_PI = ctypes.POINTER(ctypes.c_int64)


@functools.cache
def _library() -> ctypes.CDLL:
    handle = ctypes.CDLL(str(compile_source()))
    handle.posbias_profile.restype = ctypes.c_int
    handle.posbias_profile.argtypes = [
        _I64,
        _I64,
        _I64,
        _PD,
        _PD,
        _PD,
        _PD,
        _I64,
        _I64,
        _I64,
        _I64,
        _I64,
        _PD,
        _PI,
        _PI,
        _PD,
        _PD,
        _PI,
    ]
    handle.posbias_profile_batch.restype = ctypes.c_int
    handle.posbias_profile_batch.argtypes = [
        _I64,
        _I64,
        _I64,
        _I64,
        _PD,
        _PD,
        _PD,
        _PD,
        _I64,
        _I64,
        _I64,
        _I64,
        _PD,
        _PI,
        _PD,
        _PD,
        _PI,
    ]
    handle.posbias_geometric.restype = ctypes.c_int
    handle.posbias_geometric.argtypes = [ctypes.c_double, _I64, _I64, _PI, _PD]
    return handle


def library() -> ctypes.CDLL:
    """The compiled library; raises OSError (with the compiler's message) where it cannot be built."""
    if os.environ.get("POSBIAS_NATIVE", "1") == "0":
        raise OSError("the native kernel is disabled (POSBIAS_NATIVE=0)")
    return _library()


@functools.cache
def available() -> bool:
    """Compile (once per source) and load the kernel; False if disabled or impossible."""
    return loadable(library)


def loadable(load: Callable[[], object]) -> bool:
    """Whether a kernel of numerics/native/ is enabled (``POSBIAS_NATIVE`` is not 0) and ``load()``
    compiles and loads it (once per source: the loaders cache); False, never an error, otherwise."""
    if os.environ.get("POSBIAS_NATIVE", "1") == "0":
        return False
    try:
        load()
    except (OSError, AttributeError):
        return False
    return True


@dataclass(frozen=True)
class NativeState:
    """v = mantissas * 2^exponents[block] after the layers ``next_layer`` .. T-1 (top-down).

    Linear mode: one block, exponent 0 (mantissas are the values). ``support_start``: every
    position >= it is structurally non-zero, every position below it exactly zero.
    """

    mantissas: np.ndarray  # (N,) float64
    exponents: np.ndarray  # (ceil(N / block_size),) int64
    block_size: int
    extended: bool
    support_start: int
    next_layer: int  # layers 0 .. next_layer-1 remain to be applied

    @classmethod
    def initial(cls, num_tokens: int, num_layers: int, *, extended: bool, block_size: int = DEFAULT_BLOCK):
        """v = e_{N-1}, nothing applied yet."""
        block = block_size if extended else num_tokens
        mant = np.zeros(num_tokens)
        mant[-1] = 0.5 if extended else 1.0
        exps = np.zeros(-(-num_tokens // block), dtype=np.int64)
        if extended:
            exps[:] = _EMPTY
            exps[-1] = 1
        return cls(mant, exps, block, extended, num_tokens - 1, num_layers)

    def refined(self, block_size: int) -> NativeState:
        """The same v with blocks of ``block_size`` tokens (a divisor of the current size)."""
        if not self.extended or self.block_size % block_size:
            raise ValueError(f"cannot refine blocks of {self.block_size} into blocks of {block_size}")
        n = self.mantissas.shape[0]
        nb = -(-n // block_size)
        pad = nb * block_size - n
        mant = np.concatenate([self.mantissas, np.zeros(pad)]).reshape(nb, block_size)
        old = np.repeat(self.exponents, self.block_size // block_size)[:nb]
        peak = mant.max(axis=1)
        _, shift = np.frexp(peak)
        empty = peak == 0
        shift = np.where(empty, 0, shift).astype(np.int64)
        mant = np.ldexp(mant, -shift[:, None]).reshape(-1)[:n]
        exps = np.where(empty | (old == _EMPTY), _EMPTY, old + shift).astype(np.int64)
        return NativeState(mant, exps, block_size, True, self.support_start, self.next_layer)

    def to_extended(self, block_size: int = DEFAULT_BLOCK) -> NativeState:
        """The same v (a linear state) in block floating point with blocks of ``block_size`` tokens:
        exact (mantissas and exponents by frexp, no rounding)."""
        if self.extended:
            raise ValueError("the state is already in extended range")
        n = self.mantissas.shape[0]
        nb = -(-n // block_size)
        mant = np.concatenate([self.mantissas, np.zeros(nb * block_size - n)]).reshape(nb, block_size)
        peak = mant.max(axis=1)
        _, shift = np.frexp(peak)
        empty = peak == 0
        shift = np.where(empty, 0, shift).astype(np.int64)
        mant = np.ldexp(mant, -shift[:, None]).reshape(-1)[:n]
        exps = np.where(empty, _EMPTY, shift).astype(np.int64)
        return NativeState(mant, exps, block_size, True, self.support_start, self.next_layer)

    def log_values(self) -> np.ndarray:
        """log v (-inf where v = 0)."""
        with np.errstate(divide="ignore"):
            logm = np.log(self.mantissas)
        if not self.extended:
            return logm
        e = np.repeat(self.exponents, self.block_size)[: self.mantissas.shape[0]].astype(np.float64)
        return np.where(self.mantissas > 0, logm + e * np.log(2.0), -np.inf)

    def values(self) -> np.ndarray:
        """v in linear float64 (exact zeros where it underflows)."""
        if not self.extended:
            return self.mantissas.copy()
        e = np.repeat(self.exponents, self.block_size)[: self.mantissas.shape[0]]
        v = np.ldexp(self.mantissas, np.clip(e, -2000, 2000).astype(np.int32))
        return np.where(v >= np.finfo(np.float64).tiny, v, 0.0)  # no subnormals, as in linear mode


@dataclass(frozen=True)
class NativeProfile:
    """Result of ``profile`` over the layers ``layers`` = (start, stop) (applied stop-1 .. start).

    probabilities: (N,) linear (exact zeros where underflowed); log_probabilities: (N,)
    (finite wherever the mask structure allows mass in extended mode); min_self_weight and
    last_self_weight: (stop - start,), ordered by layer index: min_i alphabar_i and
    alphabar_{N-1} of each layer (alphabar = head-weighted mean self-weight).
    state: continue with ``profile(..., state=result.state)`` while state.next_layer > 0.
    """

    probabilities: np.ndarray
    log_probabilities: np.ndarray
    min_self_weight: np.ndarray
    last_self_weight: np.ndarray
    path: str
    layers: tuple[int, int]
    state: NativeState


def _f64(x, shape, name):
    a = np.ascontiguousarray(x, dtype=np.float64)
    if a.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite")
    return a


def _checked(lam, m, w, num_tokens, past_window, bidirectional_length) -> tuple[int, int, int]:
    """The checks ``profile`` and ``profile_batch`` share; returns (N, window or 0, K)."""
    if not np.all(np.isfinite(lam)) or np.any((lam < 0) | (lam > 1)):
        raise ValueError("lambdas must lie in [0, 1]")
    if np.any(m < 0) or np.any(m > MAX_SLOPE):
        raise ValueError(f"slopes must lie in [0, {MAX_SLOPE}]")
    if np.any(w < 0):
        raise ValueError("weights must be >= 0")
    n = int(num_tokens)
    if n < 1:
        raise ValueError("num_tokens must be >= 1")
    window = 0 if past_window is None else int(past_window)
    if past_window is not None and window < 1:
        raise ValueError("past_window must be >= 1 (or None)")
    k = min(int(bidirectional_length), n)
    if k < 0:
        raise ValueError("bidirectional_length must be >= 0")
    if window and k > 1:
        raise ValueError("a sliding window cannot be combined with a bidirectional prefix")
    return n, window, k


def profile(  # noqa: C901 (checks, state, layer range; issue 20 §4)
    lambdas,
    slopes,
    diagonal,
    weights,
    *,
    num_tokens: int,
    past_window: int | None,
    bidirectional_length: int,
    extended: bool = False,
    threads: int | None = None,
    layers: tuple[int, int] | range | None = None,
    state: NativeState | None = None,
    block_size: int = DEFAULT_BLOCK,
    refine: bool = True,
    adaptive: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> NativeProfile:
    """Profile p = e_{N-1}^T R^(T-1) ... R^(0) of an ALiBi + content stack, in C.

    lambdas (T,); slopes, diagonal, weights (T, H) float64, slopes (0 <= m <= 700) and
    diagonal already divided by the softmax temperature (|d| is clipped to 600), weight
    rows summing to 1. past_window: w (token i reads j with i - j <= w - 1) or None;
    bidirectional_length K: tokens i < K also read later j < K (0 = causal; not together
    with a window). extended: block floating point (log p finite far below 1e-308).
    threads: worker threads (groups of 8 heads are split among them); default
    os.cpu_count(), capped by the number of head groups and, for tiny problems
    (N H < 2^16), reduced to 1. layers: (start, stop) applies layers stop-1 .. start
    only (default: all remaining, i.e. (0, state.next_layer)); state: continue a previous
    run (its ``state``). block_size: tokens per exponent block (extended mode). refine:
    where an entry's value would lose relative precision (kernel error 1: the entries of a
    block span more than float64's exponent range; contributions of very different sizes
    to one entry, e.g. lambda = 1e-300, are no error), continue from the last completed
    layer with blocks 8 times smaller, down to single tokens, which do not fail (one
    mantissa, one exponent: see the C file's header for the bound, N (H/8 + 1) < ~2^40);
    the final block size is ``result.state.block_size``. adaptive (with extended): start in
    linear mode with a guard and change to block floating point only where needed: the first
    layer that would leave an entry of the support below ``GUARD`` = 2^-900 is re-run from the
    state above it in extended range (exact: the linear state converts to mantissas and
    exponents without rounding). Linear layers are ~1.45x cheaper; a profile that never comes
    near underflow is the linear mode's, to the bit (path "native"), and every other one has
    the extended mode's guarantees (path "native-extended"). In linear mode only terms below
    2^-1022 are flushed, so with every entry >= 2^-900 the flushed parts are below
    N H 2^-122 of an entry. progress: called as progress(layers applied, T) after
    each of ~20 chunks of layers (the same result as one call). Raises NativeRangeError where that is not allowed or
    not possible, NativeError on other failures, OSError where the kernel cannot be built.
    """
    lib = library()
    lam = np.ascontiguousarray(lambdas, dtype=np.float64).reshape(-1)
    t_total = lam.shape[0]
    m = _f64(slopes, (t_total, np.shape(slopes)[-1] if np.ndim(slopes) == 2 else -1), "slopes")
    heads = m.shape[1]
    d = _f64(diagonal, (t_total, heads), "diagonal")
    w = _f64(weights, (t_total, heads), "weights")
    n, window, k = _checked(lam, m, w, num_tokens, past_window, bidirectional_length)
    if threads is None:  # all cores, but not more than there are head groups or work to share
        threads = max(1, min(os.cpu_count() or 1, -(-heads // HEAD_GROUP), (n * heads) >> 15))
    threads = int(threads)
    if threads < 1:
        raise ValueError("threads must be >= 1")

    adaptive = bool(adaptive and extended)
    if state is None:
        state = NativeState.initial(n, t_total, extended=extended and not adaptive, block_size=block_size)
    elif (state.extended != bool(extended) and not adaptive) or state.mantissas.shape != (n,):
        raise ValueError("state does not match num_tokens / extended")
    if layers is None:
        start, stop = 0, state.next_layer
    elif isinstance(layers, range):
        if layers.step != 1:
            raise ValueError("layers must be a contiguous range")
        start, stop = layers.start, layers.stop
    else:
        start, stop = (int(x) for x in layers)
    if not (0 <= start <= stop <= t_total) or stop != state.next_layer:
        raise ValueError(
            f"layers ({start}, {stop}) must end where the state stands (next layer "
            f"{state.next_layer}) within 0 .. {t_total}"
        )

    if progress is not None:
        chunk = max(1, -(-(stop - start) // 20))
        mins, lasts, top = [], [], stop
        while top > start:
            low = max(start, top - chunk)
            part = profile(
                lam,
                m,
                d,
                w,
                num_tokens=n,
                past_window=past_window,
                bidirectional_length=bidirectional_length,
                extended=extended,
                threads=threads,
                layers=(low, top),
                state=state,
                block_size=block_size,
                refine=refine,
                adaptive=adaptive,
            )
            state, top = part.state, low
            mins.insert(0, part.min_self_weight)
            lasts.insert(0, part.last_self_weight)
            progress(t_total - low, t_total)
        if stop == start:
            return profile(
                lam,
                m,
                d,
                w,
                num_tokens=n,
                past_window=past_window,
                bidirectional_length=bidirectional_length,
                extended=extended,
                threads=threads,
                layers=(start, stop),
                state=state,
                adaptive=adaptive,
            )
        return dataclasses.replace(
            part, min_self_weight=np.concatenate(mins), last_self_weight=np.concatenate(lasts), layers=(start, stop)
        )

    count = stop - start
    mins = np.full(count, np.nan)
    lasts = np.full(count, np.nan)
    info = np.full(4, -1, dtype=np.int64)
    ptr: Callable[..., object] = lambda a, t=_PD: a.ctypes.data_as(t)  # noqa: E731
    top = stop
    while top > start:
        # Run layers top-1 .. start from ``state``; on a block whose dynamic range is too wide
        # (extended mode), continue from the last completed layer with smaller blocks.
        mant = state.mantissas.copy()
        exps = state.exponents.copy()
        lo = np.array([state.support_start], dtype=np.int64)
        sl = slice(start, top)
        lam_p, m_p, d_p, w_p = (np.ascontiguousarray(a[sl]) for a in (lam, m, d, w))
        mins_p = np.full(top - start, np.nan)
        lasts_p = np.full(top - start, np.nan)
        rc = lib.posbias_profile(
            n,
            heads,
            top - start,
            ptr(lam_p),
            ptr(m_p),
            ptr(d_p),
            ptr(w_p),
            window,
            k,
            state.block_size,
            1 if state.extended else (2 if adaptive else 0),
            threads,
            ptr(mant),
            ptr(exps, _PI),
            ptr(lo, _PI),
            ptr(mins_p),
            ptr(lasts_p),
            ptr(info, _PI),
        )
        failed = int(info[1]) + start if rc in (1, 2) else start - 1  # layers above it are done
        mins[failed + 1 - start : top - start] = mins_p[failed + 1 - start :]
        lasts[failed + 1 - start : top - start] = lasts_p[failed + 1 - start :]
        if rc in (0, 1, 2):
            state = NativeState(mant, exps, state.block_size, state.extended, int(lo[0]), failed + 1)
        if rc == 0:
            break
        if rc == 1 and adaptive and not state.extended:  # the guard: continue in extended range
            state = state.to_extended(block_size)
            top = failed + 1
            continue
        if rc == 1 and refine and state.block_size > 1:
            finer = state.block_size // 8 if state.block_size % 8 == 0 and state.block_size > 8 else 1
            state = state.refined(finer)
            top = failed + 1
            continue
        layer = failed if rc in (1, 2) else -1
        cls = NativeRangeError if rc == 1 else NativeError
        raise cls(int(rc), layer, int(info[2]))
    new = state
    return NativeProfile(
        probabilities=new.values(),
        log_probabilities=new.log_values(),
        min_self_weight=mins,
        last_self_weight=lasts,
        path="native-extended" if state.extended else "native",
        layers=(start, stop),
        state=new,
    )


@dataclass(frozen=True)
class NativeBatch:
    """Result of ``profile_batch`` for B stacks: row b is what ``profile(..., threads=1)`` gives
    stack b in linear mode (``guarded``: the guarded linear mode), to the bit, where codes[b] == 0.

    probabilities (B, N), min_self_weight and last_self_weight (B, T), support_start (B,),
    codes (B,): 0, or the kernel's error code for that stack (1: the guard stopped it; its row
    then holds a partial state and must not be used).
    """

    probabilities: np.ndarray
    min_self_weight: np.ndarray
    last_self_weight: np.ndarray
    support_start: np.ndarray
    codes: np.ndarray


def profile_batch(
    lambdas,
    slopes,
    diagonal,
    weights,
    *,
    num_tokens: int,
    past_window: int | None,
    bidirectional_length: int,
    guarded: bool = False,
    threads: int | None = None,
) -> NativeBatch:
    """Profiles of B stacks of one shape in one kernel call (``posbias_profile_batch``): lambdas
    (B, T), slopes, diagonal, weights (B, T, H), with the meaning and checks of ``profile``
    (done once for the whole batch). Each stack runs on one thread; ``threads`` workers
    (default: all cores) take the stacks in turn, so no Python runs per stack. ``guarded``:
    a stack that would leave an entry below ``GUARD`` returns code 1 (``profile(...,
    extended=True, adaptive=True)`` then computes it)."""
    lib = library()
    lam = np.ascontiguousarray(lambdas, dtype=np.float64)
    if lam.ndim != 2:
        raise ValueError(f"lambdas must have shape (B, T), got {lam.shape}")
    count, t_total = lam.shape
    shape = (count, t_total, np.shape(slopes)[-1] if np.ndim(slopes) == 3 else -1)
    m = _f64(slopes, shape, "slopes")
    heads = m.shape[2]
    d = _f64(diagonal, shape, "diagonal")
    w = _f64(weights, shape, "weights")
    n, window, k = _checked(lam, m, w, num_tokens, past_window, bidirectional_length)
    threads = int(threads or os.cpu_count() or 1)
    if threads < 1:
        raise ValueError("threads must be >= 1")
    mant = np.empty((count, n))
    lo = np.empty(count, dtype=np.int64)
    mins = np.full((count, t_total), np.nan)
    lasts = np.full((count, t_total), np.nan)
    info = np.full((count, 4), -1, dtype=np.int64)
    ptr: Callable[..., object] = lambda a, t=_PD: a.ctypes.data_as(t)  # noqa: E731
    rc = lib.posbias_profile_batch(
        count,
        n,
        heads,
        t_total,
        ptr(lam),
        ptr(m),
        ptr(d),
        ptr(w),
        window,
        k,
        2 if guarded else 0,
        threads,
        ptr(mant),
        ptr(lo, _PI),
        ptr(mins),
        ptr(lasts),
        ptr(info, _PI),
    )
    if rc != 0:
        raise NativeError(int(rc), -1, -1)
    if t_total == 0:
        info[:, 0] = 0
    return NativeBatch(mant, mins, lasts, lo, info[:, 0].copy())


def geometric_sums(slope: float, lengths, reach: int | None = None) -> np.ndarray:
    """G(L) = sum_{g=1}^L e^{-m g} as the kernel evaluates it (anchors + table); for tests."""
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    reach = int(lengths.max(initial=0)) if reach is None else int(reach)
    out = np.empty(lengths.shape[0])
    rc = library().posbias_geometric(
        float(slope), reach, lengths.shape[0], lengths.ctypes.data_as(_PI), out.ctypes.data_as(_PD)
    )
    if rc != 0:
        raise NativeError(rc, -1, -1)
    return out
