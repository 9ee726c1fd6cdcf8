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
from posbias.theorem.claims import certificate_registry
from posbias.theorem.derivation import DeriveError
from posbias.theorem.dichotomy import DichotomyParams


def run(schedule, delta=None):
    return dichotomy.compute(DichotomyParams(schedule, delta=delta)).data


def test_constant_schedule_collapses():
    d = run("constant:0.3")
    assert d["status"] == "diverges" and d["verdict"] == "collapse" and d["atom"].startswith("→ 0")
    # independent: the exact atom (1 - 3/10 δ)^T is below exp(-0.3 δ T) and tends to 0 (δ = 1/2 here)
    for t in (10, 100, 1000):
        assert (1 - Fraction(3, 20)) ** t <= math.exp(-0.15 * t)
    assert float((1 - Fraction(3, 20)) ** 4000) < 1e-150
    assert run("constant:0.3", delta=Fraction(1, 2))["verdict"] == "collapse"


def test_power_decay_beta_one_collapses():
    d = run("power_decay:0.5,1")
    assert d["status"] == "diverges" and d["verdict"] == "collapse"
    # independent: partial sums of 1/(2(t+1)) grow like log(T)/2 without bound
    assert sum(0.5 / (t + 1) for t in range(10**6)) > 0.5 * math.log(10**6)


def test_power_decay_beta_three_halves_does_not_collapse_and_bounds_the_atom():
    d = run("0.5/(t+1)**1.5", delta=Fraction(1, 2))
    assert d["family"] == "power_decay" and d["status"] == "converges" and d["verdict"] == "no collapse"
    assert sp.sympify(d["sum"]) == sp.zeta(sp.Rational(3, 2)) / 2
    bound = float(sp.sympify(d["atom_lower_bound"]))
    # exp(-δS/(1 - δλ_0)) with δ = 1/2, S = ζ(3/2)/2, λ_0 = 1/2: exp(-ζ(3/2)/3)
    assert bound == pytest.approx(math.exp(-float(sp.zeta(1.5)) / 3))
    # independent: the partial products decrease to the limit and stay above the bound
    with mpmath.workdps(30):
        partial = mpmath.fprod(1 - mpmath.mpf(1) / 4 / (t + 1) ** mpmath.mpf(1.5) for t in range(20000))
    assert float(partial) > bound
    assert d["atom_numeric"] <= float(partial) and d["atom_numeric"] > bound
    # independent: 10^6 factors in float64 logs plus the integral tail -Σ_{t>=10^6} λ_t δ
    logs = math.fsum(math.log1p(-0.25 / (t + 1) ** 1.5) for t in range(10**6))
    assert d["atom_numeric"] == pytest.approx(math.exp(logs - 0.5 / math.sqrt(10**6 + 0.5)), rel=1e-6)
    assert 0 < d["atom_numeric_error"] < 1e-6


def test_geometric_does_not_collapse_and_atom_is_the_q_pochhammer_symbol():
    d = run("geometric:0.5,0.9", delta=Fraction(1, 2))
    assert d["status"] == "converges" and d["verdict"] == "no collapse"
    assert sp.sympify(d["sum"]) == 5
    assert float(sp.sympify(d["atom_lower_bound"])) == pytest.approx(math.exp(-10 / 3))
    qp = float(mpmath.qp(0.25, 0.9))  # (λ_0 δ; q)_∞ = Π_t (1 - λ_0 δ q^t), an independent closed form
    assert d["atom_numeric"] == pytest.approx(qp, rel=1e-8)
    assert qp > math.exp(-10 / 3)


def test_numeric_atom_does_not_read_the_clock(monkeypatch):
    """A loaded machine gives the same answer as an idle one: make every clock jump an hour per
    call and check that nothing changes (the old time limits returned None here)."""
    import time

    want = run("0.5/(t+1)**1.5", delta=Fraction(1, 2))
    ticks = iter(range(0, 10**9, 3600))
    for name in ("monotonic", "perf_counter", "time"):
        monkeypatch.setattr(time, name, lambda: float(next(ticks)))
    got = run("0.5/(t+1)**1.5", delta=Fraction(1, 2))
    assert got == want and got["atom_numeric"] is not None
    assert run("exp(-t)/2", delta=Fraction(1, 2))["verdict"] == "no collapse"


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


def test_large_expressions_are_undecided_by_a_work_limit_not_a_timer():
    from posbias.theorem.dichotomy_analysis import MAX_OPS

    big = (
        "sin(t)**2*cos(t)**2*sin(2*t)**2*cos(3*t)**2*sin(5*t)**2*cos(7*t)**2*sin(11*t)**2/(t+1)**2/(t+2)**2/(t+3)**2/9"
    )
    d = run(big)
    assert d["verdict"] == "undecided" and f"only up to {MAX_OPS}" in d["reason"]


def test_delta_scales_the_atom_bound():
    d = run("power_decay:0.5,2", delta=Fraction(1, 2))
    # S = π²/12, sup λ = 1/2, δ = 1/2: bound exp(-(π²/24)/(3/4))
    assert float(sp.sympify(d["atom_lower_bound"])) == pytest.approx(math.exp(-(math.pi**2 / 24) / 0.75))


@pytest.mark.parametrize(
    "schedule",
    [
        "constant:0.3",
        "power_decay:0.5,1",
        "power_decay:0.5,1.5",
        "geometric:0.5,0.9",
        "constant:1",
        "exp(-t)/2",
        "1/((t+2)*log(t+2))",
    ],
)
@pytest.mark.parametrize("delta", [None, 0, Fraction(1, 2), Fraction(99, 100), "1/(t+2)"])
def test_verdict_and_atom_agree(schedule, delta):
    """Collapse iff the atom tends to 0; no collapse iff it stays positive (with a positive bound)."""
    d = run(schedule, delta)
    if d["verdict"] == "collapse":
        assert d["atom"].startswith("→ 0") and d["atom_lower_bound"] is None and d["atom_numeric"] in (None, 0.0)
    else:
        assert d["verdict"] == "no collapse"
        assert d["atom"].startswith(("≡ 1", ">= ", "> 0"))
        if d["atom_lower_bound"] is not None:
            assert sp.sympify(d["atom_lower_bound"]).subs("delta", sp.Rational(1, 2)) > 0
    if delta == 0:
        assert d["verdict"] == "no collapse" and d["atom"].startswith("≡ 1")  # the last token never moves


def test_delta_one_is_refused_and_delta_zero_never_collapses():
    with pytest.raises(DeriveError, match="outside C5"):
        run("constant:0.3", delta=1)
    d = run("constant:0.3", delta=0)
    assert d["status"] == "diverges" and d["verdict"] == "no collapse" and d["atom_numeric"] == 1.0


def test_default_delta_is_symbolic_inside_the_uniform_bounds():
    d = run("power_decay:0.5,1.5")
    assert d["delta_kind"] == "symbolic" and d["delta"] == "delta"
    assert "delta" in d["atom_lower_bound"] and d["atom_numeric"] is None


def test_delta_schedule_decides_the_atom_series():
    # λ_t = 1/(2(t+1)) diverges, but with δ_t = 1/(t+2): Σ λ_t δ_t = Σ 1/(2(t+1)(t+2)) = 1/2
    d = run("0.5/(t+1)", delta="1/(t+2)")
    assert d["delta_kind"] == "schedule" and d["series"] == "Σ_t λ_t δ_t"
    assert d["verdict"] == "no collapse" and sp.sympify(d["sum"]) == sp.Rational(1, 2)
    bound = float(sp.sympify(d["atom_lower_bound"]))  # exp(-S/(1 - sup δ_t)) = exp(-1)
    assert bound == pytest.approx(math.exp(-1))
    exact = math.prod(1 - 0.5 / (t + 1) / (t + 2) for t in range(10**5))  # independent partial product
    assert exact > bound
    assert run("constant:0.3", delta="1/4 + 1/(t+4)")["verdict"] == "collapse"  # inf δ_t = 1/4 > 0
    with pytest.raises(DeriveError, match="sup_t δ_t < 1"):
        run("constant:0.3", delta="1/2 + 1/(t+2)")  # δ_0 = 1


def test_range_is_checked_symbolically_and_the_finite_check_is_said_plainly():
    with pytest.raises(DeriveError, match="λ_300"):  # negative from t = 300 on: the old check stopped at 200
        run("1/(t+1)**2 - 2*floor(t/300)/(t+1)**2")
    with pytest.raises(DeriveError, match="not in"):  # negative from t = 2^40 on: caught at a sample point
        run("1/(t+1)**2 - floor(t/2**40)")
    assert run("exp(-t)/2")["range_proved"] is True  # λ_t >= 0 and non-increasing from 1/2
    d = run("0.5*sin(t)**2/(t+1)")
    assert d["range_proved"] is False and "only a finite check was possible" in " ".join(d["notes"])
    assert "only a finite check" in d["verdict_basis"]


def test_power_decay_just_above_one_is_answered():
    """β = 1.0000001: ζ(β) ≈ 10^7 is evaluated at enough precision (SymPy's few-bit check hit ζ's pole)."""
    for spec in ("power_decay:0.5,1.0000001", "0.5/(t+1)**1.0000001"):
        d = run(spec, delta=Fraction(1, 2))
        assert d["verdict"] == "no collapse" and d["status"] == "converges"
        assert "zeta(10000001/10000000)" in d["sum"]


def test_certificates_hold():
    certs = {n: c for n, c in certificate_registry().certificates.items() if n.startswith("dichotomy:")}
    assert {
        "dichotomy:constant-diverges",
        "dichotomy:power-decay-threshold",
        "dichotomy:product-upper-bound",
        "dichotomy:product-lower-bound",
    } <= set(certs)
    for name, check in certs.items():
        c = check()
        assert c.name == name and c.holds, (name, c.detail)


@pytest.mark.parametrize(
    "args",
    [
        ["sin(t"],
        ["__import__('os')"],
        ["t.__class__"],
        ["t+1"],
        ["1/t"],
        ["-0.1"],
        ["power_decay:0.5"],
        ["0.5/(t+1)", "--delta", "2"],
        ["0.5", "--bogus"],
        [],
        ["constant:abc+"],
        ["constant:t"],
        ["0.5/(t+1)", "--delta", "1"],
        ["0.5/(t+1)", "--delta", "t"],
        ["1 .func(t)"],
        ["constant:1e-999999999"],
    ],
)
def test_bad_input_raises_one_line_derive_error(args):
    with pytest.raises(DeriveError) as info:
        dichotomy.compute(dichotomy.DERIVATION.parse(args))
    assert "\n" not in str(info.value)


def test_text_and_latex_render():
    r = dichotomy.compute(DichotomyParams("0.5/(t+1)**1.5", delta=Fraction(1, 2)))
    assert "no collapse" in r.text and r"\zeta" in r.latex and "numerical value" in r.text


def test_jax_schedule_and_partial_atom_match_the_engine():
    """The lambdified (JAX) lambda_t equals numerics' power-decay schedule, and the partial
    product prod_t (1 - lambda_t delta) equals the engine's last-token probability for
    uniform causal attention (A[N-1, N-1] = 1/N, so delta = 1 - 1/N; C2(c))."""
    import numpy as np

    import posbias.numerics as nx
    from posbias.theorem.lambdify_jax import jax_partial_atom, jax_schedule
    from posbias.theorem.schedule_expr import parse_schedule

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
