"""THEORY.md C7 (any relative positional bias): the derive queries (monotone / row / order --bias) against
exact rational checks written here, the C7 certificates and proofs --check, the claim statements, the
verify properties and the necessity search for C2(b) with a non-log-concave bias."""

import json
import math
from fractions import Fraction as F

import mpmath
import numpy as np
import pytest
import sympy as sp

from posbias.cli.derive import derive_command
from posbias.cli.proofs import proofs_command
from posbias.theorem import relative_bias as rb
from posbias.theorem.bias_expr import G, parse_bias, parse_ranges
from posbias.theorem.queries import derivations


# ----------------------------------------------------------------- independent exact helpers
def cum(ws):
    out, acc = [], F(0)
    for x in ws:
        acc += x
        out.append(acc)
    return out


def exact_kernel(ws):
    """A(i, j) = w(i-j) / sum_{g<=i} w(g), Fractions, written out entry by entry."""
    n = len(ws)
    return [[ws[i - j] / sum(ws[: i + 1]) if j <= i else F(0) for j in range(n)] for i in range(n)]


def monotone_rows(k):
    cdfs = [cum(row) for row in k]
    return all(cdfs[i][c] >= cdfs[i + 1][c] for i in range(len(k) - 1) for c in range(len(k)))


def smallest_failure(ws):
    """(N, n) of the first n with W(n)^2 < W(n-1) W(n+1) by brute force over kernels: the smallest N whose
    N-token kernel is not monotone, and n = N - 2."""
    for n_tok in range(2, len(ws) + 1):
        if not monotone_rows(exact_kernel(ws[:n_tok])):
            return n_tok, n_tok - 2
    return None


def run(argv, capsys):
    code = derive_command(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def data(argv, capsys):
    code, out, err = run([*argv, "--format", "json"], capsys)
    assert code == 0, err
    return json.loads(out)["data"]


# --------------------------------------------------------------------------- registration
def test_derivations_registered_and_listed(capsys):
    ders = derivations()
    assert {"row", "order", "monotone"} <= set(ders)
    code, out, _ = run(["--list"], capsys)
    assert code == 0 and "row " in out and "order " in out and "C7(b)" in out
    code, out, _ = run(["monotone", "--help"], capsys)
    assert code == 0 and "--bias" in out and "weights:1,0.1,0.1,5" in out and "cos(g)" in out


# ----------------------------------------------------------------------------- monotone
@pytest.mark.parametrize("expr", ["-m*g", "-r1*log(1+r2*g)", "-r1*g^r2", "-m*g+a*cos(g)"])
def test_proved_families_agree_with_exact_kernels(expr, capsys):
    """ALiBi, Kerple-log, Kerple-power (every parameter >= 0) and the cosine bias on m >= 1, 0 <= a <= 1:
    proved, and the exact check up to N = 12 found no failure."""
    ranges = "m>=1, 0<=a<=1" if "cos" in expr else None
    d = data(["monotone", "--bias", expr, *(["--ranges", ranges] if ranges else []), "--up-to", "12"], capsys)
    assert d["verdict"] == "proved" and d["witness"] is None, d


def test_alibi_verdict_matches_exact_geometric_kernels():
    # w = r^g with rational r in (0, 1]: every such kernel is monotone (exact), as the proof says for m >= 0
    for r in (F(1), F(1, 2), F(1, 5), F(9, 10)):
        assert monotone_rows(exact_kernel([r**g for g in range(9)]))
    b = parse_bias("-m*g", "t")
    assert rb.monotone(b, parse_ranges(None, b.names, "t"), up_to=10).verdict is rb.Answer.PROVED


def test_bumped_table_refuted_with_the_smallest_exact_witness(capsys):
    ws = [F(1), F(1, 10), F(1, 10), F(5)]
    assert smallest_failure(ws) == (4, 2)
    d = data(["monotone", "--bias", "weights:1,0.1,0.1,5"], capsys)
    assert d["verdict"] == "refuted"
    assert d["witness"]["N"] == 4 and d["witness"]["n"] == 2
    W = cum(ws)
    assert F(d["witness"]["gap"]) == W[2] ** 2 - W[1] * W[3] == F(-269, 50)


@pytest.mark.parametrize("seed", range(40))
def test_random_tables_verdict_equals_brute_force(seed):
    rnd = np.random.default_rng(seed)
    n = int(rnd.integers(3, 7))
    ws = [F(int(rnd.integers(1, 9)), int(rnd.integers(1, 9))) for _ in range(n)]
    text = "weights:" + ",".join(str(x) for x in ws)
    q = rb.monotone(parse_bias(text, "t"), {}, up_to=8)
    brute = smallest_failure(ws)
    if brute is None:
        assert q.verdict is rb.Answer.PROVED
    else:
        assert q.verdict is rb.Answer.REFUTED and (q.witness["N"], q.witness["n"]) == brute


def test_cosine_bias_depends_on_parameters(capsys):
    d = data(["monotone", "--bias", "-m*g+a*cos(g)"], capsys)
    assert d["verdict"] == "refuted" and d["region"] == "a - m <= 0"
    pt = {k: F(v) for k, v in d["witness"]["point"].items()}
    N, n = d["witness"]["N"], d["witness"]["n"]
    # independent: W from mpmath at 60 digits at the witness, smallest failing n
    with mpmath.workdps(60):
        w = [
            mpmath.exp(
                -pt["m"].numerator / mpmath.mpf(pt["m"].denominator) * g
                + pt["a"].numerator / mpmath.mpf(pt["a"].denominator) * mpmath.cos(g)
            )
            for g in range(N)
        ]
        W = list(np.cumsum(np.array(w, dtype=object)))
        gaps = [W[j] ** 2 - W[j - 1] * W[j + 1] for j in range(1, N - 1)]
    assert gaps[-1] < 0 and all(x >= 0 for x in gaps[:-1]) and n == N - 2
    assert data(["monotone", "--bias", "-m*g+a*cos(g)", "--ranges", "m>=1, 0<=a<=1"], capsys)["verdict"] == "proved"


def test_undecided_when_neither_route_decides(capsys):
    # floor has no derivative SymPy can sign and its difference is not a polynomial: neither route decides,
    # and the certified check finds no failure (b is in fact non-increasing here: jumps a <= 1/10 < m)
    d = data(["monotone", "--bias", "-m*g + a*floor(g/3)", "--ranges", "m>=1, 0<=a<=1/10", "--up-to", "10"], capsys)
    assert d["verdict"] == "undecided" and d["witness"] is None and "could not be decided" in d["reason"]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["monotone", "--bias", "t*2"], "uses t"),
        (["monotone", "--bias", "-m*g", "--ranges", "q>=0"], "not a parameter"),
        (["monotone", "--bias", "-m*g", "--ranges", "2<=m<=1"], "empty"),
        (["monotone", "--bias", "-m*g", "--at", "m=-1"], "outside its range"),
        (["monotone", "--bias", "weights:1,-1"], "expected weights >= 0"),
        (["monotone", "--bias", "-m*g", "--up-to", "100000"], "<= 256"),
        (["order", "--bias", "-m*g"], "--than is required"),
    ],
)
def test_bad_input_one_line_exit_2(argv, needle, capsys):
    code, out, err = run(argv, capsys)
    assert code == 2 and needle in err and err.count("\n") == 1 and "Traceback" not in err


# ---------------------------------------------------------------------------------- row
def test_row_closed_forms_against_direct_sums(capsys):
    m, r1, r2 = sp.symbols("m r1 r2", real=True)
    for expr, closed_kind, vals in [
        ("-m*g", sp.Piecewise, {m: sp.Rational(1, 3)}),
        ("-r1*log(1+g)", sp.harmonic, {r1: sp.Rational(3, 2)}),
        ("-r1*log(1+r2*g)", sp.zeta, {r1: sp.Rational(3, 2), r2: sp.Rational(1, 2)}),
    ]:
        forms = rb.row_forms(parse_bias(expr, "t"))
        assert forms.closed and forms.W.has(closed_kind), expr
        b = parse_bias(expr, "t").expr
        for n in (0, 1, 5):
            direct = sum(math.exp(float(b.subs(vals).subs(G, g))) for g in range(n + 1))
            got = float(forms.W.subs(vals).subs(rb.N_, n).evalf(30))
            assert abs(got - direct) <= 1e-12 * direct, (expr, n, got, direct)
        # F_i(k) = 1 - W(i-k-1)/W(i) against the kernel's row CDF
        i, k = 5, 2
        w = [math.exp(float(b.subs(vals).subs(G, g))) for g in range(i + 1)]
        row_cdf = sum(w[i - j] for j in range(k + 1)) / sum(w)
        got = float(forms.F.subs(vals).subs({rb.I_: i, rb.K_: k}).evalf(30))
        assert abs(got - row_cdf) <= 1e-12
    d = data(["row", "--bias", "-r1*g^r2"], capsys)
    assert d["closed"] is False and "Sum" in d["W"]


# -------------------------------------------------------------------------------- order
def test_order_steeper_alibi_proved_and_reverse_refuted(capsys):
    assert data(["order", "--bias", "-2*m*g", "--than", "-m*g"], capsys)["verdict"] == "proved"
    d = data(["order", "--bias", "-m*g", "--than", "-2*m*g"], capsys)
    assert d["verdict"] == "refuted"
    m = F(d["witness"]["point"]["m"])
    i, k = d["witness"]["i"], d["witness"]["k"]
    # exact at r = e^-m is irrational; check the sign with mpmath at 50 digits independently
    with mpmath.workdps(50):

        def F_row(slope):
            w = [mpmath.exp(-slope * g) for g in range(i + 1)]
            return 1 - sum(w[: i - k]) / sum(w)

        mm = mpmath.mpf(m.numerator) / m.denominator
        assert F_row(mm) > F_row(2 * mm)


def test_order_tables_exact(capsys):
    assert data(["order", "--bias", "weights:1,1/2,1/4", "--than", "weights:1,1,1"], capsys)["verdict"] == "proved"
    d = data(["order", "--bias", "weights:1,1,1", "--than", "weights:1,1/2,1/4"], capsys)
    assert d["verdict"] == "refuted" and d["witness"]["i"] == 1
    flat, geo = exact_kernel([F(1)] * 3), exact_kernel([F(1), F(1, 2), F(1, 4)])
    assert cum(flat[1])[0] > cum(geo[1])[0]


# -------------------------------------------------------------------- certificates, proofs
def test_c7_certificates_hold():
    from posbias.theorem.claims import CLAIMS, run_certificate

    for label in ("C7(a)", "C7(b)", "C7(c)"):
        names = CLAIMS[label].certificates
        assert names, label
        for name in names:
            assert run_certificate(name).holds, name


def test_proofs_check_covers_c7(capsys, memoised_certificates):
    code = proofs_command(["--check"])
    out = capsys.readouterr().out
    assert code == 0, out
    for name in (
        "relative-bias:row-cdf",
        "relative-bias:consecutive-rows",
        "relative-bias:likelihood-ratio",
        "relative-bias:bumped-table",
        "statement:C7(a)",
        "statement:C7(b)",
        "statement:C7(c)",
    ):
        assert f"pass     {name}" in out, name


def test_c7_statement_check_fails_on_a_wrong_predicate():
    from dataclasses import replace

    from posbias.theorem.claims import CLAIMS
    from posbias.theorem.statements import statement_check

    wrong = dict(CLAIMS)
    wrong["C7(b)"] = replace(CLAIMS["C7(b)"], predicate=lambda k, w, tol=1e-10: True)
    assert not statement_check("C7(b)", wrong).holds


# ------------------------------------------------------------------------------- verify
def test_verify_c7_properties_and_necessity_search(tmp_path):
    import posbias.verify as pv
    from posbias.verify.runner import run_property

    props = pv.properties()
    for name in ("C7(a)", "C7(b)", "C7(c)"):
        res = run_property(props[name], profile="ci", seed=0)
        assert res.verdict == "held" and res.ok, (name, res.detail, res.text)
    res = run_property(props["C2(b) w/ non-log-concave bias"], profile="ci", seed=0)
    assert res.verdict == "found" and res.ok and res.shrinks > 0
    ex = res.counterexample
    # independent exact replay: some table is not log-concave, and raising lambda moves p later somewhere
    assert any(
        not all(c[n] ** 2 >= c[n - 1] * c[n + 1] for n in range(1, len(c) - 1))
        for c in (cum(ws) for ws in ex["tables"])
    )
    kernels = [exact_kernel(ws) for ws in ex["tables"]]

    def profile(lams):
        n = len(kernels[0])
        v = [F(0)] * (n - 1) + [F(1)]
        for a, lam in zip(kernels[::-1], lams[::-1]):
            va = [sum(v[i] * a[i][j] for i in range(n)) for j in range(n)]
            v = [(1 - lam) * x + lam * y for x, y in zip(v, va)]
        return v

    lams = list(ex["lambdas"])
    more = list(lams)
    more[ex["layer"]] = ex["new_lambda"]
    assert any(a < b for a, b in zip(cum(profile(more)), cum(profile(lams))))


def test_c7_property_detects_a_wrong_kernel():
    """The C7(b) check is not vacuous: on a kernel that is not the weights' kernel it can fail."""
    from posbias.theorem.c7_predicates import c7b

    uniform = np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]
    assert not c7b(uniform, [1.0, 0.1, 0.1, 5.0])


@pytest.mark.parametrize(
    ("expr", "caveat"),
    [
        ("-g/a", "b is undefined where a = 0"),  # a >= 0 by default: -g/0 has no value
        ("-m*g", None),
        ("-a*log(1+b*g)", None),  # 1 + b g >= 1 on the range: always defined
        ("-g/(1+a)", None),
    ],
)
def test_a_proof_says_where_the_bias_has_no_value(expr, caveat):
    """An audit found "proved ... for every parameter in range (a >= 0)" for b = -g/a, undefined at a = 0;
    the verdict now carries where b is undefined, and only where that can happen on the range."""
    b = parse_bias(expr, "t")
    q = rb.monotone(b, parse_ranges(None, b.names, "t"), up_to=8)
    assert q.verdict is rb.Answer.PROVED
    if caveat is None:
        assert "undefined" not in q.reason
    else:
        assert q.reason.endswith(f"; {caveat}: for the parameters where it is defined")
