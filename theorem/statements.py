"""Statement checks: each claim's text and predicate are tied to THEORY.md and to exact instances.

A certificate checks a step of a proof; nothing there notices a claim whose *statement* or
numeric *predicate* has drifted from what THEORY.md says (say "collapse iff Σλ < ∞" instead
of "= ∞"). Two checks per claim close that gap:

* **Fingerprint.** ``FINGERPRINTS[label]`` names the claim's key formula and phrases in
  THEORY.md's own words. After ``normalise`` (LaTeX commands and Unicode symbols mapped to one
  ASCII spelling, sum/product subscripts, braces, blanks and case dropped) the formula must
  occur in THEORY.md's text of the claim, in ``Claim.statement`` and in ``Claim.latex``; each
  phrase in THEORY.md and in the statement. THEORY.md is read from ``theory_path()``
  (``<workspace>/shared/THEORY.md``; C8, beyond it, from docs/theory.md: ``read_theory``); when it
  is absent (an installed package) the statement and
  LaTeX are still checked against the fragments, and the Check says THEORY.md was not read.
* **Instances.** ``INSTANCES[label]`` are small hand-derived cases, positive and negative, each
  with the truth value the statement gives it. The data are exact fractions; ``exact_truth``
  re-decides each case in rational arithmetic with code of its own (no NumPy, no predicate), and
  the claim's predicate, called on the float64 copy (its documented ``predicate_args``), must
  return the same value.

``statement_checks()`` runs both for every claim; ``posbias proofs --check`` prints them and
fails on any that does not hold.

Examples
--------
>>> normalise(r"\\text{collapse} \\iff \\sum_t \\lambda_t = \\infty") == normalise("collapse ⇔ Σ λ_t = ∞")
True
>>> normalise("collapse iff sum_t lambda_t = oo")
'collapseiffsumlambda_t=oo'
>>> statement_check("C5(c)").holds
True
"""

from __future__ import annotations

from typing import Literal

from posbias.theorem.certificate import Check
from posbias.theorem.statement_fingerprints import (
    FINGERPRINTS,
    Fingerprint,
    fingerprint_check,
    normalise,
    read_theory,
    theory_path,
    theory_sections,
)
from posbias.theorem.statement_instances import INSTANCES, Instance, exact_truth, instance_check

__all__ = [
    "FINGERPRINTS",
    "INSTANCES",
    "Fingerprint",
    "Instance",
    "exact_truth",
    "fingerprint_check",
    "instance_check",
    "normalise",
    "read_theory",
    "statement_check",
    "statement_checks",
    "theory_path",
    "theory_sections",
]


def statement_check(label: str, claims=None, theory: str | None | Literal[True] = True) -> Check:
    """Fingerprint and instances of one claim, as one ``Check`` named ``statement:LABEL``. ``theory``:
    THEORY.md's text, None to skip it, True (default) to read it with ``read_theory()`` if it exists."""
    from posbias.theorem.claims import CLAIMS

    claim = (claims if claims is not None else CLAIMS)[label]
    if theory is True:
        theory = read_theory()
    fp, inst = fingerprint_check(claim, theory), instance_check(claim)
    detail = "; ".join(d for d in (fp.detail, inst.detail) if d)
    return Check(f"statement:{label}", fp.holds and inst.holds, f"{fp.description}; {inst.description}", detail)


def statement_checks(claims=None, theory: str | None | Literal[True] = True) -> list[Check]:
    """``statement_check`` for every claim (THEORY.md read once)."""
    from posbias.theorem.claims import CLAIMS

    claims = claims if claims is not None else CLAIMS
    if theory is True:
        theory = read_theory()
    return [statement_check(label, claims, theory) for label in claims]
