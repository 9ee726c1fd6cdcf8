"""The options ``posbias measure`` and ``posbias validate`` share: what text the model reads, in which
precision, within which memory, with or without a BOS token, through which backend
(``posbias.measure.backend.Options``)."""

from __future__ import annotations

from pathlib import Path

from posbias.cli.argtypes import at_least, size
from posbias.measure.influence import BASELINES, DEFAULT_IG_STEPS, IG_MAX_ERROR


def add(parser, *, memory_scope: str) -> None:
    """Add --data, --precision, --memory, --bos and --backend to ``parser``; ``memory_scope`` says what the
    budget of a checkpoint covers ("the whole measurement", "each length's measurement")."""
    parser.add_argument(
        "--data",
        type=Path,
        metavar="FILE",
        help='Hugging Face checkpoints and .gguf files: text (.txt) or JSON lines with a "text" field (.jsonl); '
        "default: the pydoc_data validation topics",
    )
    parser.add_argument(
        "--precision", choices=("float64", "float32"), default="float64", help="measurement precision (default float64)"
    )
    parser.add_argument(
        "--memory",
        type=size,
        metavar="SIZE",
        help=f"Hugging Face checkpoints and .gguf files: memory budget of {memory_scope}, host and device "
        "(default and at most: 80%% of physical memory or POSBIAS_MEMORY_LIMIT; --backend transformers: "
        "1G of working memory per batch), refused before any weight is read when one sequence per batch "
        "exceeds it; a posbias train model: budget of one batch of sequences (default 1G)",
    )
    parser.add_argument(
        "--bos",
        choices=("auto", "yes", "no"),
        default="auto",
        help="Hugging Face checkpoints and .gguf files: start every window with the model's BOS token (yes), "
        "never (no), or as its tokenizer does for one input (auto, default); see posbias.hf.bos",
    )
    parser.add_argument(
        "--influence",
        default="grad",
        metavar="MEASURES",
        help="influence measures, comma-separated: grad (||d p_top1 / d e_j||, always measured), gradxinput, "
        "gradxinput-norm, ig (integrated gradients), occlusion-logp, occlusion-kl, occlusion (both) or all; an "
        "encoder without a language-model head: occlusion-shift in place of the occlusions; "
        "see posbias.measure.influence (default grad)",
    )
    parser.add_argument(
        "--ig-steps",
        type=at_least(1),
        default=DEFAULT_IG_STEPS,
        metavar="K",
        help=f"integrated gradients: intervals of the error-guided trapezoid rule along the path, K + 1 "
        f"gradients (default {DEFAULT_IG_STEPS}); a run whose "
        f"completeness error exceeds {IG_MAX_ERROR * 100:g}%% is refused",
    )
    parser.add_argument(
        "--baseline",
        choices=BASELINES,
        default="zero",
        help="the embedding integrated gradients start from and occlusion puts in: zero, or the mean of the "
        "token-embedding table (default zero)",
    )
    parser.add_argument(
        "--backend",
        choices=("jax", "transformers"),
        default="jax",
        help="Hugging Face checkpoints and .gguf files: jax (posbias's own forward, default) or "
        "transformers (its eager forward with PyTorch hooks, for architectures posbias's JAX "
        "families do not cover: needs pip install 'posbias[hf]')",
    )


def options(args, verb: str):
    """The ``posbias.measure.backend.Options`` of parsed arguments (``verb``: "measured" or "validated")."""
    from posbias.measure.backend import Options
    from posbias.measure.influence import Influence, parse

    influence = Influence(parse(args.influence), args.ig_steps, args.baseline)
    return Options(args.precision, args.memory, args.data, args.bos, verb=verb, influence=influence)
