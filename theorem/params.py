"""argv-style parameters for derivations: ``--name VALUE`` pairs, checked.

Every failure is a ``DeriveError`` with one line naming the flag, the value
and what was expected.

Examples
--------
>>> spec = {"row": Param(int, 3, minimum=0), "slope": Param(float, None, minimum=0)}
>>> parse("alibi-row", ["--row", "4"], spec)
{'row': 4, 'slope': None}
>>> parse("alibi-row", ["--row", "x"], spec)
Traceback (most recent call last):
...
posbias.theorem.derivation.DeriveError: alibi-row: --row expects an integer, got 'x'
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any, Sequence

import sympy as sp

from posbias.theorem.derivation import DeriveError


class ArgParser(argparse.ArgumentParser):
    """argparse that raises ``DeriveError`` (one line) instead of printing and exiting."""

    def __init__(self, prog: str, **kwargs):
        super().__init__(prog=prog, add_help=False, allow_abbrev=False, exit_on_error=False, **kwargs)

    def error(self, message: str):  # argparse hook
        raise DeriveError(f"{self.prog}: {message}")

    def parse(self, args: Sequence[str]) -> argparse.Namespace:
        try:
            return self.parse_args(list(args))
        except argparse.ArgumentError as exc:
            raise DeriveError(f"{self.prog}: {exc}") from None

    def parse_known(self, args: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
        """Like ``parse`` but returns the arguments it does not know instead of failing on them."""
        try:
            return self.parse_known_args(list(args))
        except argparse.ArgumentError as exc:
            raise DeriveError(f"{self.prog}: {exc}") from None


def exact_number(text: str, where: str) -> sp.Rational:
    """The decimal or fraction string ``text`` as an exact ``sympy.Rational`` ("0.3" -> 3/10)."""
    try:
        value = sp.Rational(text.strip())
    except (TypeError, ValueError, SyntaxError, ZeroDivisionError, sp.SympifyError):
        raise DeriveError(f"{where}: {text!r} is not a number (expected e.g. 0.3 or 3/10)") from None
    if not value.is_Rational:
        raise DeriveError(f"{where}: {text!r} is not a finite number")
    return value


@dataclass(frozen=True)
class Param:
    """kind: int or float; default: value when absent (None: leave symbolic);
    minimum / maximum: inclusive bounds."""

    kind: type
    default: Any
    minimum: float | None = None
    maximum: float | None = None


def parse(name: str, args: list[str], spec: dict[str, Param]) -> dict[str, Any]:
    """Parse ``--flag value`` pairs (or ``--flag=value``) against ``spec`` with ``ArgParser``."""
    parser = ArgParser(name)
    for key in spec:
        parser.add_argument("--" + key.replace("_", "-"), dest=key, default=None)
    ns = parser.parse(args)
    return {
        key: p.default if getattr(ns, key) is None else _convert(name, key, getattr(ns, key), p)
        for key, p in spec.items()
    }


def _convert(name: str, key: str, value: str, p: Param):
    flag = "--" + key.replace("_", "-")
    try:
        v = p.kind(value)
    except ValueError:
        kind = "an integer" if p.kind is int else "a number"
        raise DeriveError(f"{name}: {flag} expects {kind}, got {value!r}") from None
    if p.kind is float and not math.isfinite(v):
        raise DeriveError(f"{name}: {flag} expects a finite number, got {value!r}")
    if p.minimum is not None and v < p.minimum:
        raise DeriveError(f"{name}: {flag} must be >= {p.minimum:g}, got {value}")
    if p.maximum is not None and v > p.maximum:
        raise DeriveError(f"{name}: {flag} must be <= {p.maximum:g}, got {value}")
    return v
