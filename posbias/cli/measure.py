"""``posbias measure``: lambda_t, kernels, content and influence of a model, written to one folder.

The model is a run folder of ``posbias train``, a Hugging Face checkpoint folder or a .gguf file, measured
through the pipeline of ``posbias.measure.pipeline`` (its backends: ``posbias.measure.backend``).
``add_parser(subparsers)`` adds the subcommand, ``run(args)`` executes it (bad input: one line on stderr,
exit code 2, nothing written). Nothing here imports JAX until the command runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from posbias.cli import argtypes, model_options
from posbias.cli.argtypes import at_least
from posbias.cli.refusal import named_refusals

_nonneg = at_least(0)

MEASURE_EPILOG = """\
examples:
  posbias measure runs/lm-default --tokens 256 --samples 64
  posbias rollout runs/lm-default/measure-N256-S64/rollout.yaml
  posbias rollout --kernels runs/lm-default/measure-N256-S64/kernels.npz --causal
"""


def add_parser(subparsers):
    """Add ``measure`` to an argparse subparsers object; returns its parser."""
    me = subparsers.add_parser(
        "measure",
        help="measure a trained model: lambda_t, kernels, content, influence",
        description="Measure a posbias train checkpoint on S held-out sequences of N bytes: lambda_t with error "
        "bars, attention kernels, content b/d, influence ||d p_top1 / d e_j||; writes a rollout "
        "config, the kernels in the --kernels format and the influence profile.",
        epilog=MEASURE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    me.add_argument(
        "checkpoint",
        type=Path,
        metavar="RUN",
        help="run folder of posbias train (or its checkpoint.npz), or a Hugging Face checkpoint folder "
        "(config.json, *.safetensors, tokenizer.json: bert, bloom, falcon, gpt2, mpt)",
    )
    me.add_argument(
        "--tokens",
        type=_nonneg,
        metavar="N",
        help="sequence length (default: the model's context; Hugging Face checkpoints: 256)",
    )
    me.add_argument("--samples", type=_nonneg, metavar="S", default=64, help="held-out sequences (default 64)")
    me.add_argument("--out", type=argtypes.path, help="output folder (default: RUN/measure-N<N>-S<S>)")
    me.add_argument(
        "--content-scale",
        choices=("scaled", "raw"),
        default="scaled",
        help="content b, d in rollout.yaml: times the softmax's per-layer scale s_t (1/sqrt(d_head) unless "
        "the model sets another) as the softmax sees them (default), "
        "or raw q.k as the paper's code records them",
    )
    model_options.add(me, memory_scope="the whole measurement")
    me.add_argument("--quiet", action="store_true", help="no progress bar")
    return me


def _measure(args) -> int:
    from posbias.measure.pipeline import measure_to_folder, open_backend

    backend = open_backend(args.checkpoint, model_options.options(args, "measured"), args.backend, flag="RUN")
    return measure_to_folder(
        backend,
        tokens=args.tokens,
        samples=args.samples,
        out=args.out,
        content_scale=args.content_scale,
        show=not args.quiet,
    )


run = named_refusals(_measure)
