"""``posbias compare``: distances between a measured profile and predicted ones (``posbias.fit.compare``);
``add_parser(subparsers)`` adds the subcommand, ``run(args)`` executes it."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from posbias.cli import argtypes
from posbias.distances import compare
from posbias.errors import UserError
from posbias.fit.compare import format_table, overlay_figure, profile_names
from posbias.io.profile_file import read_profile

EPILOG = """\
examples:
  posbias compare influence.csv attention-only/profile.csv residual/profile.csv
  posbias compare influence.csv pred.csv --json --out results/compare
"""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "compare",
        help="distances between a measured profile and predicted ones (W1, Spearman, TV)",
        description="Compare a measured influence profile with predicted profiles: Wasserstein-1 on "
        "positions / (N-1), Spearman's rho, total variation. Writes compare.json and an overlay "
        "figure compare.png to --out.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("measured", type=Path, help="measured profile CSV (token_position,probability)")
    p.add_argument("predicted", type=Path, nargs="+", help="predicted profile CSVs (same N)")
    p.add_argument(
        "--out", type=argtypes.path, default=None, help="folder for compare.json and compare.png (default: posbias-out)"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")


WORK_ARRAYS = 8
"""(N,) float64 temporaries of one comparison (cumulative sums, ranks, argsort) beside the profiles."""


def run(args) -> int:
    from posbias.io.files import write_run

    measured = read_profile(args.measured)
    from posbias.numerics import budget

    reason = budget.check(
        f"comparing {len(args.predicted)} profiles of N = {measured.size}",
        8 * measured.size * (len(args.predicted) + 1 + WORK_ARRAYS),
    )
    if reason is not None:
        raise UserError(reason)
    names = profile_names(list(args.predicted))
    predictions = {}
    for name, path in zip(names, args.predicted):
        q = read_profile(path)
        if q.size != measured.size:
            raise UserError(f"{path}: {q.size} positions, expected {measured.size} like {args.measured}")
        predictions[name] = q
    rows = compare(measured, predictions)
    best = min(rows, key=lambda r: r.w1).name
    report = {
        "measured": str(args.measured),
        "num_tokens": int(measured.size),
        "best_w1": best,
        "rows": [asdict(r) for r in rows],
    }
    text = json.dumps(report, indent=2, allow_nan=False) + "\n"
    figure = overlay_figure(measured, predictions, title=f"{args.measured} (N = {measured.size})")
    written = write_run(args.out or Path("posbias-out"), {"compare.json": text}, {"compare.png": figure})
    if args.json:
        sys.stdout.write(text)
    else:
        print(f"measured: {args.measured}  (N = {measured.size})")
        print(format_table(rows))
        print("wrote " + ", ".join(str(p) for p in written))
    return 0
