"""The derivation registry: every ``posbias derive NAME`` query, by name.

Each module listed in ``DERIVATION_MODULES`` exposes ``DERIVATION: Derivation``
(name, summary, claims, parameter type, ``compute``, ``parse``); modules are
imported when the registry is first read, so ``import posbias.theorem`` stays cheap
and never pulls in JAX. Python callers use the parameter type and ``compute``
directly: ``derivations()["alibi-row"].compute(AlibiRowParams(row=3))``.

Examples
--------
>>> "alibi-row" in derivations()
True
>>> der = derivations()["alibi-row"]
>>> der.compute(der.parse(["--row", "2", "--slope", "0", "--diag", "0"])).data["row"]
[0.3333333333333333, 0.3333333333333333, 0.3333333333333333]
"""

from __future__ import annotations

import importlib
from functools import cache

from posbias.theorem.derivation import Derivation

DERIVATION_MODULES = (
    "posbias.theorem.softmax_shift",
    "posbias.theorem.alibi_row",
    "posbias.theorem.monotone",
    "posbias.theorem.drift",
    "posbias.theorem.diagonal_product",
    "posbias.theorem.cesaro",
    "posbias.theorem.dichotomy",
    "posbias.theorem.continuum",
    "posbias.theorem.bias_queries",
    "posbias.theorem.bias_order",
)


@cache
def _load() -> tuple[dict[str, Derivation], dict[str, str]]:
    found: dict[str, Derivation] = {}
    missing: dict[str, str] = {}
    for mod in DERIVATION_MODULES:
        try:
            der = importlib.import_module(mod).DERIVATION
        except (ImportError, AttributeError) as err:
            missing[mod] = f"{type(err).__name__}: {err}"
            continue
        if der.name in found:
            raise ValueError(f"derivation {der.name!r} is registered twice")
        found[der.name] = der
    return found, missing


def derivations() -> dict[str, Derivation]:
    """name -> Derivation, in registry order."""
    return dict(_load()[0])


def missing() -> dict[str, str]:
    """module -> why it could not be loaded (empty when every derivation module is present)."""
    return dict(_load()[1])
