"""Comparing profiles: a measured influence profile against predicted ones (THEORY.md,
"Comparing with measured influence").

Three distances between two probability vectors p, q over positions 0 .. N-1:

* ``w1``: Wasserstein-1 on positions divided by N - 1, i.e.
  sum_{k<N-1} |F_p(k) - F_q(k)| / (N - 1) with F the cumulative sums: 0 for equal
  profiles, 1 when all mass sits at opposite ends;
* ``spearman``: Spearman's rank correlation of the entries (average ranks for ties;
  None when either profile is constant, where it is undefined);
* ``total_variation``: (1/2) sum |p - q|, in [0, 1].

``posbias compare MEASURED.csv PRED.csv [PRED.csv ...]`` prints a table (best W1 marked),
``--json`` prints JSON instead, and an overlay figure (linear and log scale) is written
to ``--out`` (default ``posbias-out``). Files are ``token_position,<name>[,...]`` CSVs as
``posbias rollout`` and ``posbias measure`` write them (the profile is the first column after
``token_position``); profiles of different lengths or that do not sum to 1
within 1e-9 are refused.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from posbias import argtypes
from posbias.errors import UserError

MASS_TOLERANCE = 1e-9


class CompareError(UserError):
    """A profile file cannot be compared; one line naming the file."""


def w1(p: np.ndarray, q: np.ndarray) -> float:
    """Wasserstein-1 between p and q on positions 0 .. N-1, divided by N - 1 (0 for N = 1)."""
    n = len(p)
    if n < 2:
        return 0.0
    return float(np.sum(np.abs(np.cumsum(p)[:-1] - np.cumsum(q)[:-1])) / (n - 1))


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1 .. N, tied entries sharing the mean of their ranks."""
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
    ends = np.r_[starts[1:], len(x)]
    mean_rank = (starts + ends + 1) / 2.0  # ranks starts+1 .. ends, averaged
    ranks = np.empty(len(x))
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


def spearman(p: np.ndarray, q: np.ndarray) -> float | None:
    """Pearson correlation of the average ranks; None when a profile is constant."""
    a, b = average_ranks(p), average_ranks(q)
    a, b = a - a.mean(), b - b.mean()
    denom = math.sqrt(float(a @ a) * float(b @ b))
    return None if denom == 0 else float(a @ b / denom)


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    """(1/2) sum_j |p_j - q_j|."""
    return float(0.5 * np.sum(np.abs(p - q)))


@dataclass(frozen=True)
class Row:
    """One predicted profile against the measured one."""

    name: str
    w1: float
    spearman: float | None
    total_variation: float


def compare(measured: np.ndarray, predictions: dict[str, np.ndarray]) -> list[Row]:
    """A ``Row`` per prediction (same order); inputs must be valid profiles of one length."""
    return [Row(name, w1(measured, q), spearman(measured, q), total_variation(measured, q))
            for name, q in predictions.items()]


def read_profile(path: Path) -> np.ndarray:
    """The first column after ``token_position`` of a CSV (positions 0 .. N-1, in order; e.g.
    ``profile.csv`` of ``posbias rollout`` or ``influence.csv`` of ``posbias measure``), refused
    with one line unless finite, non-negative and summing to 1 within 1e-9."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise CompareError(f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise CompareError(f"{path}: empty file, expected a header token_position,probability and one row per token")
    header = [h.strip() for h in lines[0].split(",")]
    if len(header) < 2 or header[0] != "token_position":
        raise CompareError(f"{path}: header {lines[0]!r}, expected 'token_position,<name>[,...]' (the profile is "
                           "the first column after token_position)")
    values = np.empty(len(lines) - 1)
    for k, line in enumerate(lines[1:]):
        cells = line.split(",")
        try:
            position, value = int(cells[0]), float(cells[1])
            if len(cells) != len(header):
                raise ValueError
        except (ValueError, IndexError):
            raise CompareError(f"{path}: line {k + 2} is {line!r}, expected 'position,value'") from None
        if position != k:
            raise CompareError(f"{path}: line {k + 2} has position {position}, expected {k} (positions 0 .. N-1 "
                               "in order)")
        if not math.isfinite(value) or value < 0:
            raise CompareError(f"{path}: line {k + 2} has value {value!r}, expected a finite value >= 0")
        values[k] = value
    if values.size == 0:
        raise CompareError(f"{path}: no rows, expected one row per token")
    total = float(values.sum())
    if abs(total - 1.0) > MASS_TOLERANCE:
        raise CompareError(f"{path}: profile sums to {total!r}, expected 1 within {MASS_TOLERANCE:g}")
    return values


def _names(paths: list[Path]) -> list[str]:
    """Short distinct labels: the file stems, with parent folders added where stems repeat."""
    names = [p.stem for p in paths]
    depth = 1
    while len(set(names)) < len(names) and depth < 8:
        names = ["/".join(p.with_suffix("").parts[-depth - 1:]) for p in paths]
        depth += 1
    return names if len(set(names)) == len(names) else [str(p) for p in paths]


def format_table(rows: list[Row]) -> str:
    """A plain-text table, the row with the smallest W1 marked with '*'."""
    best = min(range(len(rows)), key=lambda k: rows[k].w1)
    width = max(10, *(len(r.name) for r in rows))
    out = [f"  {'prediction':<{width}}  {'W1/(N-1)':>10}  {'Spearman':>9}  {'TV':>8}"]
    for k, r in enumerate(rows):
        rho = "n/a" if r.spearman is None else f"{r.spearman:.4f}"
        out.append(f"{'*' if k == best else ' '} {r.name:<{width}}  {r.w1:>10.5f}  {rho:>9}  "
                   f"{r.total_variation:>8.5f}")
    out.append("* smallest W1")
    return "\n".join(out)


def overlay_figure(measured: np.ndarray, predictions: dict[str, np.ndarray], *, title: str):
    """Measured profile and predictions, linear (left) and log (right) scale."""
    from matplotlib.figure import Figure  # no pyplot: no global figure registry, no GUI backend

    fig = Figure(figsize=(11, 4), layout="constrained")
    axes = fig.subplots(1, 2)
    x = np.arange(len(measured))
    for ax, log in zip(axes, (False, True)):
        ax.plot(x, measured, color="black", lw=2, label="measured")
        for name, q in predictions.items():
            ax.plot(x, q, lw=1.2, label=name)
        ax.set_xlabel("token position j")
        ax.set_ylabel("influence / p(j)")
        if log:
            ax.set_yscale("log")
            ax.set_title("log scale")
        else:
            ax.set_title("linear scale")
    axes[0].legend(fontsize=8, loc="best")
    fig.suptitle(title)
    return fig


EPILOG = """\
examples:
  posbias compare influence.csv attention-only/profile.csv residual/profile.csv
  posbias compare influence.csv pred.csv --json --out results/compare
"""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "compare", help="distances between a measured profile and predicted ones (W1, Spearman, TV)",
        description="Compare a measured influence profile with predicted profiles: Wasserstein-1 on "
                    "positions / (N-1), Spearman's rho, total variation. Writes compare.json and an overlay "
                    "figure compare.png to --out.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("measured", type=Path, help="measured profile CSV (token_position,probability)")
    p.add_argument("predicted", type=Path, nargs="+", help="predicted profile CSVs (same N)")
    p.add_argument("--out", type=argtypes.path, default=None, help="folder for compare.json and compare.png "
                                                          "(default: posbias-out)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")


def run(args) -> int:
    from posbias.files import write_run

    if args.out is not None and str(args.out).strip() == "":
        raise CompareError("--out: expected a folder name, got an empty string")
    measured = read_profile(args.measured)
    names = _names(list(args.predicted))
    predictions = {}
    for name, path in zip(names, args.predicted):
        q = read_profile(path)
        if q.size != measured.size:
            raise CompareError(f"{path}: {q.size} positions, expected {measured.size} like {args.measured}")
        predictions[name] = q
    rows = compare(measured, predictions)
    best = min(rows, key=lambda r: r.w1).name
    report = {"measured": str(args.measured), "num_tokens": int(measured.size), "best_w1": best,
              "rows": [asdict(r) for r in rows]}
    text = json.dumps(report, indent=2) + "\n"
    figure = overlay_figure(measured, predictions, title=f"{args.measured} (N = {measured.size})")
    written = write_run(args.out or Path("posbias-out"), {"compare.json": text}, {"compare.png": figure})
    if args.json:
        sys.stdout.write(text)
    else:
        print(f"measured: {args.measured}  (N = {measured.size})")
        print(format_table(rows))
        print("wrote " + ", ".join(str(p) for p in written))
    return 0
