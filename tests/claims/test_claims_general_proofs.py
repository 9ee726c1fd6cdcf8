"""Issue 9's proofs: the C6 correction (steep slopes give a hump at depth), the depth-1 profile derived
from the kernel, C3(b) for every row i, head mixtures, and the general-N Hausdorff product rule.
Each test names the claim it checks and what is symbolic versus finite."""

from fractions import Fraction

import sympy as sp

from posbias.theorem import cesaro_certificates, hausdorff, monotone, shape
from posbias.theorem.claims import CLAIMS


def test_c6_old_statement_is_false_at_depth():
    """C6: N = 8, r = 1/5, d = 0, T = 8, λ = 3/4 ends 0.2136, 0.3078, 0.2725 (THEORY.md), exactly a hump."""
    p = shape.exact_profile_of(*shape.HUMP_CASES[0])
    assert [f"{float(x):.4f}" for x in p[-3:]] == ["0.2136", "0.3078", "0.2725"]
    assert p[-3] < p[-2] > p[-1] and not shape.non_decreasing(p) and not shape.u_shape(p)
    p16 = shape.exact_profile_of(*shape.HUMP_CASES[1])
    assert p16[-2] > p16[-1] and sum(p16) == 1
    assert shape.steep_hump().holds and shape.steep_witnesses().holds


def test_c6_first_hump_depths_are_the_first():
    """C6: for r = 1/5 the profile is non-decreasing for T < T*(λ) and not at T*(λ)."""
    assert shape.FIRST_HUMP == {Fraction(1, 4): 24, Fraction(1, 2): 12, Fraction(3, 4): 8, Fraction(1): 5}
    check = shape.steep_witnesses()
    assert check.holds and "24, 12, 8, 5" in check.description


def test_c6_depth_one_profile_is_derived_from_the_kernel():
    """C6: p = (1-λ) e_{N-1} + λ softmax(row N-1 of the ALiBi + content logits); p(j+1)/p(j) = e^m symbolically."""
    check = shape.single_layer()
    assert check.holds and "exp(m)" in check.detail
    # the derived formula at N = 4, m = log 2 (r = 1/2), d = 0, b = 3, λ = 1/2 equals the exact residual row
    n, lam = 4, sp.Rational(1, 2)
    got = [
        sp.nsimplify(sp.simplify(shape.depth_one_profile(sp.Integer(n), sp.Integer(c), lam, sp.log(2), 0, 3).doit()))
        for c in range(n)
    ]
    assert got == shape.exact_profile_of(n, sp.Rational(1, 2), 1, 1, lam)


def test_c6_claim_statement_is_corrected():
    text = CLAIMS["C6"].statement
    assert "a steep slope gives a monotone profile" not in text
    assert "do not make the profile monotone" in text and "0.2136, 0.3078, 0.2725" in text


def test_c3b_general_row_certificate_is_symbolic_and_not_vacuous():
    """C3(b) for every i: the decomposition P'Q - PQ' = D P' + Σ_{a>=s>b} (a-b) r^{a+b-1} holds with i, k
    symbolic, and the same identity with (b - a) does not."""
    check = monotone.slope_order_general()
    assert check.holds, check.detail
    a, b = sp.symbols("a b", integer=True)
    s = sp.Symbol("s", integer=True, positive=True)
    x = sp.Symbol("x", integer=True, nonnegative=True)
    r, d = monotone.r, monotone.D
    cp = monotone.generic(sp.Sum(r**a, (a, s, s + x)).doit())
    cq = monotone.generic(sp.Sum(r**b, (b, 1, s + x)).doit())
    num = sp.diff(cp, r) * (d + cq) - cp * sp.diff(cq, r)
    wrong = sp.Sum(sp.Sum((b - a) * r ** (a + b - 1), (b, 1, s - 1)), (a, s, s + x))
    assert sp.simplify(num - d * sp.diff(cp, r) - monotone.generic(wrong.doit())) != 0
    assert "monotone:slope-order-general" in CLAIMS["C3(b)"].certificates


def test_head_mixture_closure():
    """C3(a)/C3(c)/C4(b) with many heads: convex combinations keep monotonicity and row orders."""
    check = monotone.head_mixture()
    assert check.holds, check.detail
    for label in ("C3(a)", "C3(c)", "C4(b)"):
        assert "monotone:head-mixture" in CLAIMS[label].certificates


def test_hausdorff_factorisation_general_n():
    """cesaro: H(μ) = Δ diag(μ) Δ, Δ² = I symbolically; Δ is the signed binomial matrix."""
    assert cesaro_certificates.hausdorff_factorisation().holds
    delta = hausdorff.signed_binomial(5)
    assert delta * delta == sp.eye(5)
    mu = sp.symbols("mu0:5")
    assert (delta * sp.diag(*mu) * delta - hausdorff.hausdorff_matrix(mu)).expand() == sp.zeros(5, 5)
    assert cesaro_certificates.hausdorff_of_cesaro().holds and cesaro_certificates.residual_layer().holds
