"""posbias validate --sink-fit (posbias.validate.sink_fit; issue 35 §2): the sink-aware rows (l) and (m).

Independent routes: (l)'s profile against the dense product of the transformed kernels (orders.rollout over
all N positions, exact zeros on K); the fit against a planted c (the measured profile made from (m) itself
with a known c); the split against the offsets recomputed from the windows' own rule; the written (m) scores
against scipy on the written profile files; refusals in one line with exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from posbias.cli import main
from posbias.errors import UserError
from posbias.lm.data import disjoint_sequences, heldout_sequences, window_starts
from posbias.measure.quantities import MeasureError
from posbias.numerics.sink_transform import sink_to_diagonal
from posbias.theorem.orders import rollout
from posbias.validate import sink_fit as sf
from posbias.validate.matrix import TIE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf"


def _kernels(seed: int, t: int = 3, n: int = 12) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    k = np.tril(rng.random((t, n, n)) + 0.05)
    k[:, 1:, 0] += 2.0  # a sink on key 0
    return k / k.sum(-1, keepdims=True), rng.uniform(0.2, 0.6, t)


@pytest.mark.parametrize("sinks", [(0,), (0, 1), (2, 5), ()])
def test_the_sink_profile_is_the_last_row_of_the_dense_transformed_product(sinks):
    """() is the control (n): the plain rollout, no transform."""
    k, lam = _kernels(1)
    for c in (1.0, 0.4):
        got, clipped = sf.sink_profile(k, lam, sinks, strength=c)
        dense = rollout(sink_to_diagonal(k, sinks) if sinks else k, c * lam)[-1]
        assert not clipped and np.allclose(got, dense, atol=1e-13, rtol=0)
        assert np.all(got[list(sinks)] == 0) and abs(got.sum() - 1) < 1e-12


def test_a_strength_past_one_over_lambda_is_clipped_and_said():
    k, lam = _kernels(2)
    got, clipped = sf.sink_profile(k, lam, (0,), strength=1.0 / lam.max() * 1.5)
    assert clipped and np.allclose(got, rollout(sink_to_diagonal(k, (0,)), np.minimum(1.5 * lam / lam.max(), 1))[-1])


@pytest.mark.parametrize("planted", [0.35, 0.9, 1.7])
def test_the_fit_recovers_a_planted_strength(planted):
    k, lam = _kernels(3)
    c_max = 1 / lam.max()
    measured, _ = sf.sink_profile(k, lam, (0,), strength=planted * c_max / 2)
    fit = sf.fit_strength(measured, k, lam, (0,))
    assert fit.c == pytest.approx(planted * c_max / 2, rel=1e-4) and fit.w1 < 1e-6
    assert fit.c_max == pytest.approx(c_max) and fit.w1_flat > fit.w1


@pytest.mark.parametrize("where", ["top", "bottom"])
def test_a_strength_at_the_edge_of_its_range_is_refused(where):
    k, lam = _kernels(4)
    if where == "top":
        measured, _ = sf.sink_profile(k, lam, (0,), strength=1 / lam.max())
    else:  # the last token alone: no mixing at all, c -> 0
        measured = np.zeros(12)
        measured[-1] = 1.0
    with pytest.raises(UserError, match="edge of its range") as err:
        sf.fit_strength(measured, k, lam, (0,), what=" to grad at N = 12")
    assert "\n" not in str(err.value)


def test_the_fit_windows_share_no_position_with_any_scored_window():
    data = np.arange(5000, dtype=np.int64)  # token value = its position
    lengths, samples = (64, 128, 256), 8
    fit, starts = disjoint_sequences(data, 64, samples, lengths)
    assert fit.shape == (samples, 64) and np.array_equal(fit[:, 0], starts)
    scored = {int(v) for n in lengths for v in heldout_sequences(data, n, samples).ravel()}
    assert scored == {int(s) + j for n in lengths for s in window_starts(data.size, n, samples) for j in range(n)}
    assert not scored & {int(v) for v in fit.ravel()}
    assert len({int(v) for v in fit.ravel()}) == fit.size  # the fit windows do not overlap either


def test_too_little_text_for_a_fit_set_is_refused_in_one_line():
    with pytest.raises(MeasureError, match=r"the fit set: only \d+ windows of 64 tokens") as err:
        disjoint_sequences(np.arange(700), 64, 8, (64,))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--no-sink-fit", "--sinks", "1"], "--sinks: the sink set of rows (l) and (m), which --no-sink-fit"),
        (["--sinks", "9"], "--sinks: key 9 is the last position"),
        (["--sink-fit", "--sinks", "9"], "--sinks: key 9 is the last position"),
        (["--sink-fit", "--sinks", "12"], "--sinks: sink set: key 12 lies outside the window"),
        (["--sink-fit", "--sinks", "a"], "--sinks: expected comma-separated key positions"),
        (["--sink-fit", "--sinks", "1,1"], "--sinks: sink set: a key position is repeated"),
    ],
)
def test_bad_sink_options_are_refused_in_one_line(extra, message, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["validate", "--checkpoint", str(FIXTURES / "llama"), "--lengths", "10,12", *extra, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0] and not out.exists()


def _read(path):
    return np.loadtxt(path, delimiter=",", skiprows=1)[:, 1]


def _w1(p, q):
    positions = np.arange(len(p))
    return wasserstein_distance(positions, positions, p, q) / (len(p) - 1)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("sinkfit") / "run"
    args = ["validate", "--checkpoint", str(FIXTURES / "llama"), "--lengths", "16,24", "--samples", "4"]
    args += ["--influence", "grad,gradxinput,occlusion", "--resamples", "50", "--sink-fit", "--out", str(out)]
    assert main([*args, "--json"]) == 0
    return out


def test_the_report_states_the_split_and_the_in_sample_fit(written):
    report = json.loads((written / "report.json").read_text())
    fit = report["sink_fit"]
    assert fit["sinks"] == [0] and fit["fit_length"] == 16 and fit["fit_samples"] == 4
    assert set(fit["measures"]) == {"grad", "gradxinput", "occlusion-logp", "occlusion-kl"}
    for m in fit["measures"].values():
        assert 0 < m["c"] < m["c_range"][1] and m["in_sample_w1"] <= m["in_sample_w1_c_1"] + 1e-12
        assert 0 < m["control"]["c"] < m["c_range"][1]
    text = (written / "report.md").read_text()
    assert "## Sink-aware fit (in sample)" in text and "out of sample" in text


def test_the_fit_windows_are_disjoint_from_the_scored_ones(written):
    from posbias.hf import bos, data
    from posbias.hf.source import open_checkpoint

    report = json.loads((written / "report.json").read_text())
    ck = open_checkpoint(FIXTURES / "llama")
    tokenizer = ck.tokenizer()
    text = data.read_text(None)[0]
    ids = np.asarray(tokenizer.encode(text, add_special_tokens=False).ids)
    first = bos.bos_id(tokenizer, ck.config, "auto", "fixture")
    shift = 0 if first is None else 1
    scored = {int(s) + j for n in (16, 24) for s in window_starts(ids.size, n - shift, 4) for j in range(n - shift)}
    fitted = {int(s) + j for s in report["sink_fit"]["fit_window_offsets"] for j in range(16 - shift)}
    assert len(fitted) == 4 * (16 - shift) and not scored & fitted


def test_the_fitted_rows_are_each_measures_own_profile_scored_out_of_sample(written):
    report = json.loads((written / "report.json").read_text())
    for n in ("16", "24"):
        for name in ("grad", "gradxinput", "occlusion-logp", "occlusion-kl"):
            measured = _read(written / "profiles" / n / ("d.csv" if name == "grad" else f"d-{name}.csv"))
            for row in ("m", "n"):
                q = _read(written / "profiles" / n / f"{row}-{name}.csv")
                cell = report["matrix"][n]["all"][name][row]
                assert cell["w1"] == pytest.approx(_w1(measured, q), abs=1e-12)
            assert list(report["matrix"][n]["all"][name])[-6:] == ["m", "n", "o", "p", "uniform", "flat"]
        assert report["lengths"][n]["m"]["w1"] == report["matrix"][n]["all"]["grad"]["m"]["w1"]
    assert "W1/(N-1) of a row minus its reference's" in (written / "report.md").read_text()


def test_the_sink_aware_rows_are_compared_with_the_plain_rollout_and_the_control(written):
    """Each paired difference's point against scipy on the written profiles: (l), (m), (n) minus (e), (m) minus (n)."""
    report = json.loads((written / "report.json").read_text())
    for n in ("16", "24"):
        for name in ("grad", "gradxinput", "occlusion-logp", "occlusion-kl"):
            measured = _read(written / "profiles" / n / ("d.csv" if name == "grad" else f"d-{name}.csv"))
            profile = {
                "e": _read(written / "profiles" / n / "e.csv"),
                "l": _read(written / "profiles" / n / "l.csv"),
                **{row: _read(written / "profiles" / n / f"{row}-{name}.csv") for row in ("m", "n")},
            }
            for view in ("all", "without_token_0"):
                rows = report["matrix"][n][view][name]
                assert {k: set(rows[k]["versus"]) for k in "lmn"} == {"l": {"e"}, "m": {"e", "n"}, "n": {"e"}}
                if view != "all":
                    continue
                for key in "lmn":
                    for ref, d in rows[key]["versus"].items():
                        want = _w1(measured, profile[key]) - _w1(measured, profile[ref])
                        assert d["w1_minus"] == pytest.approx(want, abs=1e-12)
                        assert d["w1_minus_ci"][0] <= d["w1_minus_ci"][1] and d["lower"] == (d["w1_minus_ci"][1] < -TIE)
        l_profile = _read(written / "profiles" / n / "l.csv")
        assert l_profile[0] == 0 and abs(l_profile.sum() - 1) < 1e-12


def test_every_backend_cuts_the_same_fit_set():
    """The transformers route measures the same fit windows as the JAX route (one shared cutting rule)."""
    from posbias.measure.backend import Options
    from posbias.measure.pipeline import open_backend

    cut = [
        open_backend(FIXTURES / "llama", Options(verb="validated"), backend).fit_windows(16, 4, (16, 24))
        for backend in ("jax", "transformers")
    ]
    assert np.array_equal(cut[0][0], cut[1][0]) and np.array_equal(cut[0][1], cut[1][1])


def test_by_default_the_rows_are_added_and_without_room_only_l_with_a_note(tmp_path, capsys):
    """No flag: (l), (m), (n) where the text has room for the fit set; with too little text (l) alone and a note
    naming why, exit 0; --sink-fit on the same text refuses in one line; --no-sink-fit leaves all three out."""
    text = tmp_path / "short.txt"
    text.write_text(" ".join(f"word{i} and more text" for i in range(4)), encoding="utf-8")
    base = ["validate", "--checkpoint", str(FIXTURES / "llama"), "--lengths", "16", "--resamples", "20", "--json"]

    def run(*extra):
        out = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        code = main([*base, *extra, "--out", str(out)])
        return code, out, capsys.readouterr()

    code, out, _ = run("--samples", "3")
    report = json.loads((out / "report.json").read_text())
    assert code == 0 and {"l", "m", "n"} <= set(report["matrix"]["16"]["all"]["grad"])
    assert report["sink_fit"]["sinks"] == [0] and report["sink_fit"]["omitted"] == {}
    assert (out / "profiles" / "16" / "m-grad.csv").is_file()

    code, out, _ = run("--samples", "3", "--data", str(text))  # room for the scored windows only
    report = json.loads((out / "report.json").read_text())
    rows = report["matrix"]["16"]["all"]["grad"]
    assert code == 0 and "l" in rows and not {"m", "n"} & set(rows)
    why = report["sink_fit"]["omitted"][""]
    assert why.startswith("the fit set: only") and report["sink_fit"]["measures"] == {}
    assert f"Rows (m) and (n) omitted: {why}" in (out / "report.md").read_text()

    code, out, captured = run("--samples", "3", "--data", str(text), "--sink-fit")
    err = captured.err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "the fit set: only" in err[0] and not out.exists()

    code, out, _ = run("--samples", "3", "--no-sink-fit")
    report = json.loads((out / "report.json").read_text())
    assert code == 0 and "sink_fit" not in report and not {"l", "m", "n"} & set(report["matrix"]["16"]["all"]["grad"])


def test_without_sink_fit_required_an_edge_strength_leaves_that_measure_out():
    """fit_measures: a measure whose c lies at the edge is refused by --sink-fit, left out (with the reason)
    by default, while the others are fitted."""
    k, lam = _kernels(4)
    edge = np.zeros((3, 12))
    edge[:, -1] = 1.0  # the last token alone: c -> 0
    inside, _ = sf.sink_profile(k, lam, (0,), strength=0.5)
    measurement = SimpleNamespace(
        scores={"edge": edge, "inside": np.tile(inside, (3, 1))}, kernels=k, lambdas=lam, num_tokens=12
    )
    with pytest.raises(UserError, match="edge of its range"):
        sf.fit_measures(measurement, (0,), required=True)
    fits, omitted = sf.fit_measures(measurement, (0,), required=False)
    assert set(omitted) == {"edge"} and "edge of its range" in omitted["edge"]
    assert set(fits["m"]) == set(fits["n"]) == {"inside"} and fits["m"]["inside"].c == pytest.approx(0.5, abs=1e-4)


def test_a_refused_fit_set_measurement_leaves_m_and_n_out_by_default_and_is_refused_when_required(monkeypatch):
    """A measurement of the fit windows that is refused (e.g. integrated gradients' completeness on one of them):
    by default (m) and (n) are left out with the refusal as the reason; required (--sink-fit), it is raised."""
    import posbias.measure.pipeline as pipeline

    def refused(*_args, **_kwargs):
        raise MeasureError("integrated gradients: completeness is off by 0.2 on sequence 1")

    monkeypatch.setattr(pipeline, "measure_lengths", refused)
    ids, offsets = np.zeros((2, 10), np.int32), np.array([0, 20])
    lenient = sf.FitSet((0,), 10, ids, offsets, required=False)
    fits, omitted = lenient.fit(None, {10: None}, show=False)
    why = "the fit set's measurement was refused: integrated gradients: completeness is off by 0.2 on sequence 1"
    assert fits == {} and omitted == {"": why}
    report = sf.fit_report(fits, lenient, omitted)
    assert report["measures"] == {} and report["fit_samples"] == 2
    assert sf.notes(report, [])[0].endswith(f"Rows (m) and (n) omitted: {why}.")
    with pytest.raises(MeasureError, match="completeness is off by 0.2"):
        sf.FitSet((0,), 10, ids, offsets, required=True).fit(None, {10: None}, show=False)
