"""The one exception of posbias.theorem's derivations: bad parameters.

``DeriveError`` is raised by parameter objects that refuse a value, by the
command-line parser, and by a derivation that finds its parameters inconsistent.
Its message is one line: what, where, and what was expected. ``posbias derive``
prints it as ``posbias derive: error: ...`` and exits with status 2.

Examples
--------
>>> issubclass(DeriveError, ValueError)
True
"""

from __future__ import annotations


class DeriveError(ValueError):
    """Bad parameters for a derivation (one line: what, where, what was expected)."""
