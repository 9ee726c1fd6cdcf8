"""theorem.dichotomy: C5's infinite-depth dichotomy (collapse iff Σλ_t = ∞) and C2(c)'s atom.

Verdicts are checked against independent facts (partial sums, exact partial products);
SymPy's failure to decide must come back as "undecided", never as a guess.
"""

import math
from fractions import Fraction

import mpmath
import pytest
import sympy as sp

from posbias.theorem import dichotomy
from posbias.theorem.derivation import DeriveError


def run(*args):
    return dichotomy.DERIVATION.run(list(args)).data


def test_constant_schedule_collapses():
    d = run("constant:0.3")
    assert d["status"] == "diverges" and d["verdict"] == "collapse"
    # independent: the exact atom (1 - 3/10)^T is below exp(-0.3 T) and tends to 0
    for t in (10, 100, 1000):
        atom = (1 - Fraction(3, 10)) ** t
        assert atom <= math.exp(-0.3 * t)
    assert float((1 - Fraction(3, 10)) ** 1000) < 1e-150


def test_power_decay_beta_one_collapses():
    d = run("power_decay:0.5,1")
    assert d["status"] == "diverges" and d["verdict"] == "collapse"
    # independent: partial sums of 1/(2(t+1)) grow like log(T)/2 without bound
    assert sum(0.5 / (t + 1) for t in range(10**6)) > 0.5 * math.log(10**6)


def test_power_decay_beta_three_halves_does_not_collapse_and_bounds_the_atom():
    d = run("0.5/(t+1)**1.5")
    assert d["family"] == "power_decay" and d["status"] == "converges" and d["verdict"] == "no collapse"
    assert sp.sympify(d["sum"]) == sp.zeta(sp.Rational(3, 2)) / 2
    bound = float(sp.sympify(d["atom_lower_bound"]))
    assert bound == pytest.approx(math.exp(-float(sp.zeta(1.5))))  # exp(-δS/(1-λ_0 δ)), S = ζ(3/2)/2
    # independent: the partial products decrease to the limit and stay above the bound
    with mpmath.workdps(30):
        partial = mpmath.fprod(1 - mpmath.mpf(1) / 2 / (t + 1) ** mpmath.mpf(1.5) for t in range(20000))
    assert float(partial) > bound
    assert d["atom_numeric"] <= float(partial) and d["atom_numeric"] > bound
    # independent: 10^6 factors exactly in float64 logs plus the integral tail -Σ_{t>=10^6} λ_t
    logs = math.fsum(math.log1p(-0.5 / (t + 1) ** 1.5) for t in range(10**6))
    assert d["atom_numeric"] == pytest.approx(math.exp(logs - 1 / math.sqrt(10**6 + 0.5)), rel=1e-6)


def test_geometric_does_not_collapse_and_atom_is_the_q_pochhammer_symbol():
    d = run("geometric:0.5,0.9")
    assert d["status"] == "converges" and d["verdict"] == "no collapse"
    assert sp.sympify(d["sum"]) == 5
    assert float(sp.sympify(d["atom_lower_bound"])) == pytest.approx(math.exp(-10))
    qp = float(mpmath.qp(0.5, 0.9))  # (λ_0 δ; q)_∞ = Π_t (1 - λ_0 q^t), an independent closed form
    assert d["atom_numeric"] == pytest.approx(qp, rel=1e-8)
    assert qp > math.exp(-10)


def test_symbolic_parameters_give_the_condition():
    d = run("lambda_0/(t+1)**beta")
    assert d["status"] == "conditional"
    beta = sp.Symbol("beta", positive=True)
    assert sp.sympify(d["converges"], locals={"beta": beta}) == (beta > 1)
    assert d["verdict"] == "collapse iff beta <= 1"
    g = run("geometric:lambda_0,q")
    assert g["verdict"] == "collapse iff q >= 1"


def test_expression_outside_the_families_uses_sympy():
    assert run("1/((t+2)*log(t+2))")["verdict"] == "collapse"  # Σ 1/(n log n) = ∞
    assert run("exp(-t)/2")["verdict"] == "no collapse"
    assert run("0.5*sin(t)**2/(t+1)")["verdict"] == "collapse"


def test_undecidable_expression_is_reported_undecided():
    # Σ (t+1)^(-1-sin²t): convergence hinges on how well π is approximated by rationals;
    # SymPy cannot decide it and must say so.
    d = run("1/(t+1)**(1+sin(t)**2)")
    assert d["status"] == "undecided" and d["verdict"] == "undecided" and d["converges"] is None
    assert "SymPy" in d["reason"]
    d = run("a/(t+1)**2 + b/(t+1)**3")  # free parameters outside the recognised families
    assert d["verdict"] == "undecided" and "free parameters" in d["reason"]


def test_delta_scales_the_atom_bound():
    d = run("power_decay:0.5,2", "--delta", "0.5")
    # S = π²/12, sup λ = 1/2, δ = 1/2: bound exp(-(π²/24)/(3/4))
    assert float(sp.sympify(d["atom_lower_bound"])) == pytest.approx(math.exp(-(math.pi**2 / 24) / 0.75))
    assert run("constant:0.3", "--delta", "0")["atom"].startswith("≡ 1")


def test_certificates_hold():
    certs = dichotomy.certificates()
    assert {"dichotomy:constant-diverges", "dichotomy:power-decay-threshold",
            "dichotomy:product-upper-bound", "dichotomy:product-lower-bound"} <= set(certs)
    for name, check in certs.items():
        c = check()
        assert c.name == name and c.holds, (name, c.detail)


def test_product_bounds_numerically_bracket_the_product():
    # 1 - x <= e^{-x} and 1 - x >= e^{-x/(1-x)} on a grid (the certified inequalities, checked pointwise)
    for k in range(0, 100):
        x = k / 100
        assert math.exp(-x / (1 - x)) <= 1 - x <= math.exp(-x) + 1e-15


@pytest.mark.parametrize("args", [
    ["sin(t"], ["__import__('os')"], ["t.__class__"], ["t+1"], ["1/t"], ["-0.1"],
    ["power_decay:0.5"], ["0.5/(t+1)", "--delta", "2"], ["0.5", "--bogus"], [], ["constant:abc+"], ["constant:t"],
])
def test_bad_input_raises_one_line_derive_error(args):
    with pytest.raises(DeriveError) as info:
        dichotomy.DERIVATION.run(args)
    assert "\n" not in str(info.value)


def test_text_and_latex_render():
    r = dichotomy.DERIVATION.run(["0.5/(t+1)**1.5"])
    assert "no collapse" in r.text and r"\zeta" in r.latex


def test_jax_schedule_and_partial_atom_match_the_engine():
    """The lambdified (JAX) lambda_t equals numerics' power-decay schedule, and the partial
    product prod_t (1 - lambda_t delta) equals the engine's last-token probability for
    uniform causal attention (A[N-1, N-1] = 1/N, so delta = 1 - 1/N; C2(c))."""
    import numpy as np

    import posbias.numerics as nx
    from posbias.theorem.dichotomy import jax_partial_atom, jax_schedule, parse_schedule

    s = parse_schedule("lambda_0/(t+1)**beta")
    lam = np.asarray(jax_schedule(s, lambda_0=0.8, beta=1.5)(np.arange(40.0)))
    expected, _ = nx.schedules.evaluate(nx.PowerDecay(0.8, 1.5), 40)
    assert np.allclose(lam, expected, rtol=1e-14, atol=0)
    n = 16
    for layers in (1, 7, 40):
        stack = nx.AlibiStack.build(expected[:layers], [0.0])
        p_last = nx.profile(stack, n).probabilities[-1]
        atom = float(jax_partial_atom(s, 1 - 1 / n, lambda_0=0.8, beta=1.5)(layers))
        assert abs(atom - p_last) <= 1e-14
