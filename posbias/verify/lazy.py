"""Deferred imports: ``import posbias.verify`` (and the CLI's ``add_parser``) needs neither
hypothesis nor JAX; running properties does.

``st`` stands for ``hypothesis.strategies`` and ``ps`` for ``posbias.verify.strategies``; each is
imported on its first attribute access. ``composite`` is ``hypothesis.strategies.composite``
applied when the strategy is first asked for.
"""

from __future__ import annotations

import functools
import importlib


class Lazy:
    """A module imported on first attribute access."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        return getattr(importlib.import_module(self._name), attr)


st = Lazy("hypothesis.strategies")
ps = Lazy("posbias.verify.strategies")


def composite(fn):
    """``hypothesis.strategies.composite``, applied when the strategy is first asked for."""

    @functools.wraps(fn)
    def make(*args, **kwargs):
        from hypothesis import strategies

        return strategies.composite(fn)(*args, **kwargs)

    return make
