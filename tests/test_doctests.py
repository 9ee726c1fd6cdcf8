"""Every docstring example in the installed posbias namespace runs and gives what it shows."""

import doctest
import importlib
import pkgutil

import pytest

from tests.project_packages import packages

PACKAGES = packages()


def _modules():
    names = set(PACKAGES)
    for package in PACKAGES:
        path = importlib.import_module(package).__path__
        names |= {info.name for info in pkgutil.iter_modules(path, prefix=package + ".") if not info.ispkg}
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
