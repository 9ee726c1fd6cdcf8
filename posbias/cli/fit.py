"""``posbias fit``: fit the structural model to a measured profile (``posbias.fit.profile``), or a relative
bias to a measurement folder's logits (``posbias.fit.bias_run``); ``add_parser(subparsers)`` adds the
subcommand, ``run(args)`` executes it."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from posbias.cli import argtypes
from posbias.fit.bias import DEFAULT_SMOOTHNESS, FAMILIES
from posbias.fit.bias_run import is_measurement
from posbias.fit.profile import (
    DEFAULT_LEARNING_RATE,
    DEFAULT_STEPS,
    DEFAULT_TIME_BUDGET,
    DIAGONAL_MODES,
    MAX_SMOOTHNESS,
    PROFILE_FIT_FLAGS,
    FitError,
    FitSpec,
    check_budgets,
    fit,
    fit_figure,
    model_profile,
    require_alibi,
)

EPILOG = """\
examples:
  posbias fit influence.csv model.yaml                       (pooled d and temperature)
  posbias fit influence.csv model.yaml --diagonal per-layer --lambda-scale --heldout influence-512.csv
  posbias fit out/measure --bias table --smoothness 0.5 --out out/bias   (a posbias measure folder: fit
      b_h(g) + d_h [i = j] + s_h [j = 0] to each head's mean pre-softmax logits; families alibi, table,
      kerple-log, kerple-power; writes fitted_bias.json, fitted_bias.csv, fitted_bias_profile.csv)
"""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "fit",
        help="fit content diagonal / temperature / lambda scale to a measured profile (W1, optax)",
        description="Fit the parameters the theory leaves free to a measured profile by minimising W1 / (N-1) "
        "with Adam (optax), gradients through the differentiable dense profile. Writes fit.json, "
        "fitted_profile.csv and fit.png to --out. Given a posbias measure folder instead, fit a "
        "relative bias to each head's mean pre-softmax logits (--bias, --smoothness).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "measured",
        type=Path,
        help="measured profile CSV (token_position,probability); N is its length; "
        "or a posbias measure folder (the relative-bias fit, --bias)",
    )
    p.add_argument(
        "config",
        type=Path,
        nargs="?",
        help="the model: a rollout YAML (mask, slopes, lambda schedule, content); not with a folder",
    )
    bias = p.add_argument_group("relative-bias fit of a posbias measure folder (posbias.fit.bias, THEORY.md C7)")
    bias.add_argument(
        "--bias",
        choices=FAMILIES,
        metavar="FAMILY",
        help=f"the family of b_h(g): {', '.join(FAMILIES)} (default table)",
    )
    bias.add_argument(
        "--smoothness",
        type=float,
        metavar="ALPHA",
        help=f"table: the second-difference penalty alpha >= 0 (default {DEFAULT_SMOOTHNESS:g})",
    )
    # The profile-fit flags default to None (their defaults are set in run): a measure folder refuses them
    # when given, instead of ignoring them.
    p.add_argument(
        "--diagonal",
        choices=DIAGONAL_MODES,
        help="free content diagonal: one value (pooled, default), one per layer, or none",
    )
    p.add_argument(
        "--no-temperature",
        dest="temperature",
        action="store_const",
        const=False,
        help="keep the temperature fixed",
    )
    p.add_argument(
        "--content-scale",
        action="store_const",
        const=True,
        help="fit c in d = c * (the model's d); needs --diagonal none",
    )
    p.add_argument("--lambda-scale", action="store_const", const=True, help="fit s in lambda_t' = min(1, s lambda_t)")
    p.add_argument("--steps", type=argtypes.at_least(1), help=f"optimiser steps (default {DEFAULT_STEPS})")
    p.add_argument(
        "--learning-rate",
        type=argtypes.positive_float,
        help=f"Adam's initial rate (cosine decay; default {DEFAULT_LEARNING_RATE:g})",
    )
    p.add_argument(
        "--time-budget",
        type=argtypes.positive_float,
        metavar="SECONDS",
        help=f"refuse a fit estimated to take longer (default {DEFAULT_TIME_BUDGET:.0f} s; the estimate is "
        "O(steps T H N^2), see posbias.fit.profile.seconds_estimate)",
    )
    p.add_argument("--heldout", type=Path, help="a second measured profile (any N) to evaluate the fit on")
    p.add_argument(
        "--content-broadcast",
        choices=("all", "first-head"),
        help="a single content value in CONFIG goes to every head (all, default) or to head 0 only",
    )
    p.add_argument("--out", type=argtypes.path, help="output folder (default: posbias-out)")
    p.add_argument("--json", action="store_true", help="print fit.json instead of the text report")


def _refuse_profile_fit_flags(args) -> None:
    """A measure folder takes --bias, --smoothness, --out and --json; refuse (FitError, one line) a flag
    of the profile fit, which would be ignored."""
    for dest, flag in PROFILE_FIT_FLAGS:
        if getattr(args, dest) is not None:
            raise FitError(
                f"{flag}: applies to the profile fit (a measured CSV and CONFIG), not to the measure folder "
                f"{args.measured} (its relative-bias fit takes --bias, --smoothness, --out, --json)"
            )


def _check_smoothness(family: str | None, smoothness: float | None) -> None:
    """Refuse (FitError, one line) a table smoothness outside [0, MAX_SMOOTHNESS] (other families refuse
    --smoothness itself, in posbias.fit.bias_run)."""
    if smoothness is None or family not in (None, "table"):
        return
    if not (math.isfinite(smoothness) and 0 <= smoothness <= MAX_SMOOTHNESS):
        raise FitError(
            f"--smoothness: {smoothness!r}, expected a finite value >= 0 and <= {MAX_SMOOTHNESS:g} "
            f"(beyond {MAX_SMOOTHNESS:g} the penalty leaves the table fit undetermined in float64)"
        )


def run(args) -> int:
    from posbias import config as cfg
    from posbias.io.files import write_run
    from posbias.io.output import position_csv
    from posbias.io.profile_file import read_profile
    from posbias.runtime.progress import progress_bar

    if is_measurement(args.measured):
        from posbias.fit import bias_run as bias_fit_run

        _refuse_profile_fit_flags(args)
        _check_smoothness(args.bias, args.smoothness)
        return bias_fit_run.run(args)
    if args.bias is not None or args.smoothness is not None:
        raise FitError(f"--bias, --smoothness: apply to a posbias measure folder, and {args.measured} is not a folder")
    if args.config is None:
        raise FitError(
            f"{args.measured}: a measured profile needs CONFIG, the model's rollout YAML "
            "(posbias fit MEASURED.csv CONFIG)"
        )
    spec = FitSpec(
        args.diagonal or "pooled",
        args.temperature is None,
        bool(args.content_scale),
        bool(args.lambda_scale),
        DEFAULT_STEPS if args.steps is None else args.steps,
        DEFAULT_LEARNING_RATE if args.learning_rate is None else args.learning_rate,
    )
    measured = read_profile(args.measured)
    heldout = read_profile(args.heldout) if args.heldout is not None else None
    model = cfg.load(args.config, tokens=measured.size, content_broadcast=args.content_broadcast or "all")
    require_alibi(model.stack, str(args.config))
    check_budgets(
        model.stack,
        measured.size,
        None if heldout is None else heldout.size,
        spec.steps,
        DEFAULT_TIME_BUDGET if args.time_budget is None else args.time_budget,
        where=str(args.measured),
    )
    with progress_bar(not args.json, "fit", "steps") as update:
        result = fit(model.stack, measured, spec, progress=update)
    if result.stopped is not None:
        print(f"posbias fit: warning: {result.stopped}; returned {result.returned}", file=sys.stderr)
    report = {
        "measured": str(args.measured),
        "config": str(args.config),
        "num_tokens": int(measured.size),
        "free": {
            "diagonal": spec.diagonal,
            "temperature": spec.temperature,
            "content_scale": spec.content_scale,
            "lambda_scale": spec.lambda_scale,
        },
        "steps": spec.steps,
        "learning_rate": spec.learning_rate,
        "gradient_route": "jax.grad through numerics/differentiable.py (dense vector route)",
        "w1_before": result.loss_before,
        "w1_after": result.loss_after,
        "values": result.values,
        "returned_iterate": result.returned_step,
        "steps_done": result.steps_done,
        "stopped": result.stopped,
        "returned": result.returned,
    }
    if heldout is not None:
        from posbias.distances import w1

        n2 = int(heldout.size)
        report["heldout"] = {
            "file": str(args.heldout),
            "num_tokens": n2,
            "w1_before": w1(heldout, model_profile(model.stack, n2)),
            "w1_after": w1(heldout, model_profile(model.stack, n2, result.values)),
        }
    text = json.dumps(report, indent=2, allow_nan=False) + "\n"  # strict JSON: fit() returns finite values only
    files = {"fit.json": text, "fitted_profile.csv": position_csv(probability=result.after)}
    written = write_run(
        args.out or Path("posbias-out"),
        files,
        {"fit.png": fit_figure(measured, result, f"fit to {args.measured} (N = {measured.size})")},
    )
    if args.json:
        sys.stdout.write(text)
        return 0
    print(
        f"fit to {args.measured} (N = {measured.size}) of {args.config}: {result.steps_done} of {spec.steps} Adam steps"
    )
    print(f"  W1/(N-1): {result.loss_before:.4g} before -> {result.loss_after:.4g} after")
    print(f"  returned: {result.returned}")
    for name, value in result.values.items():
        shown = f"{value:.6g}" if isinstance(value, float) else "[" + ", ".join(f"{v:.4g}" for v in value) + "]"
        print(f"  {name} = {shown}")
    if heldout is not None:
        h = report["heldout"]
        print(
            f"  held out ({args.heldout}, N = {h['num_tokens']}): W1/(N-1) {h['w1_before']:.4g} unfitted -> "
            f"{h['w1_after']:.4g} fitted"
        )
    print("  wrote " + ", ".join(str(p) for p in written))
    return 0
