"""posbias compare: W1 / (N-1), Spearman, total variation against scipy; refusals; the command."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from posbias import distances as pc
from posbias.cli import main
from posbias.io.output import position_csv
from posbias.io.profile_file import read_profile


def _profile(draw_list):
    x = np.asarray(draw_list, float)
    return x / x.sum()


vectors = st.integers(1, 60).flatmap(
    lambda n: st.tuples(
        *(
            st.lists(st.integers(0, 5) | st.floats(1e-3, 10), min_size=n, max_size=n).filter(lambda v: sum(v) > 0)
            for _ in range(2)
        )
    )
)


@settings(max_examples=150, deadline=None)
@given(vectors)
def test_metrics_against_scipy(pair):
    p, q = (_profile(v) for v in pair)
    n = len(p)
    pos = np.arange(n)
    expected_w1 = stats.wasserstein_distance(pos, pos, p, q) / (n - 1) if n > 1 else 0.0
    assert pc.w1(p, q) == pytest.approx(expected_w1, abs=1e-12)
    assert pc.total_variation(p, q) == pytest.approx(0.5 * sum(abs(a - b) for a, b in zip(p, q)), abs=1e-15)
    rho = pc.spearman(p, q)
    if np.ptp(p) == 0 or np.ptp(q) == 0:
        assert rho is None
    else:
        assert rho == pytest.approx(stats.spearmanr(p, q).statistic, abs=1e-12)
    assert np.array_equal(pc.average_ranks(p), stats.rankdata(p))


def test_extreme_cases_by_hand():
    first, last = np.eye(5)[0], np.eye(5)[4]
    assert pc.w1(first, last) == 1.0 and pc.total_variation(first, last) == 1.0
    assert pc.w1(first, first) == 0.0


def _write(path, p):
    path.write_text(position_csv(probability=p))
    return path


def test_command_table_json_and_default_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    m = _write(tmp_path / "measured.csv", np.array([0.5, 0.1, 0.1, 0.3]))
    good = _write(tmp_path / "good.csv", np.array([0.45, 0.15, 0.1, 0.3]))
    bad = _write(tmp_path / "bad.csv", np.array([0.0, 0.1, 0.2, 0.7]))
    assert main(["compare", str(m), str(bad), str(good)]) == 0
    out = capsys.readouterr().out
    assert "* good" in out and "  bad" in out
    assert sorted(p.name for p in (tmp_path / "posbias-out").iterdir()) == ["compare.json", "compare.png"]
    assert main(["compare", str(m), str(good), "--json", "--out", "o"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["best_w1"] == "good" and report["rows"][0]["w1"] == pytest.approx(0.05 / 3 + 0.0 / 3, abs=1e-15)


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "empty file"),
        ("position,probability\n0,1.0\n", "header"),
        ("token_position,probability\n0,0.5\n2,0.5\n", "has position 2, expected 1"),
        ("token_position,probability\n0,0.5\n1,0.4\n", "sums to"),
        ("token_position,probability\n0,nan\n1,0.4\n", "finite"),
        ("token_position,probability\n0,1.5\n1,-0.5\n", "finite value >= 0"),
        ("token_position,probability\n0,x\n", "expected 'position,value'"),
        ("token_position,probability,sem\n0,0.5\n1,0.5,0.1\n", "expected 'position,value'"),
    ],
)
def test_bad_files_one_line_exit_2_nothing_written(tmp_path, capsys, text, message):
    m = _write(tmp_path / "m.csv", np.array([0.5, 0.5]))
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    assert main(["compare", str(m), str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_different_lengths_refused(tmp_path, capsys):
    m = _write(tmp_path / "m.csv", np.array([0.5, 0.5]))
    q = _write(tmp_path / "q.csv", np.array([0.2, 0.3, 0.5]))
    assert main(["compare", str(m), str(q), "--out", str(tmp_path / "o")]) == 2
    assert "3 positions, expected 2" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_first_value_column_of_wider_files(tmp_path):
    """influence.csv of posbias measure: token_position,influence,grad_norm_mean,grad_norm_sem."""
    f = tmp_path / "influence.csv"
    f.write_text("token_position,influence,grad_norm_mean,grad_norm_sem\n0,0.25,3.0,0.1\n1,0.75,9.0,0.2\n")
    assert read_profile(f).tolist() == [0.25, 0.75]
