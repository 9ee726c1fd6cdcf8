"""The result of running a certificate: did the checked statement hold?

A *certificate* is a zero-argument callable that re-derives one step of a
proof in ``proofs/`` (a symbolic identity, a factorisation, an exact rational
check) and returns a ``Check``. Certificates from other modules may return any
object with ``holds`` and ``description`` attributes; ``as_check`` normalises.

Examples
--------
>>> Check("demo", True, "1 + 1 = 2").holds
True
>>> as_check("x", (False, "broken")).holds
False
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    """name: the certificate's registry name; holds: the verdict;
    description: what was checked (one line); detail: optional evidence."""

    name: str
    holds: bool
    description: str
    detail: str = ""


@dataclass(frozen=True)
class Cert:
    """The minimal certificate outcome used by theorem.cesaro, theorem.dichotomy and
    theorem.continuum: name, verdict, and one line saying what was checked."""

    name: str
    holds: bool
    detail: str

    @property
    def description(self) -> str:
        return self.detail


def as_check(name: str, result: object) -> Check:
    """Normalise a certificate's return value (``Check``, duck-typed object,
    ``(holds, description)`` pair or bare bool) into a ``Check``."""
    if isinstance(result, Check):
        return result
    if hasattr(result, "holds"):
        desc = str(getattr(result, "description", None) or getattr(result, "summary", "") or "")
        detail = str(getattr(result, "detail", "") or "")
        return Check(name, bool(result.holds), desc, "" if detail == desc else detail)
    if isinstance(result, tuple) and len(result) == 2:
        return Check(name, bool(result[0]), str(result[1]))
    if isinstance(result, bool):
        return Check(name, result, "")
    raise TypeError(f"certificate {name!r} returned {type(result).__name__}, expected an object with .holds")
