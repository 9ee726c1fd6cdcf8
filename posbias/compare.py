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
import errno
import json
import math
import os
import stat
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


MAX_ROWS = 2**20
"""Rows (positions) a profile file may hold: 1,048,576. A file is read one line at a time into
a float64 array that grows by doubling up to this size, so reading one holds at most 8 MiB
beside one line (``MAX_LINE`` characters), whatever the file's size."""
MAX_LINE = 4096
MAX_BYTES = MAX_ROWS * 256
"""A larger file is refused from its size before any parsing (256 bytes a row: room for the
widest file posbias writes, influence.csv's four columns, several times over)."""


def read_profile(path: Path) -> np.ndarray:
    """The first column after ``token_position`` of a CSV (positions 0 .. N-1, in order; e.g.
    ``profile.csv`` of ``posbias rollout`` or ``influence.csv`` of ``posbias measure``), refused
    with one line unless finite, non-negative and summing to 1 within 1e-9, or when it holds
    more than ``MAX_ROWS`` rows or ``MAX_BYTES`` bytes (read with bounded memory: see MAX_ROWS).
    Blank lines are skipped; line numbers in messages are the file's."""
    path = Path(path)
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory")
        if stat.S_ISREG(info.st_mode) and info.st_size > MAX_BYTES:
            raise CompareError(f"{path}: {info.st_size} bytes, larger than the {MAX_BYTES // 2**20} MiB a profile "
                               f"file may hold (at most {MAX_ROWS} rows)")
        with open(path, "rb") as handle:
            fast = _parse_fast(handle, path)
        if fast is not None:
            return _checked_mass(path, fast)
        with open(path, "rb") as handle:
            return _checked_mass(path, _parse(path, handle))
    except OSError as exc:
        raise CompareError(f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None


def _parse_fast(handle, path: Path) -> np.ndarray | None:
    """The profile column read by pyarrow's streaming CSV reader (1 MiB blocks), or None when
    the file is anything but clean (``_parse``, the reference reader, then says what is wrong):
    the same values as ``_parse``, as both round correctly to the nearest float64."""
    import pyarrow as pa
    from pyarrow import csv

    header = b""
    while not header.strip():
        header = handle.readline(MAX_LINE + 1)
        if not header or len(header) > MAX_LINE:
            return None
    try:
        names = [h.strip() for h in header.decode("utf-8").rstrip("\r\n").split(",")]
    except UnicodeDecodeError:
        return None
    if len(names) < 2 or names[0] != "token_position":
        return None
    columns = [f"c{i}" for i in range(len(names))]
    try:
        reader = csv.open_csv(
            handle, read_options=csv.ReadOptions(column_names=columns, block_size=2**20),
            parse_options=csv.ParseOptions(newlines_in_values=False),
            convert_options=csv.ConvertOptions(column_types={"c0": pa.int64(), "c1": pa.float64()},
                                               include_columns=["c0", "c1"], null_values=[],
                                               strings_can_be_null=False, quoted_strings_can_be_null=False))
        positions, values, count = [], [], 0
        for batch in reader:
            count += batch.num_rows
            if count > MAX_ROWS:
                raise CompareError(f"{path}: more than {MAX_ROWS} rows, the most a profile file may hold")
            if batch.column(0).null_count or batch.column(1).null_count:
                return None
            positions.append(batch.column(0).to_numpy())
            values.append(batch.column(1).to_numpy())
    except CompareError:
        raise
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError):
        return None
    if count == 0:
        return None
    positions, values = np.concatenate(positions), np.concatenate(values).astype(np.float64)
    if not (np.array_equal(positions, np.arange(count)) and np.all(np.isfinite(values)) and np.all(values >= 0)):
        return None
    return values


def _checked_mass(path: Path, values: np.ndarray) -> np.ndarray:
    total = float(values.sum())
    if abs(total - 1.0) > MASS_TOLERANCE:
        raise CompareError(f"{path}: profile sums to {total!r}, expected 1 within {MASS_TOLERANCE:g}")
    return values


def _parse(path: Path, handle) -> np.ndarray:  # noqa: C901 (one branch per bad line; issue 20 §4)
    values = np.empty(1024)
    header, count, total_bytes, number = None, 0, 0, 0
    while True:
        raw = handle.readline(MAX_LINE + 1)
        if not raw:
            break
        number += 1
        total_bytes += len(raw)
        if total_bytes > MAX_BYTES:
            raise CompareError(f"{path}: larger than the {MAX_BYTES // 2**20} MiB a profile file may hold")
        if len(raw) > MAX_LINE and not raw.endswith(b"\n"):
            raise CompareError(f"{path}: line {number} is longer than {MAX_LINE} characters, expected "
                               "'position,value'")
        try:
            line = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            raise CompareError(f"{path}: line {number} is not UTF-8 text") from None
        if not line.strip():
            continue
        if header is None:
            header = [h.strip() for h in line.split(",")]
            if len(header) < 2 or header[0] != "token_position":
                raise CompareError(f"{path}: header {line!r}, expected 'token_position,<name>[,...]' (the profile "
                                   "is the first column after token_position)")
            continue
        cells = line.split(",")
        try:
            position, value = int(cells[0]), float(cells[1])
            if len(cells) != len(header):
                raise ValueError
        except (ValueError, IndexError):
            raise CompareError(f"{path}: line {number} is {line[:80]!r}, expected 'position,value'") from None
        if position != count:
            raise CompareError(f"{path}: line {number} has position {position}, expected {count} (positions "
                               "0 .. N-1 in order)")
        if not math.isfinite(value) or value < 0:
            raise CompareError(f"{path}: line {number} has value {value!r}, expected a finite value >= 0")
        if count == MAX_ROWS:
            raise CompareError(f"{path}: more than {MAX_ROWS} rows, the most a profile file may hold")
        if count == values.size:
            values = np.concatenate([values, np.empty(values.size)])
        values[count] = value
        count += 1
    if header is None:
        raise CompareError(f"{path}: empty file, expected a header token_position,probability and one row per token")
    if count == 0:
        raise CompareError(f"{path}: no rows, expected one row per token")
    return values[:count].copy()


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


FIGURE_POINTS = 4096
"""At most this many points a curve: longer profiles are drawn as means of equal bins of
positions (rendering millions of points would take minutes and gigabytes)."""


def _binned(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bin centres, bin means) of ``p`` over bins of k = ceil(N / FIGURE_POINTS) positions (the
    trailing positions beyond a whole bin are dropped); (positions, p) itself when N fits."""
    n = len(p)
    k = -(-n // FIGURE_POINTS)
    if k == 1:
        return np.arange(n), p
    bins = n // k
    return np.arange(bins) * k + (k - 1) / 2, p[:bins * k].reshape(bins, k).mean(axis=1)


def overlay_figure(measured: np.ndarray, predictions: dict[str, np.ndarray], *, title: str):
    """Measured profile and predictions, linear (left) and log (right) scale."""
    from matplotlib.figure import Figure  # no pyplot: no global figure registry, no GUI backend

    fig = Figure(figsize=(11, 4), layout="constrained")
    axes = fig.subplots(1, 2)
    x, shown = _binned(measured)
    if len(x) < len(measured):
        title = f"{title}; each point: mean of {len(measured) // len(x)} positions"
    for ax, log in zip(axes, (False, True)):
        ax.plot(x, shown, color="black", lw=2, label="measured")
        for name, q in predictions.items():
            ax.plot(x, _binned(q)[1], lw=1.2, label=name)
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


WORK_ARRAYS = 8
"""(N,) float64 temporaries of one comparison (cumulative sums, ranks, argsort) beside the profiles."""


def run(args) -> int:
    from posbias.files import write_run

    measured = read_profile(args.measured)
    from posbias.numerics import budget

    reason = budget.check(f"comparing {len(args.predicted)} profiles of N = {measured.size}",
                          8 * measured.size * (len(args.predicted) + 1 + WORK_ARRAYS))
    if reason is not None:
        raise CompareError(reason)
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
