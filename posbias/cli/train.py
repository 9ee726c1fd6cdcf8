"""``posbias train``: train the byte-level ALiBi model (``posbias.lm.train``), resuming where a run stopped.

``add_parser(subparsers)`` adds the subcommand, ``run(args)`` executes it (bad input: one line on stderr,
exit code 2, nothing written). Nothing here imports JAX until the command runs.
"""

from __future__ import annotations

import argparse

from posbias.cli import argtypes
from posbias.cli.argtypes import at_least
from posbias.cli.refusal import named_refusals
from posbias.lm.limits import PRESET_NAMES, SEED_MAX, SLOPE_CONVENTIONS

_positive = at_least(1)
_nonneg = at_least(0)

TRAIN_EPILOG = """\
examples:
  posbias train --out runs/lm-default                 (the default preset: about 9 minutes on 2 CPU cores)
  posbias train --preset ci --out runs/lm-ci          (under a minute)
  posbias train --out runs/lm-default                 (again after an interruption: resumes from the checkpoint)
"""


def add_parser(subparsers):
    """Add ``train`` to an argparse subparsers object; returns its parser."""
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
    return tr


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


run = named_refusals(_train)
