"""``expr:`` bias specs that are not finite real expressions are refused in one line (posbias/bias_spec.py,
numerics/bias.py): NaN or infinite parameters, a parameter given twice, parameter values that make
the expression infinite or complex, and complex values of the expression at any distance.

Before these refusals, ``a=nan`` reduced the expression to NaN, read as ALiBi slope 0; ``(-g)^(1/3)``
lost its imaginary part; ``a=1,a=2`` took the last value; ``-g/a;a=0`` crashed with a traceback.
Accepted specs are checked against values written here by hand (NumPy), never against the parser."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from posbias.bias_spec import parse_bias
from posbias.cli import main
from posbias.errors import UserError
from posbias.numerics.bias import Bias, Function
from posbias.numerics.stack import StackError
from posbias.sweep.cli import main as sweep_main
from posbias.sweep.spec import SpecError, parse

ROLLOUT = ["rollout", "--layers", "3", "--heads", "2", "--tokens", "8", "--schedule", "constant:0.5"]
SWEEP_BASE = {"layers": 2, "heads": 1, "tokens": 8, "schedule": "constant:0.5"}
NOT_FINITE = [
    ("expr:-a*log(1+g);a=nan", "parameter a: nan is not finite"),
    ("expr:-a*log(1+g);a=NaN", "parameter a: nan is not finite"),
    ("expr:-a*log(1+g);a=-nan", "parameter a: nan is not finite"),
    ("expr:-a*g-b*g;a=1,b=nan", "parameter b: nan is not finite"),
    ("expr:-a*log(1+g);a=inf", "parameter a: inf is not finite"),
    ("expr:-a*log(1+g);a=-Infinity", "parameter a: -inf is not finite"),
    ("expr:-a*log(1+g);a=1e999", "parameter a: inf is not finite"),
]
TWICE = [
    ("expr:-a*g;a=1,a=2", "parameter a given twice"),
    ("expr:-a*log(1+b*g);a=1,b=2, b = 2", "parameter b given twice"),
]
NOT_REAL = [
    ("expr:-g/a;a=0", "'-g/a;a=0.0' is not a finite real expression"),
    ("expr:-g/(a-1);a=1", "'-g/(a-1);a=1.0' is not a finite real expression"),
    ("expr:-g*log(a);a=-1", "'-g*log(a);a=-1.0' is not a finite real expression"),
    ("expr:-log(a)*g;a=0", "'-log(a)*g;a=0.0' is not a finite real expression"),
    ("expr:-g*factorial(a);a=-1", "'-g*factorial(a);a=-1.0' is not a finite real expression"),
    ("expr:-g*a^(1/3);a=-1", "'-g*a^(1/3);a=-1.0' is not a finite real expression"),
    ("expr:(-g)^(1/3)", "'(-g)^(1/3)' is not a finite real expression"),
    ("expr:-a*(-g)^(2/3);a=1", "'-a*(-g)^(2/3);a=1.0' is not a finite real expression"),
]
REFUSED = NOT_FINITE + TWICE + NOT_REAL


@pytest.mark.parametrize("spec,fragment", REFUSED)
def test_bad_expr_specs_are_refused_in_one_line(spec, fragment):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning, no RuntimeWarning on the way
        with pytest.raises(UserError) as info:
            parse_bias(spec).values(8)
    message = str(info.value)
    assert fragment in message and "\n" not in message and message.startswith(f"--bias {spec!r}: ")


@pytest.mark.parametrize("spec,fragment", REFUSED)
def test_rollout_refuses_bad_expr_specs_with_exit_2_writing_nothing(tmp_path, capsys, spec, fragment):
    out = tmp_path / "run"
    assert main([*ROLLOUT, "--bias", spec, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


def test_config_bias_with_a_nan_parameter_is_refused(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(
        "sequence_length: 8\nnum_layers: 2\nattention_config:\n  num_heads: 1\n"
        '  bias: "expr:-a*log(1+g);a=nan"\n'
        "lambda_schedule_config:\n  schedule_type: constant\n  lambda_const: 0.5\n"
    )
    assert main(["rollout", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "parameter a: nan is not finite" in err and str(path) in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "base,axes,fragment",
    [
        ({}, {"bias": ["alibi:1", "expr:-a*log(1+g);a=nan"]}, "parameter a: nan is not finite"),
        ({}, {"bias": ["expr:-a*g;a=1,a=2"]}, "parameter a given twice"),
        ({"bias": "expr:-g/a;a={a}"}, {"a": [0, 1]}, "axes.a = 0.0: bias 'expr:-g/a;a=0.0': '-g/a;a=0.0' is not a"),
        ({"bias": "expr:(-g)^(1/3)*a;a={a}"}, {"a": [1, 2]}, "'(-g)^(1/3)*a;a=1.0' is not a finite real"),
    ],
)
def test_sweeps_refuse_bad_expr_specs_at_plan_time(tmp_path, capsys, base, axes, fragment):
    with pytest.raises(SpecError) as info:
        parse({"base": {**SWEEP_BASE, **base}, "axes": axes}, "s.yaml")
    assert fragment in str(info.value) and "\n" not in str(info.value)
    spec = tmp_path / "s.yaml"
    lines = [f"{k}: {v!r}" for k, v in {**SWEEP_BASE, **base}.items()]
    spec.write_text(
        "base: {" + ", ".join(lines) + "}\naxes: {" + ", ".join(f"{k}: {v!r}" for k, v in axes.items()) + "}\n"
    )
    out = tmp_path / "out"
    assert sweep_main([str(spec), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1
    assert not out.exists()


def test_a_complex_value_at_any_evaluated_distance_is_refused():
    """``Bias.values`` refuses a complex value with a non-zero imaginary part wherever it occurs in
    0 .. n-1 (here only at g = 5), and takes a complex result with zero imaginary parts as real."""
    late = Bias(Function("late", lambda g: np.where(g == 5, -g + 0.5j, -g + 0j)))
    np.testing.assert_array_equal(late.values(5)[0], [0.0, -1.0, -2.0, -3.0, -4.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(StackError, match=r"^bias 'late': past b\(5\) = \(-5\+0\.5j\) is not real"):
            late.values(8)
        with pytest.raises(StackError, match=r"future b\(1\) = .*j\) is not real"):
            Bias(Function("ok", lambda g: -g), Function("cube", lambda g: (-g + 0j) ** (1 / 3))).values(3)


@pytest.mark.parametrize(
    "spec,hand",
    [
        ("expr:-a*log(1+g);a=0.5", lambda g: -0.5 * np.log1p(g)),
        ("expr:-a*log(1+b*g);a=1, b=2", lambda g: -np.log1p(2 * g)),
        ("expr:-g*log(a)*a;a=2", lambda g: -2 * np.log(2) * g),
        ("expr:-g^(1/3)", lambda g: -np.cbrt(g)),
    ],
)
def test_finite_real_expressions_still_parse_to_their_values(spec, hand):
    g = np.arange(12.0)
    past, _ = parse_bias(spec).values(12)
    np.testing.assert_allclose(past - past[0], hand(g) - hand(g)[0], rtol=1e-15, atol=1e-15)


def test_a_sweep_whose_bias_has_no_value_at_its_n_is_refused_when_the_batch_runs(tmp_path, capsys):
    """e^g is finite as written, but b(710) overflows at N = 800: known only when the batch's stacks are
    evaluated; one line, exit 2, nothing written (it was a StackError traceback)."""
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "base: {layers: 2, heads: 2, tokens: 800, schedule: 'constant:0.5', bias: 'expr:exp(g)*{a}'}\n"
        "axes: {a: [1.0, 2.0]}\n"
    )
    out = tmp_path / "out"
    assert sweep_main([str(spec), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "b(710) = inf, expected a finite value" in err and err.count("\n") == 1
    assert not out.exists()
