"""The one exception type the CLI turns into a single line and exit code 2.

Bad input anywhere in the product layer raises ``UserError``. A subclass exists only where
something tells it apart: a caller that catches it and not its siblings (``ModelError`` in
posbias/config.py and posbias/sweep/grid.py, ``BiasFitError``, ``YamlError``, ``ProfileError`` and
the language-model ``CheckpointError``, which their own readers re-raise past a broader
``except ValueError``) or a test that pins the type of a refusal (``ConfigError``, ``FitError``,
``SpecError``, ``MeasureError``, ``UnsupportedModel``, the Hugging Face ``CheckpointError``).
"""


class UserError(ValueError):
    """Bad input: the message says what, where and what was expected, in one line."""
