"""The files of ``posbias measure`` on a Hugging Face checkpoint, rendered in memory and written as one set.

* ``config.yaml``: the measured model in the reference schema, read by ``posbias rollout``
  unmodified (``posbias.lm.outputs.rollout_yaml``: slopes, uniform head weights, content
  b and d per layer and head, lambda_t as a custom schedule);
* ``kernels.npz``: ``kernels`` (T, N, N) head-averaged measured A^(t) and ``lambdas`` (T,)
  (the ``posbias rollout --kernels`` format), plus ``per_head`` (T, H, N, N),
  ``content_logits`` (T, H, N, N), ``slopes`` (H,) and the value-norm-weighted head-mean kernels
  ``kernels_value`` (T, N, N) with the value norms ``value_norms`` (T, H, N) (``posbias.lm.measure``), the
  softmax's per-layer factors ``scales`` (T,), the mask ``causal`` and ``logits_note`` (why the bias fit is
  refused, "" when it is not: ``Measurement.logits_note``);
* ``bias_fit.json``: the relative-bias fit of the mean pre-softmax logits (``posbias.lm.outputs.bias_fit_json``);
* ``influence.csv``: ``token_position,influence,grad_norm_mean,grad_norm_sem`` (a standard error is
  ``nan`` when S = 1: it needs two sequences);
* ``lambdas.csv``: ``layer,mean,std`` (std over sequences of per-sequence means);
* ``report.json`` (``posbias.io.reports``, schema version 2): checkpoint, family, shapes, data, N, S,
  precision, lambdas, content fit, influence summary, memory estimate, notes, and under ``diagnostics``
  the sink diagnostics per layer (``posbias.measure.sinks``).
"""

from __future__ import annotations

import io
import json

import numpy as np

from posbias.io.reports import measure_report
from posbias.lm.outputs import bias_fit_json, rollout_yaml
from posbias.measure.sinks import sink_diagnostics
from posbias.output import position_csv

FILES = ("config.yaml", "kernels.npz", "influence.csv", "lambdas.csv", "report.json", "bias_fit.json")


def render(m, *, source: str, content_scale: str, meta: dict, causal: bool = True) -> dict[str, bytes]:
    """name -> contents of the files of the module docstring (``causal`` false: an encoder, whose
    config.yaml says mask_type full)."""
    s, t = m.samples, len(m.lambdas)
    sem = m.grad_norms.std(axis=0, ddof=1) / np.sqrt(s) if s > 1 else np.full(m.num_tokens, np.nan)
    buf = io.BytesIO()
    variants = {} if m.kernels_value is None else {"kernels_value": m.kernels_value, "value_norms": m.value_norms}
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
    fit = m.content
    report = {
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
            "r2": fit.r2.tolist(),
            "mean_r2": float(fit.r2.mean()),
        },
        "influence": {
            "first": float(m.influence[0]),
            "last": float(m.influence[-1]),
            "argmin": int(np.argmin(m.influence)),
        },
        "max_row_sum_error": float(np.abs(m.kernels.astype(np.float64).sum(axis=-1) - 1).max()),
    }
    report = measure_report(report, sink_diagnostics(m, causal=causal))
    return {
        "config.yaml": rollout_yaml(
            m, content_scale=content_scale, source=source, mask="causal" if causal else "full"
        ).encode(),
        "kernels.npz": buf.getvalue(),
        "influence.csv": position_csv(
            influence=m.influence, grad_norm_mean=m.grad_norms.mean(axis=0), grad_norm_sem=sem
        ).encode(),
        "lambdas.csv": ("\n".join(lam) + "\n").encode(),
        "report.json": (json.dumps(report, indent=1) + "\n").encode(),
        "bias_fit.json": bias_fit_json(m),
    }


def print_summary(title: str, m, written) -> None:
    """The lines ``posbias measure`` prints for a measurement ``m`` (both backends)."""
    lam = "  ".join(f"{v:.3f}±{s:.3f}" for v, s in zip(m.lambdas, m.lambda_std))
    print(f"posbias measure: {title}")
    print(f"  lambda_t (± std over sequences): {lam}   sum = {m.lambdas.sum():.3f}")
    print(
        f"  influence: p(0) = {m.influence[0]:.4g}   p(N-1) = {m.influence[-1]:.4g}   "
        f"argmin = {int(m.influence.argmin())}"
    )
    print("  wrote " + ", ".join(str(p) for p in written))
