"""Hostile input to ``posbias derive`` (issue 8, symbolic half; issue 9 §4): every query answers or
refuses with ONE line on stderr and exit status 2, never a traceback, never a hang.

Each case runs ``posbias.cli.derive.derive_command(argv)`` in one child interpreter that takes the
cases in turn, each with a stdout and stderr of its own (an interpreter per case cost 25 s more of
start-ups). The child's timeout is only a hang detector: the limits that make these cases answer or refuse
are deterministic work limits (literal sizes, exponent towers, cost estimates from the
parameters, bounded series terms), so no assertion here depends on how fast the machine is.
The wall-clock guard ``--time-budget`` is exercised only with a budget below the 0.05 s that
``time_limit`` refuses at once, which is deterministic too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HANG_DETECTOR_S = 600  # every case together
# One child interpreter runs every case in turn (pytest's process is never at risk), each with its own
# stdout and stderr captured, an escaping exception recorded as its traceback text (and fails the test),
# and the query's own wall-clock guard (--time-budget) armed as a user's would be.
RUNNER = """
import contextlib, io, json, sys, traceback
from posbias.cli.derive import derive_command
results = []
for argv in json.load(sys.stdin):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = derive_command(argv)
        except BaseException:
            traceback.print_exc()
            code = -1
    results.append([code, out.getvalue(), err.getvalue()])
json.dump(results, sys.stdout)
"""

REFUSE, ANSWER = 2, 0
# (argv, expected exit status, text expected on stderr (refusals) or stdout (answers))
CASES = [
    # --- arithmetic overflow (was an OverflowError traceback)
    (["alibi-row", "--row", "3", "--slope", "1e308", "--diag", "1e308"], REFUSE, "--slope must be <= 700"),
    (["drift", "--row", "3", "--slope", "1e308", "--diag", "0", "--lam", "1"], REFUSE, "--slope must be <= 700"),
    # --- hangs in parsing (sympify evaluated eagerly)
    (["dichotomy", "10**10**10"], REFUSE, "numeric power above 1000"),
    (["dichotomy", "9^9^9"], REFUSE, "numeric power above 1000"),
    (["dichotomy", "factorial(10**9)"], REFUSE, "factorial to a number above"),
    (["dichotomy", "1/gamma(10**12)"], REFUSE, "gamma to a number above"),
    (["dichotomy", "exp(10**5)"], REFUSE, "constant part beyond"),
    # --- hang in the range check (no limit on λ_t's size)
    (["dichotomy", "1/factorial(factorial(factorial(t)))"], REFUSE, "nests factorial/gamma"),
    # --- a Fraction of 10^(10^9) from a decimal exponent
    (["dichotomy", "constant:1e999999999"], REFUSE, "decimal exponent beyond"),
    (["dichotomy", "constant:1e-999999999"], REFUSE, "decimal exponent beyond"),  # was silently λ = 0
    (["dichotomy", "0.5/(t+1)", "--delta", "1e999999999"], REFUSE, "decimal exponent beyond"),
    (["continuum-profile", "--lam", "1e999999999"], REFUSE, "decimal exponent beyond"),
    (["cesaro-rollout", "--schedule", "constant:1e-999999999"], REFUSE, "decimal exponent beyond"),
    # --- cost checked from the parameters before anything is built
    (["cesaro-rollout", "--layers", "1000000000"], REFUSE, "--layers must be <= 4096"),
    (["cesaro-rollout", "--tokens", "4096", "--layers", "4096"], REFUSE, "word operations"),
    (
        ["cesaro-rollout", "--tokens", "16", "--layers", "1000", "--schedule", "geometric:0.5,0.9"],
        REFUSE,
        "word operations",
    ),
    (["continuum-profile", "--tokens", "99999999999999999999"], REFUSE, "(2N)^3 T"),
    (["alibi-row", "--row", "4097"], REFUSE, "--row must be <= 4096"),
    # --- the expression filter: allow-list, no attribute access at all
    (["dichotomy", "1 .func(t)"], REFUSE, "attribute access"),
    (["dichotomy", "t.__class__"], REFUSE, "attribute access"),
    (["dichotomy", "(t).real"], REFUSE, "attribute access"),
    (["dichotomy", '__import__("os")'], REFUSE, "characters other than"),
    (["dichotomy", "lambda: t"], REFUSE, "characters other than"),
    (["dichotomy", "t[0]"], REFUSE, "characters other than"),
    (["dichotomy", "'abc'"], REFUSE, "characters other than"),
    (["dichotomy", "eval(t)"], REFUSE, "calls eval"),
    (["dichotomy", "Symbol(t)"], REFUSE, "calls Symbol"),
    (["dichotomy", "t if t else 1"], REFUSE, "an if-expression"),
    (["dichotomy", "__class__"], REFUSE, "not allowed"),
    (["dichotomy", "t" * 201], REFUSE, "longer than 200"),
    # --- dichotomy defects (issue 9 §4)
    (["dichotomy", "1/(t+1)**2 - 2*floor(t/300)/(t+1)**2"], REFUSE, "λ_300"),
    (["dichotomy", "constant:0.3", "--delta", "1"], REFUSE, "outside C5(c)"),
    (["dichotomy", "constant:0.3", "--delta", "1/2 + 1/(t+2)"], REFUSE, "sup_t δ_t < 1"),
    # --- the wall-clock guard: bad values, and a budget below 0.05 s refuses at once (deterministic)
    (["dichotomy", "0.5/(t+1)", "--time-budget", "0"], REFUSE, "--time-budget expects seconds"),
    (["dichotomy", "0.5/(t+1)", "--time-budget", "abc"], REFUSE, "--time-budget expects seconds"),
    (["alibi-row", "--row", "3", "--time-budget", "0.01"], REFUSE, "undecided: time budget exceeded"),
    # --- answers: the documented maxima, and the inputs that used to crash
    (["alibi-row", "--row", "4096", "--slope", "0.5", "--diag", "1"], ANSWER, "alpha_i value"),
    (["alibi-row", "--row", "4096", "--slope", "700", "--diag", "-700"], ANSWER, "alpha_i value"),
    (["drift", "--row", "4096", "--slope", "0.5", "--diag", "1", "--lam", "0.5"], ANSWER, "Delta_i = -0.459848"),
    (["dichotomy", "power_decay:0.5,1.0000001"], ANSWER, "verdict: no collapse"),
    (["dichotomy", "0.5/(t+1)**1.0000001", "--delta", "1/2"], ANSWER, "verdict: no collapse"),
    (["dichotomy", "constant:0.3", "--delta", "0"], ANSWER, "verdict: no collapse"),
    (["dichotomy", "0.5/(t+1)", "--delta", "1/(t+2)"], ANSWER, "verdict: no collapse"),
    (["dichotomy", "1/factorial(t)", "--delta", "1/2"], ANSWER, "verdict: no collapse"),
    (["cesaro-rollout", "--tokens", "1024", "--layers", "64"], ANSWER, "Σ_j p(j) = 1 exactly"),
    (["cesaro-rollout", "--tokens", "4096", "--layers", "1"], ANSWER, "Σ_j p(j) = 1 exactly"),
    (["cesaro-rollout", "--tokens", "4", "--layers", "4096"], ANSWER, "Σ_j p(j) = 1 exactly"),
    (["continuum-profile", "--tokens", "512", "--layers", "64"], ANSWER, "window error ratio"),
    (["continuum-profile", "--tokens", "8", "--layers", "256", "--lam", "1/" + "9" * 57], ANSWER, "f(0.5) = 2.56e-55"),
    (["monotone", "--max-row", "16"], ANSWER, "monotone"),
    (["diagonal-product", "--layers", "5", "--tokens", "5"], ANSWER, "P"),
]


@cache
def _results() -> dict[tuple[str, ...], tuple[int | None, str, str]]:
    """Every case in one child interpreter (``RUNNER``), in turn; the hang detector bounds the whole run."""
    keys = [tuple(argv) for argv, _, _ in CASES]
    # Cases expected to answer get a generous wall-clock guard: their answer must come from the
    # deterministic limits, never depend on how busy the machine is.
    relaxed = [
        list(argv) + ["--time-budget", "3600"] if status == ANSWER and "--time-budget" not in argv else list(argv)
        for argv, status, _ in CASES
    ]
    try:
        done = subprocess.run(
            [sys.executable, "-c", RUNNER],
            input=json.dumps(relaxed),
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=HANG_DETECTOR_S,
        )
    except subprocess.TimeoutExpired:
        return dict.fromkeys(keys, (None, "", ""))
    assert done.returncode == 0, done.stderr[-3000:]
    return {key: tuple(result) for key, result in zip(keys, json.loads(done.stdout))}


def _id(case) -> str:
    argv = " ".join(case[0])
    return argv if len(argv) <= 60 else argv[:57] + "..."


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_hostile_input_answers_or_refuses_in_one_line(case):
    argv, status, text = case
    code, out, err = _results()[tuple(argv)]
    assert code is not None, f"no answer within the {HANG_DETECTOR_S} s hang detector"
    assert "Traceback" not in err and "Traceback" not in out
    assert code == status, err
    if status == REFUSE:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("posbias derive: error: "), err
        assert text in lines[0]
        assert out == ""
    else:
        assert err == "" and text in out


def test_the_table_covers_every_class_of_the_audit():
    refusals = sum(1 for _, status, _ in CASES if status == REFUSE)
    answers = sum(1 for _, status, _ in CASES if status == ANSWER)
    assert refusals >= 30 and answers >= 10


def test_each_derivation_documents_its_limits_and_the_time_budget(capsys):
    from posbias.cli.derive import DEFAULT_TIME_BUDGET, derive_command
    from posbias.theorem.params import DEFAULT_TIME_BUDGET_TEXT
    from posbias.theorem.queries import derivations

    assert float(DEFAULT_TIME_BUDGET_TEXT) == DEFAULT_TIME_BUDGET
    for name in derivations():
        assert derive_command([name, "--help"]) == 0
        text = capsys.readouterr().out
        assert "limits: " in text and "--time-budget SECONDS" in text
        assert f"default {DEFAULT_TIME_BUDGET_TEXT} s" in text
        assert derivations()[name].describe()["limits"]
    assert derive_command(["--help"]) == 0
    assert f"default {DEFAULT_TIME_BUDGET:g} s" in capsys.readouterr().out


def test_the_budget_guard_refuses_and_never_answers_in_process(capsys):
    """In-process: a budget under 0.05 s refuses before any work (deterministic), one line, status 2."""
    from posbias.cli.derive import derive_command

    assert derive_command(["dichotomy", "constant:0.3", "--time-budget", "0.04"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "time budget exceeded" in captured.err
