"""Fitting the theory's free parameters to measurements (``posbias fit``, ``posbias compare``).

* ``posbias.fit.profile``: the structural model's content diagonal, temperature and lambda scale fitted to a
  measured profile (W1 by gradient descent);
* ``posbias.fit.bias``: a relative position bias b(g) + d [i = j] + s [j = 0] fitted to a measurement's mean
  pre-softmax logits (least squares, four families); ``posbias.fit.bias_run``: that fit on a folder of
  ``posbias measure`` and the files it writes;
* ``posbias.fit.compare``: distances between a measured profile and predicted ones.

The commands (arguments, printing) are ``posbias.cli.fit`` and ``posbias.cli.compare``. The names the
module ``posbias.fit`` defined before it became this package are still answered, with a
``DeprecationWarning`` (``posbias._moved``).
"""

from __future__ import annotations

_PROFILE_NAMES = (
    "DIAGONAL_MODES", "FitError", "FitSpec", "FitResult", "SECONDS_PER_ENTRY", "SECONDS_PER_STEP", "XLA_OVERHEAD",
    "seconds_estimate", "memory_bytes", "model_profile", "fit", "check_budgets", "DEFAULT_TIME_BUDGET",
    "DEFAULT_STEPS", "DEFAULT_LEARNING_RATE", "PROFILE_FIT_FLAGS", "MAX_SMOOTHNESS", "require_alibi",
)  # fmt: skip


def __getattr__(name: str):
    from posbias._moved import moved_attribute

    return moved_attribute(__name__, name, dict.fromkeys(_PROFILE_NAMES, "posbias.fit.profile"))
