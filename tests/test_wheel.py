"""The built wheel works on its own: build it from a copy of the source tree, install it
(not editable) into a fresh virtual environment, and from a folder outside the
repository run ``posbias --version``, ``posbias demo``, ``posbias proofs --check`` and
README.md's first ```python example.

Dependencies come from the package index pip is configured with (or its cache); the
whole test takes about a minute on a 2-core machine.
"""

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

from tests.readme_runner import first_python_block

REPO = Path(__file__).resolve().parents[1]

# Folders never copied into the build tree (outputs of earlier builds and runs).
_NOT_SOURCE = {
    ".git",
    ".venv",
    "build",
    "dist",
    "posbias-demo",
    "posbias-out",
    "results",
    "__pycache__",
    ".pytest_cache",
    ".hypothesis",
}


def _source_files() -> list[Path]:
    """Tracked and untracked-but-not-ignored files (what a clean checkout plus new files holds)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout
        files = [Path(p) for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: walk, minus outputs
        files = [
            p.relative_to(REPO)
            for p in REPO.rglob("*")
            if p.is_file()
            and not _NOT_SOURCE & set(p.relative_to(REPO).parts)
            and not any(part.endswith(".egg-info") for part in p.parts)
        ]
    return [f for f in files if (REPO / f).is_file()]


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(extra)
    return env


def _run(argv, cwd, env, timeout):
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (
        f"{' '.join(map(str, argv))} exited {done.returncode}\n"
        f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
    )
    return done.stdout


def test_wheel_installs_and_runs_outside_the_repository(tmp_path):
    # 1. Build the wheel from a copy of the source tree (never from build/ leftovers in the checkout).
    src = tmp_path / "src"
    for rel in _source_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel)
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", dist, src], tmp_path, _clean_env(), 600)
    (wheel,) = dist.glob("posbias-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "posbias/numerics/native/alibi_layer.c" in names and "posbias/proofs/C1.md" in names
    assert "posbias/numerics/native/exp_taylor.h" in names  # included by bias_layer.c and scaled_panel.c
    tops = {n.split("/")[0] for n in names if "/" in n}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"posbias"}, tops

    # 2. A fresh virtual environment and a regular (non-editable) install.
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    bin_dir = env_dir / "bin"
    python = bin_dir / "python"
    env = _clean_env(PATH=str(bin_dir) + os.pathsep + os.environ.get("PATH", ""))
    _run([python, "-m", "pip", "install", "--quiet", wheel], tmp_path, env, 900)

    # 3. From a working directory outside the repository.
    work = tmp_path / "work"
    work.mkdir()
    installed = _run(
        [python, "-c", "import importlib.metadata as m; print(m.version('posbias'))"], work, env, 60
    ).strip()
    version = _run([bin_dir / "posbias", "--version"], work, env, 120)
    assert installed and installed in version, (installed, version)

    demo = work / "demo-out"
    _run([bin_dir / "posbias", "demo", "--out", demo], work, env, 300)
    for name in ("profiles.png", "summaries.md", "summaries.json"):
        assert (demo / name).is_file() and (demo / name).stat().st_size > 0, name
    assert (demo / "profiles.png").read_bytes()[:4] == b"\x89PNG"
    assert len(json.loads((demo / "summaries.json").read_text())) == 3

    proofs = _run([bin_dir / "posbias", "proofs", "--check"], work, env, 300)
    assert " hold" in proofs.splitlines()[-1], proofs[-500:]

    example = work / "readme_example.py"
    example.write_text(first_python_block((REPO / "README.md").read_text(encoding="utf-8")), encoding="utf-8")
    _run([python, example], work, env, 300)

    # 4. The installed layout: one namespace, resolved from the venv, nothing at top level.
    where = json.loads(
        _run(
            [
                python,
                "-c",
                (
                    "import importlib.util, json, sysconfig\n"
                    "import posbias, posbias.numerics, posbias.theorem, posbias.proofs\n"
                    "print(json.dumps({'numerics': posbias.numerics.__file__, 'theorem': posbias.theorem.__file__,\n"
                    "  'purelib': sysconfig.get_paths()['purelib'],\n"
                    "  'top': {m: importlib.util.find_spec(m) is not None\n"
                    "          for m in ('numerics', 'theorem', 'proofs')}}))"
                ),
            ],
            work,
            env,
            120,
        )
    )
    site = Path(where["purelib"]).resolve()
    assert site.is_relative_to(env_dir.resolve())
    for key in ("numerics", "theorem"):
        path = Path(where[key]).resolve()
        assert path.is_relative_to(site) and not path.is_relative_to(REPO), (key, path)
    assert where["top"] == {"numerics": False, "theorem": False, "proofs": False}, where["top"]
    assert not [p.name for p in site.iterdir() if p.name in ("numerics", "theorem", "proofs")]
    (info,) = site.glob("posbias-*.dist-info")
    assert not (info / "direct_url.json").exists() or '"editable": true' not in (info / "direct_url.json").read_text()
    top_level = info / "top_level.txt"
    assert not top_level.exists() or top_level.read_text().split() == ["posbias"]
