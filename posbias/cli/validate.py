"""``posbias validate``: the paper's experiment on a measured model (``posbias.validate``).

``add_parser(subparsers)`` adds the subcommand, ``run(args)`` executes it: open the model
(``posbias.measure.pipeline.open_backend``), run ``posbias.validate.run.validate``, print report.md (or
report.json with ``--json``). Bad input: one line, exit code 2, nothing written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from posbias.cli import argtypes, model_options
from posbias.errors import UserError

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
        "Every prediction is scored against every influence measure (--influence), on all positions and "
        "without token 0, with bootstrap intervals over the sequences. "
        "Writes profiles/<N>/<panel>.csv, kernels/<N>.npz, report.json, report.md, validate.png and matrix.png "
        "to --out.",
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
    model_options.add(p, memory_scope="each length's measurement")
    p.add_argument(
        "--resamples",
        type=int,
        default=1000,
        help="bootstrap resamples of the sequences for every score's 95%% interval (default 1000)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap resamples (default 0)")
    fit = p.add_mutually_exclusive_group()
    fit.add_argument(
        "--sink-fit",
        action="store_const",
        const="required",
        default="default",
        help="require rows (l), (m) and (n), refusing the run when they cannot be made. By default they are added "
        "where the text allows: (l), the measured kernels with the sink keys moved to the diagonal (C8); (m), the "
        "same with c lambda_t, c fitted per influence measure on windows of the smallest length that share no text "
        "position with any scored window (scored out of sample); (n), the control: (e) with c lambda_t fitted the "
        "same way. Without room in the text for those windows, or with a fitted c at the edge of its range, (m) "
        "and (n) are left out with a note",
    )
    fit.add_argument(
        "--no-sink-fit", dest="sink_fit", action="store_const", const="off", help="leave rows (l), (m) and (n) out"
    )
    p.add_argument(
        "--sinks",
        help="the sink set K of rows (l) and (m), comma-separated key positions inside every window (default 0)",
    )
    p.add_argument("--out", type=argtypes.path, help="output folder (default: posbias-out)")
    p.add_argument("--json", action="store_true", help="print report.json instead of the tables")


def run(args) -> int:
    from posbias.measure.pipeline import open_backend
    from posbias.validate.matrix import Bootstrap
    from posbias.validate.run import validate

    if args.samples < 1:
        raise UserError(f"--samples: expected a positive integer, got {args.samples}")
    bootstrap = Bootstrap(resamples=args.resamples, seed=args.seed)
    from posbias.validate.sink_fit import DEFAULT_SINKS, parse_sinks

    sink_fit = DEFAULT_SINKS if args.sinks is None else parse_sinks(args.sinks)
    if args.sink_fit == "off":
        if args.sinks is not None:
            raise UserError("--sinks: the sink set of rows (l) and (m), which --no-sink-fit leaves out")
        sink_fit = None
    if args.checkpoint is not None and not args.checkpoint.exists():
        raise UserError(f"--checkpoint {args.checkpoint}: no such file or folder")
    backend = open_backend(
        args.checkpoint,
        model_options.options(args, "validated"),
        args.backend,
        flag="--checkpoint",
        preset=args.preset,
        progress=not args.json,
    )
    out = args.out or Path("posbias-out")
    result = validate(
        backend,
        args.lengths,
        args.samples,
        out,
        show=not args.json,
        bootstrap=bootstrap,
        sink_fit=sink_fit,
        sink_fit_required=args.sink_fit == "required",
    )
    if args.json:
        sys.stdout.write(result.report_json)
        return 0
    print(result.report_markdown.rstrip())
    print(
        f"\nwrote {len(result.written)} files to {out}: profiles/<N>/<panel>.csv, "
        "kernels/<N>.npz, report.json, report.md, validate.png, matrix.png"
    )
    return 0
