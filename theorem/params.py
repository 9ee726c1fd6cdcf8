"""Typed parameters for derivations, and the one command-line parser built from them.

Every derivation declares its parameters once, as a frozen dataclass derived from
``Params`` whose fields are made with ``param(default, meaning=..., example=...)``.
That declaration is used three ways:

* Python callers build it directly (``AlibiRowParams(row=3)``); ``__post_init__``
  checks every value (type, finiteness, ``minimum`` / ``maximum``) and refuses
  what the derivation cannot use with a one-line ``DeriveError``;
* ``parse_params(ParamsType, argv)`` builds an argparse parser from the fields
  (``row`` -> ``--row``, ``max_row`` -> ``--max-row``) and converts each string
  by the field's type: ``int``, ``float`` (finite), ``Fraction`` (exact:
  "0.3" -> 3/10, "3/10" too), ``bool`` (a flag), ``str``, or any other type
  through the field's ``convert`` function (schedules);
* ``describe`` / ``usage`` / ``help_text`` list each parameter with its meaning,
  default and an example, for ``posbias derive NAME --help`` and ``--list``.

Examples
--------
>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Demo(Params):
...     name = "demo"
...     row: int | None = param(None, meaning="row i", example="3", minimum=0)
...     lam: Fraction = param(Fraction(1, 2), meaning="mixing coefficient", example="0.3",
...                           minimum=0, maximum=1)
>>> parse_params(Demo, ["--row", "4", "--lam", "0.3"])
Demo(row=4, lam=Fraction(3, 10))
>>> Demo(lam=0.25).lam  # floats are read as the decimal they print as
Fraction(1, 4)
>>> parse_params(Demo, ["--row", "x"])
Traceback (most recent call last):
...
posbias.theorem.errors.DeriveError: demo: --row expects an integer, got 'x'
>>> Demo(row=-1)
Traceback (most recent call last):
...
posbias.theorem.errors.DeriveError: demo: --row must be >= 0, got -1
>>> usage(Demo)
'posbias derive demo [--row INT] [--lam NUMBER]'
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import numbers
import operator
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass
from fractions import Fraction
from functools import cache, reduce
from typing import Any, ClassVar

from posbias.theorem.errors import DeriveError


class ArgParser(argparse.ArgumentParser):
    """argparse that raises ``DeriveError`` (one line) instead of printing and exiting."""

    def __init__(self, prog: str, **kwargs):
        super().__init__(prog=prog, add_help=False, allow_abbrev=False, exit_on_error=False, **kwargs)

    def error(self, message: str):  # argparse hook
        """Raise ``DeriveError`` with argparse's message (instead of printing and exiting)."""
        raise DeriveError(f"{self.prog}: {message}")

    def parse(self, args: Sequence[str]) -> argparse.Namespace:
        """Parse all of ``args``; anything unknown or malformed is a ``DeriveError``."""
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


def param(
    default: Any = MISSING,
    *,
    meaning: str,
    example: str,
    minimum: Any = None,
    maximum: Any = None,
    positional: bool = False,
    convert: Callable[[str], Any] | None = None,
    metavar: str | None = None,
    default_text: str | None = None,
) -> Any:
    """A ``Params`` field: its default, what it means, an example value, inclusive bounds.

    ``positional``: given on the command line without a flag; ``convert``: string ->
    value for field types other than int, float, Fraction, bool and str (also applied
    when a Python caller passes a string); ``default_text``: how to show the default
    (e.g. "symbolic" for ``None``).
    """
    meta = {
        "meaning": meaning,
        "example": example,
        "minimum": minimum,
        "maximum": maximum,
        "positional": positional,
        "convert": convert,
        "metavar": metavar,
        "default_text": default_text,
    }
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class _Field:
    """One parameter as the parser sees it (private to this module)."""

    name: str
    kind: Any  # int, float, Fraction, bool, str, or another type (converted by ``convert``)
    optional: bool  # None is allowed
    default: Any
    meta: dict

    @property
    def flag(self) -> str:
        return self.name if self.meta["positional"] else "--" + self.name.replace("_", "-")

    @property
    def metavar(self) -> str:
        if self.meta["metavar"]:
            return self.meta["metavar"]
        names = {int: "INT", float: "FLOAT", Fraction: "NUMBER", str: "TEXT"}
        return names.get(self.kind, self.name.upper())


@cache
def _fields(params_type: type) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(params_type)
    out = []
    for f in dataclasses.fields(params_type):
        hint = hints[f.name]
        optional = False
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            optional = len(args) < len(typing.get_args(hint))
            hint = args[0] if len(args) == 1 else reduce(operator.or_, args)
        out.append(_Field(f.name, hint, optional, f.default, dict(f.metadata)))
    return tuple(out)


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(getattr(value, "spec", value))


@dataclass(frozen=True)
class Params:
    """Base of every derivation's parameter dataclass (frozen; fields made with ``param``).

    ``name`` (a class attribute) is the derivation's name, used in error messages.
    Subclasses that check more than one field at a time extend ``__post_init__``
    and call ``super().__post_init__()`` first.
    """

    name: ClassVar[str] = "derive"

    def __post_init__(self):
        for f in _fields(type(self)):
            value = getattr(self, f.name)
            checked = _check(self.name, f, value)
            if checked is not value:
                object.__setattr__(self, f.name, checked)


def _check(  # noqa: C901 (one branch per parameter kind; split per kind; issue 20 §4)
    name: str,
    f: _Field,
    value: Any,
) -> Any:
    """The value of field ``f`` after type checks and exact conversion, or a DeriveError."""
    where = f"{name}: {f.flag}"
    if value is None:
        if f.optional:
            return None
        raise DeriveError(f"{where} is required")
    kind = f.kind
    if kind is bool:
        if not isinstance(value, bool):
            raise DeriveError(f"{where} expects True or False, got {value!r}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise DeriveError(f"{where} expects an integer, got {value!r}")
        value = value if type(value) is int else int(value)
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise DeriveError(f"{where} expects a finite number, got {value!r}")
        value = value if type(value) is float else float(value)
    elif kind is Fraction:
        value = _fraction(where, value)
    elif kind is str:
        if not isinstance(value, str):
            raise DeriveError(f"{where} expects a string, got {value!r}")
    else:
        if isinstance(value, str) and f.meta["convert"] is not None:
            value = _convert(where, f, value)
        if not isinstance(value, f.kind):
            raise DeriveError(f"{where} expects {f.metavar.lower()}, got {value!r}")
        return value
    if f.meta["minimum"] is not None and value < f.meta["minimum"]:
        raise DeriveError(f"{where} must be >= {_show(f.meta['minimum'])}, got {_show(value)}")
    if f.meta["maximum"] is not None and value > f.meta["maximum"]:
        raise DeriveError(f"{where} must be <= {_show(f.meta['maximum'])}, got {_show(value)}")
    return value


def _fraction(where: str, value: Any) -> Fraction:
    """An exact Fraction: ints and Fractions as they are, a float as the decimal it prints as
    (0.1 -> 1/10), a string as written ("0.3", "3/10", "1e-3"; at most 60 digits and a decimal
    exponent within ±60, see theorem.expr_guard)."""
    if isinstance(value, bool):
        raise DeriveError(f"{where} expects a number, got {value!r}")
    try:
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ValueError
            return Fraction(repr(float(value)))
        if isinstance(value, str):
            from posbias.theorem.expr_guard import exact_number  # bounded: no 10^(10^9) from "1e999999999"

            return exact_number(value, where)
        return Fraction(value)
    except DeriveError:
        raise
    except (TypeError, ValueError, ZeroDivisionError):
        raise DeriveError(f"{where} expects a number (e.g. 0.3 or 3/10), got {value!r}") from None


def _convert(where: str, f: _Field, text: str) -> Any:
    try:
        return f.meta["convert"](text)
    except DeriveError:
        raise
    except ValueError as exc:
        raise DeriveError(f"{where}: {str(exc).splitlines()[0] if str(exc) else text!r}") from None


def _from_text(name: str, f: _Field, text: str) -> Any:
    """Convert one command-line string by the field's type."""
    where = f"{name}: {f.flag}"
    if f.kind is int:
        try:
            return int(text)
        except ValueError:
            raise DeriveError(f"{where} expects an integer, got {text!r}") from None
    if f.kind is float:
        try:
            value = float(text)
        except ValueError:
            raise DeriveError(f"{where} expects a number, got {text!r}") from None
        if not math.isfinite(value):
            raise DeriveError(f"{where} expects a finite number, got {text!r}")
        return value
    if f.kind is Fraction:
        return _fraction(where, text)
    if f.kind is str or f.meta["convert"] is None:
        return text
    return _convert(where, f, text)


def build_parser(params_type: type[Params]) -> ArgParser:
    """The argparse parser for ``params_type``: one flag (or positional) per field."""
    parser = ArgParser(params_type.name)
    for f in _fields(params_type):
        if f.meta["positional"]:
            parser.add_argument(f.name, nargs=None if f.default is MISSING else "?", default=None)
        elif f.kind is bool:
            parser.add_argument(f.flag, dest=f.name, action="store_true", default=None)
        else:
            parser.add_argument(f.flag, dest=f.name, default=None)
    return parser


def parse_params(params_type: type[Params], argv: Sequence[str]) -> Params:
    """``params_type`` from command-line arguments; absent flags keep their defaults."""
    ns = build_parser(params_type).parse(argv)
    given = {}
    for f in _fields(params_type):
        text = getattr(ns, f.name)
        if text is not None:
            given[f.name] = text if f.kind is bool else _from_text(params_type.name, f, text)
    return params_type(**given)


@dataclass(frozen=True)
class ParamInfo:
    """One parameter for help texts and ``posbias derive --list --format json``."""

    name: str
    flag: str
    type: str
    meaning: str
    default: str | None  # None: required
    example: str
    minimum: str | None
    maximum: str | None


def describe(params_type: type[Params]) -> list[ParamInfo]:
    """Every parameter of ``params_type`` with its flag, meaning, default and an example."""
    out = []
    for f in _fields(params_type):
        if f.default is MISSING:
            default = None
        elif f.meta["default_text"] is not None:
            default = f.meta["default_text"]
        else:
            default = _show(f.default)
        bound = lambda v: None if v is None else _show(v)  # noqa: E731
        out.append(
            ParamInfo(
                f.name,
                f.flag,
                "flag" if f.kind is bool else f.metavar,
                f.meta["meaning"],
                default,
                f.meta["example"],
                bound(f.meta["minimum"]),
                bound(f.meta["maximum"]),
            )
        )
    return out


def usage(params_type: type[Params]) -> str:
    """One line: ``posbias derive NAME [--flag VALUE] ...`` (positional parameters first)."""
    parts = []
    for f in _fields(params_type):
        if f.meta["positional"]:
            parts.append(f.metavar if f.default is MISSING else f"[{f.metavar}]")
        elif f.kind is bool:
            parts.append(f"[{f.flag}]")
        else:
            parts.append(f"[{f.flag} {f.metavar}]")
    return " ".join(["posbias derive", params_type.name, *parts])


DEFAULT_TIME_BUDGET_TEXT = "20"  # posbias.cli.derive.DEFAULT_TIME_BUDGET, as --help shows it


def help_text(params_type: type[Params], summary: str, claims: Sequence[str], limits: str = "") -> str:
    """The text of ``posbias derive NAME --help``."""
    lines = [
        f"usage: {usage(params_type)} [--format text|latex|json] [--time-budget SECONDS]",
        "",
        summary,
        f"claims: {', '.join(claims)}",
        "",
    ]
    if limits:
        lines += [f"limits: {limits}", ""]
    infos = describe(params_type)
    if not infos:
        lines.append("parameters: none")
    else:
        lines.append("parameters:")
        for info in infos:
            positional = info.flag == info.name
            if positional:
                head, example = info.type, info.example
            elif info.type == "flag":
                head, example = info.flag, info.flag
            else:
                head, example = f"{info.flag} {info.type}", f"{info.flag} {info.example}"
            default = "required" if info.default is None else f"default {info.default}"
            bounds = ""
            if info.minimum is not None or info.maximum is not None:
                low = "-inf" if info.minimum is None else info.minimum
                high = "inf" if info.maximum is None else info.maximum
                bounds = f"; range [{low}, {high}]"
            lines.append(f"  {head}")
            lines.append(f"      {info.meaning} ({default}{bounds}; example: {example})")
    lines.append("  --format text|latex|json")
    lines.append("      output format (default text)")
    lines.append("  --time-budget SECONDS")
    lines.append(
        f"      last-resort wall-clock guard (default {DEFAULT_TIME_BUDGET_TEXT} s): past it the query is "
        "refused "
        "(exit 2, 'undecided: time budget exceeded'); it never changes an answer"
    )
    return "\n".join(lines)
