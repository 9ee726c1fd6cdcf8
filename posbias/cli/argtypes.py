"""Argument types shared by the ``posbias`` subcommands (argparse ``type=`` callables).

>>> at_least(1)("3")
3
>>> at_least(1)("0")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: expected a positive integer, got '0'
>>> integer_in(0, 2**32 - 1)("4294967296")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: expected an integer in [0, 4294967295], got '4294967296'
>>> positive_float("inf")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: expected a finite number > 0, got 'inf'
>>> size("1.5G")
1610612736
>>> path("runs/a")
PosixPath('runs/a')
>>> path("")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: expected a file or folder name, got an empty string
>>> join_negative_values(["--content-diagonal", "-1,2,3", "--tokens", "8", "--sink", "-1e-3"])
['--content-diagonal=-1,2,3', '--tokens', '8', '--sink=-1e-3']
>>> join_negative_values(["--bias", "-m*g;m=0.5", "--json", "--out", "run"])
['--bias=-m*g;m=0.5', '--json', '--out', 'run']
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

# what an option looks like (-h, --tokens, --bias=...); any other argument that starts with a minus sign is
# a value: "-1,2,3", "-1e-3", "-m*g", "-log(1+g)" (argparse takes them for options, and accepts as
# negative numbers only "-1" and "-.5")
_OPTION = re.compile(r"^--?[A-Za-z][A-Za-z0-9_-]*(=.*)?$")


def join_negative_values(argv: list[str]) -> list[str]:
    """``--option -1,2,3`` as ``--option=-1,2,3``: a long option followed by a value that starts with a
    minus sign and does not look like an option (a negative number or list, a formula such as ``-m*g``),
    so that argparse reads the value (it would take it for an unknown option and say "expected one
    argument"); every other argument is left as it is. A bare ``-g`` looks like an option: write
    ``--bias=-g``."""
    out: list[str] = []
    for arg in argv:
        previous = out[-1] if out else ""
        is_value = arg.startswith("-") and arg not in ("-", "--") and not _OPTION.match(arg)
        if is_value and _OPTION.match(previous) and previous.startswith("--") and "=" not in previous:
            out[-1] = f"{previous}={arg}"
        else:
            out.append(arg)
    return out


def at_least(minimum: int):
    """An argparse type: an integer >= ``minimum``, or one line saying what was expected."""
    kind = (
        "a positive integer"
        if minimum == 1
        else ("a non-negative integer" if minimum == 0 else f"an integer >= {minimum}")
    )

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}")
        return value

    return convert


def integer_in(minimum: int, maximum: int):
    """An argparse type: an integer in [``minimum``, ``maximum``], or one line naming the range."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"expected an integer in [{minimum}, {maximum}], got {text!r}")
        return value

    return convert


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0 (``inf`` and ``nan`` parse as floats; they are refused here)."""
    import math

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def size(text: str) -> int:
    """An argparse type: a byte count such as 512M or 2G (``posbias.numerics.budget.parse_size``)."""
    from posbias.numerics.budget import parse_size

    try:
        return parse_size(text)
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"expected a size such as 512M or 2G, got {text!r}") from None


def path(text: str) -> Path:
    """An argparse type: a non-empty path (``Path("")`` would silently mean the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a file or folder name, got an empty string")
    if "\0" in text:
        raise argparse.ArgumentTypeError(f"expected a file or folder name, got {text!r} (contains a NUL byte)")
    return Path(text)
