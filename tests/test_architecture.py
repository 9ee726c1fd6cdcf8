"""The layering the README's architecture section describes holds in the code:
no module reaches into another module's private names, numerics never imports SymPy,
and every engine name maps to an Engine through the one table."""

import ast
import importlib
import importlib.util
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import posbias.numerics as nx
from tests.project_packages import packages

REPO = Path(__file__).resolve().parents[1]

PACKAGES = packages()


def _module_files():
    for package in PACKAGES:
        mod = importlib.import_module(package)
        for info in pkgutil.iter_modules(mod.__path__, prefix=package + "."):
            if not info.ispkg:
                yield info.name, Path(importlib.util.find_spec(info.name).origin)
        yield package, Path(mod.__file__)


def _package_private_module(importer: str, package: str, name: str) -> bool:
    """A private module of the importer's own package (the pattern for pieces two modules share)."""
    return importer.rsplit(".", 1)[0] == package and importlib.util.find_spec(f"{package}.{name}") is not None


def _private_reaches(name: str, path: Path) -> list[str]:
    """``other._private`` where ``other`` is a project module imported by this one."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("posbias"):
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("posbias"):
                    aliases[a.asname or a.name.split(".")[0]] = a.name
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            found.append(f"{name}: {node.value.id}.{node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("posbias"):
            found += [
                f"{name}: from {node.module} import {a.name}"
                for a in node.names
                if a.name.startswith("_")
                and not a.name.startswith("__")
                and not _package_private_module(name, node.module, a.name)
            ]
    return found


def test_no_module_reaches_into_another_modules_private_names():
    found = [hit for name, path in _module_files() for hit in _private_reaches(name, path)]
    assert found == []


def _importers(module: str) -> list[str]:
    """The package modules that import ``posbias.numerics.<module>`` (either import form)."""

    def imports(path):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        return any(
            isinstance(node, ast.ImportFrom)
            and (
                ((node.module or "").endswith("numerics") and any(a.name == module for a in node.names))
                or (node.module or "").endswith(f"numerics.{module}")
            )
            for node in ast.walk(tree)
        )

    return sorted(name for name, path in _module_files() if imports(path))


def test_the_shared_recurrence_is_used_only_by_the_engines_that_share_it():
    # numerics/_chunked.py is the recurrence's parallel formulation, built on its row weights
    assert _importers("_recurrence") == [
        "posbias.numerics._chunked",
        "posbias.numerics.fft",
        "posbias.numerics.structured",
    ]
    assert _importers("_chunked") == ["posbias.numerics.structured"]


def test_numerics_never_imports_sympy():
    code = (
        "import sys, posbias.numerics as nx, numpy as np\n"
        "s = nx.AlibiStack.build([0.5, 0.5], [0.5]); nx.summarize(nx.profile(s, 8), s)\n"
        "print(any(m == 'sympy' or m.startswith('sympy.') for m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_engine_table_and_cli_choices_agree():
    from posbias.cli import ENGINE_NAMES

    assert set(ENGINE_NAMES) <= set(nx.ENGINES)
    assert all(isinstance(e, nx.Engine) for e in nx.ENGINES.values())
    assert set(nx.ENGINES) - set(ENGINE_NAMES) == {"measured"}  # chosen by auto for --kernels
    from posbias.sweep.spec import ENGINES as SWEEP_ENGINES

    assert SWEEP_ENGINES == ENGINE_NAMES  # one table: the sweep spec takes the same names as --engine


@pytest.mark.parametrize("folder", ["numerics", "theorem", "proofs"])
def test_source_folders_cannot_load_as_top_level_modules(folder):
    """From the checkout's root ``import numerics`` would load a second copy of posbias.numerics whose
    classes differ from the installed ones (issue 20): it is refused with one line naming the right import."""
    done = subprocess.run([sys.executable, "-c", f"import {folder}"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 1
    assert f"ImportError: this folder is the package posbias.{folder}; import posbias.{folder}" in done.stderr
    ok = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import posbias.{folder}, posbias.numerics.masks as m; import posbias; assert posbias.Causal is m.Causal",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr


# The command line (argument parsing for a process, exit codes, stderr) and the wall-clock guard
# (signal timers) belong to the product layer (posbias/cli/derive.py, posbias/cli/proofs.py,
# posbias/runtime/time_limit.py); theorem/ holds the mathematics. theorem/params.py still builds each
# derivation's parameter parser on argparse (``Derivation.parse``): the one allowed use.
PRODUCT_ONLY_MODULES = {"argparse", "signal", "threading", "sys"}
ARGPARSE_ALLOWED = {"params.py"}


def _product_only_uses(path: Path) -> list[str]:
    """Imports of ``PRODUCT_ONLY_MODULES`` in one theorem/ file (argparse allowed where listed)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module.split(".")[0]]
        else:
            continue
        found += [
            f"{path.name}: imports {n}"
            for n in names
            if n in PRODUCT_ONLY_MODULES and not (n == "argparse" and path.name in ARGPARSE_ALLOWED)
        ]
    return found


def test_theorem_holds_no_command_line_and_no_wall_clock_guard():
    theorem = Path(importlib.import_module("posbias.theorem").__file__).parent
    files = sorted(theorem.glob("*.py"))
    assert files and not (theorem / "cli.py").exists() and not (theorem / "time_limit.py").exists()
    assert [hit for path in files for hit in _product_only_uses(path)] == []
    for name in ("posbias.cli.derive", "posbias.cli.proofs", "posbias.runtime.time_limit"):
        assert importlib.util.find_spec(name) is not None, name


def test_the_command_line_rule_sees_the_imports_it_forbids(tmp_path):
    """The rule above can fail: each forbidden import form is reported, the allowed one is not."""
    bad = tmp_path / "bad.py"
    bad.write_text("import signal\nfrom argparse import ArgumentParser\nimport sys as system\n", encoding="utf-8")
    assert _product_only_uses(bad) == ["bad.py: imports signal", "bad.py: imports argparse", "bad.py: imports sys"]
    allowed = tmp_path / "params.py"
    allowed.write_text("import argparse\n", encoding="utf-8")
    assert _product_only_uses(allowed) == []


def test_every_package_ships_in_the_wheel():
    """pyproject.toml lists its packages by hand: a new sub-package missing there installs without its
    modules (caught once only by the wheel test, minutes later). Every package found is listed."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set(PACKAGES) | {"posbias.numerics.native", "posbias.proofs"}
    assert found - listed == set(), "missing from [tool.setuptools] packages"
