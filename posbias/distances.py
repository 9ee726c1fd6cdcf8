"""Distances between two probability vectors p, q over positions 0 .. N-1 (THEORY.md,
"Comparing with measured influence"):

* ``w1``: Wasserstein-1 on positions divided by N - 1, i.e.
  sum_{k<N-1} |F_p(k) - F_q(k)| / (N - 1) with F the cumulative sums: 0 for equal
  profiles, 1 when all mass sits at opposite ends;
* ``spearman``: Spearman's rank correlation of the entries (average ranks for ties;
  None when either profile is constant, where it is undefined);
* ``total_variation``: (1/2) sum |p - q|, in [0, 1].

Each is one float64 pass over N entries (the cumulative sums of ``w1`` round to about N ulp).

>>> import numpy as np
>>> first, last = np.eye(3)[0], np.eye(3)[2]      # all mass at opposite ends
>>> w1(first, last), total_variation(first, last), spearman(first, last)
(1.0, 1.0, -0.5)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def w1(p: np.ndarray, q: np.ndarray) -> float:
    """Wasserstein-1 between p and q on positions 0 .. N-1, divided by N - 1 (0 for N = 1)."""
    n = len(p)
    if n < 2:
        return 0.0
    return float(np.sum(np.abs(np.cumsum(p)[:-1] - np.cumsum(q)[:-1])) / (n - 1))


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1 .. N, tied entries sharing the mean of their ranks."""
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
    ends = np.r_[starts[1:], len(x)]
    mean_rank = (starts + ends + 1) / 2.0  # ranks starts+1 .. ends, averaged
    ranks = np.empty(len(x))
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


def spearman(p: np.ndarray, q: np.ndarray) -> float | None:
    """Pearson correlation of the average ranks; None when a profile is constant."""
    a, b = average_ranks(p), average_ranks(q)
    a, b = a - a.mean(), b - b.mean()
    denom = math.sqrt(float(a @ a) * float(b @ b))
    return None if denom == 0 else float(a @ b / denom)


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    """(1/2) sum_j |p_j - q_j|."""
    return float(0.5 * np.sum(np.abs(p - q)))


@dataclass(frozen=True)
class Row:
    """One predicted profile against the measured one."""

    name: str
    w1: float
    spearman: float | None
    total_variation: float


def compare(measured: np.ndarray, predictions: dict[str, np.ndarray]) -> list[Row]:
    """A ``Row`` per prediction (same order); inputs must be valid profiles of one length."""
    return [
        Row(name, w1(measured, q), spearman(measured, q), total_variation(measured, q))
        for name, q in predictions.items()
    ]
