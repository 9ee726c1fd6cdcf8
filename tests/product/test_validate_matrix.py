"""posbias validate's prediction-by-measure matrix (posbias.validate.matrix).

Independent routes: every score by scipy (wasserstein_distance, spearmanr) on resampled profiles built by
indexing the sequences (not the module's count matrix), the percentile intervals by numpy.percentile, the
"without token 0" view by renormalising by hand; on a written validate folder, the matrix against scipy on
the written profile files, and the bootstrap reproduced from the stated seed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr, wasserstein_distance

from posbias.cli import main
from posbias.errors import UserError
from posbias.validate.matrix import TIE, Bootstrap, measured_shape, score_matrix, shape

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf"


def _w1(p, q):
    positions = np.arange(len(p))
    return wasserstein_distance(positions, positions, p, q) / (len(p) - 1)


def _by_hand(scores, q, bootstrap, start):
    """Point scores and percentile intervals of one prediction, resampling by indexing."""
    s, n = scores.shape
    draws = np.random.default_rng([bootstrap.seed, n]).integers(0, s, size=(bootstrap.resamples, s))

    def view(p):
        p = p[start:]
        return p / p.sum()

    qv, flat = view(q), np.full(n - start, 1 / (n - start))
    point = view(scores.mean(axis=0) / scores.mean(axis=0).sum())
    w1s, rhos, tvs, diffs = [], [], [], []
    for idx in draws:
        m = scores[idx].mean(axis=0)
        m = view(m / m.sum())
        w1s.append(_w1(m, qv))
        rhos.append(spearmanr(m, qv).statistic)
        tvs.append(0.5 * np.abs(m - qv).sum())
        diffs.append(_w1(m, qv) - _w1(m, flat))
    tail = 100 * (1 - bootstrap.level) / 2

    def ci(values):
        return list(np.percentile(values, [tail, 100 - tail]))

    return {
        "w1": _w1(point, qv),
        "w1_ci": ci(w1s),
        "spearman": spearmanr(point, qv).statistic,
        "spearman_ci": ci(rhos),
        "tv": 0.5 * np.abs(point - qv).sum(),
        "tv_ci": ci(tvs),
        "w1_minus_flat_ci": ci(diffs),
    }


@pytest.mark.parametrize("seed", range(3))
def test_scores_and_intervals_equal_scipy_on_resampled_sequences(seed):
    rng = np.random.default_rng(100 + seed)
    s, n = int(rng.integers(2, 9)), int(rng.integers(4, 30))
    scores = rng.gamma(0.7, size=(s, n)) * np.linspace(2, 1, n)
    predictions = {"p": rng.dirichlet(np.ones(n)), "q": rng.dirichlet(np.full(n, 5.0))}
    bootstrap = Bootstrap(resamples=60, seed=seed, level=0.9)
    matrix = score_matrix(predictions, {"m": scores}, bootstrap, num_tokens=n)
    for view, start in (("all", 0), ("without_token_0", 1)):
        for key, q in predictions.items():
            got, want = matrix[view]["m"][key], _by_hand(scores, q, bootstrap, start)
            for field, value in want.items():
                np.testing.assert_allclose(got[field], value, rtol=0, atol=1e-12, err_msg=f"{view} {key} {field}")
            assert got["beats_flat"] == (want["w1_minus_flat_ci"][1] < -TIE)


def _paired_by_hand(scores, q, reference, bootstrap, start):
    """The percentile interval of W1(m_b, q) - W1(m_b, reference) over resamples drawn by indexing."""
    s, n = scores.shape
    draws = np.random.default_rng([bootstrap.seed, n]).integers(0, s, size=(bootstrap.resamples, s))

    def view(p):
        p = np.asarray(p, np.float64)[start:]
        return p / p.sum()

    diffs = []
    for idx in draws:
        m = view(scores[idx].mean(axis=0))
        diffs.append(_w1(m, view(q)) - _w1(m, view(reference)))
    tail = 100 * (1 - bootstrap.level) / 2
    point = view(scores.mean(axis=0))
    return _w1(point, view(q)) - _w1(point, view(reference)), list(np.percentile(diffs, [tail, 100 - tail]))


@pytest.mark.parametrize("seed", range(3))
def test_paired_comparisons_and_per_measure_rows_equal_scipy(seed):
    rng = np.random.default_rng(200 + seed)
    s, n = int(rng.integers(2, 9)), int(rng.integers(4, 30))
    measures = {"u": rng.gamma(0.7, size=(s, n)), "v": rng.gamma(2.0, size=(s, n)) * np.linspace(1, 3, n)}
    plain = rng.dirichlet(np.ones(n))
    fitted = {"u": rng.dirichlet(np.full(n, 3.0)), "v": rng.dirichlet(np.full(n, 0.5))}  # one per measure
    control = {"u": rng.dirichlet(np.ones(n))}  # fitted to one measure only: absent from v's column
    bootstrap = Bootstrap(resamples=80, seed=seed, level=0.9)
    matrix = score_matrix(
        {"e": plain, "m": fitted, "n": control},
        measures,
        bootstrap,
        num_tokens=n,
        versus={"m": ("e", "n"), "n": ("e",), "e": ("absent",)},
    )
    for view, start in (("all", 0), ("without_token_0", 1)):
        for name, scores in measures.items():
            rows = matrix[view][name]
            assert list(rows) == (["e", "m", "n", "flat"] if name == "u" else ["e", "m", "flat"])
            assert "versus" not in rows["e"]  # a reference that is not scored is left out
            want = _by_hand(scores, fitted[name], bootstrap, start)  # (m) scored against its own measure's profile
            np.testing.assert_allclose(rows["m"]["w1_ci"], want["w1_ci"], rtol=0, atol=1e-12)
            references = {"e": plain, "n": control.get(name)}
            assert set(rows["m"]["versus"]) == {r for r, q in references.items() if q is not None}
            for ref, got in rows["m"]["versus"].items():
                point, interval = _paired_by_hand(scores, fitted[name], references[ref], bootstrap, start)
                assert got["w1_minus"] == pytest.approx(point, abs=1e-12)
                np.testing.assert_allclose(got["w1_minus_ci"], interval, rtol=0, atol=1e-12)
                assert got["lower"] == (interval[1] < -TIE)


def test_a_row_far_closer_than_its_reference_is_lower_on_the_whole_interval():
    rng = np.random.default_rng(3)
    truth = np.linspace(1, 2, 12) ** 3
    scores = truth * rng.uniform(0.95, 1.05, size=(40, 12))
    close, far = truth / truth.sum(), np.full(12, 1 / 12)[::-1] * np.r_[np.ones(11), 0.1] / 0.925
    far = far / far.sum()
    rows = score_matrix(
        {"far": far, "close": close},
        {"m": scores},
        Bootstrap(resamples=200),
        num_tokens=12,
        versus={"close": ("far",), "far": ("close",)},
    )["all"]["m"]
    assert rows["close"]["versus"]["far"]["lower"] and rows["close"]["versus"]["far"]["w1_minus_ci"][1] < 0
    assert not rows["far"]["versus"]["close"]["lower"] and rows["far"]["versus"]["close"]["w1_minus_ci"][0] > 0


def test_a_prediction_equal_to_flat_up_to_rounding_is_a_tie_not_a_win():
    """The attention-only rollout of a full mask without positional bias is 1/N up to rounding; nudged towards the
    measured profile by 1e-12 it is closer on every resample, by ~1e-14: a tie (TIE), not "beats flat", and its
    shape is neither primacy nor recency."""
    rng = np.random.default_rng(11)
    n = 16
    scores = rng.gamma(2.0, size=(12, n)) * np.linspace(1, 2, n)
    flat = np.full(n, 1 / n)
    measured = scores.mean(axis=0) / scores.mean(axis=0).sum()
    nudged = flat + 1e-12 * (measured - flat)
    rows = score_matrix(
        {"nudged": nudged}, {"m": scores}, Bootstrap(resamples=200), num_tokens=n, versus={"nudged": ("flat",)}
    )["all"]["m"]
    row = rows["nudged"]
    assert row["w1_minus_flat_ci"][1] < 0 < -row["w1_minus_flat_ci"][1] < TIE  # below 0 by rounding alone
    assert not row["beats_flat"] and not row["versus"]["flat"]["lower"]
    assert shape(nudged)["primacy"] is False and shape(nudged)["recency"] is False


def test_beats_flat_is_decided_on_the_interval_not_the_point():
    n = 10
    halves = np.r_[np.ones(5), np.zeros(5)]
    early, late = 0.14 * halves + 0.06 * (1 - halves), 0.07 * halves + 0.13 * (1 - halves)  # 0.70 / 0.35 early
    close = (early + late) / 2  # exactly the mean of the two sequences: point W1 0, flat's > 0
    two = np.stack([early, late])
    row = score_matrix({"close": close}, {"m": two}, Bootstrap(resamples=400), num_tokens=n)["all"]["m"]["close"]
    assert row["w1"] < 1e-15 and row["w1_minus_flat"] < 0  # the point says "beats flat"
    assert row["w1_minus_flat_ci"][0] < 0 < row["w1_minus_flat_ci"][1]  # a resample of `late` twice does not
    assert not row["beats_flat"]
    # many sequences scattered about the mean: the same prediction beats flat on the whole interval
    rng = np.random.default_rng(7)
    many = close * rng.uniform(0.9, 1.1, size=(200, n))
    row = score_matrix({"close": close}, {"m": many}, Bootstrap(resamples=400), num_tokens=n)["all"]["m"]["close"]
    assert row["w1_minus_flat_ci"][1] < 0 and row["beats_flat"]


def test_one_sequence_collapses_every_interval_to_the_point():
    scores = np.array([[3.0, 1.0, 1.0, 2.0]])
    row = score_matrix({"p": np.full(4, 0.25)}, {"m": scores}, Bootstrap(resamples=20), num_tokens=4)["all"]["m"]["p"]
    assert row["w1_ci"] == [row["w1"], row["w1"]]


def test_shape_of_planted_profiles():
    u = np.r_[np.full(3, 3.0), np.ones(24), np.full(3, 2.0)]
    got = shape(u / u.sum())
    assert got["u_shape"] and got["primacy"] and got["recency"]
    assert got["head"] == pytest.approx(3.0) and got["tail"] == pytest.approx(2.0)
    falling = np.linspace(2, 1, 30)
    got = shape(falling / falling.sum())
    assert got["primacy"] and not got["recency"] and got["argmin"] == 1.0
    rng = np.random.default_rng(0)
    measured = measured_shape(u * rng.uniform(0.9, 1.1, size=(40, 30)), Bootstrap(resamples=200))
    assert (measured["primacy"], measured["recency"], measured["u_shape"]) == ("holds", "holds", "holds")
    measured = measured_shape(falling * rng.uniform(0.9, 1.1, size=(40, 30)), Bootstrap(resamples=200))
    assert (measured["primacy"], measured["recency"], measured["u_shape"]) == ("holds", "fails", "fails")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"resamples": 0}, "--resamples"), ({"seed": -1}, "--seed"), ({"level": 1.0}, "level")],
)
def test_bad_bootstrap_is_refused(kwargs, message):
    with pytest.raises(UserError, match=message):
        Bootstrap(**kwargs)


def test_wrong_shaped_scores_are_refused():
    with pytest.raises(UserError, match=r"expected \(sequences, 5\) scores"):
        score_matrix({"p": np.full(5, 0.2)}, {"m": np.ones((2, 4))}, Bootstrap(), num_tokens=5)


@pytest.mark.parametrize(("flag", "value"), [("--resamples", "0"), ("--seed", "-3")])
def test_cli_refuses_bad_bootstrap_options_in_one_line(flag, value, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["validate", "--checkpoint", str(FIXTURES / "llama"), "--lengths", "8", flag, value, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and flag in err[0] and not out.exists()


def _read(path):
    return np.loadtxt(path, delimiter=",", skiprows=1)[:, 1]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folders = []
    for seed in (5, 5, 6):
        out = tmp_path_factory.mktemp("matrix") / f"seed{seed}"
        args = ["validate", "--checkpoint", str(FIXTURES / "llama"), "--lengths", "10", "--samples", "3"]
        args += ["--influence", "grad,gradxinput,occlusion", "--resamples", "50", "--seed", str(seed)]
        assert main([*args, "--out", str(out), "--json"]) == 0
        folders.append(out)
    return folders


@pytest.mark.filterwarnings("ignore::scipy.stats.ConstantInputWarning")  # rho against flat: undefined, None
def test_written_matrix_equals_scipy_on_the_written_profiles(written):
    out = written[0]
    report = json.loads((out / "report.json").read_text())
    assert report["bootstrap"] == {"resamples": 50, "seed": 5, "level": 0.95, "method": "percentile"}
    matrix = report["matrix"]["10"]
    files = {p.stem: _read(p) for p in (out / "profiles" / "10").glob("*.csv")}
    measured = {"grad": files["d"], **{k[2:]: v for k, v in files.items() if k.startswith("d-")}}
    assert sorted(measured) == ["grad", "gradxinput", "occlusion-kl", "occlusion-logp"]
    assert sorted(matrix["all"]) == sorted(measured)
    for name, m in measured.items():
        for key, row in matrix["all"][name].items():
            q = files[key] if key in files else files[f"{key}-{name}"]  # (m), (n): one profile per measure
            assert row["w1"] == pytest.approx(_w1(m, q), abs=1e-12)
            rho = spearmanr(m, q).statistic
            assert (row["spearman"] is None) if np.isnan(rho) else row["spearman"] == pytest.approx(rho, abs=1e-12)
            assert row["tv"] == pytest.approx(0.5 * np.abs(m - q).sum(), abs=1e-12)
            mv, qv = m[1:] / m[1:].sum(), q[1:] / q[1:].sum()
            assert matrix["without_token_0"][name][key]["w1"] == pytest.approx(_w1(mv, qv), abs=1e-12)


def test_the_bootstrap_is_reproduced_from_its_seed(written):
    same, again, other = ((out / "report.json").read_text() for out in written)
    assert same == again
    a, b = json.loads(same)["matrix"]["10"]["all"]["grad"]["b"], json.loads(other)["matrix"]["10"]["all"]["grad"]["b"]
    assert a["w1"] == b["w1"] and a["w1_ci"] != b["w1_ci"]
    md = (written[0] / "report.md").read_text()
    assert "50 resamples, seed 5" in md and "positions 1..N-1 only" in md and "| measured occlusion-kl |" in md


def test_integrated_gradients_completeness_is_reported_per_length_as_measure_reports_it(tmp_path, capsys):
    common = ["--checkpoint", str(FIXTURES / "llama"), "--samples", "2", "--influence", "ig", "--baseline", "mean"]
    assert main(["validate", *common, "--lengths", "10", "--resamples", "20", "--out", str(tmp_path / "v")]) == 0
    args = ["measure", str(FIXTURES / "llama"), "--tokens", "10", *common[2:], "--out", str(tmp_path / "m")]
    assert main([*args, "--quiet"]) == 0
    capsys.readouterr()
    validated = json.loads((tmp_path / "v" / "report.json").read_text())["diagnostics"]["integrated_gradients"]["10"]
    measured = json.loads((tmp_path / "m" / "report.json").read_text())["integrated_gradients"]
    assert validated["steps"] == 64 and validated["baseline"] == "mean"
    assert validated["per_sequence_completeness_error"] == measured["per_sequence_completeness_error"]
    assert max(validated["per_sequence_completeness_error"]) <= 0.05


def test_the_docs_digest_states_the_report_cell_by_cell(written):
    """benchmarks/smollm2_gap.py's tables (what docs/smollm2-gap.md shows) against report.json."""
    from tests.benchmark_scripts import load

    report = json.loads((written[0] / "report.json").read_text())
    tables = load("smollm2_gap.py").digest(report, "10")
    for view in ("all", "without_token_0"):
        block = report["matrix"]["10"][view]
        for record in tables[view]:
            key = record["panel"].strip("()")
            for measure, rows in block.items():
                row = rows[key]
                value, interval = record[measure].split(" [")
                lo, hi = interval.split("]")[0].split(", ")
                assert float(value) == pytest.approx(row["w1"], abs=5e-4)
                assert [float(lo), float(hi)] == pytest.approx(row["w1_ci"], abs=5e-4)
                assert record[measure].endswith("★") == bool(row.get("beats_flat"))
        winners = [f"({k}) vs {m}" for m, rows in block.items() for k, r in rows.items() if r.get("beats_flat")]
        assert tables[f"{view}_beats_flat"] == (", ".join(sorted(winners)) or "none")
        margins = {(r["prediction"], r["measure"]): r["w1_minus_flat"] for r in tables[f"{view}_margins"]}
        assert sorted(f"{k} vs {m}" for k, m in margins) == sorted(winners)
        for (k, m), text in margins.items():
            assert float(text.split(" [")[0]) == pytest.approx(block[m][k.strip("()")]["w1_minus_flat"], abs=5e-4)
