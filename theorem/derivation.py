"""The one interface every symbolic derivation implements.

A derivation is a named query: ``run(args)`` parses its own argv-style
parameters and returns a ``Result`` carrying plain text, LaTeX and a
JSON-serialisable dict. ``posbias derive NAME ...`` and the tests use only this.
Bad input raises ``DeriveError`` with one line saying what, where and what was
expected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


class DeriveError(ValueError):
    """Bad parameters for a derivation (one line: what, where, what was expected)."""


@dataclass(frozen=True)
class Result:
    name: str
    text: str
    latex: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Derivation:
    name: str
    summary: str
    claims: tuple[str, ...]
    usage: str
    run: Callable[[list[str]], Result]
