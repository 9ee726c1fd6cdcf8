"""The project's packages as tests scan them: the three layers and every sub-package below them."""

import importlib
import pkgutil

BASES = ("posbias", "posbias.numerics", "posbias.theorem")


def packages() -> tuple[str, ...]:
    """The three layers and every sub-package below them (posbias.verify, posbias.sweep, ...)."""
    names = list(BASES)
    for base in BASES:
        path = importlib.import_module(base).__path__
        names += [info.name for info in pkgutil.walk_packages(path, prefix=base + ".") if info.ispkg]
    return tuple(dict.fromkeys(names))
