"""Statement fingerprints: each claim's key formula and phrases in THEORY.md's own words.

``FINGERPRINTS[label]`` names the claim's key formula and phrases. After ``normalise`` (LaTeX
commands and Unicode symbols mapped to one ASCII spelling, sum/product subscripts, braces, blanks
and case dropped) the formula must occur in THEORY.md's text of the claim (``theory_sections``),
in ``Claim.statement`` and in ``Claim.latex``; each phrase in THEORY.md and in the statement.
THEORY.md is read from ``theory_path()`` (``<workspace>/shared/THEORY.md``, read-only to this project);
the claims this project adds beyond it (C8) are stated in the same format in the section "## Claims
beyond THEORY.md" of ``extension_path()`` (the repository's docs/theory.md), and ``read_theory()`` joins
the two. When THEORY.md is absent (an installed package) ``fingerprint_check`` still checks the statement
and LaTeX against the fragments and says THEORY.md was not read. Plain text processing: no numbers are
computed.

Examples
--------
>>> normalise("collapse iff sum_t lambda_t = oo")
'collapseiffsumlambda_t=oo'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from posbias.theorem.certificate import Check

# --------------------------------------------------------------------------- normalising
_LATEX = {
    "preceq": "≼",
    "lambda": "λ",
    "mu": "μ",
    "sum": "Σ",
    "prod": "Π",
    "infty": "∞",
    "iff": "⇔",
    "Leftrightarrow": "⇔",
    "le": "≤",
    "leq": "≤",
    "ge": "≥",
    "geq": "≥",
    "varepsilon": "ε",
    "epsilon": "ε",
    "delta": "δ",
    "alpha": "α",
    "to": "→",
    "Rightarrow": "⇒",
    "cdot": "·",
    "dots": "…",
    "ldots": "…",
    "downarrow": "↓",
    "quad": " ",
    "qquad": " ",
}
_WRAPPERS = {"text", "operatorname", "mathrm", "mathbb", "bigl", "bigr", "Bigl", "Bigr", "left", "right"}
_UNICODE = {
    "≼": "≼",
    "λ": "lambda",
    "μ": "mu",
    "Σ": "sum",
    "Π": "prod",
    "∞": "oo",
    "⇔": "iff",
    "≤": "<=",
    "≥": ">=",
    "ε": "eps",
    "δ": "delta",
    "α": "alpha",
    "→": "->",
    "⇒": "=>",
    "·": "",
    "…": "...",
    "⋯": "...",
    "−": "-",
    "′": "'",
    "ᵀ": "^T",
    "×": "x",
}


def normalise(text: str) -> str:
    """One spelling for THEORY.md's Unicode, the registry's ASCII and its LaTeX: commands mapped
    (``\\preceq`` -> ≼, ``\\lambda`` -> lambda, ...), wrappers (``\\text``, ``\\bigl``) and ``\\ `` dropped,
    Unicode mapped to ASCII words (λ -> lambda, Σ -> sum, ∞ -> oo, ⇔ -> iff), the subscript of a sum or
    product dropped (Σ_t -> sum), then braces, blanks and case."""
    text = re.sub(r"\\([ ,;:!])", " ", text)
    text = re.sub(
        r"\\([A-Za-z]+)", lambda mt: "" if mt.group(1) in _WRAPPERS else _LATEX.get(mt.group(1), mt.group(1)), text
    )
    text = "".join(_UNICODE.get(ch, ch) for ch in text)
    text = re.sub(r"(sum|prod)_(\{[^{}]*\}|[A-Za-z0-9])", r"\1", text)
    text = text.replace("{", "").replace("}", "")
    return re.sub(r"\s+", "", text).lower()


# ------------------------------------------------------------------------------ THEORY.md
def theory_path() -> Path:
    """``<workspace>/shared/THEORY.md``: two folders above this package's repository root."""
    return Path(__file__).resolve().parents[2] / "shared" / "THEORY.md"


def extension_path() -> Path:
    """The repository's docs/theory.md, whose section "## Claims beyond THEORY.md" states C8."""
    return Path(__file__).resolve().parents[1] / "docs" / "theory.md"


def read_theory() -> str | None:
    """THEORY.md's text followed by docs/theory.md's "## Claims beyond THEORY.md" section (where the file
    exists), or None when THEORY.md cannot be read."""
    path = theory_path()
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    ext = extension_path()
    if ext.is_file():
        extra = re.search(r"^## Claims beyond THEORY\.md.*?(?=^## |\Z)", ext.read_text(encoding="utf-8"), re.M | re.S)
        if extra:
            text += "\n\n" + extra.group(0)
    return text


_PART = re.compile(r"(?<![A-Za-z0-9])\(([a-z])\)\s")


def theory_sections(text: str) -> dict[str, str]:
    """label -> THEORY.md's text of that claim: the bullet ``- **C5 ...`` of every "## Claims" section split at its
    parts in order: the first "(a) ", then the first "(b) " after it, ... (so "C2(b)", "A^(t) " and a
    part's letter named again inside it, "(b) can fail", do not split), and "cesaro" -> the section
    "## An exact closed form"."""
    out: dict[str, str] = {}
    body = "".join(mt.group(0) for mt in re.finditer(r"^## Claims.*?(?=^## |\Z)", text, re.M | re.S))
    for item in re.split(r"^- (?=\*\*)", body, flags=re.M)[1:]:
        head = re.match(r"\*\*(C\d+)", item)
        if not head:
            continue
        base = head.group(1)
        out[base] = item
        marks, pos = [], 0  # the parts in order: the first "(a) ", then the first "(b) " after it, ...
        for letter in "abcdefgh":
            mark = next((mt for mt in _PART.finditer(item, pos) if mt.group(1) == letter), None)
            if mark is None:
                break
            marks.append(mark)
            pos = mark.end()
        for a, mark in enumerate(marks):
            end = marks[a + 1].start() if a + 1 < len(marks) else len(item)
            out[f"{base}({mark.group(1)})"] = item[mark.start() : end]
    closed = re.search(r"^## An exact closed form.*?(?=^## |\Z)", text, re.M | re.S)
    if closed:
        out["cesaro"] = closed.group(0)
    return out


@dataclass(frozen=True)
class Fingerprint:
    """formula: in THEORY.md's words; must occur (normalised) in THEORY.md's claim, the statement and
    the LaTeX. phrases: must occur in THEORY.md's claim and the statement."""

    formula: str
    phrases: tuple[str, ...] = ()


FINGERPRINTS: dict[str, Fingerprint] = {
    "C1": Fingerprint("μK ≼ μ"),
    "C2(a)": Fingerprint("μA ≼ μR_λ ≼ μ", ("F_{μR_λ} = (1−λ)F_μ + λF_{μA}",)),
    "C2(b)": Fingerprint("p is ≼-non-increasing in each λ_t", ("stochastically monotone",)),
    "C2(c)": Fingerprint("p(N−1) = Π_t (1 − λ_t (1 − A^(t)[N−1, N−1]))"),
    "C3(a)": Fingerprint("F_i(k) = r^{i−k} (1 − r^{k+1}) / (1 − r^{i+1})", ("stochastically", "decreasing in i")),
    "C3(b)": Fingerprint("A^(m)(i,·) ≼ A^(m′)(i,·)", ("m ≤ m′",)),
    "C3(c)": Fingerprint("steeper slopes at any layer give a ≼-later p"),
    "C4(a)": Fingerprint("b cancels"),
    "C4(b)": Fingerprint("α_i increasing in d", ("(ALiBi on the strict past)", "p is ≼-non-decreasing in d")),
    "C5(a)": Fingerprint(
        "P[i, i] = Π_t (1 − λ_t (1 − A^(t)[i, i])) ≥ Π_t (1 − λ_t δ_t)", ("Σ_t λ_t δ_t < ∞", "no collapse")
    ),
    "C5(b)": Fingerprint("P[i, 0] ≥ 1 − Π_t (1 − λ_t ε_t) → 1", ("Σ_t λ_t ε_t = ∞", "A^(t)[i, 0] ≥ ε_t")),
    "C5(c)": Fingerprint("collapse ⇔ Σ λ_t = ∞", ("every allowed entry",)),
    "C6": Fingerprint(
        "N = 8, r = 1/5, d = 0, T = 8, λ = 3/4",
        (
            "at depth 1 no profile is U-shaped",
            "0.2136, 0.3078, 0.2725",
            "u_shape = argmin interior and both ends above the minimum",
        ),
    ),
    "C7(a)": Fingerprint("F_i(k) = 1 − W(i − k − 1) / W(i)", ("for k < i",)),
    "C7(b)": Fingerprint("W is log-concave", ("stochastically monotone iff", "b non-increasing on g ≥ 1")),
    "C7(c)": Fingerprint("A(i,·) ≼ A′(i,·)", ("w′(g)/w(g) is non-increasing in g",)),
    "C8(a)": Fingerprint("log(e^{s_ii} + Σ_{k∈K} e^{s_ik})", ("row-stochastic", "content diagonal")),
    "C8(b)": Fingerprint("p ≼ p_S", ("A(i,·) ≼ S_K(A)(i,·)", "K = {0, …, k−1}", "stochastically monotone")),
    "C8(c)": Fingerprint("collapse onto j_0 ⇔ Σ λ_t = ∞", ("P_S[i, k] = 0", "every allowed entry")),
    "cesaro": Fingerprint(
        "μ_k = Π_t (1 − λ_t · k/(k+1))", ("p(j) = C(N−1, j) Σ_{i=0}^{N−1−j} (−1)^i C(N−1−j, i) μ_{j+i}", "P = H(μ)")
    ),
}


def fingerprint_check(claim, theory: str | None) -> Check:
    """The claim's statement and LaTeX carry its key formula and phrases, and THEORY.md's text of the
    claim (``theory``: the whole file, or None when it could not be read) carries them too."""
    label = claim.label
    name = f"statement:{label}"
    if label not in FINGERPRINTS:
        return Check(name, False, f"{label}: no fingerprint in theorem.statements.FINGERPRINTS")
    fp = FINGERPRINTS[label]
    missing: list[str] = []
    if normalise(fp.formula) not in normalise(claim.statement):
        missing.append(f"statement lacks {fp.formula!r}")
    if normalise(fp.formula) not in normalise(claim.latex):
        missing.append(f"latex lacks {fp.formula!r}")
    missing += [f"statement lacks {ph!r}" for ph in fp.phrases if normalise(ph) not in normalise(claim.statement)]
    read = theory is not None
    if read:
        section = theory_sections(theory).get(label)
        if section is None:
            missing.append(f"THEORY.md has no text for {label}")
        else:
            missing += [
                f"THEORY.md's {label} lacks {frag!r}"
                for frag in (fp.formula, *fp.phrases)
                if normalise(frag) not in normalise(section)
            ]
    where = "THEORY.md, statement and LaTeX" if read else "statement and LaTeX (THEORY.md not found: not compared)"
    return Check(name, not missing, f"{label}: key formula {fp.formula!r} in {where}", "; ".join(missing))
