"""Readable text of drawn examples: numbers as exact fractions where the float is one,
matrices row by row, stacks by their fields.

>>> from fractions import Fraction
>>> frac(0.25), frac(1 / 3), frac(Fraction(1, 7)), frac(2 ** 0.5), frac(float("inf"))
('1/4', '1/3', '1/7', '1.41421', 'inf')
>>> print(show_example({"K": np.array([[1.0, 0.0], [0.5, 0.5]]), "mu": np.array([1.0, 0.0])}))
K =
  [  1    0]
  [1/2  1/2]
mu = [1, 0]
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


def frac(x) -> str:
    """x as text: a Fraction, bool or integer as itself; a float as the fraction p/q (q <= 10^4)
    that equals it exactly, else to 6 significant digits."""
    if isinstance(x, Fraction):
        return str(x)
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    x = float(x)
    if not math.isfinite(x):
        return str(x)
    f = Fraction(x).limit_denominator(10**4)
    return str(f) if float(f) == x else f"{x:.6g}"


def show(value, indent: str = "  ") -> str:
    """Readable text of an example value: matrices row by row as exact fractions where the
    float is one (1/3 shows as 1/3 only if it is the float nearest 1/3), stacks by fields."""
    from posbias.numerics.stack import AlibiStack

    if isinstance(value, AlibiStack):
        lines = [
            f"AlibiStack(T={value.num_layers}, H={value.num_heads}, mask={value.mask.spec}, "
            f"tau={frac(value.temperature)})"
        ]
        lines.append(f"{indent}lambdas: " + show(value.lambdas, "").strip())
        for name in ("slopes", "diagonal", "head_weights"):
            arr = getattr(value, name)
            same = bool(np.all(arr == arr[:1]))
            lines.append(
                f"{indent}{name} (per head{'' if same else ', row t = layer t'}): "
                + show(arr[0] if same else arr, indent + "  ").strip("\n ")
                if same
                else f"{indent}{name} (row t = layer t):\n" + show(arr, indent + "  ")
            )
        return "\n".join(lines)
    arr = np.asarray(value) if isinstance(value, (np.ndarray, list)) else None
    if arr is not None and arr.ndim == 2:
        cells = [[frac(x) for x in row] for row in arr]
        width = max((len(c) for row in cells for c in row), default=1)
        return "\n".join(indent + "[" + "  ".join(c.rjust(width) for c in row) + "]" for row in cells)
    if arr is not None and arr.ndim == 3:
        return "\n".join(f"{indent}layer {t}:\n" + show(a, indent + "  ") for t, a in enumerate(arr))
    if arr is not None and arr.ndim == 1:
        return indent + "[" + ", ".join(frac(x) for x in arr) + "]"
    if hasattr(value, "spec"):
        return indent + value.spec
    return indent + frac(value) if isinstance(value, (int, float, Fraction, np.number)) else indent + repr(value)


def show_example(example) -> str:
    """``show`` of an example; a dict as ``key = value`` lines."""
    if isinstance(example, dict):
        parts = []
        for key, value in example.items():
            text = show(value)
            parts.append(f"{key} =\n{text}" if "\n" in text else f"{key} = {text.strip()}")
        return "\n".join(parts)
    return show(example)
