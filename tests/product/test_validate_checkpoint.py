"""posbias validate --checkpoint on Hugging Face checkpoint folders (the tiny fixtures of tests/fixtures/hf).

Every number of the written report is recomputed from the written files by an independent
route: W1 with scipy.stats.wasserstein_distance, Spearman with scipy.stats.spearmanr, the
rollout panels by dense NumPy matrix products of the slopes (and, for BLOOM, of a separate
measurement of lambda_t, content and kernels).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.stats import spearmanr, wasserstein_distance

from posbias.cli import main
from posbias.hf import bos, checkpoint, data
from posbias.hf.forward import slopes as hf_slopes
from posbias.io.reports import read_report
from posbias.numerics.kernel_checks import KernelError
from posbias.validate.predict import predictions

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
LENGTHS = (16, 32)
FAMILIES = ("bloom", "mpt", "gpt2", "falcon", "bert")


def _jsonl(path: Path) -> Path:
    """Two documents from CPython's pydoc topics as JSON lines (the --data route)."""
    from pydoc_data.topics import topics

    path.write_text("".join(json.dumps({"text": topics[k]}) + "\n" for k in ("assignment", "class")))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """validate on each fixture (GPT-2 on a .jsonl file), with the out folders and the exit codes."""
    root = tmp_path_factory.mktemp("validate-hf")
    out = {}
    for family in FAMILIES:
        extra = ["--data", str(_jsonl(root / "docs.jsonl"))] if family == "gpt2" else []
        code = main(
            [
                "validate",
                "--checkpoint",
                str(FIXTURES / family),
                "--lengths",
                "16,32",
                "--samples",
                "2",
                "--out",
                str(root / family),
                *extra,
            ]
        )
        out[family] = (code, root / family)
    return out


def _profile(path: Path) -> np.ndarray:
    table = np.loadtxt(path, delimiter=",", skiprows=1)
    assert np.array_equal(table[:, 0], np.arange(len(table)))
    return table[:, 1]


def _dense_profile(slopes, lambdas, diagonal, n, causal=True):
    """e_{N-1}^T R^(T-1) ... R^(0), R^(t) = (1 - lambda_t) I + lambda_t mean_h softmax(-m_h |i - j| + d_th [i = j])
    over j <= i (causal) or every j: dense NumPy."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    row = np.eye(n)[-1]
    for t in range(len(lambdas) - 1, -1, -1):
        logits = -np.asarray(slopes)[:, None, None] * np.abs(i - j) + np.asarray(diagonal[t])[:, None, None] * (i == j)
        if causal:
            logits = np.where(j <= i, logits, -np.inf)
        probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
        kernel = (probs / probs.sum(axis=-1, keepdims=True)).mean(axis=0)
        row = (1 - lambdas[t]) * row + lambdas[t] * (row @ kernel)
    return row


def _kernel_rollout(kernels, lambdas):
    row = np.eye(kernels.shape[-1])[-1]
    for t in range(len(lambdas) - 1, -1, -1):
        row = (1 - lambdas[t]) * row + lambdas[t] * (row @ kernels[t])
    return row


@pytest.mark.parametrize("family", FAMILIES)
def test_report_recomputed_from_the_written_files(runs, family):
    code, out = runs[family]
    assert code == 0
    report = read_report(out / "report.json", note=pytest.fail)["lengths"]
    assert sorted(report) == ["16", "32"]
    spec = checkpoint.load(FIXTURES / family).spec
    for n in LENGTHS:
        panels = {k: _profile(out / "profiles" / str(n) / f"{k}.csv") for k in "abcde"}
        for p in panels.values():
            assert p.shape == (n,) and abs(p.sum() - 1) < 1e-12 and p.min() >= 0
        d, positions = panels["d"], np.arange(n)
        for key in ("a", "b", "c", "e"):
            q, row = panels[key], report[str(n)][key]
            assert row["w1"] == pytest.approx(wasserstein_distance(positions, positions, d, q) / (n - 1), abs=1e-12)
            if np.ptp(q) == 0:  # a uniform prediction (an encoder's attention-only rollout) has no ranking
                assert row["spearman"] is None or np.isnan(row["spearman"])
            else:
                assert row["spearman"] == pytest.approx(spearmanr(d, q).statistic, abs=1e-12)
            assert row["tv"] == pytest.approx(0.5 * np.abs(d - q).sum(), abs=1e-12)
        zero = np.zeros((spec.layers, spec.heads))
        attention_only = _dense_profile(hf_slopes(spec), np.ones(spec.layers), zero, n, causal=spec.causal)
        assert np.max(np.abs(panels["a"] - attention_only)) < 1e-12
    md = (out / "report.md").read_text()
    assert f"model_type {family}, T = 2, H = {spec.heads}, width {spec.width}, vocab 320" in md
    assert (out / "validate.png").read_bytes()[:4] == b"\x89PNG"


def test_report_meta_names_positions_and_data(runs):
    bloom, gpt2 = (runs[f][1] / "report.md" for f in ("bloom", "gpt2"))
    assert "context ALiBi, no limit (causal decoder); data: pydoc_data validation topics" in bloom.read_text()
    gpt2_md = gpt2.read_text()
    assert "context 32 learned positions" in gpt2_md and "docs.jsonl" in gpt2_md
    assert "(a) and (b) are pure causal mask rollouts;" in gpt2_md


def test_bloom_panels_match_a_separate_measurement(runs):
    """(b), (c), (e) by dense NumPy rollouts of lambda_t, content and kernels measured here; (d) equal."""
    from posbias.hf import weights
    from posbias.hf.measure import measure

    out = runs["bloom"][1]
    ck = checkpoint.load(FIXTURES / "bloom")
    text, label = data.read_text(None)
    n = LENGTHS[0]
    m = measure(weights.params(ck, np.float64), ck.spec, bos.windows(ck.tokenizer(), text, (n,), 2, label, None)[n])
    panels = {k: _profile(out / "profiles" / str(n) / f"{k}.csv") for k in "bcde"}
    slopes = hf_slopes(ck.spec)
    zero = np.zeros((ck.spec.layers, ck.spec.heads))
    diagonal = m.content.diagonal_raw / np.sqrt(ck.spec.head_dim)
    assert np.max(np.abs(panels["b"] - _dense_profile(slopes, m.lambdas, zero, n))) < 1e-12
    assert np.max(np.abs(panels["c"] - _dense_profile(slopes, m.lambdas, diagonal, n))) < 1e-12
    assert np.max(np.abs(panels["e"] - _kernel_rollout(np.asarray(m.kernels, float), m.lambdas))) < 1e-12
    assert np.max(np.abs(panels["d"] - m.influence)) < 1e-12


def _synthetic_encoder_measurement(n=7, t=3, h=2, seed=0):
    """Full (non-causal) row-stochastic kernels, lambdas and a content diagonal, as an encoder's measurement."""
    rng = np.random.default_rng(seed)
    kernels = rng.random((t, n, n)) + 0.05
    kernels /= kernels.sum(axis=-1, keepdims=True)
    lambdas = rng.uniform(0.2, 0.9, t)
    content = SimpleNamespace(diagonal_scaled=rng.normal(size=(t, h)))
    return SimpleNamespace(num_tokens=n, lambdas=lambdas, kernels=kernels, content=content)


def test_encoder_predictions_use_the_full_mask():
    m = _synthetic_encoder_measurement()
    slopes = np.array([0.7, 0.15])
    panels = predictions(m, slopes, causal=False)
    ones = np.ones(len(m.lambdas))
    zero = np.zeros_like(m.content.diagonal_scaled)
    expected = {
        "a": _dense_profile(slopes, ones, zero, m.num_tokens, causal=False),
        "b": _dense_profile(slopes, m.lambdas, zero, m.num_tokens, causal=False),
        "c": _dense_profile(slopes, m.lambdas, m.content.diagonal_scaled, m.num_tokens, causal=False),
        "e": _kernel_rollout(m.kernels, m.lambdas),
    }
    for key, value in expected.items():
        assert np.max(np.abs(panels[key] - value)) < 1e-13
    causal_a = _dense_profile(slopes, ones, zero, m.num_tokens)
    assert np.max(np.abs(panels["a"] - causal_a)) > 1e-3  # the mask matters at these slopes
    with pytest.raises(KernelError):
        predictions(m, slopes, causal=True)  # full kernels are not a causal measurement


def test_float32_kernels_are_renormalised():
    m = _synthetic_encoder_measurement(seed=1)
    m32 = SimpleNamespace(**{**vars(m), "kernels": m.kernels.astype(np.float32)})
    panels = predictions(m32, np.array([0.3, 0.0]), causal=False)
    k = m32.kernels.astype(np.float64)
    assert np.max(np.abs(panels["e"] - _kernel_rollout(k / k.sum(axis=-1, keepdims=True), m.lambdas))) < 1e-13


def test_encoder_spec_runs_with_the_full_mask(tmp_path, monkeypatch):
    """A checkpoint whose Spec says encoder: the rollouts (a)-(c) take the full mask and the report says so."""
    real_load = checkpoint.load

    def as_encoder(folder):
        ck = real_load(folder)
        return dataclasses.replace(ck, spec=dataclasses.replace(ck.spec, causal=False))

    monkeypatch.setattr(checkpoint, "load", as_encoder)
    out = tmp_path / "enc"
    assert (
        main(
            [
                "validate",
                "--checkpoint",
                str(FIXTURES / "bloom"),
                "--lengths",
                "16",
                "--samples",
                "2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    spec = real_load(FIXTURES / "bloom").spec
    a = _profile(out / "profiles" / "16" / "a.csv")
    full = _dense_profile(hf_slopes(spec), np.ones(spec.layers), np.zeros((spec.layers, spec.heads)), 16, False)
    assert np.max(np.abs(a - full)) < 1e-12
    assert "(encoder, full mask)" in (out / "report.md").read_text()


def _copy(family: str, tmp_path: Path) -> Path:
    folder = tmp_path / family
    shutil.copytree(FIXTURES / family, folder)
    return folder


@pytest.mark.parametrize(
    "case,message",
    [
        ("unknown-type", "model_type 'no_such_family' is not supported; supported model_type values: "),
        ("too-long", "--lengths: N = 64 is longer than the model's 32 learned positions"),
        ("short-text", "tokens, fewer than --lengths N = 32"),
        ("few-windows", "windows of N = 32"),
        ("bad-jsonl", "line 1 is not JSON"),
        ("data-for-trained", "--data applies to Hugging Face checkpoints"),
    ],
)
def test_refusals_one_line_exit_2_nothing_written(tmp_path, capsys, case, message):
    folder, argv = FIXTURES / "gpt2", ["--lengths", "16,32"]
    if case == "unknown-type":
        folder = _copy("bloom", tmp_path)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "model_type": "no_such_family"}))
    elif case == "too-long":
        argv = ["--lengths", "16,64"]
    elif case == "short-text":
        (tmp_path / "short.txt").write_text("A short note, a few tokens long.")
        argv += ["--data", str(tmp_path / "short.txt"), "--samples", "1"]
    elif case == "few-windows":  # about 46 tokens: 31 windows of 16, 15 of 32
        (tmp_path / "short.txt").write_text("A short note, a few tokens long. " * 2)
        argv += ["--data", str(tmp_path / "short.txt"), "--samples", "20"]
    elif case == "bad-jsonl":
        (tmp_path / "bad.jsonl").write_text("{not json\n")
        argv += ["--data", str(tmp_path / "bad.jsonl")]
    elif case == "data-for-trained":
        folder = tmp_path / "not-a-checkpoint"
        folder.mkdir()
        argv += ["--data", str(_jsonl(tmp_path / "docs.jsonl"))]
    assert main(["validate", "--checkpoint", str(folder), *argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()
