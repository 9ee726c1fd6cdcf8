"""posbias validate's kernel variants, baselines, sink diagnostics and --bos (posbias.validate.panels, posbias.hf.bos).

Independent routes: the uniform baseline against THEORY.md's exact closed form (Hausdorff moments,
exact rationals: posbias.theorem.cesaro_exact.exact_profile) and, for the full mask, against the closed form
prod(1 - lambda) e_{N-1} + (1 - prod(1 - lambda)) / N; every written profile against dense NumPy
rollouts of the kernels validate wrote (kernels/<N>.npz); W1 by scipy; the sink diagnostics from
the written arrays.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from posbias.cli import main
from posbias.hf import bos, checkpoint, data
from posbias.io.reports import read_report
from posbias.measure.quantities import MeasureError
from posbias.validate.matrix import TIE
from posbias.validate.panels import kernel_profile, per_position_kernels, uniform_kernels

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
LENGTHS = (12, 16)


@pytest.mark.parametrize("seed", range(4))
def test_uniform_causal_baseline_is_the_hausdorff_closed_form(seed):
    from posbias.theorem.cesaro_exact import exact_profile

    rng = np.random.default_rng(seed)
    t, n = int(rng.integers(1, 6)), int(rng.integers(2, 20))
    lambdas = rng.uniform(0, 1, t)
    got = kernel_profile(uniform_kernels(t, n), lambdas)
    exact = np.array([float(f) for f in exact_profile([Fraction(x) for x in lambdas], n).fractions()])
    np.testing.assert_allclose(got, exact, rtol=0, atol=1e-13)


def test_uniform_full_mask_baseline_closed_form():
    lambdas = np.array([0.3, 0.7, 0.2])
    n = 9
    keep = np.prod(1 - lambdas)
    expected = np.full(n, (1 - keep) / n)
    expected[-1] += keep
    np.testing.assert_allclose(
        kernel_profile(uniform_kernels(3, n, causal=False), lambdas, causal=False), expected, rtol=0, atol=1e-15
    )


@pytest.mark.parametrize("causal", [True, False])
def test_per_position_lambda_equal_across_positions_is_the_plain_rollout(causal):
    rng = np.random.default_rng(3)
    t, n = 4, 9
    kernels = rng.uniform(0.1, 1, (t, n, n))
    if causal:
        kernels *= np.tril(np.ones((n, n)))
    lambdas = rng.uniform(0, 1, t)
    same = np.broadcast_to(lambdas[:, None], (t, n))
    folded = per_position_kernels(kernels, same)
    np.testing.assert_allclose(folded.sum(axis=-1), 1, rtol=0, atol=1e-15)
    np.testing.assert_allclose(
        kernel_profile(folded, np.ones(t), causal=causal),
        kernel_profile(kernels, lambdas, causal=causal),
        rtol=0,
        atol=1e-15,
    )


def _rollout(kernels, lambdas):
    row = np.eye(kernels.shape[-1])[-1]
    for t in range(len(lambdas) - 1, -1, -1):
        row = (1 - lambdas[t]) * row + lambdas[t] * (row @ kernels[t])
    return row


def _rollout_per_position(kernels, ratios):
    """The last row of prod_t ((1 - diag(r_t)) I + diag(r_t) K_t), position-dependent r (T, N), as a row vector
    v -> v (1 - r_t) + (v r_t) K_t."""
    row = np.eye(kernels.shape[-1])[-1]
    for t in range(len(ratios) - 1, -1, -1):
        row = row * (1 - ratios[t]) + (row * ratios[t]) @ kernels[t]
    return row


def _profile(path: Path) -> np.ndarray:
    return np.loadtxt(path, delimiter=",", skiprows=1)[:, 1]


@pytest.fixture(scope="module", params=[f for f in ("gpt2", "llama", "bloom") if (FIXTURES / f).is_dir()])
def run(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("panels") / request.param
    code = main(
        [
            "validate",
            "--checkpoint",
            str(FIXTURES / request.param),
            "--lengths",
            ",".join(map(str, LENGTHS)),
            "--samples",
            "2",
            "--out",
            str(out),
            "--json",
        ]
    )
    return code, out


def test_written_panels_recomputed_from_the_written_kernels(run, capsys):
    code, out = run
    assert code == 0
    whole = read_report(out / "report.json", note=pytest.fail)
    report = whole["lengths"]
    assert sorted(report) == sorted(map(str, LENGTHS))
    for n in LENGTHS:
        arrays = np.load(out / "kernels" / f"{n}.npz")
        kernels, kv, lambdas = arrays["kernels"], arrays["kernels_value"], arrays["lambdas"]
        kn, per_position, own = arrays["kernels_norm"], arrays["lambda_positions"], arrays["lambda_self"]
        # lambda_t is the mean of r_t,i over positions; the MLP-as-self ratio is never above r_t,i
        np.testing.assert_allclose(per_position.mean(axis=1), lambdas, rtol=1e-13, atol=0)
        assert np.all(own <= per_position + 1e-15) and np.all(own >= 0)
        profiles = {p.stem: _profile(p) for p in (out / "profiles" / str(n)).glob("*.csv")}
        assert sorted(profiles) == sorted([*"abcdefghijklop", "flat", "uniform", "m-grad", "n-grad"])
        ones = np.ones(len(lambdas))
        moved = kernels.astype(np.float64).copy()  # S_{0} by hand: rows 1..N-1 move their key-0 mass to the diagonal
        for i in range(1, n):
            moved[:, i, i] += moved[:, i, 0]
            moved[:, i, 0] = 0
        c_m = whole["sink_fit"]["measures"]["grad"]["c"]
        c_n = whole["sink_fit"]["measures"]["grad"]["control"]["c"]
        sinkless = kernels.astype(np.float64).copy()  # key 0 removed by hand from rows 1..N-1, rows renormalised
        sinkless[:, 1:, 0] = 0
        sinkless[:, 1:] /= sinkless[:, 1:].sum(axis=-1, keepdims=True)
        dense = {
            "j": _rollout(sinkless, lambdas),
            "k": _rollout(kn, ones),
            "e": _rollout(kernels, lambdas),
            "f": _rollout(kernels, ones),
            "g": _rollout(kv, lambdas),
            "h": _rollout(kv, ones),
            "flat": np.full(n, 1 / n),
            "l": _rollout(moved, lambdas),
            "m-grad": _rollout(moved, np.minimum(1, c_m * lambdas)),
            "n-grad": _rollout(kernels, np.minimum(1, c_n * lambdas)),
            "o": _rollout_per_position(kernels / kernels.sum(axis=-1, keepdims=True), per_position),
            "p": _rollout_per_position(kernels / kernels.sum(axis=-1, keepdims=True), own),
        }
        for key, expected in dense.items():
            np.testing.assert_allclose(profiles[key], expected, rtol=0, atol=1e-12, err_msg=key)
        from posbias.theorem.cesaro_exact import exact_profile

        uniform = [float(f) for f in exact_profile([Fraction(x) for x in lambdas], n).fractions()]
        np.testing.assert_allclose(profiles["uniform"], uniform, rtol=0, atol=1e-12)
        np.testing.assert_allclose(profiles["d"], arrays["influence"], rtol=0, atol=1e-15)
        rows, positions = report[str(n)], np.arange(n)
        assert profiles["j"][0] == 0
        assert sorted(rows) == sorted([*"abcefghijklmnop", "uniform", "flat"])
        grad_column = whole["matrix"][str(n)]["all"]["grad"]
        for key, row in rows.items():
            q = profiles[key if key in profiles else f"{key}-grad"]  # (m), (n): fitted to the gradient norm
            w1 = wasserstein_distance(positions, positions, profiles["d"], q) / (n - 1)
            assert row["w1"] == pytest.approx(w1, abs=1e-12)
            assert row["w1_ci"] == grad_column[key]["w1_ci"]
            if key != "flat":
                assert row["beats_flat"] == (grad_column[key]["w1_minus_flat_ci"][1] < -TIE)
        sinks = whole["diagnostics"]["sinks"][str(n)]
        np.testing.assert_allclose(sinks["key0_mass"], kernels[:, 1:, 0].mean(axis=1), rtol=0, atol=1e-15)
        np.testing.assert_allclose(sinks["key0_mass_value_weighted"], kv[:, 1:, 0].mean(axis=1), rtol=0, atol=1e-15)
        norms = arrays["value_norms"]
        np.testing.assert_allclose(
            sinks["value_norm_ratio"], norms[:, :, 0].mean(axis=1) / norms[:, :, 1:].mean(axis=(1, 2)), rtol=1e-12
        )
        assert kv.min() >= 0 and np.abs(kv.sum(axis=-1) - 1).max() < 1e-12
        assert kn.min() >= 0 and np.abs(kn.sum(axis=-1) - 1).max() < 1e-12
    md = (out / "report.md").read_text()
    assert "| beats flat |" in md and "Sink diagnostics per layer" in md and "the flat profile 1/N in W1" in md


def test_bos_modes_on_the_fixture_tokenizers():
    text, label = data.read_text(None)
    gpt2 = checkpoint.load(FIXTURES / "gpt2")
    tok = gpt2.tokenizer()
    assert bos.leading_token(tok) is None
    assert bos.bos_id(tok, gpt2.config, "auto", "gpt2") is None
    assert bos.bos_id(tok, gpt2.config, "no", "gpt2") is None
    first = bos.bos_id(tok, gpt2.config, "yes", "gpt2")
    assert first == gpt2.config["bos_token_id"]
    plain = np.asarray(tok.encode(text, add_special_tokens=False).ids)
    got = bos.windows(tok, text, (12,), 3, label, first)[12]
    ref = data.windows(plain, 11, 3, label)
    assert got.shape == (3, 12) and np.all(got[:, 0] == first) and np.array_equal(got[:, 1:], ref)
    assert np.array_equal(bos.windows(tok, text, (12,), 3, label, None)[12], data.windows(plain, 12, 3, label))
    from tokenizers.processors import TemplateProcessing

    lead = tok.encode("x", add_special_tokens=False).ids[0]  # any id: a Llama-style "<s> $A" template
    name = tok.id_to_token(lead)
    tok.post_processor = TemplateProcessing(single=f"{name} $A", special_tokens=[(name, lead)])
    assert bos.leading_token(tok) == lead
    first = bos.bos_id(tok, {}, "auto", "template")
    assert first == lead and bos.bos_id(tok, {}, "yes", "template") == lead
    windows = bos.windows(tok, text, (10,), 2, label, first)[10]
    assert np.all(windows[:, 0] == lead) and np.array_equal(windows[:, 1:], data.windows(plain, 9, 2, label))
    tok.post_processor = None
    with pytest.raises(MeasureError, match="names no BOS token"):
        bos.bos_id(tok, {}, "yes", "gpt2")


def test_bos_option_end_to_end_and_refused_for_the_trained_model(tmp_path, capsys):
    args = ["validate", "--checkpoint", str(FIXTURES / "gpt2"), "--lengths", "12", "--samples", "2", "--json"]
    assert main([*args, "--bos", "yes", "--out", str(tmp_path / "yes")]) == 0
    assert main([*args, "--bos", "no", "--out", str(tmp_path / "no")]) == 0
    capsys.readouterr()
    yes, no = (np.load(tmp_path / f / "kernels" / "12.npz")["kernels"] for f in ("yes", "no"))
    assert not np.allclose(yes, no)  # the first key is token 0 in every window, not text
    assert main(["validate", "--bos", "yes", "--out", str(tmp_path / "trained")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--bos applies to Hugging Face checkpoints" in err
    assert not (tmp_path / "trained").exists()
