"""The paper's experiment on the model trained here (``posbias validate``; THEORY.md,
"Comparing with measured influence").

For each sequence length N, on held-out text, the measured influence profile (d) is
compared with four predictions:

(a) attention-only rollout: lambda_t = 1, the model's ALiBi slopes, no content (C1, C3);
(b) residual-aware rollout: the measured lambda_t, no content (C2);
(c) (b) plus the measured content diagonal d (scaled by 1/sqrt(d_head), as the softmax sees it; C4);
(d) measured influence ||d p_top1 / d e_j|| (posbias.lm.measure);
(e) the rollout of the measured, data-set-averaged kernels with the measured lambda_t.

Each of (a), (b), (c), (e) is scored against (d) by W1 on positions / (N - 1), Spearman's
rho and total variation (posbias.compare). Nothing here tunes a prediction to (d): (a)-(c)
use architecture and measured lambda / content only, as in the paper.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from posbias.errors import UserError

PANELS = {
    "a": "attention-only (lambda = 1)",
    "b": "residual-aware (measured lambda)",
    "c": "residual + measured content",
    "d": "measured influence",
    "e": "rollout of measured kernels",
}
PREDICTIONS = ("a", "b", "c", "e")


class ValidateError(UserError):
    """Bad validate input; one line."""


def predictions(measurement, slopes: np.ndarray) -> dict[str, np.ndarray]:
    """Profiles (a), (b), (c), (e) for one measurement (module docstring), float64, each summing to 1."""
    import posbias.numerics as nx

    m = measurement
    n, t = m.num_tokens, len(m.lambdas)
    out = {
        "a": nx.profile(nx.AlibiStack.build(np.ones(t), slopes), n),
        "b": nx.profile(nx.AlibiStack.build(m.lambdas, slopes), n),
        "c": nx.profile(nx.AlibiStack.build(m.lambdas, slopes, m.content.diagonal_scaled), n),
        "e": nx.profile(nx.KernelStack.build(np.asarray(m.kernels, np.float64), m.lambdas, causal=True)),
    }
    profiles = {}
    for key, prof in out.items():
        p = prof.probabilities / prof.probabilities.sum()
        if abs(prof.probabilities.sum() - 1) > 1e-9 or prof.unresolved().any():
            raise ValidateError(f"panel ({key}): the profile is not determined in float64 at N = {n}")
        profiles[key] = p
    return profiles


def score(measured: np.ndarray, profiles: dict[str, np.ndarray]) -> dict[str, dict]:
    """W1 / (N - 1), Spearman and total variation of each prediction against ``measured``."""
    from posbias.compare import spearman, total_variation, w1

    return {k: {"w1": w1(measured, p), "spearman": spearman(measured, p), "tv": total_variation(measured, p)}
            for k, p in profiles.items()}


def report_markdown(report: dict, meta: dict) -> str:
    lines = [f"# posbias validate: {meta['checkpoint']}", "",
             f"Model T = {meta['layers']}, H = {meta['heads']}, width {meta['width']}, context {meta['context']}; "
             f"S = {meta['samples']} held-out sequences per length; float64 measurement.", ""]
    for n, rows in report.items():
        best = min(rows, key=lambda k: rows[k]["w1"])
        lines += [f"## N = {n}", "", "| panel | prediction | W1/(N-1) vs (d) | Spearman vs (d) | TV vs (d) |",
                  "|---|---|---|---|---|"]
        for key, row in rows.items():
            rho = "n/a" if row["spearman"] is None else f"{row['spearman']:.4f}"
            mark = " (best W1)" if key == best else ""
            lines.append(f"| ({key}) | {PANELS[key]}{mark} | {row['w1']:.5f} | {rho} | {row['tv']:.5f} |")
        beats = [k for k in ("b", "c") if rows[k]["w1"] < rows["a"]["w1"]]
        lines += ["", ("(" + "), (".join(beats) + ") beat(s) the attention-only rollout (a) in W1."
                       if beats else "Neither (b) nor (c) beats the attention-only rollout (a) in W1."), ""]
    return "\n".join(lines) + "\n"


def figure(panels_by_n: dict[int, dict[str, np.ndarray]], title: str):
    """One row per N: panels (a), (b), (c), (d) on log axes; (e) dashed over (d)."""
    from matplotlib.figure import Figure

    rows = len(panels_by_n)
    fig = Figure(figsize=(15, 3.3 * rows + 0.5), layout="constrained")
    axes = fig.subplots(rows, 4, squeeze=False)
    for r, (n, panels) in enumerate(panels_by_n.items()):
        x = np.arange(n)
        for c, key in enumerate("abcd"):
            ax = axes[r][c]
            ax.plot(x, panels[key], color="C3" if key == "d" else "C0", lw=1.4, label=f"({key})")
            if key == "d":
                ax.plot(x, panels["e"], color="C2", lw=1.0, ls="--", label="(e) measured kernels")
                ax.legend(fontsize=7, loc="upper center")
            ax.set_yscale("log")
            ax.set_title(f"({key}) {PANELS[key]}, N = {n}", fontsize=9)
            ax.set_xlabel("token position j")
            if c == 0:
                ax.set_ylabel("p(j)")
    fig.suptitle(title)
    return fig


def default_lengths(context: int) -> tuple[int, ...]:
    return (context // 2, context) if context >= 4 else (context,)


EPILOG = """\
examples:
  posbias validate --preset ci --out out/validate              (trains the CI model first if needed)
  posbias validate --checkpoint runs/lm-default --lengths 128,256 --out out/validate
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
        "validate", help="the paper's experiment on the model trained here: predictions (a)-(c), (e) vs influence (d)",
        description="Measure the trained model (training it first if --checkpoint is not given and its run "
                    "folder has no finished checkpoint) at each length and compare the rollout predictions with "
                    "the measured influence. Writes profiles/<N>/{a,b,c,d,e}.csv, report.json, report.md and "
                    "validate.png to --out.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", type=Path, help="a trained run folder or checkpoint.npz (default: train or "
                                                   "resume runs/lm-<preset>)")
    p.add_argument("--preset", choices=("default", "ci"), default="default",
                   help="the model to train when --checkpoint is not given (default: default)")
    p.add_argument("--lengths", type=_lengths, help="sequence lengths N (default: half the context and the context, "
                                                    "i.e. 128,256 for the default model)")
    p.add_argument("--samples", type=int, default=64, help="held-out sequences per length (default 64)")
    p.add_argument("--out", type=Path, help="output folder (default: posbias-out)")
    p.add_argument("--json", action="store_true", help="print report.json instead of the tables")


def _checkpoint(args):
    from posbias.lm import checkpoint as ckpt
    from posbias.lm.config import PRESETS
    from posbias.lm.train import train

    if args.checkpoint is not None:
        return ckpt.load(args.checkpoint), str(args.checkpoint)
    run_dir = Path("runs") / f"lm-{args.preset}"
    preset = PRESETS[args.preset]
    done = (run_dir / ckpt.CHECKPOINT).exists() and ckpt.load(run_dir / ckpt.CHECKPOINT).complete
    if not done:
        print(f"posbias validate: training the {args.preset} model into {run_dir} first", file=sys.stderr)
        train(preset.model, preset.train, run_dir, progress=not args.json, log=lambda line: None)
    return ckpt.load(run_dir / ckpt.CHECKPOINT), str(run_dir)


def run(args) -> int:
    from posbias.files import write_run
    from posbias.lm.data import heldout_sequences, load_corpus
    from posbias.lm.measure import measure
    from posbias.lm.model import slopes_of
    from posbias.output import position_csv
    from posbias.run import progress_bar

    if args.out is not None and str(args.out).strip() == "":
        raise ValidateError("--out: expected a folder name, got an empty string")
    if args.samples < 1:
        raise ValidateError(f"--samples: expected a positive integer, got {args.samples}")
    if args.checkpoint is not None and not args.checkpoint.exists():
        raise ValidateError(f"--checkpoint {args.checkpoint}: no such file or folder")
    loaded, source = _checkpoint(args)
    model = loaded.model
    lengths = args.lengths or default_lengths(model.context)
    too_long = [n for n in lengths if n > model.context]
    if too_long:
        raise ValidateError(f"--lengths: N = {too_long[0]} is longer than the model's context {model.context}")
    corpus = load_corpus()
    slopes = slopes_of(model)
    report, panels_by_n, texts = {}, {}, {}
    for n in lengths:
        sequences = heldout_sequences(corpus.validation, n, args.samples)
        with progress_bar(not args.json, f"measure N = {n}", "sequences") as update:
            m = measure(loaded.params, model, sequences, progress=update)
        panels = predictions(m, slopes)
        panels["d"] = m.influence
        report[str(n)] = score(m.influence, {k: panels[k] for k in PREDICTIONS})
        panels_by_n[n] = panels
        for key in "abcde":
            texts[f"profiles/{n}/{key}.csv"] = position_csv(probability=panels[key])
    meta = {"checkpoint": source, "layers": model.layers, "heads": model.heads, "width": model.width,
            "context": model.context, "samples": args.samples}
    text = json.dumps(report, indent=2) + "\n"
    texts["report.json"] = text
    texts["report.md"] = report_markdown(report, meta)
    written = write_run(args.out or Path("posbias-out"), texts,
                        {"validate.png": figure(panels_by_n, f"posbias validate: {source}")})
    if args.json:
        sys.stdout.write(text)
        return 0
    print(texts["report.md"].rstrip())
    print(f"\nwrote {len(written)} files to {args.out or 'posbias-out'}: profiles/<N>/{{a,b,c,d,e}}.csv, "
          "report.json, report.md, validate.png")
    return 0
