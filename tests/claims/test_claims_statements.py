"""Claim statements are checked, not only certificates (issue 9): each claim's key formula matches
THEORY.md's text, and its predicate decides exact hand-derived instances as the statement does.
Sabotaging C5(c) ("collapse iff Σλ < ∞") in its text or its predicate now fails the check and
``posbias proofs --check``."""

import dataclasses
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from posbias.cli.proofs import proofs_command
from posbias.theorem import statement_instances as si
from posbias.theorem.claims import CLAIMS
from posbias.theorem.statements import (
    FINGERPRINTS,
    INSTANCES,
    exact_truth,
    fingerprint_check,
    instance_check,
    normalise,
    read_theory,
    statement_check,
    theory_sections,
)

THEORY = Path(__file__).resolve().parents[3] / "shared" / "THEORY.md"


@pytest.fixture(scope="module")
def theory() -> str:
    assert THEORY.is_file(), f"THEORY.md not found at {THEORY}"
    text = read_theory()  # THEORY.md, then docs/theory.md's "Claims beyond THEORY.md" (C8)
    assert text is not None and text.startswith(THEORY.read_text(encoding="utf-8"))
    return text


def test_every_claim_has_a_fingerprint_and_positive_and_negative_instances():
    assert set(FINGERPRINTS) == set(CLAIMS) == set(INSTANCES)
    for label, cases in INSTANCES.items():
        assert {c.expected for c in cases} == {True, False}, label


def test_theory_md_is_split_into_the_registry_labels(theory):
    sections = theory_sections(theory)
    assert set(CLAIMS) <= set(sections)
    assert sections["C2(b)"].startswith("(b) If every A^(t)")  # "(b) can fail" and "A^(t) " do not split
    assert "collapse ⇔ Σ λ_t = ∞" in sections["C5(c)"]
    assert "T = 8, λ = 3/4" in sections["C6"]
    assert sections["C8(b)"].startswith("(b) For causal A")  # from docs/theory.md, beyond THEORY.md


@pytest.mark.parametrize("label", list(CLAIMS))
def test_statement_and_latex_match_theory(label, theory):
    check = fingerprint_check(CLAIMS[label], theory)
    assert check.holds, check.detail


@pytest.mark.parametrize("label", list(CLAIMS))
def test_predicate_decides_the_exact_instances_as_the_statement_does(label):
    for case in INSTANCES[label]:
        assert exact_truth(label, case) == case.expected, case.why
    check = instance_check(CLAIMS[label])
    assert check.holds, check.detail


def _rollout(kernels, lambdas):
    n = len(kernels[0])
    p = [[Fraction(int(i == j)) for j in range(n)] for i in range(n)]
    for k, lam in zip(kernels, lambdas):
        r = [[(1 - lam) * (i == j) + lam * k[i][j] for j in range(n)] for i in range(n)]
        p = [[sum(r[i][q] * p[q][j] for q in range(n)) for j in range(n)] for i in range(n)]
    return p


def test_hand_derived_data_equal_exact_rollouts():
    """The closed forms written into the instances are the exact matrix products."""
    half = Fraction(1, 2)
    u2 = si.UNIFORM2
    assert _rollout([u2, u2], [half, half]) == si.P_UNIFORM2
    assert _rollout([u2] * 64, si.CONSTANT) == si.two_token(si.CONSTANT)
    assert _rollout([u2] * 64, si.SUMMABLE) == si.two_token(si.SUMMABLE)
    u3 = si.UNIFORM3
    assert _rollout([u3, u3], [half, half])[-1] == [Fraction(23, 72), Fraction(17, 72), Fraction(32, 72)]
    assert _rollout([u3], [half])[-1] == [Fraction(1, 6), Fraction(1, 6), Fraction(2, 3)]
    assert _rollout([u3, u3], [half, half]) == si.P_UNIFORM3
    # C8: S_{0} written out by hand (row 2's mass 1/3 on the sink moved to the diagonal), then rolled out
    sunk = [[1, 0, 0], [0, 1, 0], [0, Fraction(1, 3), Fraction(2, 3)]]
    assert si.sink_moved(u3, [0]) == sunk
    assert _rollout([sunk, sunk], [half, half]) == si.P_S_UNIFORM3
    from posbias.theorem.alibi_row import exact_kernel

    assert [
        [Fraction(int(x.p), int(x.q)) for x in exact_kernel(3, Fraction(1, 2), 1).row(i)] for i in range(3)
    ] == si.ALIBI_HALF3


def test_normalise_identifies_the_three_spellings():
    assert (
        normalise("P[i, 0] ≥ 1 − Π_t (1 − λ_t ε_t) → 1")
        == normalise(r"P[i, 0] \ge 1 - \prod_t (1 - \lambda_t \varepsilon_t) \to 1")
        == normalise("P[i, 0] >= 1 - prod_t (1 - lambda_t eps_t) -> 1")
    )
    assert normalise("Σ λ_t = ∞") != normalise("sum_t lambda_t < oo")


# ------------------------------------------------------------------------- sabotage of C5(c)
SABOTAGED_TEXT = "If every allowed entry is >= eps > 0, then collapse iff sum_t lambda_t < oo."


def _wrong_dichotomy(pmat, kernels, lambdas, tol=1e-10):
    """ "collapse iff Σλ < ∞": collapsed exactly when the schedule is summable (here: Σλ < 2)."""
    collapsed = bool(np.min(np.asarray(pmat)[1:, 0]) > 1 - 1e-6)
    return collapsed == (float(np.sum(lambdas)) < 2)


@pytest.mark.parametrize(
    "change",
    [
        {"statement": SABOTAGED_TEXT},
        {"latex": r"\text{collapse} \iff \sum_t \lambda_t < \infty"},
        {"predicate": _wrong_dichotomy},
        {"predicate": lambda *args, **kwargs: True},
        {"predicate": lambda pmat, kernels, lambdas, tol=1e-10: not CLAIMS["C5(c)"].predicate(pmat, kernels, lambdas)},
    ],
)
def test_sabotaged_c5c_fails_the_statement_check_and_proofs_check(change, monkeypatch, capsys, memoised_certificates):
    original = CLAIMS["C5(c)"]
    assert statement_check("C5(c)").holds
    monkeypatch.setitem(CLAIMS, "C5(c)", dataclasses.replace(original, **change))
    assert not statement_check("C5(c)").holds
    assert proofs_command(["--check"]) == 1
    out, err = capsys.readouterr()
    assert "FAIL     statement:C5(c)" in out
    assert "statement:C5(c) does not hold" in err


def test_sabotaged_theory_text_is_detected(theory):
    """The same check read against a THEORY.md whose C5(c) says '< ∞' fails."""
    bad = theory.replace("collapse ⇔ Σ λ_t = ∞", "collapse ⇔ Σ λ_t < ∞")
    assert not fingerprint_check(CLAIMS["C5(c)"], bad).holds
    assert statement_check("C5(c)", theory=bad).holds is False


def test_proofs_check_prints_every_statement(capsys, memoised_certificates):
    assert proofs_command(["--check"]) == 0
    out = capsys.readouterr().out
    for label in CLAIMS:
        assert f"pass     statement:{label}" in out
    assert f"{len(CLAIMS)} claim statements checked, {len(CLAIMS)} hold" in out


def test_without_theory_md_statements_are_still_checked_against_their_fingerprints():
    check = statement_check("C5(c)", theory=None)
    assert check.holds and "THEORY.md not found" in check.description
    bad = dataclasses.replace(CLAIMS["C5(c)"], statement=SABOTAGED_TEXT)
    assert not statement_check("C5(c)", {"C5(c)": bad}, theory=None).holds
