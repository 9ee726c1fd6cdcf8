"""The one interface every symbolic derivation implements.

A derivation is a typed function ``compute(params) -> Result``: ``params`` is a
frozen dataclass derived from ``posbias.theorem.params.Params`` (each field with
its meaning, default and an example), and the ``Result`` carries plain text,
LaTeX and a JSON-serialisable dict. Python callers and tests build the parameters
and call ``compute``; ``posbias derive NAME ...`` goes through ``parse`` first,
which is built from the same dataclass. Bad input raises ``DeriveError`` with
one line saying what, where and what was expected.

Examples
--------
>>> from posbias.theorem.softmax_shift import DERIVATION, SoftmaxShiftParams
>>> DERIVATION.compute(SoftmaxShiftParams()).data["holds"]
True
>>> DERIVATION.parse([]) == SoftmaxShiftParams()
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from posbias.theorem.errors import DeriveError
from posbias.theorem.params import Params, describe, help_text, parse_params, usage

__all__ = ["DeriveError", "Derivation", "Result"]


@dataclass(frozen=True)
class Result:
    """What a derivation returns: ``text`` for people, ``latex`` for papers, ``data`` for programs."""

    name: str
    text: str
    latex: str
    data: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """``{"name", "text", "latex", "data"}``: what ``posbias derive ... --format json`` prints."""
        return {"name": self.name, "text": self.text, "latex": self.latex, "data": self.data}


@dataclass(frozen=True)
class Derivation:
    """One registry entry: ``compute(params_type(...)) -> Result``; ``parse(argv) -> params``.

    ``claims``: the THEORY.md labels the derivation speaks to. ``parse`` defaults to the
    generic command-line parser built from ``params``' fields. ``limits``: the sizes the
    derivation refuses or caps (deterministic work limits), shown by ``--help``.
    """

    name: str
    summary: str
    claims: tuple[str, ...]
    params: type[Params]
    compute: Callable[[Any], Result]
    parse: Callable[[Sequence[str]], Params] | None = None
    limits: str = ""  # the deterministic work limits and what is refused, for --help
    examples: str = ""  # example calls with their answers, appended to --help

    def __post_init__(self):
        if self.params.name != self.name:
            raise ValueError(f"derivation {self.name!r}: its parameters are named {self.params.name!r}")
        if self.parse is None:
            object.__setattr__(self, "parse", partial(parse_params, self.params))

    @property
    def usage(self) -> str:
        """``posbias derive NAME [--flag VALUE] ...``."""
        return usage(self.params)

    def help(self) -> str:
        """The text of ``posbias derive NAME --help``: each parameter's meaning, default, example."""
        text = help_text(self.params, self.summary, self.claims, self.limits)
        return f"{text}\n\n{self.examples}" if self.examples else text

    def describe(self) -> dict[str, Any]:
        """Machine-readable description (``posbias derive --list --format json``)."""
        return {
            "name": self.name,
            "summary": self.summary,
            "claims": list(self.claims),
            "usage": self.usage,
            "limits": self.limits,
            "parameters": [asdict(info) for info in describe(self.params)],
        }
