"""Certificates: machine checks of proof steps, declared once with ``@certificate``.

A *certificate* is a function that re-derives one step of a proof in ``proofs/``
(a symbolic identity, a factorisation, an exact rational check) and returns a
``Check``. It is declared, named and registered in one place:

    @certificate("drift:causal-cdf-identity", claims=("C1", "C2(a)", "C2(b)"))
    def causal_cdf_identity(max_tokens: int = 8) -> Check:
        ...
        return check(ok, "C1: F_(muK)(k) - F_mu(k) = ...")

``check(holds, description, detail)`` builds the ``Check``; the decorator fills in
the registered name, refuses any other return type, and refuses a second
certificate with a name already taken (naming both). ``claims`` lists the
THEORY.md labels whose proofs the certificate checks a step of; the claim
registry (``posbias.theorem.claims``) reads it from here.

Examples
--------
>>> @certificate("demo:one-plus-one")
... def one_plus_one() -> Check:
...     return check(1 + 1 == 2, "1 + 1 = 2")
>>> one_plus_one()
Check(name='demo:one-plus-one', holds=True, description='1 + 1 = 2', detail='')
>>> @certificate("demo:one-plus-one")  # doctest: +NORMALIZE_WHITESPACE
... def impostor() -> Check:
...     return check(False, "declared twice")
Traceback (most recent call last):
...
ValueError: certificate 'demo:one-plus-one' is declared twice: by posbias.theorem.certificate.one_plus_one
and by posbias.theorem.certificate.impostor
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]*:[a-z0-9][a-z0-9-]*$")


@dataclass(frozen=True)
class Check:
    """The outcome of one certificate (or one verification step).

    name: the certificate's registry name; holds: the verdict; description: what was
    checked (one line); detail: optional evidence (values, failures).
    """

    name: str
    holds: bool
    description: str
    detail: str = ""


def check(holds: bool, description: str, detail: str = "") -> Check:
    """The ``Check`` a certificate returns; ``@certificate`` fills in its name."""
    return Check("", bool(holds), description, detail)


@dataclass(frozen=True)
class Certificate:
    """A registered certificate: ``run()`` returns its ``Check`` (named ``name``).

    module: where it was declared; origin: ``module.qualname`` of the declaring function.
    """

    name: str
    claims: tuple[str, ...]
    run: Callable[..., Check]
    module: str
    origin: str


_REGISTERED: dict[str, Certificate] = {}


def certificate(name: str, *, claims: Iterable[str] = ()) -> Callable[[Callable[..., Check]], Callable[..., Check]]:
    """Declare and register a certificate named ``name`` ("module:check-name").

    The decorated function keeps its signature (arguments with defaults only, so the
    registry can call it with none) and returns a ``Check`` carrying ``name``.
    """
    if not NAME_PATTERN.match(name):
        raise ValueError(f"certificate name {name!r}: expected 'module:check-name' (lower case, digits, '-')")
    labels = tuple(claims)

    def decorate(fn: Callable[..., Check]) -> Callable[..., Check]:
        @functools.wraps(fn)
        def run(*args, **kwargs) -> Check:
            out = fn(*args, **kwargs)
            if not isinstance(out, Check):
                raise TypeError(f"certificate {name!r} returned {type(out).__name__}; expected a Check")
            if out.name not in ("", name):
                raise ValueError(f"certificate {name!r} returned a Check named {out.name!r}")
            return replace(out, name=name)

        record = Certificate(name, labels, run, fn.__module__, f"{fn.__module__}.{fn.__qualname__}")
        existing = _REGISTERED.get(name)
        if existing is not None and existing.origin != record.origin:
            raise ValueError(f"certificate {name!r} is declared twice: by {existing.origin} and by {record.origin}")
        _REGISTERED[name] = record
        vars(run)["certificate"] = record  # the record, reachable from the function as ``run.certificate``
        return run

    return decorate


def registered(modules: Iterable[str] | None = None) -> dict[str, Certificate]:
    """name -> Certificate for every certificate declared so far (in the given modules only,
    module by module in the order given, when ``modules`` is set)."""
    if modules is None:
        return dict(_REGISTERED)
    out: dict[str, Certificate] = {}
    for mod in modules:
        out.update({n: c for n, c in _REGISTERED.items() if c.module == mod})
    return out
