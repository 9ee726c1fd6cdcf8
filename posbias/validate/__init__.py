"""Validation of the theory against a measured model (``posbias validate``).

* ``posbias.validate.predict``: the paper's predictions (a)-(c) and (e) from a measurement, and their scores;
* ``posbias.validate.panels``: the further panels (value-weighted kernels, the fitted bias, the flat
  baseline) and the sink diagnostics' table;
* ``posbias.validate.report``: report.md;
* ``posbias.validate.run``: the experiment on an opened model, through the measurement pipeline.

The command itself (arguments, printing) is ``posbias.cli.validate``. The names the module
``posbias.validate`` defined before it became this package are still answered, with a
``DeprecationWarning`` (``posbias._moved``).
"""

from __future__ import annotations

_OLD = {
    **dict.fromkeys(
        ("PANELS", "PREDICTIONS", "predictions", "score", "prediction_notes", "validate_bytes"),
        "posbias.validate.predict",
    ),
    "report_markdown": "posbias.validate.report",
    "add_parser": "posbias.cli.validate",
    "run": "posbias.cli.validate",
}


def __getattr__(name: str):
    """The names the module ``posbias.validate`` defined before it became this package (deprecated)."""
    from posbias._moved import moved_attribute

    return moved_attribute(__name__, name, _OLD)
