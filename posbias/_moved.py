"""Deprecation aliases for the modules that moved when posbias/ was grouped by concern (issue 30).

``import posbias.yaml_io`` (or ``from posbias import yaml_io``) still works: a finder on ``sys.meta_path``
(installed by ``posbias/__init__.py``) answers an old name with the module at its new place, the same
module object, and warns once per name with a ``DeprecationWarning`` naming the new place.
``posbias.fit`` and ``posbias.validate`` are packages now; the names the old modules defined are
answered by those packages' ``__getattr__`` through ``moved_attribute``. Nothing else of posbias uses the
old names (tests/test_layering.py checks that no module imports one).

Examples
--------
>>> import warnings
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     import posbias.yaml_io as old
>>> import posbias.io.yaml_io as new
>>> old is new, caught[0].category.__name__
(True, 'DeprecationWarning')
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

MOVED = {
    "posbias.argtypes": "posbias.cli.argtypes",
    "posbias.derive_cli": "posbias.cli.derive",
    "posbias.proofs_cli": "posbias.cli.proofs",
    "posbias.lm.cli": "posbias.cli.train",
    "posbias.yaml_io": "posbias.io.yaml_io",
    "posbias.profile_file": "posbias.io.profile_file",
    "posbias.kernel_file": "posbias.io.kernel_file",
    "posbias.array_headers": "posbias.io.array_headers",
    "posbias.schema": "posbias.io.schema",
    "posbias.output": "posbias.io.output",
    "posbias.files": "posbias.io.files",
    "posbias.bias_fit": "posbias.fit.bias",
    "posbias.bias_fit_run": "posbias.fit.bias_run",
    "posbias.compare": "posbias.fit.compare",
    "posbias.validate_panels": "posbias.validate.panels",
    "posbias.interrupt": "posbias.runtime.interrupt",
    "posbias.time_limit": "posbias.runtime.time_limit",
    "posbias.progress": "posbias.runtime.progress",
    "posbias.jax_cache": "posbias.runtime.jax_cache",
    "posbias.lm.outputs": "posbias.measure.outputs",
    "posbias.hf.outputs": "posbias.measure.outputs",
}
"""Old module name -> its module now."""


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old} moved to {new}; import it from there", DeprecationWarning, stacklevel=3)


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module at its new place (the same object, its own ``__spec__`` kept)."""

    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self.spec  # the import machinery set the alias's spec on the shared module


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        new = MOVED.get(fullname)
        if new is None:
            return None
        _warn(fullname, new)
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())


def moved_attribute(package: str, name: str, places: dict[str, str]):
    """An attribute ``name`` of ``package`` that an old module defined, from its module now (``places``:
    name -> module), with a ``DeprecationWarning``; AttributeError for any other name."""
    module = places.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    _warn(f"{package}.{name}", f"{module}.{name}")
    return getattr(importlib.import_module(module), name)
