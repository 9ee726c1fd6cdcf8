"""ALiBi slope conventions and lambda schedules."""

import numpy as np
import pytest
from ruamel.yaml import YAML

import posbias.numerics as nx
from posbias.numerics import schedules


@pytest.mark.parametrize("h", [1, 2, 8, 32, 64])
def test_conventions_agree_for_powers_of_two(h):
    assert np.array_equal(nx.alibi_slopes(h, "paper"), nx.alibi_slopes(h, "hf"))


def test_hf_112_heads_matches_the_transformers_construction():
    """data README trap 5: 2^(-h/8), h = 1..64, then 2^(-(2k-1)/16), k = 1..48."""
    expected = [2.0 ** (-h / 8) for h in range(1, 65)] + [2.0 ** (-(2 * k - 1) / 16) for k in range(1, 49)]
    assert np.allclose(nx.alibi_slopes(112, "hf"), expected, rtol=1e-15, atol=0)


def test_paper_convention_matches_the_reference_configs(shared_data):
    for name, h in [("bloom", 112), ("mpt-30b", 64), ("bloom-7b1", 32)]:
        cfg = YAML(typ="safe", pure=True).load((shared_data / f"official-configs/no_content/{name}.yaml").read_text())
        assert np.allclose(cfg["attention_config"]["alibi_slopes"][0], nx.alibi_slopes(h, "paper"), rtol=1e-14)


def test_unknown_convention():
    with pytest.raises(ValueError, match="unknown slope convention"):
        nx.alibi_slopes(8, "alibi")


def test_schedules_and_clipping():
    lam, clipped = schedules.evaluate(nx.PowerDecay(1.5, 1.0), 4)
    assert np.allclose(lam, [1.0, 0.75, 0.5, 0.375]) and clipped == [0]
    lam, clipped = schedules.evaluate(nx.Constant(0.25), 3)
    assert np.array_equal(lam, [0.25] * 3) and clipped == []
    with pytest.raises(ValueError, match="expected num_layers = 3"):
        schedules.evaluate(nx.Custom((0.1, 0.2)), 3)


@pytest.mark.parametrize(
    "spec,expected",
    [
        ("constant:0.3", nx.Constant(0.3)),
        ("power_decay:0.8,1.5", nx.PowerDecay(0.8, 1.5)),
        ("custom:0.1,0.2", nx.Custom((0.1, 0.2))),
    ],
)
def test_parse_schedule(spec, expected):
    assert schedules.parse(spec) == expected


@pytest.mark.parametrize("spec", ["constant", "constant:a", "power_decay:1", "custom:", "linear:1", "constant:nan"])
def test_parse_schedule_rejects(spec):
    with pytest.raises(ValueError, match="schedule"):
        schedules.parse(spec)


def test_numerics_does_not_import_sympy():
    import subprocess
    import sys

    code = "import sys, posbias.numerics; assert 'sympy' not in sys.modules, 'sympy imported'; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
