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
