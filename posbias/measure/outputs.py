"""The files of ``posbias measure``, rendered in memory and written as one set (all or none).

Two sets, by the backend's ``files`` (``posbias.measure.backend``). A model of ``posbias train``
(``FILES["trained"]``, its run folder's layout):

* ``rollout.yaml``: the measured model in the reference schema (../shared/data/README.md)
  that ``posbias rollout`` reads unmodified: the model's slopes, uniform head weights,
  temperature 1, content b and d per layer and head (times the softmax's per-layer scale s_t,
  1/sqrt(d_head) unless the model sets another, by default: the logits the softmax sees; ``raw``
  gives the paper's q.k scale), lambda_t as a custom schedule;
* ``kernels.npz``: ``kernels`` (T, N, N), the head-averaged measured A^(t), and ``lambdas``
  (T,): the ``posbias rollout --kernels`` format;
* ``attention.npz``: ``per_head`` (T, H, N, N), ``content_logits`` (T, H, N, N) mean raw
  q.k, ``slopes`` (H,), ``grad_norms`` (S, N), ``lambda_per_sequence`` (S, T), ``scales`` (T,) the softmax's
  per-layer factor s_t, ``causal`` (the mask) and ``logits_note`` ("" or why the bias fit is refused): what
  ``posbias fit MEASUREMENT_DIR`` reads;
* ``influence.csv``: ``token_position,influence,grad_norm_mean,grad_norm_sem`` (a standard error is
  ``nan`` when S = 1: it needs two sequences);
* ``lambda.csv``: ``layer,lambda,std,std_positions,sem``;
* ``content.csv``: ``layer,head,slope,background_raw,diagonal_raw,background_scaled,diagonal_scaled,r2``;
* ``bias_fit.json``: the relative-bias fit of the mean pre-softmax logits (``posbias.fit.bias``: the
  table family with the default smoothness; per layer and head b(g), d, s and R^2), or the one-line
  reason it was not determined (N too short). The config schema gives one bias per head for all
  layers, so no rollout YAML of these per-layer biases is written; ``posbias fit MEASUREMENT_DIR
  --bias FAMILY`` refits with another family;
* ``measure.json`` (``posbias.io.reports``, schema version 2): the summary (source checkpoint, N, S,
  precision, lambdas, content, notes), and under ``diagnostics`` the sink diagnostics per layer
  (``posbias.measure.sinks``);
* ``lambda.png``: lambda_t per layer with +-2 std error bars.

A Hugging Face folder or a GGUF file (``FILES["checkpoint"]``, either backend):

* ``config.yaml``: the measured model in the reference schema, read by ``posbias rollout``
  unmodified (``posbias.measure.outputs.rollout_yaml``: slopes, uniform head weights, content
  b and d per layer and head, lambda_t as a custom schedule);
* ``kernels.npz``: ``kernels`` (T, N, N) head-averaged measured A^(t) and ``lambdas`` (T,)
  (the ``posbias rollout --kernels`` format), plus ``per_head`` (T, H, N, N),
  ``content_logits`` (T, H, N, N), ``slopes`` (H,) and the value-norm-weighted head-mean kernels
  ``kernels_value`` (T, N, N) with the value norms ``value_norms`` (T, H, N) (``posbias.lm.measure``), the
  residual-norm kernels ``kernels_norm`` (T, N, N) where the backend forms them
  (``posbias.measure.quantities.residual_norm_kernel``), lambda per position ``lambda_positions`` (T, N)
  and, where the backend forms them, the MLP-as-self ratios ``lambda_self`` (T, N)
  (``posbias.measure.quantities.EXTRAS``), the softmax's per-layer factors ``scales`` (T,),
  the mask ``causal`` and ``logits_note`` (why the bias fit is refused, "" when it is not:
  ``Measurement.logits_note``);
* ``bias_fit.json``: the relative-bias fit of the mean pre-softmax logits (``posbias.measure.outputs.bias_fit_json``);
* ``influence.csv``: ``token_position,influence,grad_norm_mean,grad_norm_sem`` (a standard error is
  ``nan`` when S = 1: it needs two sequences);
* ``lambdas.csv``: ``layer,mean,std`` (std over sequences of per-sequence means);
* ``report.json`` (``posbias.io.reports``, schema version 2): checkpoint, family, shapes, data, N, S,
  precision, lambdas, content fit, influence summary, memory estimate, notes, and under ``diagnostics``
  the sink diagnostics per layer (``posbias.measure.sinks``).

Files are rendered first, then written into a fresh staging folder inside the output
folder and moved in by atomic renames, so a failure leaves the folder as it was.
"""

from __future__ import annotations

import io
import json

import numpy as np

from posbias.io.files import HF_MEASURE_FILES, MEASURE_FILES
from posbias.io.output import position_csv
from posbias.io.reports import measure_report
from posbias.measure.influence import MEASURES, profile
from posbias.measure.quantities import EXTRAS
from posbias.measure.sinks import sink_diagnostics

FILES = {"trained": MEASURE_FILES, "checkpoint": HF_MEASURE_FILES}


def _rows(a) -> str:
    return "[" + ", ".join("[" + ", ".join(repr(float(x)) for x in row) + "]" for row in np.asarray(a)) + "]"


def rollout_yaml(m, *, content_scale: str = "scaled", source: str = "", mask: str = "causal") -> str:
    """The reference-schema rollout config of a measurement (module docstring); ``mask`` "full" for
    an encoder, whose tokens read every position."""
    fit = m.content
    b, d = (
        (fit.background_scaled, fit.diagonal_scaled)
        if content_scale == "scaled"
        else (fit.background_raw, fit.diagonal_raw)
    )
    t, h = b.shape
    return (
        f"# measured by posbias measure from {source}: N = {m.num_tokens}, S = {m.samples} held-out sequences,\n"
        f"# content b, d = mean content logits q.k fitted as b + d [i = j] "
        f"({'times the softmax scale s_t' if content_scale == 'scaled' else 'raw q.k'})\n"
        f"sequence_length: {m.num_tokens}\nnum_layers: {t}\n"
        f'mask_config:\n  mask_type: "{mask}"\n'
        f"attention_config:\n  num_heads: {h}\n  alibi_slopes: {_rows([m.slopes])}\n"
        f"  head_weights: {_rows([np.ones(h)])}\n  softmax_temperature: 1.0\n"
        f"content_config:\n  diagonal_scores: {_rows(d)}\n  base_scores: {_rows(b)}\n"
        f'lambda_schedule_config:\n  schedule_type: "custom"\n'
        f"  lambdas_custom: [{', '.join(repr(float(x)) for x in m.lambdas)}]\n"
    )


def bias_fit_json(m) -> bytes:
    """bias_fit.json of a measurement (module docstring): ``posbias.fit.bias.fit_measurement``'s summary,
    or {"refused": reason} when the logits do not determine the fit."""
    from posbias.fit.bias import BiasFitError, fit_measurement

    try:
        record = fit_measurement(m).summary()
    except BiasFitError as exc:
        record = {"refused": str(exc)}
    return (json.dumps(record, indent=1, allow_nan=False) + "\n").encode()


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def lambda_figure(m, title: str):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 3.6), constrained_layout=True)
    ax = fig.add_subplot()
    layers = np.arange(len(m.lambdas))
    ax.errorbar(layers, m.lambdas, yerr=2 * m.lambda_std, fmt="o-", capsize=4, label="λ_t ± 2 std (over sequences)")
    ax.set_xlabel("layer t")
    ax.set_ylabel("λ_t = ‖a_t‖ / (‖x_t‖ + ‖a_t‖)")
    ax.set_xticks(layers)
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    return fig


def report_fields(m, *, source: str, content_scale: str, meta: dict, causal: bool) -> dict:
    """The fields of measure.json / report.json (both sets): ``meta`` (the model's), the sizes, lambda_t with
    its spreads, the content fit (scaled and raw), the influence's ends and argmin, and the kernels' largest
    row-sum error (and, under the causal mask, their largest entry above the diagonal)."""
    fit = m.content
    kernels = np.asarray(m.kernels, np.float64)
    fields = {
        **meta,
        "source": source,
        "num_tokens": m.num_tokens,
        "samples": m.samples,
        "precision": m.precision,
        "batch": m.batch,
        "content_scale_in_yaml": content_scale,
        "slopes": m.slopes.tolist(),
        "lambdas": m.lambdas.tolist(),
        "lambda_std": m.lambda_std.tolist(),
        "lambda_std_positions": m.lambda_std_positions.tolist(),
        "sum_lambda": float(m.lambdas.sum()),
        "content": {
            "background_scaled": fit.background_scaled.tolist(),
            "diagonal_scaled": fit.diagonal_scaled.tolist(),
            "background_raw": fit.background_raw.tolist(),
            "diagonal_raw": fit.diagonal_raw.tolist(),
            "r2": fit.r2.tolist(),
            "mean_r2": float(fit.r2.mean()),
        },
        "influence": {
            "first": float(m.influence[0]),
            "last": float(m.influence[-1]),
            "argmin": int(np.argmin(m.influence)),
        },
        "max_row_sum_error": float(np.abs(kernels.sum(axis=-1) - 1).max()),
    }
    if causal:
        fields["max_upper_triangle"] = float(np.abs(np.triu(kernels, 1)).max())
    extra = {name: profile(m.scores[name])[0] for name in MEASURES if name != "grad" and name in (m.scores or {})}
    if extra:
        fields["influence_measures"] = {
            name: {"first": float(p[0]), "last": float(p[-1]), "argmin": int(np.argmin(p))} for name, p in extra.items()
        }
    if m.ig_error is not None:
        fields["integrated_gradients"] = {
            "max_completeness_error": float(m.ig_error.max()),
            "mean_completeness_error": float(m.ig_error.mean()),
            "per_sequence_completeness_error": m.ig_error.tolist(),
        }
    return fields


def influence_csv(m) -> str:
    """influence.csv: ``token_position,influence,grad_norm_mean,grad_norm_sem`` (the gradient norm's profile,
    its raw mean and standard error; a standard error is ``nan`` when S = 1), then for every further measure
    asked its profile and standard error on the profile's scale (``<name>,<name>_sem``,
    ``posbias.measure.influence.profile``)."""
    s = m.samples
    sem = m.grad_norms.std(axis=0, ddof=1) / np.sqrt(s) if s > 1 else np.full(m.num_tokens, np.nan)
    columns = {"influence": m.influence, "grad_norm_mean": m.grad_norms.mean(axis=0), "grad_norm_sem": sem}
    for name in MEASURES:
        if name != "grad" and name in (m.scores or {}):
            columns[name], columns[f"{name}_sem"] = profile(m.scores[name])
    return position_csv(**columns)


def render_trained(m, *, source: str, content_scale: str, meta: dict) -> dict[str, bytes]:
    """name -> file contents of the set of a posbias train model (module docstring)."""
    s, t, h = m.samples, len(m.lambdas), len(m.slopes)
    lam_sem = m.lambda_per_sequence.std(axis=0, ddof=1) / np.sqrt(s) if s > 1 else np.full(t, np.nan)
    fit = m.content
    lines = ["layer,head,slope,background_raw,diagonal_raw,background_scaled,diagonal_scaled,r2"]
    for i in range(t):
        for k in range(h):
            lines.append(
                ",".join(
                    [str(i), str(k)]
                    + [
                        repr(float(v))
                        for v in (
                            m.slopes[k],
                            fit.background_raw[i, k],
                            fit.diagonal_raw[i, k],
                            fit.background_scaled[i, k],
                            fit.diagonal_scaled[i, k],
                            fit.r2[i, k],
                        )
                    ]
                )
            )
    lam_lines = ["layer,lambda,std,std_positions,sem"] + [
        f"{i},{float(m.lambdas[i])!r},{float(m.lambda_std[i])!r},{float(m.lambda_std_positions[i])!r},"
        f"{float(lam_sem[i])!r}"
        for i in range(t)
    ]
    summary = report_fields(m, source=source, content_scale=content_scale, meta=meta, causal=True)
    fig = lambda_figure(m, f"{source}: N = {m.num_tokens}, S = {s}")
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=150)
    return {
        "rollout.yaml": rollout_yaml(m, content_scale=content_scale, source=source).encode(),
        "kernels.npz": _npz(kernels=m.kernels, lambdas=m.lambdas),
        "attention.npz": _npz(
            per_head=m.kernels_per_head,
            content_logits=m.content_mean,
            slopes=m.slopes,
            grad_norms=m.grad_norms,
            lambda_per_sequence=m.lambda_per_sequence,
            scales=m.scales,
            causal=np.asarray(m.causal),
            logits_note=np.asarray(m.logits_note),
        ),
        "influence.csv": influence_csv(m).encode(),
        "lambda.csv": ("\n".join(lam_lines) + "\n").encode(),
        "content.csv": ("\n".join(lines) + "\n").encode(),
        "measure.json": (json.dumps(measure_report(summary, sink_diagnostics(m)), indent=1) + "\n").encode(),
        "bias_fit.json": bias_fit_json(m),
        "lambda.png": png.getvalue(),
    }


def render_checkpoint(m, *, source: str, content_scale: str, meta: dict, causal: bool = True) -> dict[str, bytes]:
    """name -> contents of the set of a Hugging Face folder or GGUF file (module docstring; ``causal`` false:
    an encoder, whose config.yaml says mask_type full)."""
    t = len(m.lambdas)
    buf = io.BytesIO()
    variants = {name: getattr(m, name) for name in EXTRAS if getattr(m, name) is not None}
    np.savez(
        buf,
        kernels=m.kernels,
        lambdas=m.lambdas,
        per_head=m.kernels_per_head,
        content_logits=m.content_mean,
        slopes=m.slopes,
        scales=m.scales,
        causal=np.asarray(m.causal),
        logits_note=np.asarray(m.logits_note),
        **variants,
    )
    lam = ["layer,mean,std"] + [f"{i},{float(m.lambdas[i])!r},{float(m.lambda_std[i])!r}" for i in range(t)]
    report = report_fields(m, source=source, content_scale=content_scale, meta=meta, causal=causal)
    report = measure_report(report, sink_diagnostics(m, causal=causal))
    return {
        "config.yaml": rollout_yaml(
            m, content_scale=content_scale, source=source, mask="causal" if causal else "full"
        ).encode(),
        "kernels.npz": buf.getvalue(),
        "influence.csv": influence_csv(m).encode(),
        "lambdas.csv": ("\n".join(lam) + "\n").encode(),
        "report.json": (json.dumps(report, indent=1) + "\n").encode(),
        "bias_fit.json": bias_fit_json(m),
    }


def print_summary(title: str, m, written) -> None:
    """The lines ``posbias measure`` prints for a measurement ``m`` (every backend)."""
    lam = "  ".join(f"{v:.3f}±{s:.3f}" for v, s in zip(m.lambdas, m.lambda_std))
    print(f"posbias measure: {title}")
    print(f"  lambda_t (± std over sequences): {lam}   sum = {m.lambdas.sum():.3f}")
    print(
        "  content d (scaled) per layer, head-mean: "
        + "  ".join(f"{v:+.3f}" for v in m.content.diagonal_scaled.mean(axis=1))
        + f"   R^2 mean {m.content.r2.mean():.3f}"
    )
    print(
        f"  influence: p(0) = {m.influence[0]:.4g}   p(N-1) = {m.influence[-1]:.4g}   "
        f"argmin = {int(m.influence.argmin())}"
    )
    print("  wrote " + ", ".join(str(p) for p in written))
