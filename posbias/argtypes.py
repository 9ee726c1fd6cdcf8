"""Argument types shared by the ``posbias`` subcommands (argparse ``type=`` callables).

>>> at_least(1)("3")
3
>>> at_least(1)("0")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: expected a positive integer, got '0'
>>> size("1.5G")
1610612736
>>> path("runs/a")
PosixPath('runs/a')
>>> path("")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: expected a file or folder name, got an empty string
"""

from __future__ import annotations

import argparse
from pathlib import Path


def at_least(minimum: int):
    """An argparse type: an integer >= ``minimum``, or one line saying what was expected."""
    kind = "a positive integer" if minimum == 1 else ("a non-negative integer" if minimum == 0
                                                      else f"an integer >= {minimum}")

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}")
        return value

    return convert


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
