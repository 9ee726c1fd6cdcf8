"""posbias fit: the differentiable profile, planted-parameter recovery, held-out check, the command."""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import posbias.numerics as nx
from posbias.cli import main
from posbias.fit.profile import FitError, FitSpec, fit, model_profile
from posbias.io.output import position_csv
from posbias.numerics import differentiable

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _params(stack):
    return [jnp.asarray(a) for a in (stack.lambdas, stack.slopes, stack.diagonal, stack.head_weights)]


@pytest.mark.parametrize("mask", [nx.Causal(), nx.Full(), nx.SlidingWindow(5), nx.Prefix(4)])
def test_differentiable_profile_equals_the_structured_engine(mask):
    rng = np.random.default_rng(3)
    stack = nx.AlibiStack.build(
        rng.uniform(0, 1, 5),
        rng.uniform(0, 1, (5, 3)),
        rng.uniform(-3, 3, (5, 3)),
        rng.uniform(0.2, 1, (5, 3)),
        temperature=0.8,
        mask=mask,
    )
    with jax.enable_x64(True):
        p = np.asarray(differentiable.profile(*_params(stack), stack.temperature, num_tokens=30, mask=mask))
    assert abs(p.sum() - 1) < 1e-12
    assert np.max(np.abs(p - nx.profile(stack, 30).probabilities)) < 1e-13


def test_gradient_matches_central_differences():
    stack = nx.AlibiStack.build([0.7, 0.4, 0.9], [0.5, 0.1], 0.5)
    q = nx.profile(nx.AlibiStack.build([0.7, 0.4, 0.9], [0.5, 0.1], 2.0), 20).probabilities

    def loss(d, log_tau):
        lam, m, _, w = _params(stack)
        p = differentiable.profile(lam, m, jnp.full((3, 2), d), w, jnp.exp(log_tau), num_tokens=20, mask=stack.mask)
        return jnp.sum((jnp.cumsum(p) - jnp.cumsum(q)) ** 2)  # smooth, so differences are meaningful

    with jax.enable_x64(True):
        g = jax.grad(loss, argnums=(0, 1))(0.5, 0.1)
        h = 1e-6
        fd = [(loss(0.5 + h, 0.1) - loss(0.5 - h, 0.1)) / (2 * h), (loss(0.5, 0.1 + h) - loss(0.5, 0.1 - h)) / (2 * h)]
    assert np.allclose(np.array(g, float), np.array(fd, float), rtol=1e-6, atol=1e-12)


def test_fit_recovers_planted_diagonal_and_temperature():
    """Profile made by the structured engine at d = 1.5, tau = 0.7; fit starts from d = 0, tau = 1."""
    truth = nx.AlibiStack.build([0.6] * 4, nx.alibi_slopes(4), 1.5, temperature=0.7)
    measured = nx.profile(truth, 48).probabilities
    start = nx.AlibiStack.build([0.6] * 4, nx.alibi_slopes(4), 0.0)
    result = fit(start, measured, FitSpec(steps=1000, learning_rate=0.1))
    assert result.values["diagonal"] == pytest.approx(1.5, abs=0.03)
    assert result.values["temperature"] == pytest.approx(0.7, abs=0.01)
    assert result.loss_after < 1e-3 < result.loss_before
    assert abs(result.after.sum() - 1) < 1e-12


def test_fit_recovers_a_lambda_scale():
    truth = nx.AlibiStack.build(np.linspace(0.2, 0.5, 6), nx.alibi_slopes(4), 1.0)
    measured = nx.profile(truth, 40).probabilities
    start = nx.AlibiStack.build(np.linspace(0.2, 0.5, 6) / 1.6, nx.alibi_slopes(4), 1.0)
    result = fit(start, measured, FitSpec(diagonal="none", temperature=False, lambda_scale=True, steps=600))
    assert result.values["lambda_scale"] == pytest.approx(1.6, abs=0.02)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(diagonal="pooled", content_scale=True), "cannot be fitted together"),
        (dict(diagonal="none", temperature=False), "nothing to fit"),
        (dict(steps=0), "at least 1"),
        (dict(diagonal="sometimes"), "expected one of"),
    ],
)
def test_bad_specs(kwargs, message):
    with pytest.raises(FitError, match=message):
        FitSpec(**kwargs)


def test_command_with_heldout(tmp_path, capsys):
    """Measured profiles made at d = 2.5 by the engine at N = 64 (fit) and N = 96 (held out)."""
    from posbias import config

    truth = config.load(EXAMPLES / "small.yaml", content_diagonal=2.5)
    for n, name in ((64, "m64.csv"), (96, "m96.csv")):
        (tmp_path / name).write_text(position_csv(probability=nx.profile(truth.stack, n).probabilities))
    out = tmp_path / "fit"
    code = main(
        [
            "fit",
            str(tmp_path / "m64.csv"),
            str(EXAMPLES / "small.yaml"),
            "--no-temperature",
            "--steps",
            "300",
            "--heldout",
            str(tmp_path / "m96.csv"),
            "--out",
            str(out),
            "--json",
        ]
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["values"]["diagonal"] == pytest.approx(2.5, abs=0.05)
    assert report["heldout"]["w1_after"] < 0.1 * report["heldout"]["w1_before"]
    assert sorted(p.name for p in out.iterdir()) == ["fit.json", "fit.png", "fitted_profile.csv"]
    fitted = np.loadtxt(out / "fitted_profile.csv", delimiter=",", skiprows=1)[:, 1]
    assert np.allclose(fitted, model_profile(truth.stack, 64, {"diagonal": report["values"]["diagonal"]}), atol=1e-15)


def test_command_refuses_bad_input(tmp_path, capsys):
    (tmp_path / "m.csv").write_text("token_position,probability\n0,0.5\n1,0.6\n")
    code = main(["fit", str(tmp_path / "m.csv"), str(EXAMPLES / "small.yaml"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "sums to" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()
