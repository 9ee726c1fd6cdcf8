"""Shape of a profile (THEORY.md C6): the one definition of "U-shaped" in posbias.

Pure Python over any sequence whose entries compare (floats, NumPy arrays,
``fractions.Fraction``, SymPy rationals), so the float engines and the exact
certificates of posbias.theorem use the same rule.

Examples
--------
>>> u_shape([3, 1, 2])
True
>>> u_shape([1, 2, 3])
False
>>> from fractions import Fraction as F
>>> u_shape([F(1, 2), F(1, 8), F(3, 8)])
True
>>> middle_mass_ratio([F(1, 2), F(1, 8), F(3, 8)]), lost_in_middle([F(1, 2), F(1, 8), F(3, 8)])
(Fraction(3, 8), True)
"""

from __future__ import annotations


def u_shape(p) -> bool:
    """C6: the minimum over the interior lies strictly below both ends (N >= 3).

    Equivalently: some minimiser of p is interior and p(0), p(N-1) are strictly
    above the minimum.
    """
    p = list(p)
    if len(p) < 3:
        return False
    low = min(p[1:-1])
    return bool(low < p[0] and low < p[-1])


# Graded measures (issue: a phase diagram of the u_shape flag alone is nearly all "yes").

LOST_IN_MIDDLE_THRESHOLD = 0.5
"""``lost_in_middle`` holds when the middle third gets less than this fraction of its
uniform share and less mass than each outer third."""


def thirds(num_tokens: int) -> tuple[slice, slice, slice]:
    """Positions j with j < N/3, N/3 <= j < 2N/3, 2N/3 <= j (integer arithmetic)."""
    a = -(-num_tokens // 3)
    b = -(-2 * num_tokens // 3)
    return slice(0, a), slice(a, b), slice(b, num_tokens)


def _seq(p):
    return p if hasattr(p, "shape") else list(p)


def _total(x):
    return x.sum() if hasattr(x, "sum") else sum(x)


def middle_mass_ratio(p) -> float | None:
    """(sum of p over the middle third) / (its share under the uniform profile, n_mid / N),
    with p normalised by its sum.

    1 for a flat profile; below 1 when the middle is under-used. None when N < 3.
    Exact for Fractions; NumPy arrays are summed by NumPy.
    """
    p = _seq(p)
    n = len(p)
    if n < 3:
        return None
    middle = p[thirds(n)[1]]
    return _total(middle) * n / len(middle) / _total(p)


def lost_in_middle(p, threshold: float = LOST_IN_MIDDLE_THRESHOLD) -> bool | None:
    """The middle third receives less than ``threshold`` of its uniform share and less
    mass than the first third and than the last third (N >= 3, else None)."""
    p = _seq(p)
    ratio = middle_mass_ratio(p)
    if ratio is None:
        return None
    first, middle, last = (_total(p[s]) for s in thirds(len(p)))
    return bool(ratio < threshold and middle < first and middle < last)


def log_middle_measures(log_p, threshold: float = LOST_IN_MIDDLE_THRESHOLD) -> tuple[float | None, bool | None]:
    """(log middle_mass_ratio, lost_in_middle) from a log profile (natural logs, any
    normalisation): the same quantities as ``middle_mass_ratio`` and ``lost_in_middle``,
    decided in log space so that masses far below the float64 range still compare.
    (None, None) when N < 3."""
    import numpy as np

    log_p = np.asarray(log_p, dtype=np.float64)
    n = log_p.size
    if n < 3:
        return None, None
    first, middle, last = (float(np.logaddexp.reduce(log_p[s])) for s in thirds(n))
    total = float(np.logaddexp.reduce(log_p))
    count = thirds(n)[1].stop - thirds(n)[1].start
    log_ratio = middle - total + float(np.log(n / count))
    return log_ratio, bool(log_ratio < np.log(threshold) and middle < first and middle < last)
