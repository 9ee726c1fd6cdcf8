"""The engine boundary's types: what an engine is given and which option strings it takes.

For annotations and type checkers (pyright, pyproject.toml [tool.pyright]); nothing here
computes, and importing it pulls in no JAX (array shapes: numerics/arrays.py).

* ``Stack``: every stack type (ALiBi + content, relative bias (C7), given kernels, a periodic
  block of layers); an engine's ``supports`` says which of them it computes.
* ``Literal`` option types: the engine names of ``posbias.numerics.engines`` (``EngineName``),
  the number systems (``RingName``), the structured engine's XLA formulations (``XlaScan``),
  a summary's ``Precision`` and the mask kinds (``MaskName``, defined in numerics/masks.py).
  tests/test_boundary.py checks each against the table or tuple the code validates with.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

from posbias.numerics.bias_stack import BiasStack
from posbias.numerics.masks import MaskName
from posbias.numerics.periodic import PeriodicStack
from posbias.numerics.stack import AlibiStack, KernelStack

Stack: TypeAlias = AlibiStack | BiasStack | KernelStack | PeriodicStack

EngineName: TypeAlias = Literal["auto", "structured", "log", "fft", "dense", "bias", "bias-fft", "power", "measured"]
RingName: TypeAlias = Literal["linear", "log"]
XlaScan: TypeAlias = Literal["chunked", "blocked"]
Precision: TypeAlias = Literal["float64", "float32"]

__all__ = ["Stack", "EngineName", "RingName", "XlaScan", "Precision", "MaskName"]
