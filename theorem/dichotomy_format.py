"""How ``posbias derive dichotomy`` shows an ``Analysis``: plain text, LaTeX and a JSON dict.

The JSON ``data`` keys: ``schedule`` (the spec), ``expr`` (λ_t), ``family`` and ``params``,
``delta`` and ``delta_kind`` ("symbolic", "constant", "schedule"), ``series`` (the analysed
series), ``converges`` (true, false, null when undecided, or the condition as a string),
``status`` ("converges", "diverges", "undecided" or "conditional", of the series), ``how``,
``reason``, ``sum``, ``atom``, ``atom_lower_bound``, ``atom_numeric`` and
``atom_numeric_error`` (half-width of its certified bracket), ``verdict``
(``Analysis.verdict_text``), ``verdict_basis``, ``range_proved`` and ``notes``.

Examples
--------
>>> from posbias.theorem.dichotomy_analysis import analyse
>>> from posbias.theorem.schedule_expr import parse_schedule
>>> a = analyse(parse_schedule("geometric:0.5,0.9"))
>>> status(a), data(a)["sum"]
('converges', '5')
"""

from __future__ import annotations

from typing import Any

import sympy as sp

from posbias.theorem.dichotomy_analysis import NUMERIC_TERMS, Analysis, Verdict


def status(a: Analysis) -> str:
    """What is known of the analysed series: "converges", "diverges", "undecided" or "conditional"."""
    if a.converges is True:
        return "converges"
    if a.converges is False:
        return "diverges"
    if a.converges is None:
        return "undecided"
    return "conditional"


def text(a: Analysis) -> str:
    """The plain-text report: λ_t, δ, family, the series test, S, the atom (C2(c), C5(a)), the verdict."""
    st = status(a)
    conv_word = f"converges iff {a.converges}" if st == "conditional" else st
    fam = a.family
    lines = [
        f"dichotomy: λ_t = {a.expr}   (t = 0, 1, 2, ...; δ = {a.delta})",
        f"family: {fam.kind}" + (f" ({', '.join(f'{k} = {v}' for k, v in fam.params.items())})" if fam.params else ""),
        f"{a.series}: {conv_word}" + (f" — {a.how}" if a.how else "") + (f" — {a.reason}" if a.reason else ""),
    ]
    if a.total is not None and a.converges is not None:
        approx = ""
        if a.total.is_number and a.total.is_finite:
            from posbias.theorem.dichotomy_analysis import approx_text

            approx = approx_text(a.total)
        lines.append(f"S = {a.series} = {a.total}{approx}")
    lines.append(f"last-token atom Π_t (1 - λ_t δ_t) (C2(c), C5(a)): {a.atom}")
    if a.atom_numeric is not None and a.verdict is Verdict.NO_COLLAPSE and a.atom_numeric_error:
        lines.append(
            f"  numerical value: {a.atom_numeric:.6g} ± {a.atom_numeric_error:.1e} (first "
            f"{NUMERIC_TERMS} factors in mpmath, the tail bracketed by the product bounds)"
        )
    lines.append(f"verdict: {a.verdict_text}   ({a.verdict_basis})")
    lines += [f"note: {n}" for n in a.notes]
    return "\n".join(lines)


def latex(a: Analysis) -> str:
    """λ_t, the series (< ∞, = ∞, undecided or the condition), the atom bound and the verdict."""
    conv = {"converges": r"<\infty", "diverges": r"=\infty", "undecided": r"\;\text{undecided}"}.get(status(a))
    if conv is None:
        conv = r"<\infty\iff " + sp.latex(a.converges)
    series = r"\sum_{t\ge0}\lambda_t\delta_t" if a.delta.kind == "schedule" else r"\sum_{t\ge0}\lambda_t"
    bound = (r",\quad\prod_t(1-\lambda_t\delta_t)\ge " + sp.latex(a.atom_bound)) if a.atom_bound is not None else ""
    return (
        r"\lambda_t="
        + sp.latex(a.expr)
        + r",\quad\delta="
        + sp.latex(a.delta.expr)
        + r",\quad"
        + series
        + conv
        + bound
        + r"\quad\text{("
        + a.verdict_text
        + ")}"
    )


def data(a: Analysis) -> dict[str, Any]:
    """The JSON-serialisable fields (see the module docstring)."""
    st = status(a)
    return {
        "schedule": a.schedule.spec,
        "expr": str(a.expr),
        "family": a.family.kind,
        "params": {k: str(v) for k, v in a.family.params.items()},
        "delta": str(a.delta.expr),
        "delta_kind": a.delta.kind,
        "series": a.series,
        "converges": {"converges": True, "diverges": False, "undecided": None}.get(st, str(a.converges)),
        "status": st,
        "how": a.how,
        "reason": a.reason,
        "sum": None if a.total is None else str(a.total),
        "atom": a.atom,
        "atom_lower_bound": None if a.atom_bound is None else str(a.atom_bound),
        "atom_numeric": a.atom_numeric,
        "atom_numeric_error": a.atom_numeric_error,
        "verdict": a.verdict_text,
        "verdict_basis": a.verdict_basis,
        "range_proved": a.range_proved,
        "notes": list(a.notes),
    }
