"""``posbias proofs``: the machine-checked chain claim -> proof -> certificate, from the command line.

``proofs_command(argv)``: ``--check`` or ``--list`` over the proof files in ``--dir`` (default:
``PROOFS_DIR``, the proof files shipped as posbias.proofs); ``--help``. ``--check`` runs every
certificate the proofs cite (posbias.theorem.claims) and every claim's statement check
(posbias.theorem.statements: key formula against THEORY.md, predicate on exact instances).
A proof cites a certificate with a line

    Certificate: `module:check-name`

It returns a process exit status: 0 when everything holds, 1 when a check fails, 2 with one line
``posbias proofs: error: ...`` on stderr for bad arguments (never a traceback).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import posbias.proofs
from posbias.theorem.derivation import DeriveError
from posbias.theorem.params import ArgParser

PROOFS_DIR = Path(posbias.proofs.__file__).resolve().parent
HELP = ("-h", "--help")
CITATION = re.compile(r"^\s*(?:[-*]\s*)?Certificate:\s*(.*)$", re.MULTILINE)
NAME_IN_TICKS = re.compile(r"`([^`]+)`")
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


def _error(message: str) -> int:
    print(f"posbias proofs: error: {message}", file=sys.stderr)
    return 2


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


def proofs_command(  # noqa: C901 (parsing, --list, --check; split per action; issue 20 §4)
    argv: list[str],
    registry=None,
) -> int:
    """``posbias proofs --check|--list [--dir DIR]``; ``registry`` (a ``claims.Registry``) is for tests."""
    from posbias.theorem.claims import CLAIMS, certificate_registry, run_certificate

    if any(a in HELP for a in argv):
        print(PROOFS_HELP)
        return 0
    try:
        action, folder = _parse_proofs_args(argv)
    except ValueError as err:
        return _error(str(err))
    files = sorted(folder.glob("*.md"))
    cited = {f.name: list(dict.fromkeys(cited_certificates(f.read_text(encoding="utf-8")))) for f in files}
    covers: dict[str, list[str]] = {}
    for claim in CLAIMS.values():
        covers.setdefault(Path(claim.proof).name, []).append(claim.label)

    if action == "--list":
        for f in files:
            print(
                f"{f.name}: claims {', '.join(covers.get(f.name, [])) or '(none)'}; "
                f"certificates {', '.join(cited[f.name]) or '(none)'}"
            )
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
        print(
            f"posbias proofs: error: {len(problems)} problem(s): {problems[0]}"
            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
            file=sys.stderr,
        )
        return 1
    return 0
