"""``posbias derive`` and ``posbias proofs``: the command-line face of ``theorem``.

``derive_command(argv)``: ``--list`` or ``NAME [PARAMS...] [--format text|latex|json]``.
``proofs_command(argv)``: ``--check`` or ``--list`` over the proof files in ``--dir``
(default: the repository's ``proofs/``). A proof cites a certificate with a line

    Certificate: `module:check-name`

Both return a process exit status; user errors print one line
``posbias <cmd>: error: ...`` to stderr and return 2.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from posbias.theorem.derivation import DeriveError
from posbias.theorem.params import ArgParser

PROOFS_DIR = Path(__file__).resolve().parents[1] / "proofs"
FORMATS = ("text", "latex", "json")
CITATION = re.compile(r"^\s*(?:[-*]\s*)?Certificate:\s*(.*)$", re.MULTILINE)
NAME_IN_TICKS = re.compile(r"`([^`]+)`")

DERIVE_USAGE = "usage: posbias derive --list | posbias derive NAME [PARAMS...] [--format text|latex|json]"
PROOFS_USAGE = "usage: posbias proofs --check | --list [--dir PROOFS_DIR]"


def _error(cmd: str, message: str) -> int:
    print(f"posbias {cmd}: error: {message}", file=sys.stderr)
    return 2


# -------------------------------------------------------------------------------- derive
def _split_format(argv: list[str]) -> tuple[list[str], str]:
    """Take ``--format text|latex|json`` out of the parameters; the rest goes to the derivation."""
    parser = ArgParser("posbias derive")
    parser.add_argument("--format", default="text")
    try:
        ns, rest = parser.parse_known(argv)
    except DeriveError as err:
        raise DeriveError(str(err).removeprefix("posbias derive: ")) from None
    if ns.format not in FORMATS:
        raise DeriveError(f"--format must be one of text, latex, json; got {ns.format!r}")
    return rest, ns.format


def derive_command(argv: list[str]) -> int:
    """``posbias derive`` (argv without the subcommand name)."""
    from posbias.theorem.queries import derivations, missing

    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(DERIVE_USAGE)
        return 0 if argv else 2
    if argv[0] == "--list":
        if len(argv) > 1:
            return _error("derive", f"--list takes no arguments, got {' '.join(argv[1:])!r}")
        ders = derivations()
        width = max(len(n) for n in ders)
        for name, der in ders.items():
            print(f"{name:<{width}}  [{', '.join(der.claims)}]  {der.summary}")
            print(f"{'':<{width}}  {der.usage}")
        for mod, why in missing().items():
            print(f"posbias derive: warning: {mod} unavailable ({why})", file=sys.stderr)
        return 0
    name, params = argv[0], argv[1:]
    ders = derivations()
    if name not in ders:
        return _error("derive", f"unknown derivation {name!r}; run 'posbias derive --list' (known: {', '.join(ders)})")
    try:
        params, fmt = _split_format(params)
        result = ders[name].run(params)
    except DeriveError as err:
        return _error("derive", str(err).splitlines()[0] if str(err) else type(err).__name__)
    if fmt == "text":
        print(result.text)
    elif fmt == "latex":
        print(result.latex)
    else:
        print(json.dumps({"name": result.name, "text": result.text, "latex": result.latex, "data": result.data},
                         indent=2, default=str, ensure_ascii=False))
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


def proofs_command(argv: list[str], registry=None) -> int:
    """``posbias proofs --check|--list [--dir DIR]``; ``registry`` (a ``claims.Registry``) is for tests."""
    from posbias.theorem.claims import CLAIMS, certificate_registry, run_certificate

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
    total = sum(1 for r in results.values() if r is not None and r.holds)
    print(f"{len(files)} proof files, {len(results)} certificates cited, {total} hold")
    if problems:
        print(f"posbias proofs: error: {len(problems)} problem(s): {problems[0]}"
              + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""), file=sys.stderr)
        return 1
    return 0
