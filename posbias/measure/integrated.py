"""Integrated gradients by an error-guided trapezoid rule: one driver for every backend.

Integrated gradients (Sundararajan et al. 2017) attribute f(e) - f(b) to the input positions along the
straight path x(a) = b + a (e - b), a in [0, 1]: with F(a) = f(x(a)) and s_j(a) = (e_j - b_j) . g_j(x(a)),
g_j = df/de_j, the attribution of position j is

    A_j = integral_0^1 s_j(a) da,      and completeness  sum_j A_j = F(1) - F(0)  (since F' = sum_j s_j).

The rule here is the trapezoid rule on nodes 0 = a_0 < ... < a_K = 1,
A_j ~ sum_m (h_m / 2) (s_j(a_m) + s_j(a_m+1)), h_m = a_m+1 - a_m. On each interval the rule's error for the
*sum* over positions is known exactly, because the integral of F' there is F(a_m+1) - F(a_m):

    E_m = F(a_m+1) - F(a_m) - (h_m / 2) (F'(a_m) + F'(a_m+1)),    sum_m E_m = (F(1) - F(0)) - sum_j A_j.

The grid starts uniform with ceil(K/2) intervals; each further step bisects the interval with the largest
|E_m| (the first such, on a tie), one gradient at its midpoint, until there are K intervals: K + 1 gradients
in all, about what the midpoint rule with K steps costs, but spent where the path bends. A model whose
p_top1 has a narrow feature along the path (SmolLM2: a rise by 30x within 2e-4 of a, ``docs/smollm2-gap.md``)
is resolved by bisection where a uniform rule of any affordable K is not. The completeness error
|sum_m E_m| / |F(1) - F(0)| is returned per sequence, as the caller's refusal threshold expects.

Floating point: the host keeps the nodes, F, s and every sum in float64; the device evaluates the gradient
at the node cast to its compute dtype (in float32 a node is exact to 2^-24, deeper bisection than that
only adds intervals of width ~0 whose error is ~0). The rule is exact (E_m = 0) where F is linear in a.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from posbias.runtime.progress import step_done

PointFn = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
"""alphas (B,) -> (F (B,), s (B, N)): each sequence's f and its per-position s_j at its own node."""


def initial_intervals(steps: int) -> int:
    """The uniform grid's number of intervals before any bisection: ceil(K / 2)."""
    return (steps + 1) // 2


def integrate(point: PointFn, steps: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """(attribution A (B, N), completeness error (B,)) of ``batch`` sequences by the error-guided trapezoid
    rule with ``steps`` K intervals (module docstring): K + 1 calls of ``point``, each reported to an enclosing
    progress bar (``posbias.runtime.progress.step_done``)."""
    if steps < 1:
        raise ValueError(f"steps: expected a positive integer, got {steps}")
    start = initial_intervals(steps)
    rows = np.arange(batch)
    alpha = np.zeros((batch, steps + 1))
    value = np.zeros((batch, steps + 1))
    derivative = np.zeros((batch, steps + 1))  # F' = sum_j s_j
    slopes: list[np.ndarray] = []  # node -> (B, N) s_j

    def evaluate(node: int, at: np.ndarray) -> None:
        step_done(node / (steps + 1))
        f, s = point(at)
        s = np.asarray(s, np.float64)
        alpha[:, node] = at
        value[:, node] = np.asarray(f, np.float64)
        derivative[:, node] = s.sum(axis=1)
        slopes.append(s)

    for node in range(start + 1):
        evaluate(node, np.full(batch, node / start))
    left = np.zeros((batch, steps), dtype=np.int64)
    right = np.zeros((batch, steps), dtype=np.int64)
    left[:, :start] = np.arange(start)
    right[:, :start] = np.arange(1, start + 1)
    for count in range(start, steps):
        lo, hi = left[:, :count], right[:, :count]
        error = _interval_errors(alpha, value, derivative, lo, hi)
        worst = np.argmax(np.abs(error), axis=1)
        node = count + 1
        a, c = lo[rows, worst], hi[rows, worst]
        evaluate(node, 0.5 * (alpha[rows, a] + alpha[rows, c]))
        right[rows, worst] = node
        left[:, count], right[:, count] = node, c
    s_nodes = np.stack(slopes, axis=1)  # (B, K + 1, N)
    width = alpha[rows[:, None], right] - alpha[rows[:, None], left]  # (B, K)
    weight = np.zeros((batch, steps + 1))
    np.add.at(weight, (rows[:, None], left), width / 2)
    np.add.at(weight, (rows[:, None], right), width / 2)
    attribution = np.einsum("bk,bkn->bn", weight, s_nodes)
    gap = value[:, start] - value[:, 0]
    error = np.abs(attribution.sum(axis=1) - gap) / np.maximum(np.abs(gap), np.finfo(np.float64).tiny)
    return attribution, error


def _interval_errors(alpha, value, slope, lo, hi) -> np.ndarray:
    """(B, M) E_m of the intervals (lo, hi) (node indices, (B, M)), from node arrays (B, nodes)."""

    def at(arr, idx):
        return np.take_along_axis(arr, idx, axis=1)

    h = at(alpha, hi) - at(alpha, lo)
    return at(value, hi) - at(value, lo) - 0.5 * h * (at(slope, lo) + at(slope, hi))
