"""Relative biases through the product (issue 19 §1): build_model(bias=...), rollout --bias, the config's bias key.

Every profile is compared with the dense engine on a stack built directly from the numerics
types (an independent route: N x N logits soft-maxed row by row).
"""

from __future__ import annotations

import numpy as np
import pytest

from posbias.cli import main
from posbias.model import ModelError, build_model
from posbias.numerics.bias import Bias, KerpleLog, T5Buckets
from posbias.numerics.bias_stack import BiasStack
from posbias.numerics.dense import Dense
from posbias.numerics.masks import Full

T5 = "t5:8,16:0,-1,-2,-3,-4,-5,-6,-7"
T5_BIAS = Bias(T5Buckets(8, 16, tuple(-float(k) for k in range(8))))


def _csv(path):
    return np.loadtxt(path, delimiter=",", skiprows=1)[:, 1]


def test_build_model_with_a_bias_is_the_bias_stack():
    model = build_model(
        layers=3,
        heads=2,
        tokens=40,
        schedule="constant:0.5",
        bias=f"kerple-log:1,0.5/{T5}",
        content_diagonal=0.5,
        sink=[1.0, 0.0],
        mask="full",
    )
    direct = BiasStack.build(
        [0.5] * 3, [Bias(KerpleLog(1.0, 0.5)), T5_BIAS], diagonal=0.5, sink=[1.0, 0.0], mask=Full()
    )
    np.testing.assert_allclose(
        model.profile().probabilities, Dense().profile(direct, 40).probabilities, rtol=0, atol=1e-12
    )
    with pytest.raises(ModelError, match="3 head biases given"):
        build_model(layers=1, heads=2, tokens=8, bias="alibi:1/alibi:2/alibi:3")


def test_rollout_with_bias_flag(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            "rollout",
            "--layers",
            "4",
            "--heads",
            "2",
            "--tokens",
            "64",
            "--schedule",
            "constant:0.5",
            "--bias",
            f"kerple-log:1,0.5/{T5}",
            "--sink",
            "2",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    assert "engine bias" in capsys.readouterr().out
    direct = BiasStack.build([0.5] * 4, [Bias(KerpleLog(1.0, 0.5)), T5_BIAS], sink=2.0)
    np.testing.assert_allclose(_csv(out / "profile.csv"), Dense().profile(direct, 64).probabilities, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["--bias", "alibi:-1"], "alibi slope: -1 is below 0"),
        (["--bias", "expr:exp(g)", "--tokens", "800"], "b(710) = inf"),
        (["--sink", "1"], "--sink: applies with --bias"),
        (["--bias", "alibi:1", "--slopes", "hf"], "does not combine with --slopes"),
        (["--bias", "kerple-log:1,1", "--diagonal"], "--diagonal: the O(T N) diagonal identity"),
    ],
)
def test_rollout_bias_refusals_are_one_line_and_write_nothing(tmp_path, capsys, argv, fragment):
    out = tmp_path / "run"
    base = [
        "rollout",
        "--layers",
        "2",
        "--heads",
        "1",
        "--tokens",
        "16",
        "--schedule",
        "constant:0.5",
        "--out",
        str(out),
    ]
    code = main(base + argv)
    err = capsys.readouterr().err
    assert code == 2 and fragment in err and err.count("\n") == 1
    assert not out.exists()


CONFIG = """\
sequence_length: 48
num_layers: 3
attention_config:
  num_heads: 2
  bias: {bias}
  sink: [[1.0, 0.0]]
content_config:
  diagonal_scores: [[0.5]]
lambda_schedule_config:
  schedule_type: constant
  lambda_const: 0.5
"""


def test_config_bias_key(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG.format(bias=f'["kerple-log:1,0.5", "{T5}"]'))
    out = tmp_path / "run"
    assert main(["rollout", str(path), "--out", str(out)]) == 0
    direct = BiasStack.build([0.5] * 3, [Bias(KerpleLog(1.0, 0.5)), T5_BIAS], diagonal=0.5, sink=[1.0, 0.0])
    np.testing.assert_allclose(_csv(out / "profile.csv"), Dense().profile(direct, 48).probabilities, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "bias,fragment",
    [
        ('"wave:1"', "unknown bias"),
        ('["alibi:1", "alibi:2", "alibi:3"]', "3 head biases given"),
        # issue 29 item 3: pydantic's union wording was "attention_config.bias.str: input should be a valid string"
        ("[[1, 2], alibi:1]", "attention_config.bias[0]: expected a bias spec such as kerple-log:1,0.5"),
        ("3", "attention_config.bias: expected a bias spec such as kerple-log:1,0.5 or -0.5*log(1+g), or a list"),
        ("[alibi:1, 2]", "attention_config.bias[1]: expected a bias spec"),
        ("true", "one per head; got True"),
    ],
)
def test_config_bias_refusals(tmp_path, capsys, bias, fragment):
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG.format(bias=bias))
    assert main(["rollout", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert fragment in err and str(path) in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_config_needs_slopes_or_bias(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG.replace("  bias: {bias}\n", "").replace("  sink: [[1.0, 0.0]]\n", ""))
    assert main(["rollout", str(path), "--out", str(tmp_path / "run")]) == 2
    assert "exactly one of alibi_slopes or bias" in capsys.readouterr().err
