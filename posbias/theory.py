"""The theory side of the public API: derivations by name and the claim registry (SymPy; no JAX).

Examples
--------
>>> import posbias
>>> "alibi-row" in posbias.derivations()
True
>>> posbias.derive("softmax-shift").data["holds"]
True
>>> sorted(posbias.claims())[:3]
['C1', 'C2(a)', 'C2(b)']
"""

from __future__ import annotations


def derivations() -> dict:
    """name -> ``Derivation`` (summary, claims, parameter type, compute) for every ``posbias derive`` query."""
    from posbias.theorem.queries import derivations as registry

    return registry()


def derive(name: str, **params):
    """Run the derivation ``name`` with keyword parameters; returns its ``Result`` (text, latex, data).

    The keywords are the fields of the derivation's parameter dataclass, the same as the
    ``--flags`` of ``posbias derive NAME`` (``posbias derive NAME --help`` lists them).
    """
    found = derivations()
    if name not in found:
        raise KeyError(f"unknown derivation {name!r}; known: {', '.join(found)}")
    der = found[name]
    return der.compute(der.params(**params))


def claims() -> dict:
    """label -> claim (statement, hypotheses, certificates, proof) for C1-C6 and the Cesàro closed form."""
    from posbias.theorem.claims import CLAIMS

    return dict(CLAIMS)
