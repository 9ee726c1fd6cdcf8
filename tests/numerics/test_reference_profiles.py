"""Section 4 of the foundation issue: every official config reproduces the authors'
reference profile to 1e-12 through ``posbias rollout``; the data README's traps."""

from pathlib import Path

import numpy as np
import pytest

from posbias.cli import main
from tests.conftest import SHARED_DATA

CONFIGS = sorted((SHARED_DATA / "official-configs").rglob("*.yaml"))


def _reference(shared: Path, config: Path) -> np.ndarray:
    rel = config.relative_to(shared / "official-configs").with_suffix("")
    data = np.loadtxt(shared / "reference-profiles" / ("__".join(rel.parts) + ".csv"), delimiter=",", skiprows=1)
    assert np.array_equal(data[:, 0], np.arange(data.shape[0]))
    return data[:, 1]


def _rollout(tmp_path, *args) -> tuple[np.ndarray, dict]:
    import json

    out = tmp_path / "out"
    assert main(["rollout", *map(str, args), "--out", str(out)]) == 0
    p = np.loadtxt(out / "profile.csv", delimiter=",", skiprows=1)[:, 1]
    return p, json.loads((out / "summary.json").read_text())


def test_all_reference_configs_are_present(shared_data):
    assert len(CONFIGS) == 22


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "/".join(c.parts[-3:]))
def test_reference_profile_reproduced(shared_data, tmp_path, config):
    first_head = "mean_content" in config.parts
    args = [config] + (["--content-broadcast", "first-head"] if first_head else [])
    p, summary = _rollout(tmp_path, *args)
    ref = _reference(shared_data, config)
    assert p.shape == ref.shape
    assert np.max(np.abs(p - ref)) <= 1e-12
    assert abs(p.sum() - 1.0) <= 1e-12
    assert summary["mass_defect"] <= 1e-12


def test_content_broadcast_all_differs_as_data_readme_says(shared_data, tmp_path):
    """Trap 3: mpt-7b last-token mass 0.017 (head 0 only, the published numbers) vs 0.186 (all heads)."""
    cfg = shared_data / "official-configs/mean_content/fineweb-edu/mpt-7b.yaml"
    p_all, _ = _rollout(tmp_path, cfg)
    p_first, _ = _rollout(tmp_path, cfg, "--content-broadcast", "first-head")
    assert round(p_all[-1], 3) == 0.186
    assert round(p_first[-1], 3) == 0.017


def test_hf_slopes_move_bloom_as_data_readme_says(shared_data, tmp_path):
    """Trap 5: transformers' BLOOM-176B slopes give p(0) = 0.0112, argmin 40 (paper: 0.0203, 61)."""
    cfg = shared_data / "official-configs/no_content/bloom.yaml"
    p_hf, s_hf = _rollout(tmp_path, cfg, "--slopes", "hf")
    p_paper, s_paper = _rollout(tmp_path, cfg, "--slopes", "paper")
    assert (round(p_hf[0], 4), s_hf["argmin"]) == (0.0112, 40)
    assert (round(p_paper[0], 4), s_paper["argmin"]) == (0.0203, 61)
    assert np.max(np.abs(p_paper - _reference(shared_data, cfg))) <= 1e-12


def test_tab_characters_load(shared_data):
    """Trap 1: mpt-30b files carry TABs in flow lists; PyYAML would reject them, we must not."""
    from posbias.config import load

    cfg = shared_data / "official-configs/no_content/mpt-30b.yaml"
    assert "\t" in cfg.read_text()
    loaded = load(cfg)
    assert loaded.stack.num_layers == 48 and loaded.stack.num_heads == 64


def test_background_score_cancels(shared_data, tmp_path):
    """Trap 2 / C4(a): changing base_scores to -50 leaves the profile unchanged."""
    cfg = shared_data / "official-configs/all_content/fineweb-edu/mpt-7b.yaml"
    text = cfg.read_text()
    start = text.index("base_scores:")
    end = text.index("\n", start)
    changed = tmp_path / "changed.yaml"
    changed.write_text(text[:start] + "base_scores: [[-50.0]]" + text[end:])
    p_ref, _ = _rollout(tmp_path, cfg)
    p_new, _ = _rollout(tmp_path, changed)
    assert np.max(np.abs(p_ref - p_new)) == 0.0
