"""The documentation site builds strictly (every link, every API page from the docstrings), and its
benchmarks page shows the figures of ``benchmarks/results*.json``, nothing typed by hand."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MKDOCS = Path(sys.executable).parent / "mkdocs"


def _hook():
    spec = importlib.util.spec_from_file_location("bench_hook", REPO / "docs" / "hooks" / "benchmarks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    assert MKDOCS.exists(), f"{MKDOCS} missing: install the docs extra (pip install -e '.[docs]')"
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(MKDOCS.parent) + ":/usr/bin:/bin", "HOME": str(out)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_every_guide_and_the_api_reference_are_built(site):
    for page in [
        "rollout",
        "engines",
        "relative-bias",
        "sweeps",
        "derive",
        "verify",
        "trained-model",
        "huggingface",
        "compare-fit",
        "theory",
        "reference",
        "benchmarks",
        "smollm2-gap",
        "architecture",
        "api",
    ]:
        assert (site / page / "index.html").exists(), page
    api = (site / "api" / "index.html").read_text()
    for name in ["build_model", "AlibiStack", "BiasEngine", "profile_batch", "summarize_columns"]:
        assert name in api, name
    assert (site / "proofs" / "C7" / "index.html").exists()
    assert not (site / "hooks").exists()  # the build hook is not published


def _public_modules() -> list[str]:
    """Every module of the library whose name has no leading underscore, by its ``:::`` name in docs/api.md
    (numerics.x and theorem.x for the source folders installed as posbias.numerics / posbias.theorem)."""
    names = []
    for folder, prefix in [("numerics", "numerics"), ("theorem", "theorem"), ("posbias", "posbias")]:
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            if any(part.startswith("_") for part in parts[:-1]):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            elif parts[-1].startswith("_"):
                continue
            names.append(".".join((prefix, *parts)))
    return names


def test_the_api_reference_lists_every_public_module():
    entries = {
        line[4:].strip() for line in (REPO / "docs" / "api.md").read_text().splitlines() if line.startswith("::: ")
    }
    missing = [name for name in _public_modules() if name not in entries and name not in ("numerics", "theorem")]
    assert missing == [], f"public modules missing from docs/api.md: {missing}"
    assert len(entries) > 140


def test_benchmarks_page_shows_the_results_files(site):
    html = (site / "benchmarks" / "index.html").read_text()
    assert "<!-- bench:" not in html
    sweep = json.loads((REPO / "benchmarks" / "results-sweep.json").read_text())
    for row in sweep["kernel_limit"]:
        assert f"{row['ratio']:.4g}" in html
    depth = json.loads((REPO / "benchmarks" / "results-depth.json").read_text())
    assert f"{depth['ratio_power_to_blas_limit']:.4g}" in html
    hf = json.loads((REPO / "benchmarks" / "results-hf.json").read_text())
    for run in hf["runs"]:
        assert f"{run['ratio_process_to_limit']:.4g}" in html
        assert f"{run['ratio_process_to_counted_limit']:.4g}" in html


def test_the_smollm2_page_shows_the_results_file(site):
    import html as entities

    page = entities.unescape((site / "smollm2-gap" / "index.html").read_text())
    assert "<!-- bench:" not in page
    gap = json.loads((REPO / "benchmarks" / "results-smollm2-gap.json").read_text())
    for n in ("n64", "n128", "n256"):
        for record in gap[n]["without_token_0"]:
            assert record["grad"] in page, (n, record["panel"])
        assert gap[n]["without_token_0_beats_flat"] in page


def test_hook_tables_and_refusals(tmp_path):
    hook = _hook()
    (tmp_path / "r.json").write_text(
        json.dumps({"runs": [{"a": 1, "b": 0.123456}, {"a": 20000, "b": "x|y"}], "one": {"k": 2.5}, "v": 3})
    )
    got = hook.expand("x\n<!-- bench: r.json runs b,a -->\ny <!-- bench: r.json v -->", tmp_path)
    assert got == "x\n| b | a |\n|---|---|\n| 0.1235 | 1 |\n| x\\|y | 20,000 |\ny 3"
    assert hook.expand("<!-- bench: r.json one -->", tmp_path) == "| quantity | value |\n|---|---|\n| k | 2.5 |"
    for bad, why in [
        ("<!-- bench: none.json v -->", "no file"),
        ("<!-- bench: r.json w -->", "has no w"),
        ("<!-- bench: r.json runs a,c -->", "has no c"),
    ]:
        with pytest.raises(hook.BenchmarkDirectiveError, match=why):
            hook.expand(bad, tmp_path, page="p.md")


def test_mkdocs_is_not_needed_to_import_posbias():
    done = subprocess.run(
        [sys.executable, "-c", "import sys, posbias; assert 'mkdocs' not in sys.modules"],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr


def test_citation_file_matches_the_package():
    import tomllib

    import yaml

    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert cff["version"] == project["version"]
    assert cff["license"] == project["license"]
    assert [a["name"] for a in cff["authors"]] == [a["name"] for a in project["authors"]]
    assert "arXiv:2602.16837" in [i["value"] for i in cff["references"][0]["identifiers"]]
    assert "(CITATION.cff)" in (REPO / "README.md").read_text()
