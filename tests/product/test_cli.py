"""The posbias CLI: outputs, JSON, measured kernels, demo; bad input gets one line,
exit code 2 and writes nothing."""

import json

import numpy as np
import pytest

import posbias.numerics as nx
from posbias.cli import main
from tests.configs import SMALL_ALIBI

GOOD = SMALL_ALIBI

REQUIRED = {
    "num_layers",
    "num_tokens",
    "num_heads",
    "p_first",
    "p_last",
    "argmin",
    "p_min",
    "entropy",
    "sum_lambda",
    "sum_lambda_delta",
    "last_token_atom",
    "u_shape",
    "precision",
    "engine",
}


def _write(tmp_path, text, name="c.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_rollout_outputs(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["rollout", str(_write(tmp_path, GOOD)), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["profile.csv", "profile.png", "summary.json"]
    lines = (out / "profile.csv").read_text().splitlines()
    assert lines[0] == "token_position,probability" and len(lines) == 17
    p = np.array([float(line.split(",")[1]) for line in lines[1:]])
    summary = json.loads((out / "summary.json").read_text())
    assert REQUIRED <= summary.keys()
    assert summary["argmin"] == int(np.argmin(p)) and summary["p_first"] == p[0]
    # independent route: the same model built by hand and rolled out densely
    stack = nx.AlibiStack.build(0.8 / np.arange(1, 4), [0.5, 0.125], 1.0)
    dense = np.asarray(nx.rollout_matrix(nx.alibi_kernels(stack, 16), stack.lambdas))[-1]
    assert np.max(np.abs(p - dense)) <= 1e-12
    assert abs(summary["last_token_atom"] - dense[-1]) <= 1e-12
    assert (out / "profile.png").read_bytes()[:4] == b"\x89PNG"
    assert "U-shaped" in capsys.readouterr().out
    assert not [f for f in out.iterdir() if f.name.startswith(".")]  # no temp files left


def test_rollout_json_and_full(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["rollout", str(_write(tmp_path, GOOD)), "--out", str(out), "--json", "--full"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["engine"] == "structured" and summary["matrix"]["max_row_sum_error"] <= 1e-12
    rows = np.loadtxt(out / "matrix.csv", delimiter=",", skiprows=1)
    assert rows.shape == (16, 4)
    assert abs(rows[-1, 1] - summary["p_last"]) <= 1e-12  # causal: P_{N-1,N-1} = p(N-1)
    assert main(["rollout", str(tmp_path / "c.yaml"), "--out", str(out), "--json", "--engine", "dense"]) == 0
    dense = json.loads(capsys.readouterr().out)
    assert dense["engine"] == "dense" and abs(dense["p_first"] - summary["p_first"]) <= 1e-12


def test_diagonal_identity_route_matches_full_matrix(tmp_path, capsys):
    """--diagonal (O(T N), C5(a)) against the diagonal of the dense P from --full."""
    out = tmp_path / "out"
    cfg = _write(
        tmp_path, GOOD.replace("mask_type: causal, window_size: null", "mask_type: sliding_window, window_size: 5")
    )
    assert main(["rollout", str(cfg), "--out", str(out), "--full", "--diagonal", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    diag = np.loadtxt(out / "diagonal.csv", delimiter=",", skiprows=1)[:, 1]
    dense = np.loadtxt(out / "matrix.csv", delimiter=",", skiprows=1)[:, 1]
    assert np.max(np.abs(diag - dense)) <= 1e-14
    assert summary["diagonal"]["argmin"] == int(np.argmin(diag))
    full = _write(tmp_path, GOOD.replace("mask_type: causal", "mask_type: full"), "full.yaml")
    assert main(["rollout", str(full), "--out", str(tmp_path / "f"), "--diagonal"]) == 2
    assert "needs lower-triangular kernels" in capsys.readouterr().err
    assert not (tmp_path / "f").exists()


def test_lenient_numbers_like_the_reference_loader(tmp_path):
    """A file the authors' (lax pydantic) loader accepts must load here: quoted numbers do."""
    text = GOOD.replace("num_layers: 3", "num_layers: '3'").replace("[[0.5, 0.125]]", "[['0.5', 0.125]]")
    out = tmp_path / "out"
    assert main(["rollout", str(_write(tmp_path, text)), "--out", str(out)]) == 0
    assert main(["rollout", str(_write(tmp_path, GOOD, "g.yaml")), "--out", str(tmp_path / "g")]) == 0
    assert (out / "profile.csv").read_text() == (tmp_path / "g" / "profile.csv").read_text()


def test_overrides_and_clipping_warning(tmp_path, capsys):
    text = GOOD.replace("lambda_0: 0.8", "lambda_0: 1.5")
    out = tmp_path / "out"
    assert (
        main(["rollout", str(_write(tmp_path, text)), "--out", str(out), "--tokens", "40", "--layers", "5", "--json"])
        == 0
    )
    captured = capsys.readouterr()
    assert "lambda clipped to [0, 1] in layer(s) 0" in captured.err
    summary = json.loads(captured.out)
    assert (summary["num_tokens"], summary["num_layers"]) == (40, 5)


def test_measured_kernels_mode(tmp_path, capsys):
    stack = nx.AlibiStack.build([0.3, 0.6, 0.9], nx.alibi_slopes(4), 0.5)
    kernels = np.asarray(nx.alibi_kernels(stack, 20))
    path = tmp_path / "k.npz"
    np.savez(path, kernels=kernels, lambdas=stack.lambdas)
    out = tmp_path / "out"
    assert main(["rollout", "--kernels", str(path), "--causal", "--out", str(out), "--json"]) == 0
    p = np.loadtxt(out / "profile.csv", delimiter=",", skiprows=1)[:, 1]
    assert np.max(np.abs(p - nx.profile(stack, 20).probabilities)) <= 1e-12
    # a .npy plus --schedule
    np.save(tmp_path / "k.npy", kernels)
    assert (
        main(["rollout", "--kernels", str(tmp_path / "k.npy"), "--schedule", "custom:0.3,0.6,0.9", "--out", str(out)])
        == 0
    )
    p2 = np.loadtxt(out / "profile.csv", delimiter=",", skiprows=1)[:, 1]
    assert np.max(np.abs(p2 - p)) <= 1e-15


def _bad_config_cases():
    def edit(old, new):
        assert old in GOOD
        return GOOD.replace(old, new)

    return {
        "unknown key": (GOOD + "bogus: 1\n", "bogus: unknown key"),
        "unknown nested key": (
            edit("softmax_temperature: 1.0", "softmax_temperature: 1.0, temp: 2"),
            "attention_config.temp: unknown key",
        ),
        "inner length": (
            edit("[[0.5, 0.125]]", "[[0.5, 0.125, 0.1]]"),
            "attention_config.alibi_slopes[0]: has length 3, expected 1 or num_heads = 2",
        ),
        "outer length": (
            edit("[[0.5, 0.125]]", "[[0.5], [0.1]]"),
            "attention_config.alibi_slopes: outer list has length 2, expected 1 or num_layers = 3",
        ),
        "nan": (
            edit("diagonal_scores: [[1.0]]", "diagonal_scores: [[.nan]]"),
            "content_config.diagonal_scores[0][0]: input should be a finite number",
        ),
        "inf": (
            edit("lambda_0: 0.8", "lambda_0: .inf"),
            "lambda_schedule_config.lambda_0: input should be a finite number",
        ),
        "non-numeric": (
            edit("[[0.5, 0.125]]", "[[0.5, fast]]"),
            "attention_config.alibi_slopes[0][1]: input should be a valid number, unable to parse string "
            "as a number, got 'fast'",
        ),
        "fractional size": (edit("num_layers: 3", "num_layers: 2.5"), "num_layers: input should be a valid integer"),
        "non-positive size": (
            edit("sequence_length: 16", "sequence_length: 0"),
            "sequence_length: input should be greater than 0",
        ),
        "negative slope": (
            edit("[[0.5, 0.125]]", "[[0.5, -0.1]]"),
            "attention_config.alibi_slopes[0][1]: input should be greater than or equal to 0",
        ),
        "custom length": (
            edit(
                "{schedule_type: power_decay, lambda_0: 0.8, beta: 1.0}",
                "{schedule_type: custom, lambdas_custom: [0.1, 0.2]}",
            ),
            "lambda_schedule_config.lambdas_custom: has 2 values, expected num_layers = 3",
        ),
        "schedule type": (
            edit("schedule_type: power_decay", "schedule_type: linear"),
            "lambda_schedule_config.schedule_type: expected constant, power_decay or custom",
        ),
        "missing key": (GOOD.replace("num_layers: 3\n", ""), "num_layers: required key is missing"),
        "window missing": (
            edit("mask_type: causal", "mask_type: sliding_window"),
            "window_size: required for mask_type sliding_window",
        ),
        "not yaml": ("a: [1, 2\n", "not valid YAML"),
        "not a mapping": ("- 1\n- 2\n", "expected a mapping"),
    }


@pytest.mark.parametrize("case", list(_bad_config_cases()))
def test_bad_config(tmp_path, capsys, case):
    text, message = _bad_config_cases()[case]
    path = _write(tmp_path, text)
    out = tmp_path / "out"
    assert main(["rollout", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"posbias: error: {path}: ")
    assert message in err
    assert not out.exists()


def _kernel_file(tmp_path, kernels, name="k.npy"):
    np.save(tmp_path / name, kernels)
    return tmp_path / name


@pytest.mark.parametrize(
    "case,message",
    [
        ("shape", "kernels must have shape (T, N, N), got (3, 4)"),
        ("row sum", "layer 1 row 2: sums to"),
        ("negative", "layer 0 row 3: entry 0"),
        ("not causal", "layer 0 row 1: reads later token 2"),
        ("nan", "layer 0 row 0: entry 0 is not finite"),
        ("no lambdas", "no 'lambdas' array in the file; give --schedule SPEC"),
        ("bad schedule", "--schedule: schedule 'constant:x'"),
        ("wrong lambda count", "lambdas: expected 2 finite values in [0, 1]"),
        ("missing", "no such file"),
        ("not an array", "not a .npy/.npz array file"),
    ],
)
def test_bad_kernels(tmp_path, capsys, case, message):
    good = np.stack([np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]] * 2)
    extra = ["--schedule", "constant:0.5"]
    if case == "shape":
        path = _kernel_file(tmp_path, np.ones((3, 4)))
    elif case == "row sum":
        bad = good.copy()
        bad[1, 2, 0] += 0.1
        path = _kernel_file(tmp_path, bad)
    elif case == "negative":
        bad = good.copy()
        bad[0, 3, 0] -= 0.5
        bad[0, 3, 1] += 0.5
        path = _kernel_file(tmp_path, bad)
    elif case == "not causal":
        bad = good.copy()
        bad[0, 1] = [0.25, 0.25, 0.5, 0.0]
        path = _kernel_file(tmp_path, bad)
        extra.append("--causal")
    elif case == "nan":
        bad = good.copy()
        bad[0, 0, 0] = np.nan
        path = _kernel_file(tmp_path, bad)
    elif case == "no lambdas":
        path, extra = _kernel_file(tmp_path, good), []
    elif case == "bad schedule":
        path, extra = _kernel_file(tmp_path, good), ["--schedule", "constant:x"]
    elif case == "wrong lambda count":
        np.savez(tmp_path / "k.npz", kernels=good, lambdas=np.array([0.5, 0.5, 0.5]))
        path, extra = tmp_path / "k.npz", []
    elif case == "missing":
        path = tmp_path / "absent.npy"
    else:
        path = tmp_path / "text.npy"
        path.write_text("hello")
    out = tmp_path / "out"
    assert main(["rollout", "--kernels", str(path), *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    "argv,message",
    [
        (["rollout", "c.yaml", "--tokens", "0"], "argument --tokens: expected a positive integer, got '0'"),
        (["rollout", "c.yaml", "--slopes", "weird"], "argument --slopes: invalid choice"),
        (["rollout"], "missing CONFIG"),
        (["rollout", "absent.yaml"], "absent.yaml: no such file"),
        (["rollout", "."], ".: cannot read"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_command_lines(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, GOOD)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "posbias-out").exists()


def test_dense_refuses_huge_n(tmp_path, capsys):
    assert (
        main(
            [
                "rollout",
                str(_write(tmp_path, GOOD)),
                "--engine",
                "dense",
                "--tokens",
                "100000",
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    assert "too large for dense" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_demo(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    assert {"profiles.png", "summaries.md", "summaries.json"} <= {p.name for p in out.iterdir()}
    summaries = json.loads((out / "summaries.json").read_text())
    (a, b, c) = summaries.values()
    assert a["p_first"] > 0.99  # attention-only collapses onto token 0 (C5)
    assert b["u_shape"] and c["u_shape"]  # residuals give a U (C6)
    assert c["p_last"] > b["p_last"]  # a positive content diagonal adds recency (C4)
    assert str(out / "profiles.png") in capsys.readouterr().out


@pytest.mark.parametrize("value", ["-1,2,3", "-1e-3", "-.5,0,1"])
def test_a_negative_value_may_follow_its_option_as_a_separate_argument(tmp_path, capsys, value):
    """Issue 29 item 3: argparse took "--content-diagonal -1,2,3" for an unknown option ("expected one
    argument"); the separate spelling now gives the same files as --content-diagonal=-1,2,3."""
    flags = ["rollout", "--layers", "3", "--heads", "3", "--tokens", "16", "--schedule", "constant:0.5"]
    assert main([*flags, "--content-diagonal", value, "--out", str(tmp_path / "separate")]) == 0
    assert main([*flags, f"--content-diagonal={value}", "--out", str(tmp_path / "joined")]) == 0
    capsys.readouterr()
    separate, joined = (tmp_path / "separate" / "profile.csv"), (tmp_path / "joined" / "profile.csv")
    assert separate.read_text() == joined.read_text()
    assert main([*flags, "--content-diagonal", "-x", "--out", str(tmp_path / "bad")]) == 2
    assert "expected one argument" in capsys.readouterr().err and not (tmp_path / "bad").exists()
