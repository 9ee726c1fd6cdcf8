"""The slow tier's lists in tests/conftest.py name tests that exist: a renamed or moved test must not
silently fall into the fast tier (or an entry outlive its test)."""

import ast
from pathlib import Path

import pytest

from tests.conftest import ALONE_FILES, FIRST_FILES, SLOW_FILES, SLOW_TESTS

TESTS = Path(__file__).resolve().parent


def _test_names(path: Path) -> set[str]:
    """``name`` and ``Class::name`` of every test function the file defines."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names |= {
                f"{node.name}::{f.name}"
                for f in node.body
                if isinstance(f, ast.FunctionDef) and f.name.startswith("test")
            }
    return names


@pytest.mark.parametrize("name", sorted(SLOW_FILES))
def test_every_slow_file_exists(name):
    assert (TESTS / name).is_file(), name


@pytest.mark.parametrize("name", FIRST_FILES)
def test_every_file_collected_first_exists(name):
    assert (TESTS / name).is_file(), name


@pytest.mark.parametrize("node", sorted(SLOW_TESTS))
def test_every_slow_test_exists_outside_the_slow_files(node):
    path, test = node.split("::", 1)
    assert (TESTS / path).is_file(), path
    assert path not in SLOW_FILES, f"{path} is slow as a whole"
    assert test.split("[", 1)[0] in _test_names(TESTS / path), node


def test_the_check_sees_a_misspelt_entry():
    assert "test_engines_agree_with_dense_on_generated_stacks" in _test_names(TESTS / "numerics" / "test_bias.py")
    assert "test_no_such_test" not in _test_names(TESTS / "numerics" / "test_bias.py")


@pytest.mark.parametrize("name", sorted(ALONE_FILES))
def test_every_alone_file_exists_and_is_slow(name):
    """scripts/test runs these after the others, in one process; the fast tier leaves them out."""
    assert (TESTS / name).is_file(), name
    assert name in SLOW_FILES, f"{name} needs the whole machine: it belongs to the slow tier too"
