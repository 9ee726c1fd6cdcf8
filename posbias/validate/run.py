"""``posbias validate``'s work on an opened model: measure each length through the pipeline
(``posbias.measure.pipeline``), compute the predictions (``posbias.validate.predict``, the panels of
``posbias.validate.panels``), score them against the measured influence, and write the folder all or none:
profiles/<N>/<panel>.csv, kernels/<N>.npz, report.json (``posbias.io.reports``, schema 2), report.md
(``posbias.validate.report``) and validate.png."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from posbias.errors import UserError
from posbias.io.reports import validate_report
from posbias.validate.panels import PREDICTIONS as VARIANT_PREDICTIONS
from posbias.validate.predict import PREDICTIONS, prediction_notes, predictions, score, validate_bytes
from posbias.validate.report import report_markdown


@dataclass(frozen=True)
class Validation:
    """What ``validate`` wrote: the files, report.json's text and report.md's."""

    written: list[Path]
    report_json: str
    report_markdown: str


def validate(backend, lengths, samples: int, out: Path, *, show: bool = True) -> Validation:
    """The experiment on ``backend`` (a ``posbias.measure.backend.Backend``) at ``lengths`` (None: the
    backend's defaults), ``samples`` windows per length, into ``out``; refused in one line (``UserError``)
    before any weight is read when a length, the memory or the text does not allow it."""
    from posbias.fit.bias import BiasFitError
    from posbias.io.files import check_out, write_run
    from posbias.io.output import position_csv
    from posbias.measure.pipeline import load, measure_lengths, prepare
    from posbias.measure.sinks import sink_diagnostics
    from posbias.validate.panels import bias_prediction, extra_predictions, kernels_npz, mark_flat
    from posbias.validate.panels import figure as variants_figure

    lengths = tuple(lengths or backend.default_lengths)
    too_long = [n for n in lengths if backend.limit is not None and n > backend.limit]
    if too_long:
        raise UserError(f"--lengths: N = {too_long[0]} is longer than the model's {backend.limit_phrase}")
    check_out(out, ("report.json", "report.md", "validate.png"))
    plans, sequences = prepare(backend, lengths, samples, "--lengths", lambda n: validate_bytes(backend.layers, n))
    notes = prediction_notes(backend)
    beyond = [str(n) for n in lengths if backend.training_length is not None and n > backend.training_length]
    if beyond:
        notes += (
            f"N = {', '.join(beyond)}: longer than the training length {backend.training_length} in "
            f"config.json ({'ALiBi extrapolates' if backend.positions == 'alibi' else 'the model extrapolates'}).",
        )
    measurer, measured_notes = load(backend, "validate")
    notes += tuple(measured_notes)
    report, panels_by_n, texts, lambdas, sinks, sinks_by_n, binaries = {}, {}, {}, {}, {}, {}, {}
    for n, m in measure_lengths(measurer, plans, sequences, show=show):
        panels = predictions(m, backend.slopes, causal=backend.causal)
        panels.update(extra_predictions(m, causal=backend.causal))
        try:
            panels["i"] = bias_prediction(m)
        except BiasFitError as exc:
            notes += (f"N = {n}: panel (i) omitted: {exc}.",)
        panels["d"] = m.influence
        keys = [k for k in PREDICTIONS + VARIANT_PREDICTIONS if k in panels]
        report[str(n)] = mark_flat(score(m.influence, {k: panels[k] for k in keys}))
        sinks[str(n)] = sink_diagnostics(m, causal=backend.causal)
        sinks_by_n[n] = sinks[str(n)]
        binaries[f"kernels/{n}.npz"] = kernels_npz(m)
        panels_by_n[n] = panels
        lambdas[str(n)] = m.lambdas
        for key in [*"abcde", *VARIANT_PREDICTIONS]:
            if key in panels:
                texts[f"profiles/{n}/{key}.csv"] = position_csv(probability=panels[key])
        del m  # one measurement held at a time (posbias.hf.memory.plan counts one)
    text = json.dumps(validate_report(report, sinks), indent=2) + "\n"
    texts["report.json"] = text
    texts["report.md"] = report_markdown(
        report,
        source=backend.source,
        model_line=backend.model_line(samples),
        notes=notes,
        lambdas=lambdas,
        sinks=sinks,
    )
    written = write_run(
        out,
        texts,
        {"validate.png": variants_figure(panels_by_n, sinks_by_n, f"posbias validate: {backend.source}")},
        binaries,
    )
    return Validation(written, text, texts["report.md"])
