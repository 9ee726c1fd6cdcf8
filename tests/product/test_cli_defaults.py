"""Every CLI default as a user types it: no --out, no --tokens, run from another folder,
models from flags, --version and --help everywhere (issue 7)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import posbias.numerics as nx

POSBIAS = str(Path(sys.executable).with_name("posbias"))


def _run(args, cwd, check=True):
    out = subprocess.run(
        [POSBIAS, *args], cwd=cwd, capture_output=True, text=True, env={**os.environ, "COLUMNS": "100"}
    )
    if check:
        assert out.returncode == 0, out.stderr
    return out


def test_rollout_without_out_writes_to_save_dir_relative_to_cwd(shared_data, tmp_path):
    """Official configs name a save_dir; without --out the files go there, below the working folder."""
    cfg = shared_data / "official-configs/no_content/bloom.yaml"
    save_dir = __import__("posbias").load_config(cfg).save_dir
    assert save_dir
    out = _run(["rollout", str(cfg)], tmp_path)
    folder = tmp_path / save_dir
    assert sorted(p.name for p in folder.iterdir()) == ["profile.csv", "profile.png", "summary.json"]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["num_tokens"] == 256 and summary["source"] == str(cfg)  # no --tokens: the file's N
    assert str(folder.relative_to(tmp_path)) in out.stdout


def test_model_from_flags_without_out(tmp_path):
    out = _run(
        [
            "rollout",
            "--layers",
            "6",
            "--heads",
            "4",
            "--tokens",
            "32",
            "--schedule",
            "power_decay:0.6,0.5",
            "--content-diagonal",
            "1.5",
            "--mask",
            "window:8",
        ],
        tmp_path,
    )
    folder = tmp_path / "posbias-out"
    p = np.loadtxt(folder / "profile.csv", delimiter=",", skiprows=1)[:, 1]
    stack = nx.AlibiStack.build(0.6 / np.arange(1, 7) ** 0.5, nx.alibi_slopes(4), 1.5, mask=nx.SlidingWindow(8))
    dense = np.asarray(nx.rollout_matrix(nx.alibi_kernels(stack, 32), stack.lambdas))[-1]
    assert np.max(np.abs(p - dense)) <= 1e-12
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["source"] == "flags" and summary["schedule"] == "power_decay:0.6,0.5"
    assert summary["mask"] == "sliding_window" and "model from flags" in out.stdout


def test_flags_override_a_config(shared_data, tmp_path):
    cfg = shared_data / "official-configs/no_content/bloom.yaml"
    _run(
        [
            "rollout",
            str(cfg),
            "--tokens",
            "48",
            "--layers",
            "3",
            "--schedule",
            "constant:0.25",
            "--slopes",
            "hf",
            "--heads",
            "8",
            "--out",
            "o",
        ],
        tmp_path,
    )
    summary = json.loads((tmp_path / "o/summary.json").read_text())
    assert (summary["num_tokens"], summary["num_layers"], summary["num_heads"]) == (48, 3, 8)
    assert summary["overrides"] == ["tokens", "layers", "heads", "slopes", "schedule"]
    assert summary["sum_lambda"] == pytest.approx(0.75, abs=1e-15)


def test_missing_model_flags_get_one_line(tmp_path):
    out = _run(["rollout", "--layers", "4", "--tokens", "16"], tmp_path, check=False)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "--heads --schedule" in out.stderr and not (tmp_path / "posbias-out").exists()


def test_version(tmp_path):
    from importlib.metadata import version

    assert _run(["--version"], tmp_path).stdout.strip() == f"posbias {version('posbias')}"


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["rollout", "--help"],
        ["demo", "--help"],
        ["derive", "--help"],
        ["proofs", "--help"],
        ["derive", "drift", "--help"],
        ["derive", "--list"],
        ["verify", "--help"],
        ["sweep", "--help"],
        ["plot", "--help"],
        ["compare", "--help"],
        ["fit", "--help"],
        ["train", "--help"],
        ["measure", "--help"],
        ["validate", "--help"],
    ],
)
def test_help_everywhere(tmp_path, args):
    out = _run(args, tmp_path)
    assert out.stdout.strip() and not out.stderr


def test_sweep_and_plot_without_out(tmp_path):
    """posbias sweep SPEC writes ./posbias-sweep/<spec name>/ below the working folder; posbias plot DIR
    draws into DIR; both from a folder other than the repository."""
    (tmp_path / "grid.yaml").write_text(
        "name: tiny grid\nbase: {layers: 3, heads: 2, tokens: 12}\n"
        "axes:\n  lambda: [0.3, 0.7]\n  slope_scale: [0.5, 2.0]\n"
    )
    out = _run(["sweep", "grid.yaml"], tmp_path)
    folders = [p for p in (tmp_path / "posbias-sweep").iterdir() if p.is_dir()]
    assert len(folders) == 1 and (folders[0] / "manifest.json").is_file(), out.stdout
    assert len(list((folders[0] / "table").glob("*.parquet"))) >= 1
    plotted = _run(["plot", str(folders[0].relative_to(tmp_path))], tmp_path)
    pngs = list(folders[0].glob("*.png"))
    assert len(pngs) == 1 and pngs[0].name in plotted.stdout


def test_compare_and_fit_without_out(tmp_path):
    """Without --out, compare and fit write into ./posbias-out below the working folder."""
    _run(
        [
            "rollout",
            "--layers",
            "3",
            "--heads",
            "2",
            "--tokens",
            "16",
            "--schedule",
            "constant:0.5",
            "--content-diagonal",
            "2",
            "--out",
            "m",
        ],
        tmp_path,
    )
    _run(
        ["rollout", "--layers", "3", "--heads", "2", "--tokens", "16", "--schedule", "constant:0.5", "--out", "p"],
        tmp_path,
    )
    _run(["compare", "m/profile.csv", "p/profile.csv"], tmp_path)
    assert sorted(p.name for p in (tmp_path / "posbias-out").iterdir()) == ["compare.json", "compare.png"]
    (tmp_path / "model.yaml").write_text(
        "sequence_length: 16\nnum_layers: 3\nmask_config: {mask_type: causal, window_size: null}\n"
        "attention_config: {num_heads: 2, alibi_slopes: [[0.0625, 0.00390625]], head_weights: null,"
        " softmax_temperature: 1.0}\n"
        "content_config: {diagonal_scores: [[0.0]], base_scores: [[0.0]]}\n"
        "lambda_schedule_config: {schedule_type: constant, lambda_const: 0.5}\n"
    )
    _run(["fit", "m/profile.csv", "model.yaml", "--no-temperature", "--steps", "50"], tmp_path)
    assert {"fit.json", "fitted_profile.csv", "fit.png"} <= {p.name for p in (tmp_path / "posbias-out").iterdir()}
