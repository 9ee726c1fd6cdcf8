"""The files of ``posbias measure``, rendered in memory and written as one set (all or none).

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
* ``bias_fit.json``: the relative-bias fit of the mean pre-softmax logits (``posbias.bias_fit``: the
  table family with the default smoothness; per layer and head b(g), d, s and R^2), or the one-line
  reason it was not determined (N too short). The config schema gives one bias per head for all
  layers, so no rollout YAML of these per-layer biases is written; ``posbias fit MEASUREMENT_DIR
  --bias FAMILY`` refits with another family;
* ``measure.json``: the summary (source checkpoint, N, S, precision, lambdas, content, notes);
* ``lambda.png``: lambda_t per layer with +-2 std error bars.

Files are rendered first, then written into a fresh staging folder inside the output
folder and moved in by atomic renames, so a failure leaves the folder as it was.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np

from posbias.errors import UserError
from posbias.files import MEASURE_FILES
from posbias.output import position_csv


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
    """bias_fit.json of a measurement (module docstring): ``posbias.bias_fit.fit_measurement``'s summary,
    or {"refused": reason} when the logits do not determine the fit."""
    from posbias.bias_fit import BiasFitError, fit_measurement

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


def render(m, *, source: str, content_scale: str, meta: dict) -> dict[str, bytes]:
    """name -> file contents of a measurement's set."""
    s, t, h = m.samples, len(m.lambdas), len(m.slopes)
    sem = m.grad_norms.std(axis=0, ddof=1) / np.sqrt(s) if s > 1 else np.full(m.num_tokens, np.nan)
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
    summary = {
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
        "max_row_sum_error": float(np.abs(m.kernels.sum(axis=-1) - 1).max()),
        "max_upper_triangle": float(np.abs(np.triu(m.kernels, 1)).max()),
    }
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
        "influence.csv": position_csv(
            influence=m.influence, grad_norm_mean=m.grad_norms.mean(axis=0), grad_norm_sem=sem
        ).encode(),
        "lambda.csv": ("\n".join(lam_lines) + "\n").encode(),
        "content.csv": ("\n".join(lines) + "\n").encode(),
        "measure.json": (json.dumps(summary, indent=1) + "\n").encode(),
        "bias_fit.json": bias_fit_json(m),
        "lambda.png": png.getvalue(),
    }


def check_out(out_dir: Path) -> None:
    """Refuse an unusable --out before any work (one line)."""
    out_dir = Path(out_dir)
    if str(out_dir).strip() == "":
        raise UserError("--out: expected a folder name, got an empty string")
    if os.path.lexists(out_dir) and not out_dir.is_dir():
        raise UserError(f"--out {out_dir}: exists and is not a folder")
    for name in MEASURE_FILES:
        target = out_dir / name
        if os.path.lexists(target) and not target.is_file():
            raise UserError(f"--out {out_dir}: {name} exists and is not a regular file")


def write_set(out_dir: Path, files: dict[str, bytes]) -> list[Path]:
    """Write ``files`` into ``out_dir`` all or none (posbias.files.write_run: staging folder,
    atomic renames under a folder lock, stale staging folders of killed runs removed)."""
    from posbias.files import write_run

    return write_run(Path(out_dir), {}, binaries=files)
