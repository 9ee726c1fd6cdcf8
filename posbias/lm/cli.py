"""``posbias train`` and ``posbias measure``: train the byte-level ALiBi model, measure it.

``add_parser(subparsers)`` adds both subcommands to the ``posbias`` command's parser and
``run(args)`` executes them (bad input: one line on stderr, exit code 2, nothing written);
``main(argv)`` runs them on their own (``python -m posbias.lm.cli train ...``).
Nothing here imports JAX until a command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from posbias import argtypes
from posbias.argtypes import at_least, size
from posbias.errors import UserError
from posbias.lm.limits import PRESET_NAMES, SEED_MAX, SLOPE_CONVENTIONS

EXIT_USAGE = 2

_positive = at_least(1)
_nonneg = at_least(0)

TRAIN_EPILOG = """\
examples:
  posbias train --out runs/lm-default                 (the default preset: about 9 minutes on 2 CPU cores)
  posbias train --preset ci --out runs/lm-ci          (under a minute)
  posbias train --out runs/lm-default                 (again after an interruption: resumes from the checkpoint)
"""

MEASURE_EPILOG = """\
examples:
  posbias measure runs/lm-default --tokens 256 --samples 64
  posbias rollout runs/lm-default/measure-N256-S64/rollout.yaml
  posbias rollout --kernels runs/lm-default/measure-N256-S64/kernels.npz --causal
"""


def add_parser(subparsers) -> tuple:
    """Add ``train`` and ``measure`` to an argparse subparsers object; returns both parsers."""
    tr = subparsers.add_parser(
        "train",
        help="train the byte-level ALiBi language model on CPython's reference text",
        description="Train a JAX decoder (pre-LayerNorm, ALiBi heads, GELU MLP, bytes) on pydoc_data.topics with "
        "AdamW; checkpoints are atomic and a second run with the same --out resumes.",
        epilog=TRAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tr.add_argument(
        "--out", type=argtypes.path, required=True, help="run folder (checkpoint.npz, config.json, train.json)"
    )
    tr.add_argument(
        "--preset",
        choices=PRESET_NAMES,
        default="default",
        help="default (the measured model) or ci (tiny, under a minute)",
    )
    m = tr.add_argument_group("model (override the preset)")
    m.add_argument("--layers", type=_positive, metavar="T")
    m.add_argument("--heads", type=_positive, metavar="H")
    m.add_argument("--width", type=_positive, metavar="D", help="model width (a multiple of H)")
    m.add_argument("--context", type=_positive, metavar="N", help="context length (longest input)")
    m.add_argument("--slopes", choices=SLOPE_CONVENTIONS, help="ALiBi slopes: paper 2^(-8h/H) or hf")
    o = tr.add_argument_group("training (override the preset)")
    o.add_argument("--steps", type=_positive)
    o.add_argument("--batch", type=_positive, help="sequences per step")
    o.add_argument("--lr", type=argtypes.positive_float, help="peak learning rate (a finite number > 0)")
    o.add_argument("--warmup", type=_nonneg, help="warm-up steps")
    o.add_argument("--seed", type=argtypes.integer_in(0, SEED_MAX), help=f"in [0, {SEED_MAX}]")
    o.add_argument("--eval-every", type=_positive, metavar="K", help="validation every K steps")
    tr.add_argument(
        "--checkpoint-every",
        type=_positive,
        metavar="K",
        help="write the checkpoint every K steps (default: --eval-every); does not change the result",
    )
    tr.add_argument("--quiet", action="store_true", help="no progress bar or per-evaluation lines")

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
        "--data",
        type=Path,
        metavar="FILE",
        help='Hugging Face checkpoints: text (.txt) or JSON lines with a "text" field (.jsonl); '
        "default: the pydoc_data validation topics",
    )
    me.add_argument(
        "--tokens",
        type=_nonneg,
        metavar="N",
        help="sequence length (default: the model's context; Hugging Face checkpoints: 256)",
    )
    me.add_argument("--samples", type=_nonneg, metavar="S", default=64, help="held-out sequences (default 64)")
    me.add_argument("--out", type=argtypes.path, help="output folder (default: RUN/measure-N<N>-S<S>)")
    me.add_argument("--precision", choices=("float64", "float32"), default="float64")
    me.add_argument(
        "--memory",
        type=size,
        metavar="SIZE",
        help="Hugging Face checkpoints: memory budget of the whole measurement, host and device "
        "(default and at most: 80%% of physical memory or POSBIAS_MEMORY_LIMIT), refused before "
        "any weight is read when one sequence per batch exceeds it; a posbias train model: budget "
        "of one batch of sequences (default 1G)",
    )
    me.add_argument(
        "--content-scale",
        choices=("scaled", "raw"),
        default="scaled",
        help="content b, d in rollout.yaml: times the softmax's per-layer scale s_t (1/sqrt(d_head) unless "
        "the model sets another) as the softmax sees them (default), "
        "or raw q.k as the paper's code records them",
    )
    me.add_argument(
        "--backend",
        choices=("jax", "transformers"),
        default="jax",
        help="Hugging Face checkpoints and .gguf files: jax (posbias's own forward, default) or "
        "transformers (its eager forward with PyTorch hooks, for architectures posbias's JAX "
        "families do not cover: needs pip install 'posbias[hf]')",
    )
    me.add_argument(
        "--bos",
        choices=("auto", "yes", "no"),
        default="auto",
        help="Hugging Face checkpoints and .gguf files: start every window with the model's BOS token (yes), "
        "never (no), or as its tokenizer does for one input (auto, default); see posbias.hf.bos",
    )
    me.add_argument("--quiet", action="store_true", help="no progress bar")
    return tr, me


def run(args) -> int:
    """Execute ``posbias train`` or ``posbias measure`` from parsed arguments; returns the exit code."""
    try:
        if args.command == "train":
            return _train(args)
        return _measure(args)
    except UserError as exc:
        print(f"posbias {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _train(args) -> int:
    from posbias.lm.config import PRESETS, ModelConfig, TrainConfig, checked
    from posbias.lm.train import train

    preset = PRESETS[args.preset]

    def given(names):
        return {k: getattr(args, k) for k in names if getattr(args, k) is not None}

    model = checked(ModelConfig, **preset.model.to_dict() | given(("layers", "heads", "width", "context", "slopes")))
    fields = preset.train.to_dict() | given(("steps", "batch", "lr", "warmup", "seed", "eval_every"))
    if args.warmup is None and fields["warmup"] >= fields["steps"]:
        fields["warmup"] = fields["steps"] // 10
    cfg = checked(TrainConfig, **fields)
    result = train(
        model,
        cfg,
        args.out,
        checkpoint_every=args.checkpoint_every,
        progress=not args.quiet,
        log=(lambda line: None) if args.quiet else None,
    )
    resumed = f" (resumed at step {result.resumed_from})" if result.resumed_from else ""
    print(
        f"posbias train: T={model.layers}, H={model.heads}, D={model.width}, context {model.context}, "
        f"{cfg.steps} steps{resumed}, {result.wall_s:.0f} s"
    )
    print(
        f"  bits per byte: train {result.train_bpb:.4f}   validation {result.val_bpb:.4f}   "
        f"unigram (validation) {result.unigram_bpb:.4f}"
    )
    print("  wrote " + ", ".join(str(p) for p in result.files))
    return 0


def _measure(args) -> int:
    from posbias.measure.backend import Options
    from posbias.measure.pipeline import measure_to_folder, open_backend

    options = Options(precision=args.precision, memory=args.memory, data=args.data, bos=args.bos)
    backend = open_backend(args.checkpoint, options, args.backend, flag="RUN")
    return measure_to_folder(
        backend,
        tokens=args.tokens,
        samples=args.samples,
        out=args.out,
        content_scale=args.content_scale,
        show=not args.quiet,
    )


def main(argv=None) -> int:
    """``posbias train|measure ...`` (the same parser and behaviour as the posbias command)."""
    from posbias.cli import main as posbias_main

    return posbias_main([*(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
