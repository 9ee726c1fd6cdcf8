"""The property registry: the built-in properties (every claim of
``posbias.theorem.claims.CLAIMS``, then the necessity searches), installed on first use,
and the claims users register (``register_claim``, the ``@claim`` decorator) to run with
the same machinery and output."""

from __future__ import annotations

from collections.abc import Callable

from posbias.verify.claims import claim_properties
from posbias.verify.claims import hypotheses as claim_hypotheses
from posbias.verify.lazy import st
from posbias.verify.searches import necessity_searches
from posbias.verify.types import EXPECTS, Property

_REGISTRY: dict[str, Property] = {}
_BUILTINS_DONE = False


def register(prop: Property, *, replace_existing: bool = False) -> Property:
    """Add ``prop`` under its name; a name already taken is refused unless ``replace_existing``."""
    if prop.expect not in EXPECTS:
        raise ValueError(f"expect: {prop.expect!r}, expected one of {EXPECTS}")
    if prop.name in _REGISTRY and not replace_existing:
        raise ValueError(f"a property named {prop.name!r} is already registered (replace=True to replace it)")
    _REGISTRY[prop.name] = prop
    return prop


def register_claim(
    name: str,
    predicate: Callable[..., bool],
    strategy,
    *,
    hypotheses=(),
    expect: str = "holds",
    claim: str | None = None,
    statement: str = "",
    explain=None,
    replace: bool = False,
) -> Property:
    """Register a user claim: ``predicate(example) -> bool`` over what ``strategy`` draws (a
    hypothesis strategy, or a function of ``posbias.verify.strategies.Sizes`` returning one). A dict
    example is passed as keywords, a tuple as positional arguments. expect="holds": the run
    fails if hypothesis finds a case where the predicate is False; expect="counterexample":
    the run fails unless it finds (and shrinks) one."""
    return register(
        Property(name, claim, tuple(hypotheses), strategy, predicate, expect, statement, explain=explain),
        replace_existing=replace,
    )


def claim(name: str, strategy, **kwargs):
    """Decorator form of ``register_claim``: ``@claim("name", strategy=...)`` over the predicate."""

    def wrap(fn):
        register_claim(name, fn, strategy, **kwargs)
        return fn

    return wrap


def unregister(name: str) -> None:
    """Remove the property ``name`` (nothing if there is none)."""
    _REGISTRY.pop(name, None)


def properties() -> dict[str, Property]:
    """name -> Property, built-in first (in claim order), then user claims."""
    _install_builtins()
    return dict(_REGISTRY)


def builtin_properties() -> list[Property]:
    """Every claim's property, the necessity searches, then a placeholder (its predicate,
    untested here) for each claim of the registry that has no property yet."""
    from posbias.theorem.claims import CLAIMS
    from posbias.verify.c7 import c7_properties
    from posbias.verify.sink import sink_properties

    builtin = claim_properties() + necessity_searches() + c7_properties() + sink_properties()
    missing = [label for label in CLAIMS if label not in {p.name for p in builtin}]
    for label in missing:  # a claim added to the registry after this module
        builtin.append(
            Property(
                label, label, claim_hypotheses(label), st.nothing(), lambda *a, **k: True, statement="no property yet"
            )
        )
    return builtin


def _install_builtins() -> None:
    """Register the built-in properties (once), ahead of the user claims registered so far."""
    global _BUILTINS_DONE
    if _BUILTINS_DONE:
        return
    _BUILTINS_DONE = True
    builtin = builtin_properties()
    user = dict(_REGISTRY)
    _REGISTRY.clear()
    for prop in builtin:
        _REGISTRY[prop.name] = prop
    _REGISTRY.update(user)
