"""The ``posbias verify`` subcommand: its argparse parser (``add_parser``), its execution
(``run``: bad input is one line and exit 2, a failed expectation exit 1), and ``main`` for
``python -m posbias.verify``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from posbias.cli import argtypes
from posbias.cli.argtypes import at_least
from posbias.errors import UserError
from posbias.verify.model import verify_model
from posbias.verify.report import print_report
from posbias.verify.runner import verify
from posbias.verify.types import EXIT_USAGE, PROFILES

VERIFY_EPILOG = """\
examples:
  posbias verify                               every claim and every necessity search (profile ci)
  posbias verify C2(b) C6 --profile deep --seed 7
  posbias verify --stack ../shared/data/official-configs/no_content/bloom.yaml --tokens 64
  posbias verify --kernels examples/kernels.npz --causal --json

exit status: 0 when every claim expected to hold held and every expected counterexample
was found, 1 otherwise, 2 on bad input.
"""


_nonneg_int = at_least(0)


def add_parser(subparsers):
    """Add the ``verify`` subcommand to an argparse subparsers object; returns its parser."""
    import argparse

    pv = subparsers.add_parser(
        "verify",
        help="property-based verification of the claims; counterexample search",
        description="Run every claim's property through hypothesis, search counterexamples where a hypothesis "
        "is dropped, or check the claims that apply to one model.",
        epilog=VERIFY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pv.add_argument("claims", nargs="*", metavar="CLAIM", help="claim labels or property names (default: all)")
    src = pv.add_mutually_exclusive_group()
    src.add_argument("--stack", type=Path, metavar="CONFIG", help="check the claims that apply to this rollout YAML")
    src.add_argument("--kernels", type=Path, metavar="FILE", help="... or to these kernels (.npy/.npz)")
    pv.add_argument("--tokens", type=_nonneg_int, metavar="N", help="with --stack only: override the sequence length")
    pv.add_argument("--causal", action="store_true", help="with --kernels only: declare them causal (checked)")
    pv.add_argument("--schedule", metavar="SPEC", help="with --kernels only: the lambda schedule")
    pv.add_argument(
        "--examples",
        type=_nonneg_int,
        metavar="N",
        help="examples per property (default: the profile's 25 / 150 / 1000; necessity searches 8x)",
    )
    pv.add_argument("--seed", type=_nonneg_int, metavar="S", help="random seed (default: derandomized for ci)")
    pv.add_argument("--profile", choices=PROFILES, default="ci", help="sizes and example counts")
    pv.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    pv.add_argument(
        "--out",
        type=argtypes.path,
        default=Path("posbias-verify"),
        help="folder for the counterexample files and their manifest verify.json, written as one set "
        "(default ./posbias-verify; checked before the searches run)",
    )
    return pv


def run(args) -> int:
    """Execute ``posbias verify`` from parsed arguments; returns the exit code (bad input: one line, 2)."""
    try:
        if args.examples is not None and args.examples < 1:
            raise UserError("--examples: expected a positive integer")
        if args.tokens is not None and args.tokens < 1:
            raise UserError("--tokens: expected a positive integer")
        if args.stack is not None or args.kernels is not None:
            if args.claims:
                raise UserError(
                    "CLAIM names select built-in properties; with --stack/--kernels every applicable claim is checked"
                )
            _refuse_flags_that_do_not_apply(args)
            stack, n = _load_model(args)
            report = verify_model(
                stack,
                n,
                profile=args.profile,
                examples=args.examples,
                seed=args.seed,
                out=args.out,
                progress=not args.json,
            )
        else:
            _refuse_flags_that_do_not_apply(args)
            report = verify(
                args.claims,
                profile=args.profile,
                examples=args.examples,
                seed=args.seed,
                out=args.out,
                progress=not args.json,
            )
    except UserError as exc:
        print(f"posbias verify: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:  # e.g. a kernel file the stack refuses
        print(f"posbias verify: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        print_report(report)
    return report.exit_code


APPLIES_TO = {
    "tokens": ("stack", "(kernels fix N)"),
    "causal": ("kernels", "(a CONFIG's mask says whether it is causal)"),
    "schedule": ("kernels", "(a CONFIG has its own lambda schedule)"),
}
"""The model flags: the source each applies to (--stack or --kernels) and why not to the other."""


def _refuse_flags_that_do_not_apply(args) -> None:
    """Refuse (UserError, one line) a model flag given without the source it applies to: a flag that
    would be ignored is refused, not dropped (the help says the same: "with --stack only", "with --kernels
    only")."""
    source = "stack" if args.stack is not None else "kernels" if args.kernels is not None else None
    for name, (applies, why) in APPLIES_TO.items():
        value = getattr(args, name)
        if value is None or value is False or source == applies:
            continue
        if source is None:
            raise UserError(
                f"--{name}: the model flags apply to --stack / --kernels only "
                "(--tokens with --stack; --causal and --schedule with --kernels)"
            )
        raise UserError(f"--{name} applies to --{applies} only {why}")


def _load_model(args):
    if args.stack is not None:
        from posbias.config import load
        from posbias.numerics.stack import AlibiStack

        if not args.stack.exists():
            raise UserError(f"{args.stack}: no such file")
        model = load(args.stack, tokens=args.tokens)
        if not isinstance(model.stack, AlibiStack):
            raise UserError(
                f"{args.stack}: attention_config.bias: verify --stack checks ALiBi models only; "
                "expected a config with alibi_slopes (a relative-bias model is not supported)"
            )
        return model.stack, model.num_tokens
    from posbias.io.kernel_file import load_kernels

    stack, _ = load_kernels(args.kernels, args.schedule, args.causal)
    return stack, stack.num_tokens


def main(argv=None) -> int:
    """``python -m posbias.verify ...``: ``posbias verify`` (the same parser and behaviour)."""
    from posbias.cli import main as posbias_main

    return posbias_main(["verify", *(sys.argv[1:] if argv is None else argv)])
