"""Hostile formulas for the symbolic bias queries, ``posbias derive monotone --bias`` (issue 29): towers,
factorials, nested exp/log, Abs, floor, Piecewise, huge integers, other free symbols, formulas without a
value at some distance, empty and non-ASCII input.

Each case runs as a user types it (the ``posbias`` console script, its own process, peak memory measured
by ``tests.peak``): it answers (exit 0) or refuses in one line (exit 2, no traceback) within its stated
time budget. A verdict is never wrong: every "proved" is checked here at 80 digits on parameter values
in range (W log-concave on {0, ..., 63} for three diagonals d), every "refuted" at its witness
(W(n)^2 < W(n-1) W(n+1) at the witness's n), with the formula read by SymPy's own parser and evaluated
by mpmath (THEORY.md C7(b)), not by posbias's interval code.
"""

from __future__ import annotations

import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from functools import cache
from pathlib import Path

import mpmath
import pytest
import sympy as sp

from tests.peak import peak_rss_output

POSBIAS = shutil.which("posbias") or str(Path(__file__).resolve().parents[2] / ".venv/bin/posbias")
BUDGET_S = 3.0  # --time-budget of the cases that run into it
SLACK_S = 20.0  # interpreter start-up and a loaded machine, beyond a budget
MEMORY_BYTES = 1 << 30  # a symbolic query on a 200-character formula stays under 1 GiB
DIGITS = 80
CHECK_TOKENS = 64  # the numerical check goes twice as far as the query's own exact check (N <= 32)
SAMPLES = [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2), Fraction(7)]

# (--bias, extra arguments, expected: "refused: <fragment>" or the verdict)
CASES = [
    # input the parser refuses
    ("", (), "refused: is empty"),
    ("é*g", (), "refused: contains characters other than"),
    ("Piecewise((g, g<3), (3, True))", (), "refused: contains characters other than"),
    ("g.__class__", (), "refused: attribute access"),
    ("__import__('os')", (), "refused: contains characters other than"),
    ("lambda g: g", (), "refused: contains characters other than"),
    ("-g*t", (), "refused: uses t"),
    ("10**10**10", (), "refused: numeric power above 1000"),
    ("factorial(factorial(g))", (), "refused: nests factorial/gamma"),
    ("1" + "0" * 70 + "*g", (), "refused: digits"),
    ("-a*b*c*d*e*g", (), "refused: at most 4 are supported"),
    # formulas without a value at some distance g >= 0 (b(0) = +inf passed C7(b)'s sufficient test)
    ("-log(g)", (), "refused: has no value at g = 0"),
    ("-m*log(g)", (), "refused: has no value at g = 0"),
    ("1/(g-100)", (), "refused: has no value at g = 100"),
    ("sqrt(2-g)", (), "refused: has no value at g = 3"),
    ("log(cos(g))", (), "refused: has no value at g = 2"),
    # towers: the wall-clock guard refuses within the budget
    ("g**g**g", ("--time-budget", str(BUDGET_S)), "refused: time budget exceeded"),
    ("exp(exp(exp(g)))", ("--time-budget", str(BUDGET_S)), "refused: time budget exceeded"),
    # answers, each checked numerically below
    ("-g**g", (), "proved"),
    ("-factorial(g)", (), "proved"),
    ("factorial(g)", (), "undecided"),
    ("-gamma(g+1)", (), "proved"),
    ("exp(-exp(g))", (), "proved"),
    ("-log(log(g+2))", (), "proved"),
    ("log(1+log(1+g))", (), "undecided"),
    ("Abs(g-3)", (), "refuted"),
    ("-Abs(g-3)", (), "undecided"),
    ("floor(g/2)", (), "undecided"),
    ("-floor(g/2)", (), "undecided"),
    ("123456789012345678901234567890*g", (), "undecided"),
    ("-123456789012345678901234567890*g", (), "proved"),
    ("-g*x*y", (), "proved"),
    ("-g*x+y*cos(g)", (), "refuted"),
    ("-m*g+a*cos(g)", ("--ranges", "m>=1, 0<=a<=1"), "proved"),
    ("g^2", (), "refuted"),
    ("-g^2", (), "proved"),
    ("sin(g)", (), "refuted"),
    ("exp(g)", (), "refuted"),
    ("exp(-g)", (), "proved"),
    ("-r1*log(1+r2*g)", (), "proved"),
    ("weights:1,0.1,0.1,5", (), "refuted"),
    ("weights:5,1,0.1", (), "proved"),
]


def _argv(bias: str, extra: tuple[str, ...]) -> list[str]:
    return [POSBIAS, "derive", "monotone", f"--bias={bias}", "--format", "json", *extra]


@cache
def _results(tmp: str) -> dict[tuple, tuple[int, str, str, int, float]]:
    """Every case in its own process, two at a time: (exit, stdout, stderr, peak bytes, seconds)."""

    def one(case):
        bias, extra, _ = case
        folder = Path(tmp) / f"case{CASES.index(case)}"
        folder.mkdir()
        start = time.monotonic()
        code, out, err, peak = peak_rss_output(_argv(bias, extra), cwd=folder, timeout=120)
        return code, out, err, peak, time.monotonic() - start

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(CASES, pool.map(one, CASES)))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return _results(str(tmp_path_factory.mktemp("derive-bias")))


# ----------------------------------------------------------------------------- the independent check
def _weights(bias: str, values: dict[str, Fraction], n: int, diag: Fraction) -> list:
    """w(0..n-1) = e^{b(g)} (w(0) times e^d) at 80 digits, b read by SymPy's parser and mpmath."""
    if bias.startswith("weights:"):
        table = [mpmath.mpf(Fraction(x).numerator) / Fraction(x).denominator for x in bias[8:].split(",")]
        return [table[g] if g < len(table) else mpmath.mpf(0) for g in range(n)]
    g = sp.Symbol("g")
    expr = sp.parse_expr(bias.replace("^", "**"), local_dict={"g": g, **{k: sp.Symbol(k) for k in values}})
    expr = expr.subs({sp.Symbol(k): sp.Rational(v.numerator, v.denominator) for k, v in values.items()})
    b = sp.lambdify(g, expr, modules="mpmath")
    out = [mpmath.exp(mpmath.mpf(b(mpmath.mpf(k)))) for k in range(n)]
    out[0] *= mpmath.exp(mpmath.mpf(diag.numerator) / diag.denominator)
    return out


def _gaps(w: list) -> list:
    """(n, W(n)^2 - W(n-1) W(n+1), W(n)^2) for n = 1 .. len(w) - 2."""
    cumulative = [mpmath.fsum(w[: k + 1]) for k in range(len(w))]
    return [
        (n, cumulative[n] ** 2 - cumulative[n - 1] * cumulative[n + 1], cumulative[n] ** 2)
        for n in range(1, len(w) - 1)
    ]


def _points(bias: str, extra: tuple[str, ...]) -> list[dict[str, Fraction]]:
    """Parameter values in range: each parameter over SAMPLES (>= 0, the default range), or inside the
    --ranges the case gives (m >= 1: 1 + SAMPLES; 0 <= a <= 1: SAMPLES clipped to 1)."""
    names = [] if ":" in bias else sorted({str(s) for s in sp.parse_expr(bias.replace("^", "**")).free_symbols} - {"g"})
    ranges = dict(zip(extra[::2], extra[1::2])).get("--ranges", "")
    pick = {name: SAMPLES for name in names}
    if "m>=1" in ranges:
        pick["m"] = [1 + x for x in SAMPLES]
    if "0<=a<=1" in ranges:
        pick["a"] = sorted({min(x, Fraction(1)) for x in SAMPLES})
    points: list[dict[str, Fraction]] = [{}]
    for name in names:
        points = [{**p, name: v} for p in points for v in pick[name]]
    return points


@pytest.mark.parametrize("case", CASES, ids=[c[0][:40] or "empty" for c in CASES])
def test_answers_or_refuses_in_one_line_within_budget(results, case):
    bias, extra, expected = case
    code, out, err, peak, seconds = results[case]
    assert "Traceback" not in out + err, err
    assert peak < MEMORY_BYTES, f"{peak / 2**20:.0f} MiB"
    budget = float(dict(zip(extra[::2], extra[1::2])).get("--time-budget", 20.0))
    assert seconds < budget + SLACK_S, seconds
    if expected.startswith("refused: "):
        assert code == 2, (out, err)
        assert out == "" and err.count("\n") == 1 and err.startswith("posbias derive: error: "), err
        assert expected.removeprefix("refused: ") in err, err
        return
    assert code == 0 and err == "", err
    assert json.loads(out)["data"]["verdict"] == expected


@pytest.mark.parametrize("case", [c for c in CASES if c[2] == "proved"], ids=lambda c: c[0][:40])
def test_every_proved_verdict_holds_numerically(results, case):
    bias, extra, _ = case
    assert json.loads(results[case][1])["data"]["verdict"] == "proved"
    diagonals = [Fraction(0)] if bias.startswith("weights:") else [Fraction(0), Fraction(-3), Fraction(5)]
    with mpmath.workdps(DIGITS):
        for point in _points(bias, extra):
            for diag in diagonals:
                for n, gap, scale in _gaps(_weights(bias, point, CHECK_TOKENS, diag)):
                    assert gap >= -scale * mpmath.mpf(10) ** (10 - DIGITS), (point, diag, n, gap)


@pytest.mark.parametrize("case", [c for c in CASES if c[2] == "refuted"], ids=lambda c: c[0][:40])
def test_every_refuted_verdict_fails_at_its_witness(results, case):
    bias, _, _ = case
    witness = json.loads(results[case][1])["data"]["witness"]
    point = {k: Fraction(v) for k, v in witness["point"].items()}
    with mpmath.workdps(DIGITS):
        gaps = dict((n, (gap, scale)) for n, gap, scale in _gaps(_weights(bias, point, witness["N"], Fraction(0))))
        gap, scale = gaps[witness["n"]]
        assert gap < -scale * mpmath.mpf(10) ** (10 - DIGITS), (point, witness, gap)
        assert all(gaps[n][0] >= 0 for n in range(1, witness["n"])), "the witness is not the smallest n"
