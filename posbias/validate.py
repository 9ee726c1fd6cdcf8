"""The paper's experiment on a measured model (``posbias validate``; THEORY.md,
"Comparing with measured influence"): the model trained here (``posbias train``) or a
Hugging Face checkpoint folder (``posbias.hf``: BERT, BLOOM, Falcon, GPT-2, MPT).

For each sequence length N, on held-out text, the measured influence profile (d) is
compared with four predictions:

(a) attention-only rollout: lambda_t = 1, the model's ALiBi slopes, no content (C1, C3);
(b) residual-aware rollout: the measured lambda_t, no content (C2);
(c) (b) plus the measured content diagonal d, as the softmax sees it: s_t d_raw with s_t
    the layer's logit scale (``ContentFit.diagonal_scaled``; 1/sqrt(d_head) by default) (C4);
(d) measured influence ||d p_top1 / d e_j|| (posbias.lm.measure, posbias.hf.measure);
(e) the rollout of the measured, data-set-averaged kernels with the measured lambda_t;
(i) the rollout of the relative bias fitted to the measured pre-softmax logits, with the measured
    lambda_t (``posbias.validate_panels``, ``posbias.bias_fit``).

The slopes are those the softmax sees (``posbias.hf.forward.slopes`` for checkpoints): zero
for learned absolute positions, where (a) and (b) are rollouts of the mask alone. Decoders
use the causal mask; encoders (``Spec.causal`` false) the full mask, every token reading
every token (bidirectional ALiBi is -m |i - j|, posbias.numerics.masks). The profile is the
last row of the rollout, p = e_{N-1}^T R^(T-1) ... R^(0).

Each of (a), (b), (c), (e) is scored against (d) by W1 on positions / (N - 1), Spearman's
rho and total variation (posbias.distances). Nothing here tunes a prediction to (d): (a)-(c)
use architecture and measured lambda / content only, as in the paper.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from posbias import argtypes
from posbias.argtypes import size
from posbias.errors import UserError
from posbias.io.reports import validate_report
from posbias.validate_panels import PANELS as VARIANT_PANELS
from posbias.validate_panels import PAPER_PANELS
from posbias.validate_panels import PREDICTIONS as VARIANT_PREDICTIONS

PANELS = {**PAPER_PANELS, **VARIANT_PANELS}
PREDICTIONS = ("a", "b", "c", "e")


def predictions(measurement, slopes: np.ndarray, *, causal: bool = True) -> dict[str, np.ndarray]:
    """Profiles (a), (b), (c), (e) for one measurement (module docstring), float64, each summing to 1.

    ``causal`` false: the full mask for (a)-(c) and kernels not required to be lower triangular
    for (e). The content diagonal of (c) is the measurement's ``content.diagonal_scaled`` (s_t d_raw).
    Kernel rows are renormalised in float64 (a float32 measurement sums to 1 only within ~1e-6)."""
    import posbias.numerics as nx
    from posbias.numerics.masks import Causal, Full

    m = measurement
    n, t = m.num_tokens, len(m.lambdas)
    mask = Causal() if causal else Full()
    kernels = np.asarray(m.kernels, np.float64)
    kernels = kernels / kernels.sum(axis=-1, keepdims=True)
    out = {
        "a": nx.profile(nx.AlibiStack.build(np.ones(t), slopes, mask=mask), n),
        "b": nx.profile(nx.AlibiStack.build(m.lambdas, slopes, mask=mask), n),
        "c": nx.profile(nx.AlibiStack.build(m.lambdas, slopes, m.content.diagonal_scaled, mask=mask), n),
        "e": nx.profile(nx.KernelStack.build(kernels, m.lambdas, causal=causal)),
    }
    profiles = {}
    for key, prof in out.items():
        p = prof.probabilities / prof.probabilities.sum()
        if abs(prof.probabilities.sum() - 1) > 1e-9 or prof.unresolved().any():
            raise UserError(f"panel ({key}): the profile is not determined in float64 at N = {n}")
        profiles[key] = p
    return profiles


def score(measured: np.ndarray, profiles: dict[str, np.ndarray]) -> dict[str, dict]:
    """W1 / (N - 1), Spearman and total variation of each prediction against ``measured``."""
    from posbias.distances import spearman, total_variation, w1

    return {
        k: {"w1": w1(measured, p), "spearman": spearman(measured, p), "tv": total_variation(measured, p)}
        for k, p in profiles.items()
    }


def report_markdown(
    report: dict,
    *,
    source: str,
    model_line: str,
    notes: tuple[str, ...] = (),
    lambdas: dict | None = None,
    sinks: dict | None = None,
) -> str:
    """report.md: the model, the notes, and per N the table of (a), (b), (c), (e) and the rows of
    ``posbias.validate_panels`` against (d), with whether each beats the flat baseline, and the sink
    diagnostics (``sinks``: N -> ``posbias.validate_panels.sink_diagnostics``)."""
    from posbias.validate_panels import BASELINES, sinks_markdown

    lines = [f"# posbias validate: {source}", "", model_line, ""]
    lines += [f"- {note}" for note in notes] + ([""] if notes else [])
    for n, rows in report.items():
        best = min((k for k in rows if k not in BASELINES), key=lambda k: rows[k]["w1"])
        lines += [f"## N = {n}", ""]
        if lambdas is not None:
            lam = np.asarray(lambdas[n])
            lines += ["Measured lambda_t: " + ", ".join(f"{v:.4f}" for v in lam) + f" (sum {lam.sum():.4f}).", ""]
        lines += [
            "| panel | prediction | W1/(N-1) vs (d) | Spearman vs (d) | TV vs (d) | beats flat |",
            "|---|---|---|---|---|---|",
        ]
        for key, row in rows.items():
            rho = "n/a" if row["spearman"] is None else f"{row['spearman']:.4f}"
            mark = " (best W1)" if key == best else ""
            flat = {True: "yes", False: "no"}.get(row.get("beats_flat"), "—")
            lines.append(f"| ({key}) | {PANELS[key]}{mark} | {row['w1']:.5f} | {rho} | {row['tv']:.5f} | {flat} |")
        beats = [k for k in ("b", "c") if rows[k]["w1"] < rows["a"]["w1"]]
        verdict = ("Neither (b) nor (c) beats", f"({''.join(beats)}) beats", "Both (b) and (c) beat")[len(beats)]
        lines += ["", f"{verdict} the attention-only rollout (a) in W1."]
        if "flat" in rows:
            winners = [f"({k})" for k, row in rows.items() if k not in BASELINES and row.get("beats_flat")]
            lines += [
                f"{', '.join(winners) if winners else 'No prediction'} "
                f"{'beat' if len(winners) > 1 else 'beats'} the flat profile 1/N in W1."
            ]
        lines += [""]
        if sinks is not None and n in sinks:
            lines += sinks_markdown(sinks[n])
    return "\n".join(lines) + "\n"


def prediction_notes(backend) -> tuple[str, ...]:
    """What a reader of report.md must know about how (a)-(c) and (e) relate to this model's positions and
    mask (``posbias.measure.backend.Backend``'s ``positions``, ``windows_note`` and ``causal``)."""
    mask = "causal mask" if backend.causal else "full mask"
    notes = ()
    if backend.positions == "rotary":
        notes += (
            f"Rotary positions (RoPE): the positional term is not a separable slope, so the ALiBi "
            f"prediction does not apply: (a) and (b) are pure {mask} rollouts (slopes 0, as for learned "
            f"positions); the rotation lives in the content logits (the full pre-softmax q.k), so it reaches "
            f"(c) only through the measured content diagonal and (e) through the measured kernels.",
        )
        if backend.windows_note:
            notes += (
                f"{backend.windows_note}: (a)-(c) use the full {mask}; (e) uses the measured (windowed) kernels.",
            )
    elif backend.positions in ("learned", "unknown"):
        kind = "Learned absolute positions" if backend.positions == "learned" else "Rotary or learned positions"
        notes += (
            f"{kind}: no ALiBi term (slopes 0), so (a) and (b) are pure {mask} rollouts; the position "
            f"signal lives in the content logits, so it reaches (c) only through the measured content "
            f"diagonal and (e) through the measured kernels.",
        )
    if not backend.causal:
        notes += (
            "Encoder: every token reads every token; (a)-(c) and (e) use the full mask and the profile is "
            "the last position's row"
            + (" (ALiBi in (a)-(c): the symmetric -m |i - j|)." if backend.positions == "alibi" else "."),
        )
    return notes


def validate_bytes(layers: int, n: int) -> int:
    """What validate holds beyond a measurement at N (``posbias.hf.memory.host_bytes``): the float64
    kernels, their renormalised copy and the (e) rollout's stack, 3 x 8 T N^2."""
    return 3 * 8 * layers * n * n


EPILOG = """\
examples:
  posbias validate --preset ci --out out/validate              (trains the CI model first if needed)
  posbias validate --checkpoint runs/lm-default --lengths 128,256 --out out/validate
  posbias validate --checkpoint ~/models/bloom-560m --lengths 128,256 --samples 32 --out out/bloom
  posbias validate --checkpoint ~/models/gpt2 --data notes.jsonl --out out/gpt2
"""


def _lengths(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 2:
        raise argparse.ArgumentTypeError(f"expected lengths >= 2, got {text!r}")
    return values


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "validate",
        help="the paper's experiment on a measured model: predictions (a)-(c), (e) vs influence (d)",
        description="Measure a model at each length and compare the rollout predictions with the measured "
        "influence: the model trained here (trained first if --checkpoint is not given and its run "
        "folder has no finished checkpoint) or a Hugging Face checkpoint folder (bert, bloom, falcon, "
        "gpt2, mpt). "
        "Writes profiles/<N>/{a,b,c,d,e}.csv, report.json, report.md and validate.png to --out.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--checkpoint",
        type=Path,
        help="a trained run folder or checkpoint.npz, or a Hugging Face checkpoint folder (config.json, "
        "*.safetensors, tokenizer.json) (default: train or resume runs/lm-<preset>)",
    )
    p.add_argument(
        "--preset",
        choices=("default", "ci"),
        default="default",
        help="the model to train when --checkpoint is not given (default: default)",
    )
    p.add_argument(
        "--lengths",
        type=_lengths,
        help="sequence lengths N (default: half the context and the context, i.e. 128,256 for the "
        "default model; Hugging Face checkpoints: 128,256 with ALiBi, at most the learned "
        "positions otherwise)",
    )
    p.add_argument("--samples", type=int, default=64, help="held-out sequences per length (default 64)")
    p.add_argument(
        "--data",
        type=Path,
        metavar="FILE",
        help='Hugging Face checkpoints: text (.txt) or JSON lines with a "text" field (.jsonl); '
        "default: the pydoc_data validation topics",
    )
    p.add_argument(
        "--precision", choices=("float64", "float32"), default="float64", help="measurement precision (default float64)"
    )
    p.add_argument(
        "--memory",
        type=size,
        metavar="SIZE",
        help="Hugging Face checkpoints: memory budget of each length's measurement, host and device "
        "(default and at most: 80%% of physical memory or POSBIAS_MEMORY_LIMIT), refused before any "
        "weight is read when one sequence per batch exceeds it; a posbias train model: budget of "
        "one batch of sequences (default 1G)",
    )
    p.add_argument(
        "--bos",
        choices=("auto", "yes", "no"),
        default="auto",
        help="Hugging Face checkpoints: start every window with the model's BOS token (yes), never (no), "
        "or as its tokenizer does for one input (auto, default); see posbias.hf.bos",
    )
    p.add_argument(
        "--backend",
        choices=("jax", "transformers"),
        default="jax",
        help="Hugging Face checkpoints and .gguf files: measure with posbias's JAX forward (default) or "
        "with transformers' eager forward and PyTorch hooks (pip install 'posbias[hf]')",
    )
    p.add_argument("--out", type=argtypes.path, help="output folder (default: posbias-out)")
    p.add_argument("--json", action="store_true", help="print report.json instead of the tables")


def run(args) -> int:
    from posbias.bias_fit import BiasFitError
    from posbias.files import check_out, write_run
    from posbias.measure.backend import Options
    from posbias.measure.pipeline import load, measure_lengths, open_backend, prepare
    from posbias.measure.sinks import sink_diagnostics
    from posbias.output import position_csv
    from posbias.validate_panels import bias_prediction, extra_predictions, kernels_npz, mark_flat
    from posbias.validate_panels import figure as variants_figure

    if args.samples < 1:
        raise UserError(f"--samples: expected a positive integer, got {args.samples}")
    if args.checkpoint is not None and not args.checkpoint.exists():
        raise UserError(f"--checkpoint {args.checkpoint}: no such file or folder")
    options = Options(args.precision, args.memory, args.data, args.bos, verb="validated")
    backend = open_backend(
        args.checkpoint, options, args.backend, flag="--checkpoint", preset=args.preset, progress=not args.json
    )
    lengths = tuple(args.lengths or backend.default_lengths)
    out = args.out or Path("posbias-out")
    too_long = [n for n in lengths if backend.limit is not None and n > backend.limit]
    if too_long:
        raise UserError(f"--lengths: N = {too_long[0]} is longer than the model's {backend.limit_phrase}")
    check_out(out, ("report.json", "report.md", "validate.png"))
    plans, sequences = prepare(backend, lengths, args.samples, "--lengths", lambda n: validate_bytes(backend.layers, n))
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
    for n, m in measure_lengths(measurer, plans, sequences, show=not args.json):
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
        model_line=backend.model_line(args.samples),
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
    if args.json:
        sys.stdout.write(text)
        return 0
    print(texts["report.md"].rstrip())
    print(
        f"\nwrote {len(written)} files to {args.out or 'posbias-out'}: profiles/<N>/<panel>.csv, "
        "kernels/<N>.npz, report.json, report.md, validate.png"
    )
    return 0
