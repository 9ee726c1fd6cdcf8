"""``posbias derive``: the command-line face of the derivations in ``posbias.theorem``.

``derive_command(argv)``:
  ``--list [--format text|json]``: every derivation with its claims, summary and usage;
  ``--help``: how to call it; ``NAME --help``: each parameter with its meaning, default and
  an example; ``NAME [PARAMS...] [--format text|latex|json]``: parse the parameters with the
  derivation's ``parse`` (built from its parameter dataclass) and print ``compute``'s result.

It returns a process exit status; user errors print one line ``posbias derive: error: ...``
to stderr and return 2, never a traceback: a query whose arithmetic overflows or runs past
``--time-budget SECONDS`` (default ``DEFAULT_TIME_BUDGET``, the last-resort wall-clock guard of
posbias.runtime.time_limit; answers are decided by deterministic work limits inside the derivations, so
the guard can only refuse, labelled "undecided: time budget exceeded", never change an answer)
is refused the same way. An unexpected failure prints one line and returns 1.
"""

from __future__ import annotations

import json
import math
import sys

from posbias.runtime.time_limit import TimeLimitExceeded, time_limit
from posbias.theorem.derivation import DeriveError
from posbias.theorem.params import ArgParser

FORMATS = ("text", "latex", "json")
LIST_FORMATS = ("text", "json")
HELP = ("-h", "--help")

DEFAULT_TIME_BUDGET = 20.0  # seconds: the last-resort wall-clock guard of one query (--time-budget)
MAX_TIME_BUDGET = 3600.0
DERIVE_USAGE = (
    "usage: posbias derive --list [--format text|json] | posbias derive NAME [PARAMS...] "
    "[--format text|latex|json] [--time-budget SECONDS] | posbias derive NAME --help"
)
BUDGET_HELP = (
    f"--time-budget SECONDS: a last-resort wall-clock guard (default {DEFAULT_TIME_BUDGET:g} s, at most "
    f"{MAX_TIME_BUDGET:g}); a query that runs past it is refused (exit 2, 'undecided: time budget "
    "exceeded') and never answered by guesswork. Answers do not depend on it: each derivation's "
    "decisions are bounded by deterministic work limits (see NAME --help)."
)


def _one_line(err: BaseException) -> str:
    """The first line of an exception's message (its type name when empty), at most 300 characters."""
    text = str(err).strip()
    line = text.splitlines()[0] if text else type(err).__name__
    return line if len(line) <= 300 else line[:297] + "..."


def _error(message: str) -> int:
    print(f"posbias derive: error: {message}", file=sys.stderr)
    return 2


def _split_format(argv: list[str], formats: tuple[str, ...] = FORMATS) -> tuple[list[str], str]:
    """Take ``--format FORMAT`` out of the parameters; the rest goes to the derivation."""
    rest, fmt, _ = _split_options(argv, formats)
    return rest, fmt


def _split_options(argv: list[str], formats: tuple[str, ...] = FORMATS) -> tuple[list[str], str, float]:
    """Take ``--format FORMAT`` and ``--time-budget SECONDS`` out; the rest goes to the derivation."""
    parser = ArgParser("posbias derive")
    parser.add_argument("--format", default="text")
    parser.add_argument("--time-budget", dest="budget", default=None)
    try:
        ns, rest = parser.parse_known(argv)
    except DeriveError as err:
        raise DeriveError(str(err).removeprefix("posbias derive: ")) from None
    if ns.format not in formats:
        raise DeriveError(f"--format must be one of {', '.join(formats)}; got {ns.format!r}")
    budget = DEFAULT_TIME_BUDGET
    if ns.budget is not None:
        try:
            budget = float(ns.budget)
        except ValueError:
            budget = math.nan
        if not 0 < budget <= MAX_TIME_BUDGET:
            raise DeriveError(f"--time-budget expects seconds in (0, {MAX_TIME_BUDGET:g}], got {ns.budget!r}")
    return rest, ns.format, budget


def _list(argv: list[str]) -> int:
    from posbias.theorem.queries import derivations, missing

    try:
        rest, fmt = _split_format(argv, LIST_FORMATS)
    except DeriveError as err:
        return _error(str(err))
    if rest:
        return _error(f"--list takes only --format text|json, got {' '.join(rest)!r}")
    ders = derivations()
    if fmt == "json":
        print(json.dumps([der.describe() for der in ders.values()], indent=2, ensure_ascii=False))
    else:
        width = max(len(n) for n in ders)
        for name, der in ders.items():
            print(f"{name:<{width}}  [{', '.join(der.claims)}]  {der.summary}")
            print(f"{'':<{width}}  {der.usage}")
    for mod, why in missing().items():
        print(f"posbias derive: warning: {mod} unavailable ({why})", file=sys.stderr)
    return 0


def _general_help() -> str:
    from posbias.theorem.queries import derivations

    lines = [DERIVE_USAGE, "", "Symbolic derivations (SymPy): each prints text, LaTeX or JSON.", "", "derivations:"]
    ders = derivations()
    width = max(len(n) for n in ders)
    lines += [f"  {name:<{width}}  {der.summary}" for name, der in ders.items()]
    lines += [
        "",
        "posbias derive NAME --help lists NAME's parameters with their meaning, default and an example,",
        "and NAME's limits (the sizes it refuses, deterministically).",
        "",
        BUDGET_HELP,
    ]
    return "\n".join(lines)


def derive_command(argv: list[str]) -> int:
    """``posbias derive`` (argv without the subcommand name)."""
    from posbias.theorem.queries import derivations

    argv = list(argv)
    if not argv:
        print(DERIVE_USAGE)
        return 2
    if argv[0] in HELP:
        print(_general_help())
        return 0
    if argv[0] == "--list":
        return _list(argv[1:])
    name, params = argv[0], argv[1:]
    ders = derivations()
    if name not in ders:
        return _error(f"unknown derivation {name!r}; run 'posbias derive --list' (known: {', '.join(ders)})")
    der = ders[name]
    if any(a in HELP for a in params):
        print(der.help())
        return 0
    try:
        params, fmt, budget = _split_options(params)
        parse = der.parse
        assert parse is not None  # Derivation.__post_init__ fills in the generic parser
        with time_limit(budget):
            result = der.compute(parse(params))
    except DeriveError as err:
        return _error(_one_line(err))
    except TimeLimitExceeded:
        return _error(
            f"{name}: undecided: time budget exceeded ({budget:g} s, --time-budget); "
            "no answer was given (a wall-clock guard, not a property of the input)"
        )
    except (ArithmeticError, RecursionError, MemoryError) as err:
        return _error(
            f"{name}: refused: the computation left its numeric range ({type(err).__name__}: {_one_line(err)})"
        )
    except Exception as err:  # a bug, not bad input: still one line, no traceback
        print(f"posbias derive: internal error: {name}: {type(err).__name__}: {_one_line(err)}", file=sys.stderr)
        return 1
    if fmt == "text":
        print(result.text)
    elif fmt == "latex":
        print(result.latex)
    else:
        print(json.dumps(result.as_json(), indent=2, default=str, ensure_ascii=False))
    return 0
