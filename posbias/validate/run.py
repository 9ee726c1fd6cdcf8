"""``posbias validate``'s work on an opened model: measure each length through the pipeline
(``posbias.measure.pipeline``), compute the predictions (``posbias.validate.predict``, the panels of
``posbias.validate.panels``), score them against the measured influence, and write the folder all or none:
profiles/<N>/<panel>.csv (and d-<measure>.csv for every influence measure beyond the gradient norm),
kernels/<N>.npz, report.json (``posbias.io.reports``, schema 2), report.md
(``posbias.validate.report``), validate.png and matrix.png (``posbias.validate.matrix_figure``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from posbias.errors import UserError
from posbias.io.reports import validate_report
from posbias.validate import sink_fit as sf
from posbias.validate.matrix import Bootstrap
from posbias.validate.panels import PREDICTIONS as VARIANT_PREDICTIONS
from posbias.validate.panels import VERSUS
from posbias.validate.predict import PREDICTIONS, prediction_notes, predictions, validate_bytes
from posbias.validate.report import report_markdown

ROW_FIELDS = ("w1", "spearman", "tv", "beats_flat", "w1_ci")


def grad_rows(grad_column: dict[str, dict]) -> dict[str, dict]:
    """Each length's rows of report.json: every prediction's point scores against (d), the gradient norm, with
    the W1 interval and ``beats_flat`` (decided on the interval), taken from the matrix's gradient-norm column
    on all positions (``posbias.validate.matrix.score_matrix``; the flat row has no ``beats_flat``)."""
    return {key: {f: row[f] for f in ROW_FIELDS if f in row} for key, row in grad_column.items()}


def length_panels(m, backend) -> tuple[dict[str, np.ndarray], tuple[str, ...]]:
    """One length's predictions: the paper's (``posbias.validate.predict``) and the variants of
    ``posbias.validate.panels`` (panel (i) omitted with a note where the bias fit fails), and the notes."""
    from posbias.fit.bias import BiasFitError
    from posbias.validate.panels import bias_prediction, extra_predictions

    panels = predictions(m, backend.slopes, causal=backend.causal)
    panels.update(extra_predictions(m, causal=backend.causal))
    try:
        panels["i"] = bias_prediction(m)
    except BiasFitError as exc:
        return panels, (f"N = {m.num_tokens}: panel (i) omitted: {exc}.",)
    return panels, ()


@dataclass(frozen=True)
class Validation:
    """What ``validate`` wrote: the files, report.json's text and report.md's."""

    written: list[Path]
    report_json: str
    report_markdown: str


def validate(
    backend,
    lengths,
    samples: int,
    out: Path,
    *,
    show: bool = True,
    bootstrap: Bootstrap | None = None,
    sink_fit: tuple[int, ...] | None = sf.DEFAULT_SINKS,
    sink_fit_required: bool = False,
) -> Validation:
    """The experiment on ``backend`` (a ``posbias.measure.backend.Backend``) at ``lengths`` (None: the
    backend's defaults), ``samples`` windows per length, into ``out``; refused in one line (``UserError``)
    before any weight is read when a length, the memory or the text does not allow it. Every prediction is
    scored against every influence measure the backend's options ask for, with ``bootstrap`` intervals
    (``posbias.validate.matrix``; default ``Bootstrap()``); a row's ``beats_flat`` is decided on the interval.
    ``sink_fit``: a sink set K for the rows (l), (m) and (n) of ``posbias.validate.sink_fit`` (c fitted on windows
    disjoint from every scored one, at the smallest length; default K = {0}), None to leave them out;
    ``sink_fit_required``: refuse in one line when the text leaves no room for the fit set or a fitted c lies at
    the edge of its range (``--sink-fit``), where by default (m) and (n) are left out with a note."""
    from posbias.io.files import check_out, write_run
    from posbias.io.output import position_csv
    from posbias.measure.influence import profile as influence_profile
    from posbias.measure.pipeline import load, measure_lengths, prepare
    from posbias.measure.sinks import sink_diagnostics
    from posbias.validate.matrix import score_matrix, shapes
    from posbias.validate.matrix_figure import matrix_figure
    from posbias.validate.panels import figure as variants_figure
    from posbias.validate.panels import kernels_npz

    lengths = tuple(lengths or backend.default_lengths)
    too_long = [n for n in lengths if backend.limit is not None and n > backend.limit]
    if too_long:
        raise UserError(f"--lengths: N = {too_long[0]} is longer than the model's {backend.limit_phrase}")
    check_out(out, ("report.json", "report.md", "validate.png", "matrix.png"))
    plans, sequences = prepare(backend, lengths, samples, "--lengths", lambda n: validate_bytes(backend.layers, n))
    fit_set, fit_notes = sf.plan(backend, sink_fit, lengths, samples, required=sink_fit_required)
    notes = prediction_notes(backend) + fit_notes
    beyond = [str(n) for n in lengths if backend.training_length is not None and n > backend.training_length]
    if beyond:
        notes += (
            f"N = {', '.join(beyond)}: longer than the training length {backend.training_length} in "
            f"config.json ({'ALiBi extrapolates' if backend.positions == 'alibi' else 'the model extrapolates'}).",
        )
    measurer, measured_notes = load(backend, "validate")
    notes += tuple(measured_notes)
    bootstrap = bootstrap or Bootstrap()
    report, panels_by_n, texts, lambdas, sinks, sinks_by_n, binaries = {}, {}, {}, {}, {}, {}, {}
    matrices, shape_reports, completeness = {}, {}, {}
    fits, unfitted = {}, {}
    if fit_set is not None:
        fits, unfitted = fit_set.fit(measurer, plans, show=show, causal=backend.causal)
    clipped = []
    for n, m in measure_lengths(measurer, plans, sequences, show=show):
        panels, omitted = length_panels(m, backend)
        notes += omitted
        fitted = {}
        if fit_set is not None:
            panels["l"], fitted, over = sf.length_rows(m, fit_set.sinks, fits, causal=backend.causal)
            clipped += [f"N = {n}, {where}" for where in over]
        panels["d"] = m.influence
        keys = [k for k in PREDICTIONS + VARIANT_PREDICTIONS if k != "flat" and (k in panels or k in fitted)]
        scored = {k: panels[k] for k in keys if k in panels}
        rows = {k: fitted.get(k, panels.get(k)) for k in keys}  # (m), (n): one profile per measure
        matrices[str(n)] = score_matrix(rows, m.scores, bootstrap, num_tokens=n, versus={**sf.VERSUS, **VERSUS})
        shape_reports[str(n)] = shapes(scored, m.scores, bootstrap)
        report[str(n)] = grad_rows(matrices[str(n)]["all"]["grad"])
        sinks[str(n)] = sink_diagnostics(m, causal=backend.causal)
        if m.ig_error is not None:
            completeness[str(n)] = {
                "steps": backend.options.influence.ig_steps,
                "baseline": backend.options.influence.baseline,
                "max_completeness_error": float(m.ig_error.max()),
                "per_sequence_completeness_error": m.ig_error.tolist(),
            }
        sinks_by_n[n] = sinks[str(n)]
        binaries[f"kernels/{n}.npz"] = kernels_npz(m)
        panels_by_n[n] = panels
        lambdas[str(n)] = m.lambdas
        for key in [*"abcde", *VARIANT_PREDICTIONS]:
            if key in panels:
                texts[f"profiles/{n}/{key}.csv"] = position_csv(probability=panels[key])
        texts.update(sf.profile_files(n, fitted))
        for name, scores in m.scores.items():
            if name != "grad":  # (d) is the gradient norm's profile
                probability, sem = influence_profile(scores)
                texts[f"profiles/{n}/d-{name}.csv"] = position_csv(probability=probability, sem=sem)
        if "k" not in panels and not any(note.startswith("Panel (k) omitted") for note in notes):
            notes += (
                "Panel (k) omitted: this backend does not form the residual-norm kernels for this model (a norm "
                "between the attention output and the residual sum; posbias.hf.torch_backend.residual_norm_kernels).",
            )
        del m  # one measurement held at a time (posbias.hf.memory.plan counts one)
    whole = validate_report(report, sinks, matrices, shape_reports, bootstrap.as_dict())
    if completeness:
        whole["diagnostics"]["integrated_gradients"] = completeness
    if fit_set is not None:
        whole["sink_fit"] = sf.fit_report(fits, fit_set, unfitted)
        notes += sf.notes(whole["sink_fit"], clipped)
    text = json.dumps(whole, indent=2) + "\n"
    texts["report.json"] = text
    texts["report.md"] = report_markdown(
        report,
        source=backend.source,
        model_line=backend.model_line(samples),
        notes=notes,
        lambdas=lambdas,
        sinks=sinks,
        matrices=matrices,
        shapes=shape_reports,
        bootstrap=bootstrap,
        sink_fit=whole.get("sink_fit"),
    )
    written = write_run(
        out,
        texts,
        {
            "validate.png": variants_figure(panels_by_n, sinks_by_n, f"posbias validate: {backend.source}"),
            "matrix.png": matrix_figure(matrices, f"posbias validate: {backend.source}"),
        },
        binaries,
    )
    return Validation(written, text, texts["report.md"])
