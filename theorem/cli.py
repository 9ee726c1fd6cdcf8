"""``posbias derive`` and ``posbias proofs``: the command-line face of ``theorem``.

``derive_command(argv)``:
  ``--list [--format text|json]``: every derivation with its claims, summary and usage;
  ``--help``: how to call it; ``NAME --help``: each parameter with its meaning, default and
  an example; ``NAME [PARAMS...] [--format text|latex|json]``: parse the parameters with the
  derivation's ``parse`` (built from its parameter dataclass) and print ``compute``'s result.
``proofs_command(argv)``: ``--check`` or ``--list`` over the proof files in ``--dir``
(default: the repository's ``proofs/``); ``--help``. ``--check`` also runs every claim's statement
check (posbias.theorem.statements: key formula against THEORY.md, predicate on exact instances).
A proof cites a certificate with a line

    Certificate: `module:check-name`

Both return a process exit status; user errors print one line
``posbias <cmd>: error: ...`` to stderr and return 2, never a traceback: a query whose
arithmetic overflows or runs past ``--time-budget SECONDS`` (default ``DEFAULT_TIME_BUDGET``,
a last-resort wall-clock guard; answers are decided by deterministic work limits, so the
guard can only refuse, labelled "undecided: time budget exceeded", never change an answer)
is refused the same way. An unexpected failure prints one line and returns 1.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

from posbias.theorem.derivation import DeriveError
from posbias.theorem.params import ArgParser
from posbias.theorem.time_limit import TimeLimitExceeded, time_limit

PROOFS_DIR = Path(__file__).resolve().parents[1] / "proofs"
FORMATS = ("text", "latex", "json")
LIST_FORMATS = ("text", "json")
HELP = ("-h", "--help")
CITATION = re.compile(r"^\s*(?:[-*]\s*)?Certificate:\s*(.*)$", re.MULTILINE)
NAME_IN_TICKS = re.compile(r"`([^`]+)`")

DEFAULT_TIME_BUDGET = 20.0  # seconds: the last-resort wall-clock guard of one query (--time-budget)
MAX_TIME_BUDGET = 3600.0
DERIVE_USAGE = ("usage: posbias derive --list [--format text|json] | posbias derive NAME [PARAMS...] "
                "[--format text|latex|json] [--time-budget SECONDS] | posbias derive NAME --help")
BUDGET_HELP = (f"--time-budget SECONDS: a last-resort wall-clock guard (default {DEFAULT_TIME_BUDGET:g} s, at most "
               f"{MAX_TIME_BUDGET:g}); a query that runs past it is refused (exit 2, 'undecided: time budget "
               "exceeded') and never answered by guesswork. Answers do not depend on it: each derivation's "
               "decisions are bounded by deterministic work limits (see NAME --help).")
PROOFS_USAGE = "usage: posbias proofs --check | --list [--dir PROOFS_DIR]"
PROOFS_HELP = f"""{PROOFS_USAGE}

Check the machine-checked chain claim -> proof -> certificate, and each claim's statement.

  --check          run every certificate the proof files cite; fail (exit 1) if a cited
                   certificate does not exist or does not hold, if a proof cites none, or
                   if a claim's certificate is not cited by the claim's proof file; then check
                   every claim's statement: its key formula against THEORY.md (when found) and
                   its numeric predicate on exact hand-derived instances
  --list           list the proof files with the claims they prove and the certificates they cite
  --dir DIR        the folder of proof files (default: {PROOFS_DIR})

A proof cites a certificate with a line  Certificate: `module:check-name`"""


def _one_line(err: BaseException) -> str:
    """The first line of an exception's message (its type name when empty), at most 300 characters."""
    text = str(err).strip()
    line = text.splitlines()[0] if text else type(err).__name__
    return line if len(line) <= 300 else line[:297] + "..."


def _error(cmd: str, message: str) -> int:
    print(f"posbias {cmd}: error: {message}", file=sys.stderr)
    return 2


# -------------------------------------------------------------------------------- derive
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
        return _error("derive", str(err))
    if rest:
        return _error("derive", f"--list takes only --format text|json, got {' '.join(rest)!r}")
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
    lines += ["", "posbias derive NAME --help lists NAME's parameters with their meaning, default and an example,",
              "and NAME's limits (the sizes it refuses, deterministically).", "", BUDGET_HELP]
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
        return _error("derive", f"unknown derivation {name!r}; run 'posbias derive --list' (known: {', '.join(ders)})")
    der = ders[name]
    if any(a in HELP for a in params):
        print(der.help())
        return 0
    try:
        params, fmt, budget = _split_options(params)
        with time_limit(budget):
            result = der.compute(der.parse(params))
    except DeriveError as err:
        return _error("derive", _one_line(err))
    except TimeLimitExceeded:
        return _error("derive", f"{name}: undecided: time budget exceeded ({budget:g} s, --time-budget); "
                                "no answer was given (a wall-clock guard, not a property of the input)")
    except (ArithmeticError, RecursionError, MemoryError) as err:
        return _error("derive", f"{name}: refused: the computation left its numeric range "
                                f"({type(err).__name__}: {_one_line(err)})")
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


# -------------------------------------------------------------------------------- proofs
def cited_certificates(text: str) -> list[str]:
    """Certificate names cited by a proof: every `name` on a ``Certificate:`` line, in order."""
    names: list[str] = []
    for line in CITATION.findall(text):
        names += NAME_IN_TICKS.findall(line)
    return names


def _parse_proofs_args(argv: list[str]) -> tuple[str, Path]:
    parser = ArgParser("posbias proofs")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--check", dest="action", action="store_const", const="--check")
    action.add_argument("--list", dest="action", action="store_const", const="--list")
    parser.add_argument("--dir", type=Path, default=PROOFS_DIR)
    try:
        ns = parser.parse(argv)
    except DeriveError as err:
        raise ValueError(f"{str(err).removeprefix('posbias proofs: ')}; {PROOFS_USAGE}") from None
    if not ns.dir.is_dir():
        raise ValueError(f"proofs folder {str(ns.dir)!r} does not exist")
    return ns.action, ns.dir


def _statement_checks(claims, problems: list[str]) -> list:
    """Every claim's statement check (posbias.theorem.statements), printed; failures go to ``problems``."""
    from posbias.theorem.statements import statement_checks, theory_path

    if not theory_path().is_file():
        print(f"note     {theory_path()} not found: statements checked against their fingerprints only")
    checks = statement_checks(claims)
    for c in checks:
        if c.holds:
            print(f"pass     {c.name}")
        else:
            problems.append(f"{c.name} does not hold ({c.detail})")
            print(f"FAIL     {c.name}: {c.detail}")
    return checks


def proofs_command(argv: list[str],  # noqa: C901 (parsing, --list, --check; split per action; issue 20 §4)
                   registry=None) -> int:
    """``posbias proofs --check|--list [--dir DIR]``; ``registry`` (a ``claims.Registry``) is for tests."""
    from posbias.theorem.claims import CLAIMS, certificate_registry, run_certificate

    if any(a in HELP for a in argv):
        print(PROOFS_HELP)
        return 0
    try:
        action, folder = _parse_proofs_args(argv)
    except ValueError as err:
        return _error("proofs", str(err))
    files = sorted(folder.glob("*.md"))
    cited = {f.name: list(dict.fromkeys(cited_certificates(f.read_text(encoding="utf-8")))) for f in files}
    covers: dict[str, list[str]] = {}
    for claim in CLAIMS.values():
        covers.setdefault(Path(claim.proof).name, []).append(claim.label)

    if action == "--list":
        for f in files:
            print(f"{f.name}: claims {', '.join(covers.get(f.name, [])) or '(none)'}; "
                  f"certificates {', '.join(cited[f.name]) or '(none)'}")
        return 0

    reg = registry if registry is not None else certificate_registry()
    problems: list[str] = []
    results = {}
    for f in files:
        if not cited[f.name]:
            problems.append(f"{f.name} cites no certificate")
            print(f"FAIL     {f.name}: cites no certificate")
        for name in cited[f.name]:
            if name not in results:
                results[name] = run_certificate(name, reg) if name in reg.certificates else None
            res = results[name]
            if res is None:
                problems.append(f"{f.name} cites {name!r}, which does not exist")
                print(f"MISSING  {name}  ({f.name}): no such certificate")
            elif not res.holds:
                problems.append(f"{f.name} cites {name!r}, which does not hold")
                print(f"FAIL     {name}  ({f.name}): {res.description}")
            else:
                print(f"pass     {name}  ({f.name})")
    for claim in CLAIMS.values():
        fname = Path(claim.proof).name
        if fname not in cited:
            problems.append(f"claim {claim.label}: proof file {fname} not found in {folder}")
            print(f"MISSING  proof {fname} for claim {claim.label}")
            continue
        for name in claim.certificates:
            if name not in cited[fname]:
                problems.append(f"claim {claim.label} lists {name!r} but {fname} does not cite it")
                print(f"UNCITED  {name}  (claim {claim.label}, {fname})")
    for mod, why in reg.missing.items():
        print(f"note     {mod} not loaded ({why})")
    statements = _statement_checks(CLAIMS, problems)
    total = sum(1 for r in results.values() if r is not None and r.holds)
    print(f"{len(files)} proof files, {len(results)} certificates cited, {total} hold")
    print(f"{len(statements)} claim statements checked, {sum(c.holds for c in statements)} hold")
    if problems:
        print(f"posbias proofs: error: {len(problems)} problem(s): {problems[0]}"
              + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""), file=sys.stderr)
        return 1
    return 0
