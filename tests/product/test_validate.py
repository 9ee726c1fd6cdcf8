"""posbias validate: predictions (a)-(c), (e) against measured influence (d) on a model trained here."""

import json

import numpy as np
import pytest

import posbias.numerics as nx
from posbias.cli import main
from posbias.io.reports import read_report
from posbias.lm.config import ModelConfig, TrainConfig
from posbias.lm.data import heldout_sequences, load_corpus
from posbias.lm.measure import measure
from posbias.lm.model import slopes_of
from posbias.lm.train import train
from posbias.validate.predict import predictions

MODEL = ModelConfig(layers=2, heads=2, width=8, context=16, mlp_ratio=2)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("validate") / "run"
    train(MODEL, TrainConfig(steps=20, batch=4, lr=1e-2, warmup=2, eval_every=10), out, log=lambda line: None)
    return out


def _numpy_rollout_last_row(kernels, lambdas):
    """Independent route: v <- (1 - lambda) v + lambda v K_t from the top layer down."""
    n = kernels.shape[-1]
    v = np.zeros(n)
    v[-1] = 1.0
    for t in range(len(lambdas) - 1, -1, -1):
        v = (1 - lambdas[t]) * v + lambdas[t] * (v @ kernels[t])
    return v


def test_panels_against_independent_routes(run):
    from posbias.lm import checkpoint as ckpt

    loaded = ckpt.load(run)
    m = measure(loaded.params, MODEL, heldout_sequences(load_corpus().validation, 12, 3))
    slopes = slopes_of(MODEL)
    panels = predictions(m, slopes)
    for p in panels.values():
        assert abs(p.sum() - 1) < 1e-12 and np.all(p >= 0)
    dense = {
        "a": nx.AlibiStack.build(np.ones(2), slopes),
        "b": nx.AlibiStack.build(m.lambdas, slopes),
        "c": nx.AlibiStack.build(m.lambdas, slopes, m.content.diagonal_scaled),
    }
    for key, stack in dense.items():
        assert np.max(np.abs(panels[key] - nx.profile(stack, 12, engine="dense").probabilities)) < 1e-13
    assert np.max(np.abs(panels["e"] - _numpy_rollout_last_row(np.asarray(m.kernels, float), m.lambdas))) < 1e-13


def test_command_writes_the_report_and_profiles(run, tmp_path, capsys):
    out = tmp_path / "v"
    assert (
        main(["validate", "--checkpoint", str(run), "--lengths", "8,16", "--samples", "3", "--out", str(out), "--json"])
        == 0
    )
    whole = read_report(json.loads(capsys.readouterr().out), note=pytest.fail)  # schema 2: no note
    assert sorted(whole) == [
        "bootstrap",
        "diagnostics",
        "kind",
        "lengths",
        "matrix",
        "schema_version",
        "shape",
        "sink_fit",
    ]
    assert whole["kind"] == "posbias validate"
    report = whole["lengths"]
    assert sorted(report) == ["16", "8"] and sorted(whole["diagnostics"]["sinks"]) == ["16", "8"]
    assert sorted(report["16"]) == [*"abcef", "flat", *"ghijklmnop", "uniform"]
    for n in (8, 16):
        files = {k: np.loadtxt(out / "profiles" / str(n) / f"{k}.csv", delimiter=",", skiprows=1) for k in "abcde"}
        d = files["d"][:, 1]
        assert files["d"].shape == (n, 2) and abs(d.sum() - 1) < 1e-12
        for key in "abce":
            q = files[key][:, 1]
            w1 = np.abs(np.cumsum(d)[:-1] - np.cumsum(q)[:-1]).sum() / (n - 1)  # recomputed from the files
            assert report[str(n)][key]["w1"] == pytest.approx(w1, abs=1e-12)
            assert report[str(n)][key]["tv"] == pytest.approx(0.5 * np.abs(d - q).sum(), abs=1e-12)
    assert (out / "report.md").read_text().startswith("# posbias validate")
    assert (out / "validate.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--checkpoint", "missing-run"], "no such file or folder"),
        (["--lengths", "8,32"], "longer than the model's context length 16"),
        (["--samples", "0"], "positive integer"),
    ],
)
def test_bad_input_one_line_exit_2_nothing_written(run, tmp_path, capsys, argv, message):
    argv = [a if a != "missing-run" else str(tmp_path / "missing-run") for a in argv]
    if "--checkpoint" not in argv:
        argv += ["--checkpoint", str(run)]
    assert main(["validate", *argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()
