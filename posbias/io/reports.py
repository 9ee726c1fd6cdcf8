"""The versioned layout of ``report.json``, written by ``posbias measure`` (a Hugging Face folder or a GGUF
file) and ``posbias validate``, and the one function every reader uses.

Schema version 2 (this one), both commands:

* ``schema_version``: 2; ``kind``: ``"posbias measure"`` or ``"posbias validate"``;
* ``diagnostics``: what is not a score or a measured quantity of the profile, under its own key:
  ``{"sinks": ...}`` (``posbias.measure.sinks``: per layer, for measure; per length, then per layer, for
  validate);
* validate: ``lengths``: ``{"64": {panel: {"w1", "w1_ci", "spearman", "tv", "beats_flat", ...}}, ...}``, one
  entry per measured N, so that a reader iterating the lengths meets nothing else (the scores against the
  gradient norm (d); ``beats_flat`` decided on the bootstrap interval); ``bootstrap``: ``{"resamples",
  "seed", "level", "method"}``; ``matrix``: ``{"64": {view: {measure: {panel: scores}}}}`` with view
  ``all`` or ``without_token_0`` (``posbias.validate.matrix.score_matrix``); ``shape``: ``{"64": {view:
  {"measures": ..., "predictions": ...}}}`` (``posbias.validate.matrix.shapes``);
* measure: its fields as before (``lambdas``, ``content``, ``influence``, ...), the sinks moved under
  ``diagnostics``.

Version 1 (before ``schema_version``): validate wrote the lengths at the top level beside ``"sinks"``;
measure wrote ``"sinks"`` at the top level. ``read_report`` reads both, the old one with a one-line
deprecation note on stderr.

Examples
--------
>>> old = {"64": {"a": {"w1": 0.1}}, "sinks": {"64": {"key0_mass": [0.5]}}}
>>> new = read_report(old, note=lambda line: None)
>>> new["schema_version"], list(new["lengths"]), new["diagnostics"]["sinks"]["64"]["key0_mass"]
(2, ['64'], [0.5])
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 2
MEASURE = "posbias measure"
VALIDATE = "posbias validate"


class ReportError(ValueError):
    """A report.json that is neither this layout nor the previous one (one line)."""


def validate_report(
    lengths: dict[str, dict],
    sinks: dict[str, dict],
    matrix: dict[str, dict] | None = None,
    shape: dict[str, dict] | None = None,
    bootstrap: dict | None = None,
) -> dict[str, Any]:
    """``posbias validate``'s report: the scores per length, the sink diagnostics per length and, when given,
    the prediction-by-measure matrix, the shape verdicts and the bootstrap that made their intervals."""
    out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "kind": VALIDATE, "lengths": lengths}
    if matrix is not None:
        out.update(bootstrap=bootstrap, matrix=matrix, shape=shape)
    return {**out, "diagnostics": {"sinks": sinks}}


def measure_report(fields: dict[str, Any], sinks: dict[str, list]) -> dict[str, Any]:
    """``posbias measure``'s report: its fields, and the sink diagnostics per layer under ``diagnostics``."""
    return {"schema_version": SCHEMA_VERSION, "kind": MEASURE, **fields, "diagnostics": {"sinks": sinks}}


def _deprecated(where: str) -> str:
    return (
        f"posbias: note: {where}: a report.json without schema_version (posbias before schema 2); "
        "read as schema 2, rewrite it by running the command again"
    )


def read_report(source: str | Path | dict, *, note: Callable[[str], None] | None = None) -> dict[str, Any]:
    """A report.json (a path, or its parsed content) in schema version 2; a version-1 report is converted,
    saying so in one line through ``note`` (default: printed to stderr). Raises ``ReportError`` for
    anything else."""
    where = "report" if isinstance(source, dict) else str(source)
    if isinstance(source, dict):
        data = source
    else:
        try:
            data = json.loads(Path(source).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ReportError(f"{where}: not a readable report.json ({exc})") from None
    if not isinstance(data, dict):
        raise ReportError(f"{where}: expected a JSON object")
    version = data.get("schema_version")
    if version == SCHEMA_VERSION:
        return data
    if version is not None:
        raise ReportError(f"{where}: schema_version {version!r}; this posbias reads versions 1 and {SCHEMA_VERSION}")
    (note or (lambda line: print(line, file=sys.stderr)))(_deprecated(where))
    if any(key.isdigit() for key in data):  # validate, version 1
        lengths = {key: value for key, value in data.items() if key.isdigit()}
        return validate_report(lengths, data.get("sinks", {}))
    fields = {key: value for key, value in data.items() if key != "sinks"}
    return measure_report(fields, data.get("sinks", {}))
