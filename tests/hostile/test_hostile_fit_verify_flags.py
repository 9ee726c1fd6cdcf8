"""Hostile input found by an audit (2026-12-05): flags that would be ignored, relative-bias configs
where only ALiBi is supported, a very deep --out, smoothness beyond what the table fit can use, and
messages that name the flag and its value.

Each refusal runs the console script as a real process (as tests/hostile/test_hostile_cli.py does) and
checks exit code 2, exactly one line on stderr, no traceback and no output folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.configs import SMALL_ALIBI

CONSOLE = Path(sys.executable).with_name("posbias")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf"

BASE = ["--layers", "3", "--heads", "2", "--tokens", "8", "--schedule", "constant:0.5"]

ALIBI = SMALL_ALIBI
FULL = ALIBI.replace("mask_type: causal", "mask_type: full")
BIAS = ALIBI.replace("alibi_slopes: [[0.5, 0.125]]", 'bias: "kerple-log:1,0.5", sink: [[1.0]]')
UNIFORM_16 = "token_position,probability\n" + "".join(f"{i},{1 / 16!r}\n" for i in range(16))


def posbias(tmp: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(CONSOLE), *argv],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )


def assert_refused(r: subprocess.CompletedProcess, *needles: str, out: Path | None = None) -> None:
    lines = r.stderr.splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert len(lines) == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    if out is not None:
        assert not out.exists()


@pytest.fixture
def configs(tmp_path: Path) -> Path:
    (tmp_path / "base.yaml").write_text(ALIBI)
    (tmp_path / "full.yaml").write_text(FULL)
    (tmp_path / "bias.yaml").write_text(BIAS)
    (tmp_path / "m.csv").write_text(UNIFORM_16)
    return tmp_path


@pytest.fixture(scope="module")
def measured_folder(tmp_path_factory) -> Path:
    """A posbias measure folder of the BLOOM fixture (as tests/product/test_bias_fit.py builds it)."""
    from tests.hf_folders import measure_command as main

    tmp = tmp_path_factory.mktemp("fit-verify-flags")
    text = np.load(FIXTURES / "bloom" / "expected.npz")["text"]
    (tmp / "docs.jsonl").write_text("\n".join(json.dumps({"text": f"{text} {k}"}) for k in range(4)) + "\n")
    out = tmp / "m"
    argv = [str(FIXTURES / "bloom"), "--data", str(tmp / "docs.jsonl"), "--tokens", "10", "--samples", "3"]
    assert main([*argv, "--out", str(out), "--quiet"]) == 0
    return out


# ---------------------------------------------------------------- 1. verify --stack ignores --schedule, --causal


@pytest.mark.parametrize(
    "config, flags, needle",
    [
        (
            "base.yaml",
            ["--tokens", "8", "--schedule", "constant:0.5", "--json"],
            "--schedule applies to --kernels only",
        ),
        ("full.yaml", ["--tokens", "8", "--causal", "--json"], "--causal applies to --kernels only"),
    ],
)
def test_verify_stack_refuses_kernel_flags(configs, config, flags, needle):
    r = posbias(configs, "verify", "--stack", config, *flags, "--out", "out")
    assert_refused(r, needle, out=configs / "out")


@pytest.mark.parametrize("flags", [["--tokens", "5"], ["--causal"], ["--schedule", "constant:0.5"]])
def test_verify_bare_model_flag_names_the_flag_and_where_it_applies(configs, flags):
    r = posbias(configs, "verify", *flags, "--out", "out")
    assert_refused(r, flags[0] + ":", "apply to --stack / --kernels only", out=configs / "out")


def test_verify_help_says_which_source_each_model_flag_applies_to(configs):
    text = " ".join(posbias(configs, "verify", "--help").stdout.split())
    assert "with --stack only: override the sequence length" in text
    assert "with --kernels only: declare them causal" in text
    assert "with --kernels only: the lambda schedule" in text


# ---------------------------------------------------------------- 2, 3. relative-bias configs


def test_fit_refuses_a_relative_bias_config(configs):
    r = posbias(configs, "fit", "m.csv", "bias.yaml", "--steps", "5", "--out", "out")
    assert_refused(r, "bias.yaml", "relative-bias", "expected an ALiBi config", out=configs / "out")


def test_verify_stack_refuses_a_relative_bias_config(configs):
    r = posbias(configs, "verify", "--stack", "bias.yaml", "--tokens", "8", "--out", "out")
    assert_refused(r, "bias.yaml", "ALiBi models only", out=configs / "out")


def test_verify_model_api_refuses_a_bias_stack():
    from posbias.errors import UserError
    from posbias.model import build_model
    from posbias.verify import verify_model

    model = build_model(layers=2, heads=2, tokens=8, schedule="constant:0.5", bias="kerple-log:1,0.5")
    with pytest.raises(UserError, match="BiasStack is not supported"):
        verify_model(model.stack, 8)


# ---------------------------------------------------------------- 4. a very deep --out


def _remove_deep(top: Path, deepest: Path) -> None:
    """rm -r of a single chain of folders without recursion (shutil.rmtree and os.walk recurse once per
    level): the files in ``deepest``, then each folder up to ``top``."""
    if deepest.is_dir():
        for name in os.listdir(deepest):
            os.unlink(deepest / name)
    folder = deepest
    while True:
        if folder.is_dir():
            os.rmdir(folder)
        if folder == top:
            return
        folder = folder.parent


def test_rollout_into_a_folder_1200_levels_deep(tmp_path):
    deep = "/".join(["d"] * 1200)
    try:
        r = posbias(tmp_path, "rollout", *BASE, "--out", deep)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stderr == "" and "Traceback" not in r.stdout
        assert sorted(os.listdir(tmp_path / deep)) == ["profile.csv", "profile.png", "summary.json"]
    finally:
        if (tmp_path / "d").exists():
            _remove_deep(tmp_path / "d", tmp_path / deep)


def test_rollout_out_beyond_path_max_is_one_line_and_creates_nothing(tmp_path):
    r = posbias(tmp_path, "rollout", *BASE, "--out", "/".join(["e"] * 2100))
    assert_refused(r, "--out", "cannot create the folder", out=tmp_path / "e")


# ---------------------------------------------------------------- 5. --smoothness the fit cannot use


@pytest.mark.parametrize("value", ["1e308", "1e20", "1e9"])
def test_fit_refuses_smoothness_beyond_the_range(measured_folder, tmp_path, value):
    r = posbias(tmp_path, "fit", str(measured_folder), "--smoothness", value, "--out", "out")
    assert_refused(r, "--smoothness:", "expected a finite value >= 0 and <= 1e+08", out=tmp_path / "out")


def test_fit_accepts_the_largest_smoothness(measured_folder, tmp_path):
    r = posbias(tmp_path, "fit", str(measured_folder), "--smoothness", "1e8", "--out", "out")
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((tmp_path / "out" / "fitted_bias.json").read_text())["smoothness"] == 1e8


# ---------------------------------------------------------------- 6. profile-fit flags with a measure folder


@pytest.mark.parametrize(
    "flags",
    [
        ["--heldout", "m.csv"],
        ["--steps", "5"],
        ["--diagonal", "none"],
        ["--diagonal", "pooled"],
        ["--lambda-scale"],
        ["--no-temperature"],
        ["--learning-rate", "0.2"],
        ["--time-budget", "10"],
        ["--content-scale"],
        ["--content-broadcast", "all"],
    ],
)
def test_fit_measure_folder_refuses_profile_fit_flags(measured_folder, configs, flags):
    r = posbias(configs, "fit", str(measured_folder), *flags, "--out", "out")
    assert_refused(r, flags[0] + ": applies to the profile fit", out=configs / "out")


# ---------------------------------------------------------------- 7. --sink messages


@pytest.mark.parametrize(
    "sink, needle",
    [
        ("1e308", "--sink: 1e+308 overflows the logits at temperature 1"),
        ("nan", "--sink: nan is not finite"),
        ("1,inf,2", "--sink: inf is not finite"),
    ],
)
def test_rollout_sink_messages_name_the_flag_and_value(tmp_path, sink, needle):
    r = posbias(tmp_path, "rollout", *BASE, "--bias", "kerple-log:1,0.5", "--sink", sink, "--out", "out")
    assert_refused(r, needle, out=tmp_path / "out")
    assert "temperature: 1.0 is too small" not in r.stderr and "entry (0,)" not in r.stderr


def test_config_sink_overflow_names_the_file_field(configs):
    text = BIAS.replace("sink: [[1.0]]", "sink: [[1e308]]").replace(
        "softmax_temperature: 1.0", "softmax_temperature: 0.5"
    )
    (configs / "b2.yaml").write_text(text)
    r = posbias(configs, "rollout", "b2.yaml", "--out", "out")
    assert_refused(
        r, "b2.yaml: attention_config.sink: 1e+308 overflows the logits at temperature 0.5", out=configs / "out"
    )


# ---------------------------------------------------------------- 8. the fit report's W1 line


def test_fit_report_prints_w1_before_and_after_in_one_format(configs):
    r = posbias(configs, "fit", "m.csv", "base.yaml", "--steps", "5", "--out", "out")
    assert r.returncode == 0, r.stderr[-2000:]
    record = json.loads((configs / "out" / "fit.json").read_text())
    expected = f"W1/(N-1): {record['w1_before']:.4g} before -> {record['w1_after']:.4g} after"
    assert expected in r.stdout, r.stdout


@pytest.mark.parametrize(("save_dir", "message"), [(" ", "got a blank string"), ("a\0b", "without a NUL byte")])
def test_a_config_save_dir_is_checked_as_out_is(tmp_path, save_dir, message):
    """--out ' ' is refused (posbias.cli.argtypes.path); a config's save_dir, the default --out, was taken as
    a folder named ' '."""
    from posbias.config import ConfigError, load

    text = (
        (Path(__file__).resolve().parents[2] / "examples" / "small.yaml")
        .read_text()
        .replace("save_dir: ./posbias-out/small/", "save_dir: X")
    )
    path = tmp_path / "c.yaml"
    path.write_text(text.replace("save_dir: X", "save_dir: " + json.dumps(save_dir)))
    with pytest.raises(ConfigError, match=f"save_dir: expected a folder name.*{message.split()[-1]}"):
        load(path)


def test_a_folder_the_file_system_refuses_is_named_with_its_reason(tmp_path):
    """/proc refuses new folders (ENOENT although /proc exists): it was reported as "removed by another
    process 8 times" (prepare's retry for a vanishing parent); a save_dir is named as such, not as --out."""
    flags = ("--layers", "2", "--heads", "2", "--tokens", "8", "--schedule", "constant:0.5")
    r = posbias(tmp_path, "rollout", *flags, "--out", "/proc/posbias-x")
    assert_refused(r, "--out /proc/posbias-x: cannot create the folder (No such file or directory)")
    (tmp_path / "c.yaml").write_text(ALIBI + "save_dir: /proc/posbias-x\n")
    r = posbias(tmp_path, "rollout", "c.yaml")
    assert_refused(r, "c.yaml: save_dir /proc/posbias-x: cannot create the folder (No such file or directory)")
