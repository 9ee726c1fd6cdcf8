"""Scalar summaries of a profile (THEORY.md: C2(c), C5(a), C6): one frozen ``Summary``.

``summarize(profile, stack)`` renormalises p (the engines' mass defect is reported,
not hidden) and reads its extremes. When some entries are not determined in float64
(``Profile.unresolved``), extremes come from the log profile if it is finite
there (extended-range engines); otherwise they are reported as unresolved (None)
with the count, never as an argmin picked among entries that merely underflowed.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from posbias.numerics.engine import UNDERFLOW, Profile
from posbias.numerics.shape import log_middle_measures, u_shape

if TYPE_CHECKING:
    from posbias.numerics.boundary import Precision


@dataclass(frozen=True)
class DiagonalSummary:
    """min_i P_ii and where (C5(a) identity)."""

    min: float
    argmin: int


@dataclass(frozen=True)
class MatrixSummary:
    """Diagnostics of the full P (dense route)."""

    min_diagonal: float
    max_first_column: float
    mean_row_entropy: float
    max_row_sum_error: float


@dataclass(frozen=True)
class Summary:
    """What ``posbias rollout`` reports about one profile.

    p_first, p_last: p(0), p(N-1) (and their logs); argmin, p_min, log_p_min: the minimum (log_p_min
    finite even where p_min underflows to 0); u_shape: C6 (interior minimum below both
    ends); entropy in nats; sum_lambda = sum_t lambda_t and sum_lambda_delta =
    sum_t lambda_t delta_t with delta_t = 1 - min_i A^(t)_ii (C5(a)); last_token_atom =
    prod_t (1 - lambda_t (1 - A^(t)_{N-1,N-1})) (C2(c), causal stacks only, else None);
    mass_defect = |sum p - 1| before renormalisation; unresolved: entries the engine
    did not determine (extremes are None when they could lie among them).

    Graded shape measures (numerics/shape.py; None where the extremes are unresolved or N < 3):
    argmin_relative = argmin / (N - 1) (0: first token, 1: last); log_dip_depth =
    log(min(p_first, p_last) / p_min) >= 0 from log p (dip_depth = its exp, None beyond
    the float64 range); middle_mass_ratio = mass of the middle third over its share under a
    uniform profile (1: flat; its log in log_middle_mass_ratio, finite below the float64
    range); lost_in_middle = middle_mass_ratio < 0.5 and the middle
    third below each outer third.
    """

    num_layers: int
    num_tokens: int
    num_heads: int | None
    mask: str
    p_first: float | None
    p_last: float | None
    log_p_first: float | None
    log_p_last: float | None
    argmin: int | None
    p_min: float | None
    log_p_min: float | None
    entropy: float
    sum_lambda: float
    sum_lambda_delta: float
    last_token_atom: float | None
    u_shape: bool | None
    mass_defect: float
    engine: str
    path: str
    precision: str = "float64"  # Precision; a str here: posbias.sweep.table reads these hints at run time
    unresolved: int = 0
    argmin_relative: float | None = None
    log_dip_depth: float | None = None
    dip_depth: float | None = None
    middle_mass_ratio: float | None = None
    log_middle_mass_ratio: float | None = None
    lost_in_middle: bool | None = None
    notes: tuple[str, ...] = ()
    diagonal: DiagonalSummary | None = None
    matrix: MatrixSummary | None = None
    provenance: tuple[tuple[str, Any], ...] = field(default=())

    def with_provenance(self, **items) -> Summary:
        """A copy recording where the model came from (e.g. slopes="hf", overrides=[...])."""
        return dataclasses.replace(self, provenance=self.provenance + tuple(items.items()))

    def to_dict(self) -> dict:
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "provenance":
                out.update({k: list(v) if isinstance(v, tuple) else v for k, v in value})
                continue
            if dataclasses.is_dataclass(value) and not isinstance(value, type):  # an instance (never a class)
                value = dataclasses.asdict(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        out["underflow_below_1e-280"] = self.unresolved  # name kept from earlier releases
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def entropy(p: np.ndarray) -> float:
    """Shannon entropy -sum p log p in nats (0 log 0 = 0)."""
    q = p[p > 0]
    return float(-np.sum(q * np.log(q))) + 0.0  # + 0.0: no "-0.0000" for a collapsed profile


def last_token_atom(lambdas: np.ndarray, last_self_weight: np.ndarray) -> float:
    """C2(c): p(N-1) = prod_t (1 - lambda_t (1 - A^(t)[N-1, N-1])) for causal kernels."""
    return float(np.prod(1.0 - lambdas * (1.0 - last_self_weight)))


def normalised(profile: Profile) -> tuple[np.ndarray, np.ndarray, float]:
    """(p / sum p, log p - log sum p, |sum p - 1|): the renormalised profile in both views."""
    p = profile.probabilities
    total = float(np.sum(p))
    if not np.isfinite(total) or total <= 0:
        raise ValueError(f"profile mass is {total!r}; expected a positive finite sum")
    return p / total, profile.log_probabilities - np.log(total), abs(total - 1.0)


def exact_zeros(stack, num_tokens: int) -> np.ndarray:
    """(N,) True where p_j = 0 exactly by the mask's reach: under a causal sliding window of w
    tokens each layer with lambda_t > 0 moves mass at most w - 1 positions back (R^(t) is banded),
    so token N-1 reaches j iff N-1-j <= (w-1) L, L = #{t: lambda_t > 0}. All False for other
    masks and for measured kernels (their zeros are data, not structure)."""
    zeros = np.zeros(int(num_tokens), dtype=bool)
    mask = getattr(stack, "mask", None)
    width = getattr(mask, "past_window", None)
    if width is None or not hasattr(stack, "num_heads") or not stack.causal(num_tokens):
        return zeros
    if hasattr(stack, "distinct_lambdas"):  # PeriodicStack: counted, never T-long
        layers = float(np.dot(stack.counts, stack.distinct_lambdas > 0))
    elif hasattr(stack, "lambdas") and not hasattr(stack, "kernels"):
        layers = float(np.count_nonzero(np.asarray(stack.lambdas)))
    else:
        return zeros
    reach = (int(width) - 1) * layers
    zeros[: max(0, int(num_tokens) - 1 - int(min(reach, num_tokens)))] = True
    return zeros


def summarize(profile: Profile, stack, *, precision: Precision = "float64") -> Summary:
    """The Summary of ``profile`` computed for ``stack`` (an AlibiStack or KernelStack).

    Entries that are exactly 0 by the mask's reach (``exact_zeros``: a sliding window deeper
    than the stack reaches) are reported as 0 (their log as None), not as unresolved."""
    p, logp, defect = normalised(profile)
    n = p.size
    zero = exact_zeros(stack, n)
    lost = profile.unresolved() & ~zero
    if zero.any() and not lost.any():  # p = 0 exactly before N-1-reach: the minimum is there
        k = int(np.argmax(zero))
        argmin, p_min, log_p_min, shape = k, 0.0, None, False
    elif profile.extended_range:  # log p decides (p itself may underflow to 0)
        k = int(np.argmin(logp))
        argmin, p_min, log_p_min, shape = k, float(p[k]), float(logp[k]), u_shape(logp)
    elif not lost.any():
        k = int(np.argmin(p))
        argmin, p_min, log_p_min, shape = k, float(p[k]), float(logp[k]), u_shape(p)
    else:  # the minimum may sit among entries this engine did not determine
        argmin = p_min = log_p_min = shape = None

    def end(j):
        if zero[j]:
            return 0.0, None
        return (None, None) if lost[j] else (float(p[j]), float(logp[j]))

    graded = _graded(logp, n, argmin, log_p_min, end(0)[1], end(-1)[1])
    causal = stack.causal(n)
    if hasattr(stack, "sum_lambda_delta"):  # a compact stack (PeriodicStack): no T-long arrays, one
        sum_lambda = stack.sum_lambda()  # self-weight per distinct layer in the profile
        sum_lambda_delta = stack.sum_lambda_delta(profile.min_self_weight)
        atom = stack.last_token_atom(profile.last_self_weight) if causal else None
    else:
        lambdas = np.asarray(stack.lambdas)
        sum_lambda = float(np.sum(lambdas))
        sum_lambda_delta = float(np.sum(lambdas * (1.0 - profile.min_self_weight)))
        atom = last_token_atom(lambdas, profile.last_self_weight) if causal else None
    return Summary(
        num_layers=int(stack.num_layers),
        num_tokens=n,
        num_heads=stack.num_heads,
        mask=stack.mask_name,
        p_first=end(0)[0],
        p_last=end(-1)[0],
        log_p_first=end(0)[1],
        log_p_last=end(-1)[1],
        argmin=argmin,
        p_min=p_min,
        log_p_min=log_p_min,
        entropy=entropy(p),
        sum_lambda=sum_lambda,
        sum_lambda_delta=sum_lambda_delta,
        last_token_atom=atom,
        u_shape=shape,
        mass_defect=defect,
        engine=profile.engine,
        path=profile.path,
        precision=precision,
        unresolved=int(lost.sum()) if not profile.extended_range else 0,
        notes=profile.notes,
        **graded,
    )


def _graded(logp, n, argmin, log_p_min, log_first, log_last) -> dict:
    """The graded shape measures (see ``Summary``), from log p so that masses below the
    float64 range still compare. The thirds' masses are sums, so entries an engine did not
    resolve change them by at most their bound (negligible)."""
    log_ratio, lost = log_middle_measures(logp)
    if log_ratio is not None and not np.isfinite(log_ratio):  # every middle entry lost to underflow
        log_ratio = lost = None
    out: dict[str, float | bool | None] = {"lost_in_middle": lost}
    if log_ratio is not None:
        out["log_middle_mass_ratio"] = log_ratio
        out["middle_mass_ratio"] = float(np.exp(log_ratio))
    if argmin is not None:
        out["argmin_relative"] = argmin / (n - 1) if n > 1 else 0.0
    if None not in (log_p_min, log_first, log_last):
        depth = min(log_first, log_last) - log_p_min
        out["log_dip_depth"] = float(depth)
        out["dip_depth"] = float(np.exp(depth)) if depth < 700 else None
    return out


def summarize_columns(profiles, stacks, *, precision: Precision = "float64") -> dict[str, list]:
    """``summarize(p, s).to_dict()`` for every (profile, stack) pair, as columns: key -> list over
    the batch (the same keys, in the same order, and the same values): ``summary_arrays`` with
    every column as a list."""
    return {
        k: v.tolist() if isinstance(v, np.ndarray) else v
        for k, v in summary_arrays(profiles, stacks, precision=precision).items()
    }


def summary_arrays(profiles, stacks, *, precision: Precision = "float64") -> dict[str, list | np.ndarray]:
    """The columns of ``summarize_columns``; where every row takes the vectorised route, its
    numeric columns come as NumPy arrays (``numpy.ma.MaskedArray`` where some values are None),
    which go to Arrow without a Python object per point.

    Profiles whose entries are all resolved and positive, of stacks with per-layer lambdas
    (``AlibiStack``, or an ``AlibiBatch``, whose arrays are read at once), are summarised
    together on (B, N) arrays (sums and reductions row by row along the last axis of
    C-contiguous arrays, which NumPy computes with the same pairwise / sequential order as on
    one row, so the values are bit-for-bit those of ``summarize``: every field, no ulp
    differences; tests compare); the others (unresolved entries, exact zeros, compact periodic
    stacks) one at a time."""
    count = len(profiles)
    if count != len(stacks):
        raise ValueError(f"expected one stack per profile, got {count} profiles and {len(stacks)} stacks")
    rows = _vectorisable(profiles, stacks)
    columns: dict | None = None
    if rows.size:
        columns = _vector_columns([profiles[i] for i in rows], _rows_of(stacks, rows), precision)
        if rows.size == count:
            return columns
        columns = {k: _scatter(v, rows, count) for k, v in columns.items()}
    fast = set(rows.tolist())
    for i in range(count):
        if i in fast:
            continue
        d = summarize(profiles[i], stacks[i], precision=precision).to_dict()
        if columns is None:
            columns = {k: [None] * count for k in d}
        for k, v in d.items():
            columns[k][i] = v
    return columns if columns is not None else {}


def _scatter(values, rows: np.ndarray, count: int) -> list:
    """A column of the vectorised rows placed at ``rows`` in a list of ``count`` (None elsewhere)."""
    values = values.tolist() if isinstance(values, np.ndarray) else values
    column = [None] * count
    for j, i in enumerate(rows.tolist()):
        column[i] = values[j]
    return column


def _rows_of(stacks, rows: np.ndarray):
    """The stacks at ``rows``: an ``AlibiBatch``'s rows as a batch, else a list."""
    from posbias.numerics.batch import AlibiBatch

    if isinstance(stacks, AlibiBatch):
        return stacks if rows.size == len(stacks) else stacks.take(rows)
    return [stacks[i] for i in rows]


def _vectorisable(profiles, stacks) -> np.ndarray:
    """The rows ``_vector_columns`` may take: one N and T, per-layer lambdas (not periodic, not
    measured kernels), exact engines (resolution 0), every entry positive with a finite log
    (so nothing is unresolved and no entry is an exact zero of the mask's reach)."""
    from posbias.numerics.batch import AlibiBatch

    batch = isinstance(stacks, AlibiBatch)
    rows = [
        i
        for i, pr in enumerate(profiles)
        if pr.resolution == 0
        and pr.probabilities.ndim == 1
        and (
            batch
            or (
                hasattr(stacks[i], "lambdas")
                and not hasattr(stacks[i], "kernels")
                and not hasattr(stacks[i], "sum_lambda_delta")
            )
        )
    ]
    if (
        not rows
        or len({profiles[i].num_tokens for i in rows}) > 1
        or (not batch and len({stacks[i].num_layers for i in rows}) > 1)
    ):
        return np.array([], dtype=np.int64)
    prob = np.stack([profiles[i].probabilities for i in rows])
    logs = np.stack([profiles[i].log_probabilities for i in rows])
    good = np.all(prob > 0, axis=1) & np.all(np.isfinite(logs), axis=1) & np.all(prob >= UNDERFLOW, axis=1)
    rows = [i for i, g in zip(rows, good) if g]
    n = profiles[rows[0]].num_tokens if rows else 0
    if batch and stacks.mask.past_window is None:
        return np.asarray(rows, dtype=np.int64)
    return np.asarray(
        [
            i
            for i in rows
            if getattr(getattr(stacks[i], "mask", None), "past_window", None) is None
            or not exact_zeros(stacks[i], n).any()
        ],
        dtype=np.int64,
    )


def _vector_columns(profiles, stacks, precision: Precision) -> dict[str, list | np.ndarray]:
    """The columns of ``summary_arrays`` for vectorisable rows: numeric columns as arrays
    (masked where None), strings and notes as lists."""
    from posbias.numerics.batch import AlibiBatch
    from posbias.numerics.shape import LOST_IN_MIDDLE_THRESHOLD, thirds

    prob = np.stack([pr.probabilities for pr in profiles])
    logs = np.stack([pr.log_probabilities for pr in profiles])
    b, n = prob.shape
    total = prob.sum(axis=1)
    if not np.all(np.isfinite(total) & (total > 0)):
        raise ValueError("profile mass is not a positive finite sum")
    p = prob / total[:, None]
    logp = logs - np.log(total)[:, None]
    defect = np.abs(total - 1.0)
    at = np.arange(b)
    k = np.argmin(logp, axis=1)
    low = logp[:, 1:-1].min(axis=1) if n >= 3 else None
    shape = (low < logp[:, 0]) & (low < logp[:, -1]) if n >= 3 else np.zeros(b, bool)
    ent = -np.sum(p * np.log(p), axis=1) + 0.0
    if isinstance(stacks, AlibiBatch):
        lams = np.ascontiguousarray(stacks.lambdas, dtype=np.float64)
        layers, heads = np.full(b, stacks.num_layers), np.full(b, stacks.num_heads)
        masks, causal = [stacks.mask_name] * b, np.full(b, stacks.causal(n))
    else:
        lams = np.stack([np.asarray(s.lambdas) for s in stacks])
        layers, heads = np.array([int(s.num_layers) for s in stacks]), np.array([s.num_heads for s in stacks])
        masks, causal = [s.mask_name for s in stacks], np.array([s.causal(n) for s in stacks])
    mins = np.stack([pr.min_self_weight for pr in profiles])
    lasts = np.stack([pr.last_self_weight for pr in profiles])
    atom = np.prod(1.0 - lams * (1.0 - lasts), axis=1)
    depth = np.minimum(logp[:, 0], logp[:, -1]) - logp[at, k]
    none = [None] * b
    vec: dict[str, list | np.ndarray] = {
        "num_layers": layers,
        "num_tokens": np.full(b, n),
        "num_heads": heads,
        "mask": masks,
        "p_first": p[:, 0],
        "p_last": p[:, -1],
        "log_p_first": logp[:, 0],
        "log_p_last": logp[:, -1],
        "argmin": k,
        "p_min": p[at, k],
        "log_p_min": logp[at, k],
        "entropy": ent,
        "sum_lambda": lams.sum(axis=1),
        "sum_lambda_delta": np.sum(lams * (1.0 - mins), axis=1),
        "last_token_atom": np.ma.masked_array(atom, mask=~causal) if causal.any() else none,
        "u_shape": shape,
        "mass_defect": defect,
        "engine": [pr.engine for pr in profiles],
        "path": [pr.path for pr in profiles],
        "precision": [precision] * b,
        "unresolved": np.zeros(b, np.int64),
        "argmin_relative": k / (n - 1) if n > 1 else np.zeros(b),
        "log_dip_depth": depth,
        "dip_depth": np.ma.masked_array(np.exp(np.minimum(depth, 700.0)), mask=~(depth < 700)),
    }
    if n >= 3:
        first, middle, last = (_log_sum_rows(logp, s) for s in thirds(n))
        whole = _log_sum_rows(logp, slice(0, n))
        mid = thirds(n)[1]
        ratio = middle - whole + float(np.log(n / (mid.stop - mid.start)))
        lost = (ratio < np.log(LOST_IN_MIDDLE_THRESHOLD)) & (middle < first) & (middle < last)
        vec.update(middle_mass_ratio=np.exp(ratio), log_middle_mass_ratio=ratio, lost_in_middle=lost)
    else:
        vec.update(middle_mass_ratio=none, log_middle_mass_ratio=none, lost_in_middle=none)
    vec.update(notes=[list(pr.notes) for pr in profiles], diagonal=list(none), matrix=list(none))
    keys = [f.name for f in dataclasses.fields(Summary) if f.name != "provenance"] + ["underflow_below_1e-280"]
    vec["underflow_below_1e-280"] = vec["unresolved"]
    return {key: vec[key] for key in keys}


def _log_sum_rows(logp: np.ndarray, columns: slice) -> np.ndarray:
    """``np.logaddexp.reduce(logp[:, columns], axis=1)``: the same left fold per row (a reduction
    of a non-reorderable ufunc is one), so the same bits as ``log_middle_measures`` row by row.
    For many rows it folds column by column over the transposed block (B-long vector steps
    instead of a loop per row inside the reduction: about twice as fast at B = 1024)."""
    block = logp[:, columns]
    if block.shape[0] < 16 or block.shape[1] == 0:
        return np.logaddexp.reduce(block, axis=1)
    cols = np.ascontiguousarray(block.T)
    acc = cols[0].copy()
    for j in range(1, cols.shape[0]):
        np.logaddexp(acc, cols[j], out=acc)
    return acc
