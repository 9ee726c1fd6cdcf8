"""The relative-bias fit (posbias.fit.bias, THEORY.md C7), its validate panel (i) and ``posbias fit MEASUREMENT_DIR``.

Independent routes: logits planted in the test from b, d, s and random row offsets c_i (the fit must
return the planted values); a dense NumPy least squares with one dummy column per row offset (no
centring, no normal equations); the model's own ALiBi term (``posbias.hf.forward.position_term``) for
the slopes; a dense NumPy softmax-and-rollout of the fitted heads for panel (i).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posbias.fit.bias import BiasFitError, fit_bias, fit_measurement, pre_softmax_logits
from posbias.io.reports import read_report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
RNG = np.random.default_rng(19)


def _planted(n, causal, past, future, d, s, rng, noise=0.0):
    """(N, N) logits b(i - j) (past) / b_f(j - i) (future) + d [i = j] + s [j = 0] + c_i (+ noise)."""
    i, j = np.indices((n, n))
    g = np.abs(i - j)
    logits = np.where(j <= i, past[g], future[g]) + d * (i == j) + s * (j == 0)
    logits = logits + rng.normal(0, 3, (n, 1)) + noise * rng.normal(size=(n, n))
    if causal:
        logits = np.where(j <= i, logits, np.nan)  # never read: must not matter
    return logits


def _gauge_table(n, rng):
    """A random table in the fit's gauge: b(0) = 0, b(2) = 2 b(1)."""
    b = rng.normal(size=n)
    b[0], b[2] = 0.0, 2 * b[1]
    return b


def _nan_safe(logits, causal):
    """The fit ignores entries the mask forbids; give it zeros there (NaN would be refused as non-finite)."""
    return np.nan_to_num(logits, nan=0.0) if causal else logits


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(4, 40),
    causal=st.booleans(),
    slope=st.floats(0, 2),
    d=st.floats(-3, 3),
    s=st.floats(-3, 3),
    seed=st.integers(0, 2**31),
)
def test_alibi_family_recovers_planted_slope_diagonal_sink(n, causal, slope, d, s, seed):
    rng = np.random.default_rng(seed)
    b = -slope * np.arange(n, dtype=float)
    logits = _nan_safe(_planted(n, causal, b, b, d, s, rng), causal)
    fit = fit_bias(logits[None, None], 1, 1, n, family="alibi", causal=causal)
    assert fit.parameters[0, 0, 0] == pytest.approx(slope, abs=1e-10)
    assert fit.diagonal[0, 0] == pytest.approx(d, abs=1e-9) and fit.sink[0, 0] == pytest.approx(s, abs=1e-9)
    assert fit.r2[0, 0] == pytest.approx(1.0, abs=1e-10)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n", [4, 5, 17, 48])
def test_table_family_recovers_planted_table_in_its_gauge(causal, n):
    past, future = _gauge_table(n, RNG), RNG.normal(size=n)
    future[0] = 0.0
    heads = [(past, future, 0.8, -1.3), (-0.2 * np.arange(n), future * 0.5, -0.4, 2.0)]
    logits = np.stack([_nan_safe(_planted(n, causal, p, f, d, s, RNG), causal) for p, f, d, s in heads])
    fit = fit_bias(np.stack([logits, logits[::-1]]), 2, 2, n, family="table", causal=causal, smoothness=0.0)
    for layer, order in ((0, (0, 1)), (1, (1, 0))):
        for h, k in enumerate(order):
            p, f, d, s = heads[k]
            np.testing.assert_allclose(fit.parameters[layer, h, :n], p, rtol=0, atol=1e-10)
            if not causal:
                np.testing.assert_allclose(fit.parameters[layer, h, n:], f, rtol=0, atol=1e-10)
            assert fit.diagonal[layer, h] == pytest.approx(d, abs=1e-10)
            assert fit.sink[layer, h] == pytest.approx(s, abs=1e-10)
    np.testing.assert_allclose(fit.r2, 1.0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("causal", [True, False])
def test_table_smoothness_leaves_a_linear_table_exact_and_any_table_equivalent(causal):
    """A linear b has no second differences, so any alpha returns it; an arbitrary b (outside the gauge)
    is returned as the same logits up to row offsets (the gauge moves a level between b(g >= 1) and d)."""
    n = 12
    line = -0.3 * np.arange(n)
    logits = _nan_safe(_planted(n, causal, line, line, 0.5, 1.0, RNG), causal)
    fit = fit_bias(logits[None, None], 1, 1, n, family="table", causal=causal, smoothness=7.0)
    np.testing.assert_allclose(fit.parameters[0, 0, :n], line, rtol=0, atol=1e-10)
    assert fit.diagonal[0, 0] == pytest.approx(0.5, abs=1e-10) and fit.sink[0, 0] == pytest.approx(1.0, abs=1e-10)

    past, future = RNG.normal(size=n), RNG.normal(size=n)
    logits = _nan_safe(_planted(n, causal, past, future, 0.5, 1.0, RNG), causal)
    fit = fit_bias(logits[None, None], 1, 1, n, family="table", causal=causal, smoothness=0.0)
    i, j = np.indices((n, n))
    g = np.abs(i - j)
    fp = fit.parameters[0, 0]
    fitted = (
        np.where(j <= i, fp[:n][g], (fp[n:] if not causal else fp[:n])[g])
        + fit.diagonal[0, 0] * (i == j)
        + fit.sink[0, 0] * (j == 0)
    )
    allowed = j <= i if causal else np.ones((n, n), bool)
    diff = np.where(allowed, logits - fitted, np.nan)
    spread = np.nanmax(diff, axis=1) - np.nanmin(diff, axis=1)  # a row offset only: constant along each row
    assert spread.max() < 1e-10


@pytest.mark.parametrize(
    "family,r1,r2",
    [("kerple-log", 1.3, 0.7), ("kerple-log", 0.4, 3.0), ("kerple-power", 0.8, 0.6), ("kerple-power", 0.2, 1.5)],
)
@pytest.mark.parametrize("causal", [True, False])
def test_kerple_families_recover_planted_parameters(family, r1, r2, causal):
    """Variable projection + L-BFGS: r2 to 1e-6 relative, r1, d, s to 1e-6 (the stated tolerance)."""
    n = 24
    g = np.arange(n, dtype=float)
    b = -r1 * (np.log1p(r2 * g) if family == "kerple-log" else g**r2)
    logits = _nan_safe(_planted(n, causal, b, b, -0.6, 1.1, RNG), causal)
    fit = fit_bias(logits[None, None], 1, 1, n, family=family, causal=causal)
    got_r1, got_r2 = fit.parameters[0, 0]
    assert got_r2 == pytest.approx(r2, rel=1e-6) and got_r1 == pytest.approx(r1, rel=1e-6)
    assert fit.diagonal[0, 0] == pytest.approx(-0.6, abs=1e-6) and fit.sink[0, 0] == pytest.approx(1.1, abs=1e-6)


def test_noisy_alibi_and_smoothed_table():
    """Noise sigma = 1e-2 on every logit (N = 64): the slope within 1e-3 (its least-squares standard error is
    about sigma / sqrt(sum of the centred g^2), ~1e-5 here), and the smoothed table nearer the truth than
    the unsmoothed one."""
    n = 64
    line = -0.1 * np.arange(n)
    logits = _nan_safe(_planted(n, True, line, line, 0.3, 0.7, RNG, noise=1e-2), True)
    fit = fit_bias(logits[None, None], 1, 1, n, family="alibi")
    assert abs(fit.parameters[0, 0, 0] - 0.1) < 1e-3 and 0.99 < fit.r2[0, 0] < 1
    rough = fit_bias(logits[None, None], 1, 1, n, family="table", smoothness=0.0).parameters[0, 0]
    smooth = fit_bias(logits[None, None], 1, 1, n, family="table", smoothness=100.0).parameters[0, 0]
    assert np.abs(smooth - line).max() < np.abs(rough - line).max()


def test_rising_slope_is_refitted_at_zero():
    """b = +0.2 g is not ALiBi (m >= 0): the constrained fit is m = 0 with d, s refitted."""
    n = 10
    up = 0.2 * np.arange(n)
    fit = fit_bias(_nan_safe(_planted(n, True, up, up, 0.0, 0.0, RNG), True)[None, None], 1, 1, n, family="alibi")
    assert fit.parameters[0, 0, 0] == 0.0 and fit.r2[0, 0] < 1


@pytest.mark.parametrize("family", ["kerple-log", "kerple-power"])
def test_rising_kerple_bias_is_refitted_at_r1_zero(family):
    """b = +0.5 log(1 + g) rises: with r1 >= 0 the best Kerple fit is b = 0 (r1 = r2 = 0), and d, s are then the
    dense least squares on [i = j], [j = 0] and one dummy column per row."""
    n = 12
    up = 0.5 * np.log1p(np.arange(n, dtype=float))
    logits = _nan_safe(_planted(n, True, up, up, 0.3, -0.4, RNG), True)
    fit = fit_bias(logits[None, None], 1, 1, n, family=family)
    assert tuple(fit.parameters[0, 0]) == (0.0, 0.0)
    rows, cols = np.nonzero(np.tril(np.ones((n, n), bool)))
    design = np.zeros((rows.size, 2 + n))
    design[:, 0], design[:, 1] = rows == cols, cols == 0
    design[np.arange(rows.size), 2 + rows] = 1.0
    coef = np.linalg.lstsq(design, logits[rows, cols], rcond=None)[0]
    assert fit.diagonal[0, 0] == pytest.approx(coef[0], abs=1e-10)
    assert fit.sink[0, 0] == pytest.approx(coef[1], abs=1e-10)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"family": "t5"}, "unknown family 't5'"),
        ({"smoothness": -1.0}, "expected a finite value >= 0"),
        ({"smoothness": float("nan")}, "expected a finite value >= 0"),
    ],
)
def test_refusals_of_bad_arguments(kwargs, message):
    with pytest.raises(BiasFitError, match=message):
        fit_bias(np.zeros((1, 1, 8, 8)), 1, 1, 8, **kwargs)


def test_refusals_of_undetermined_or_bad_logits():
    for family, n in (("alibi", 2), ("table", 3), ("kerple-log", 3), ("kerple-power", 3)):
        for causal in (True, False):
            with pytest.raises(BiasFitError, match=f"do not determine the fit; expected N >= {n + 1}"):
                fit_bias(np.zeros((1, 1, n, n)), 1, 1, n, family=family, causal=causal)
    # alibi at N = 3: m, d, s from three independent row-centred differences (planted, exact)
    logits = np.array([[0.0, 0, 0], [-0.5 + 0.25, 2.0, 0], [-1.0 + 0.25, -0.5, 2.0]]) + 7.0
    fit = fit_bias(logits[None, None], 1, 1, 3, family="alibi")
    assert fit.parameters[0, 0, 0] == pytest.approx(0.5, abs=1e-12)
    assert fit.diagonal[0, 0] == pytest.approx(2.0, abs=1e-12) and fit.sink[0, 0] == pytest.approx(0.25, abs=1e-12)
    bad = np.zeros((1, 1, 8, 8))
    bad[0, 0, 5, 2] = np.inf
    with pytest.raises(BiasFitError, match="not finite on the allowed entries"):
        fit_bias(bad, 1, 1, 8)
    bad[0, 0, 5, 2], bad[0, 0, 2, 5] = 0.0, np.inf  # above the diagonal: causal ignores it
    assert fit_bias(bad, 1, 1, 8).r2.shape == (1, 1)
    with pytest.raises(BiasFitError, match="expected shape"):
        fit_bias(np.zeros((1, 2, 8, 8)), 1, 1, 8)


def _dense_alibi_slope(logits):
    """Independent route: unconstrained least squares of causal logits on [-g, [i = j], [j = 0]] plus one dummy
    column per row (the row offsets c_i), by numpy.linalg.lstsq on the dense design."""
    n = logits.shape[-1]
    rows, cols = np.nonzero(np.tril(np.ones((n, n), bool)))
    design = np.zeros((rows.size, 3 + n))
    design[:, 0] = -(rows - cols)
    design[:, 1] = rows == cols
    design[:, 2] = cols == 0
    design[np.arange(rows.size), 3 + rows] = 1.0
    coef, *_ = np.linalg.lstsq(design, logits[rows, cols], rcond=None)
    return coef[0]


def _content_bound(content):
    """||C~|| / ||g_perp|| for causal content C: the largest change C can make to the least-squares slope (the
    slope's coefficient is <g_perp, y> / ||g_perp||^2, and the row dummies centre y), by dense lstsq."""
    n = content.shape[-1]
    rows, cols = np.nonzero(np.tril(np.ones((n, n), bool)))
    others = np.zeros((rows.size, 2 + n))
    others[:, 0], others[:, 1] = rows == cols, cols == 0
    others[np.arange(rows.size), 2 + rows] = 1.0
    g = -(rows - cols).astype(float)
    g_perp = g - others @ np.linalg.lstsq(others, g, rcond=None)[0]
    y = content[rows, cols]
    y_centred = y - (np.bincount(rows, y) / np.bincount(rows))[rows]
    return np.linalg.norm(y_centred) / np.linalg.norm(g_perp)


def _measure_fixture(family, sequences=4):
    from posbias.hf import checkpoint, weights
    from posbias.hf.measure import measure

    ck = checkpoint.load(FIXTURES / family)
    ids = np.load(FIXTURES / family / "expected.npz")["input_ids"].astype(np.int32)
    seqs = np.stack([np.roll(ids, k) for k in range(sequences)])
    return ck, measure(weights.params(ck, np.float64), ck.spec, seqs, influence=False)


@pytest.mark.parametrize("family", ["bloom", "mpt", "falcon"])
def test_alibi_fixtures_fit_recovers_the_true_slopes(family):
    """On the model's own ALiBi term (posbias.hf.forward.position_term) the alibi-family fit returns the
    effective slopes: exactly for BLOOM and MPT, within Falcon's bfloat16 rounding of m j (2^-8 relative).
    On the total pre-softmax logits (content times s_t plus that term) the fitted slope is the true slope
    plus the content's own least-squares slope (linearity; checked against dense lstsq to 1e-10), and the
    content moves it by at most its Cauchy-Schwarz bound ||C~|| / ||g_perp|| (C~ the row-centred scaled content,
    g_perp the part of -g no other column explains): the content of these tiny random models is not small
    against Falcon's slopes (1/sqrt(d_head) times BLOOM's, down to 0.002; content slopes up to 0.3 measured),
    so that bound, computed here, is the stated tolerance."""
    import jax

    from posbias.hf import forward

    ck, m = _measure_fixture(family)
    t, h, n, _ = m.content_mean.shape
    with jax.enable_x64(True):
        position = np.asarray(forward.position_term(ck.spec, n, np.float64))
    causal_only = np.where(np.isfinite(position), position, 0.0)
    fit = fit_bias(np.broadcast_to(causal_only, (t, h, n, n)), t, h, n, family="alibi")
    tolerance = 2.0**-8 if ck.spec.alibi_rounding == "bfloat16" else 1e-12
    np.testing.assert_allclose(fit.parameters[..., 0], np.broadcast_to(m.slopes, (t, h)), rtol=tolerance, atol=0)
    total = m.scales[:, None, None, None] * m.content_mean + causal_only[None]
    fit = fit_bias(total, t, h, n, family="alibi")
    for layer in range(t):
        for head in range(h):
            dense_total = _dense_alibi_slope(total[layer, head])
            dense_content = _dense_alibi_slope(m.scales[layer] * m.content_mean[layer, head])
            assert fit.parameters[layer, head, 0] == pytest.approx(max(dense_total, 0.0), abs=1e-10)
            assert dense_total - dense_content == pytest.approx(_dense_alibi_slope(causal_only[head]), abs=1e-10)
            bound = _content_bound(m.scales[layer] * m.content_mean[layer, head])
            assert abs(fit.parameters[layer, head, 0] - m.slopes[head]) <= bound * (1 + 1e-9) + 1e-12


@pytest.mark.parametrize("family", ["bloom", "llama", "gpt2"])
def test_measurement_logits_are_the_softmax_input(family):
    """pre_softmax_logits reproduces what the softmax sees (ALiBi: BLOOM; rotary: Llama, the rotated q.k; learned
    positions: GPT-2): softmax over j <= i equals the measured attention of a single-sequence measurement
    (S = 1, so the mean is that sequence's)."""
    ck, m = _measure_fixture(family, sequences=1)
    n = m.num_tokens
    for layer in range(len(m.lambdas)):
        logits = pre_softmax_logits(m.content_mean, m.scales, m.slopes, layer)
        logits = np.where(np.tril(np.ones((n, n), bool)), logits, -np.inf)
        probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        np.testing.assert_allclose(probs, m.kernels_per_head[layer], rtol=0, atol=1e-12)


def _dense_fitted_rollout(fit, lambdas):
    """Independent route for panel (i): per head the logits b(i - j) + d [i = j] + s [j = 0] from the fitted
    table, a masked softmax, the head mean, and v <- (1 - lambda) v + lambda v A from the top layer down."""
    n = fit.num_tokens
    i, j = np.indices((n, n))
    g = np.abs(i - j)
    allowed = j <= i if fit.causal else np.ones((n, n), bool)
    v = np.eye(n)[-1]
    for layer in range(len(lambdas) - 1, -1, -1):
        kernel = np.zeros((n, n))
        for head in range(fit.diagonal.shape[1]):
            p = fit.parameters[layer, head]
            b = np.where(j <= i, p[:n][g], (p[:n] if fit.causal else p[n:])[g])
            logits = b + fit.diagonal[layer, head] * (i == j) + fit.sink[layer, head] * (j == 0)
            logits = np.where(allowed, logits, -np.inf)
            w = np.exp(logits - logits.max(axis=-1, keepdims=True))
            kernel += w / w.sum(axis=-1, keepdims=True)
        kernel /= fit.diagonal.shape[1]
        v = (1 - lambdas[layer]) * v + lambdas[layer] * (v @ kernel)
    return v


@pytest.mark.parametrize("family", ["bloom", "bert"])
def test_validate_panel_i_on_hf_fixtures_equals_dense_rollout(family):
    from posbias.validate.panels import bias_prediction

    _, m = _measure_fixture(family)
    p = bias_prediction(m)
    assert abs(p.sum() - 1) < 1e-12 and p.min() >= 0
    np.testing.assert_allclose(p, _dense_fitted_rollout(fit_measurement(m), m.lambdas), rtol=0, atol=1e-12)


def test_validate_panel_i_on_the_trained_model_route(tmp_path):
    from posbias.lm import checkpoint as ckpt
    from posbias.lm.config import ModelConfig, TrainConfig
    from posbias.lm.data import heldout_sequences, load_corpus
    from posbias.lm.measure import measure
    from posbias.lm.train import train
    from posbias.validate.panels import bias_prediction

    model = ModelConfig(layers=2, heads=2, width=8, context=16, mlp_ratio=2)
    train(
        model, TrainConfig(steps=4, batch=2, lr=1e-2, warmup=1, eval_every=4), tmp_path / "run", log=lambda line: None
    )
    loaded = ckpt.load(tmp_path / "run")
    m = measure(loaded.params, model, heldout_sequences(load_corpus().validation, 12, 3), influence=False)
    p = bias_prediction(m)
    assert abs(p.sum() - 1) < 1e-12
    np.testing.assert_allclose(p, _dense_fitted_rollout(fit_measurement(m), m.lambdas), rtol=0, atol=1e-12)


@pytest.fixture(scope="module")
def measured_folder(tmp_path_factory):
    """A posbias measure folder of the BLOOM fixture (the Hugging Face route's files)."""
    from tests.hf_folders import measure_command as main

    tmp = tmp_path_factory.mktemp("biasfit")
    text = np.load(FIXTURES / "bloom" / "expected.npz")["text"]
    (tmp / "docs.jsonl").write_text("\n".join(json.dumps({"text": f"{text} {k}"}) for k in range(4)) + "\n")
    out = tmp / "m"
    assert (
        main(
            [
                str(FIXTURES / "bloom"),
                "--data",
                str(tmp / "docs.jsonl"),
                "--tokens",
                "10",
                "--samples",
                "3",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    return out


def test_fit_command_on_a_measurement_folder(measured_folder, tmp_path, capsys):
    from posbias.cli import main

    out = tmp_path / "fit"
    assert main(["fit", str(measured_folder), "--bias", "table", "--smoothness", "0.5", "--out", str(out)]) == 0
    assert "bias fit of" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["fitted_bias.csv", "fitted_bias.json", "fitted_bias_profile.csv"]
    record = json.loads((out / "fitted_bias.json").read_text())
    assert record["family"] == "table" and record["smoothness"] == 0.5 and record["num_tokens"] == 10
    with np.load(measured_folder / "kernels.npz") as k:
        content, scales, slopes, lambdas = k["content_logits"], k["scales"], k["slopes"], k["lambdas"]
    # R^2 recomputed here from the written table, d, s and the folder's raw arrays
    rows = np.loadtxt(out / "fitted_bias.csv", delimiter=",", skiprows=1, usecols=(0, 1, 3, 4))
    n = 10
    i, j = np.indices((n, n))
    allowed = j <= i
    for layer in range(content.shape[0]):
        for head in range(content.shape[1]):
            sel = (rows[:, 0] == layer) & (rows[:, 1] == head)
            b = rows[sel, 3]
            logits = scales[layer] * content[layer, head] - slopes[head] * (i - j)
            model = (
                b[np.abs(i - j)] + record["diagonal"][layer][head] * (i == j) + record["sink"][layer][head] * (j == 0)
            )
            centre = lambda x: np.where(  # noqa: E731
                allowed,
                x - np.where(allowed, x, 0).sum(1, keepdims=True) / allowed.sum(1, keepdims=True),
                0,
            )
            resid = ((centre(logits) - centre(model)) ** 2).sum()
            assert record["r2"][layer][head] == pytest.approx(1 - resid / (centre(logits) ** 2).sum(), abs=1e-12)
    prof = np.loadtxt(out / "fitted_bias_profile.csv", delimiter=",", skiprows=1)[:, 1]
    assert abs(prof.sum() - 1) < 1e-12
    from posbias.fit.bias_run import fit_folder, read_measurement

    fit = fit_folder(read_measurement(measured_folder), "table", 0.5)
    np.testing.assert_allclose(prof, _dense_fitted_rollout(fit, lambdas), rtol=0, atol=1e-12)
    written = json.loads((measured_folder / "bias_fit.json").read_text())  # measure's own default fit
    assert written["family"] == "table" and np.asarray(written["r2"]).shape == (2, 6)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["EMPTY"], "not a folder written by posbias measure"),
        (["MEASURED", "--bias", "t5"], "invalid choice: 't5'"),
        (["MEASURED", "--smoothness", "-1"], "--smoothness: -1.0, expected a finite value >= 0"),
        (["MEASURED", "model.yaml"], "a measurement folder takes no CONFIG"),
        (["MEASURED", "--bias", "alibi", "--smoothness", "1"], "--smoothness: applies to --bias table only"),
        (["profile.csv", "--bias", "alibi"], "apply to a posbias measure folder"),
        (["profile.csv"], "a measured profile needs CONFIG"),
    ],
)
def test_fit_command_refusals_are_one_line_exit_2(measured_folder, tmp_path, capsys, argv, message):
    from posbias.cli import main

    (tmp_path / "EMPTY").mkdir()
    (tmp_path / "profile.csv").write_text("token_position,probability\n0,0.5\n1,0.5\n")
    names = {
        "EMPTY": str(tmp_path / "EMPTY"),
        "MEASURED": str(measured_folder),
        "profile.csv": str(tmp_path / "profile.csv"),
    }
    out = tmp_path / "out"
    assert main(["fit", *[names.get(a, a) for a in argv], "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


def test_validate_command_shows_panel_i_on_a_hf_fixture(tmp_path, capsys):
    """The done-criterion on the --checkpoint route: report.json and report.md carry panel (i), its profile
    is written and sums to 1, and its W1 is that of the written profile against the written influence."""
    from scipy.stats import wasserstein_distance

    from posbias.cli import main

    out = tmp_path / "v"
    assert (
        main(
            [
                "validate",
                "--checkpoint",
                str(FIXTURES / "bloom"),
                "--lengths",
                "12",
                "--samples",
                "2",
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    report = read_report(json.loads(capsys.readouterr().out), note=pytest.fail)["lengths"]
    assert "i" in report["12"]
    p = np.loadtxt(out / "profiles" / "12" / "i.csv", delimiter=",", skiprows=1)[:, 1]
    d = np.loadtxt(out / "profiles" / "12" / "d.csv", delimiter=",", skiprows=1)[:, 1]
    assert p.size == 12 and abs(p.sum() - 1) < 1e-12 and p.min() >= 0
    x = np.arange(12)
    assert report["12"]["i"]["w1"] == pytest.approx(wasserstein_distance(x, x, d, p) / 11, abs=1e-12)
    assert "| (i) | fitted relative bias" in (out / "report.md").read_text()


def test_sliding_window_measurement_is_refused_where_the_window_binds():
    """Mistral's fixture reads keys i - 5 < j <= i: at N = 16 the causal entries beyond the window are not what
    the softmax sees, so the fit (and panel (i)) refuses; at N = 5 the window does not bind and the fit runs."""
    from posbias.hf import checkpoint, weights
    from posbias.hf.measure import measure
    from posbias.validate.panels import bias_prediction

    ck = checkpoint.load(FIXTURES / "mistral")
    ids = np.load(FIXTURES / "mistral" / "expected.npz")["input_ids"].astype(np.int32)
    params = weights.params(ck, np.float64)
    m = measure(params, ck.spec, ids[None, :16], influence=False)
    with pytest.raises(BiasFitError, match="sliding window of 5 tokens is shorter than N = 16"):
        fit_measurement(m)
    with pytest.raises(BiasFitError, match="sliding window"):
        bias_prediction(m)
    short = measure(params, ck.spec, ids[None, :5], influence=False)
    assert short.logits_note == "" and fit_measurement(short).r2.shape == (2, ck.spec.heads)


def test_transformers_backend_bloom_is_refused_in_one_line(tmp_path, capsys):
    """BLOOM through the transformers backend records q.k without its ALiBi term (slopes 0): measure still
    writes its set, bias_fit.json says why there is no fit, and posbias fit on the folder exits 2 in one line."""
    pytest.importorskip("torch")  # the optional backend, as tests/product/test_torch_backend.py
    pytest.importorskip("transformers")
    from posbias.cli import main

    out = tmp_path / "pt"
    assert (
        main(
            [
                "measure",
                str(FIXTURES / "bloom"),
                "--backend",
                "transformers",
                "--tokens",
                "8",
                "--samples",
                "1",
                "--quiet",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    record = json.loads((out / "bias_fit.json").read_text())
    assert sorted(record) == ["refused"] and "transformers backend records only" in record["refused"]
    capsys.readouterr()
    assert main(["fit", str(out), "--out", str(tmp_path / "fit")]) == 2
    err = capsys.readouterr().err.strip()
    assert "no bias fit: the transformers backend" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "fit").exists()


def test_fit_command_alibi_json_matches_dense_least_squares(measured_folder, tmp_path, capsys):
    """posbias fit FOLDER --bias alibi --json: every head's slope is the dense lstsq slope (row dummies) of the
    folder's own arrays, s_t content - m (i - j), clipped at 0; the profile written sums to 1."""
    from posbias.cli import main

    assert main(["fit", str(measured_folder), "--bias", "alibi", "--json", "--out", str(tmp_path / "a")]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["family"] == "alibi" and record["parameter_names"] == ["slope"]
    with np.load(measured_folder / "kernels.npz") as k:
        content, scales, slopes = k["content_logits"], k["scales"], k["slopes"]
    n = content.shape[-1]
    i, j = np.indices((n, n))
    for layer in range(content.shape[0]):
        for head in range(content.shape[1]):
            dense = _dense_alibi_slope(scales[layer] * content[layer, head] - slopes[head] * (i - j))
            assert record["parameters"][layer][head][0] == pytest.approx(max(dense, 0.0), abs=1e-10)
    prof = np.loadtxt(tmp_path / "a" / "fitted_bias_profile.csv", delimiter=",", skiprows=1)[:, 1]
    assert abs(prof.sum() - 1) < 1e-12
