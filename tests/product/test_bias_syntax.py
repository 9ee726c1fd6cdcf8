"""One syntax for a bias formula in every command that takes --bias (issue 29 item 2).

``posbias rollout/sweep --bias`` and the config's ``bias:`` take a bare formula in g as ``expr:`` does;
``posbias derive monotone|row|order --bias`` takes ``expr:EXPR;NAME=VALUE`` and the closed families
(alibi, kerple-log, kerple-power) as the formulas they stand for. Each spelling is compared with the
other route: the rollout's profile with the dense engine on a stack built from the numerics types,
derive's verdict and exact data with the plain formula's.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from posbias.bias_spec import parse_bias as rollout_bias
from posbias.bias_spec import parse_biases
from posbias.cli import main
from posbias.cli.derive import derive_command
from posbias.errors import UserError
from posbias.numerics.bias import Alibi, Bias, KerpleLog
from posbias.numerics.bias_stack import BiasStack
from posbias.numerics.dense import Dense


def _csv(path):
    return np.loadtxt(path, delimiter=",", skiprows=1)[:, 1]


def _rollout(tmp_path, name, bias, capsys):
    out = tmp_path / name
    argv = ["rollout", "--layers", "3", "--heads", "2", "--tokens", "40", "--schedule", "constant:0.5"]
    code = main([*argv, "--bias", bias, "--engine", "dense", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    return _csv(out / "profile.csv")


def test_rollout_takes_a_bare_formula_as_expr_does(tmp_path, capsys):
    # a / starts a new head before a family name only: "3*cos(g)/-0.5*log(1+g)" would be one head
    bare = _rollout(tmp_path, "bare", "3*cos(g)/kerple-log:0.5,1", capsys)
    prefixed = _rollout(tmp_path, "expr", "expr:3*cos(g)/kerple-log:0.5,1", capsys)
    g = np.arange(40.0)
    # independent: the dense engine on tables of the same values (the bias constant beyond N)
    direct = BiasStack.build(
        [0.5] * 3,
        [Bias(_table(3 * np.cos(g))), Bias(_table(-0.5 * np.log1p(g)))],
    )
    expected = Dense().profile(direct, 40).probabilities
    np.testing.assert_array_equal(bare, prefixed)
    np.testing.assert_allclose(bare, expected, rtol=0, atol=1e-12)


def _table(values):
    from posbias.numerics.bias import Table

    return Table(tuple(float(v) for v in values))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("-g/2", [Bias(Alibi(0.5))]),  # a bare formula that divides is one head
        ("-m*g;m=0.25", [Bias(Alibi(0.25))]),
        ("-g|-2*g", [Bias(Alibi(1.0), Alibi(2.0))]),
        ("expr:1/(1+g)/alibi:0.25", None),
        ("-r1*log(1+r2*g);r1=1,r2=0.5/kerple-log:1,0.5", None),
    ],
)
def test_bare_formulas_split_into_heads_at_a_family_name_only(text, expected):
    heads = parse_biases(text)
    if expected is not None:
        assert heads == expected
    else:
        assert len(heads) == 2
    if text.endswith("kerple-log:1,0.5"):
        np.testing.assert_allclose(heads[0].values(30)[0], Bias(KerpleLog(1.0, 0.5)).values(30)[0], rtol=1e-15)
        assert heads[1] == Bias(KerpleLog(1.0, 0.5))


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("wave:1", "unknown bias 'wave:1'; expected alibi:M"),
        ("3*cos(t)", "give values for t"),
        ("g.real", "attribute access"),
        ("__import__('os')", "contains characters other than"),
        ("-g/a;a=0", "is not a finite real expression"),
    ],
)
def test_rollout_refusals_say_what_was_expected(text, fragment):
    with pytest.raises(UserError, match=None) as info:
        rollout_bias(text)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def _derive(argv, capsys):
    code = derive_command([*argv, "--format", "json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


@pytest.mark.parametrize(
    "spelling, formula",
    [
        ("alibi:0.5", "-g/2"),
        ("kerple-log:1,0.5", "-log(1 + g/2)"),
        ("kerple-power:1,1/2", "-g^(1/2)"),
        ("expr:-m*g + a*cos(g);m=1/4,a=1", "-g/4 + cos(g)"),
        ("expr:-m*g;m=1", "-g"),
    ],
)
@pytest.mark.parametrize("query", ["monotone", "row"])
def test_derive_takes_the_rollout_spellings_as_their_formulas(spelling, formula, query, capsys):
    extra = [] if query == "row" else ["--up-to", "10"]
    code, by_spelling, err = _derive([query, "--bias", spelling, *extra], capsys)
    assert code == 0, err
    code, by_formula, err = _derive([query, "--bias", formula, *extra], capsys)
    assert code == 0, err
    for d in (by_spelling["data"], by_formula["data"]):
        d.pop("bias", None)
    assert by_spelling["data"] == by_formula["data"]
    assert by_spelling["text"].splitlines()[1:] == by_formula["text"].splitlines()[1:]


@pytest.mark.parametrize(
    "spelling, fragment",
    [
        ("table:0,-1,-2", "a table bias has no formula for derive; give its weights"),
        ("t5:8,16:0,-1,-2,-3,-4,-5,-6,-7", "a t5 bias has no formula for derive"),
        ("wave:1", "unknown bias 'wave'"),
        ("alibi:1,2", "alibi takes 1 number(s), got 2"),
        ("expr:-g;b=1", "b does not appear in the expression"),
        ("expr:-g/a;a=0", "not a finite real expression at the values given"),
        ("expr:-m*g;m=1,m=2", "given twice"),
        ("alibi:x", "is not a number"),
        # the parser's refusals said "expected an expression in t such as 0.5/(t+1)**1.5" for a bias
        ("", "'' is empty; expected an expression in g such as -m*g"),
        (
            "-g·2",
            "contains characters other than letters, digits, + - * / ^ ( ) . and spaces; expected an expression in g",
        ),
        ("Piecewise((-g, g < 3), (-2*g, True))", "expected an expression in g"),
    ],
)
def test_derive_refuses_other_spellings_in_one_line(spelling, fragment, capsys):
    code, _, err = _derive(["monotone", "--bias", spelling], capsys)
    assert code == 2 and fragment in err and err.count("\n") == 1 and "Traceback" not in err
