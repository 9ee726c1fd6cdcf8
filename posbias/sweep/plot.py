"""``posbias plot DIR``: figures from a sweep's table.

* heat map: a metric (u_shape (C6), argmin, p_first, p_last, any numeric column) over two
  axes; every other axis is averaged (``--reduce mean``), taken at its first value
  (``--reduce first``) or fixed with ``--at AXIS=VALUE`` (the nearest grid value, named in a
  note and the title when VALUE is not on the grid; NaN or inf is refused);
* curves: the metric against one axis, one curve per value of another, on log axes with
  ticks at whole decades (a linear axis where a value shown is <= 0, e.g. log p(0)):
  with x = ``layers`` and the curves over ``beta`` this is the
  first-token mass p(0) against depth for lambda_t = lambda_0 (t+1)^(-beta), the C5
  dichotomy (p(0) -> 1 iff sum_t lambda_t diverges, i.e. beta <= 1); a second panel shows
  1 - p(0) (from log p(0), exact where p(0) is close to 1).

The default is curves when the sweep has exactly two grid dimensions, one of them
``layers``; otherwise a heat map of the first two axes. PNGs are written atomically
(posbias/io/files.py), by default into DIR.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from posbias.cli import argtypes
from posbias.errors import UserError

EXIT_USAGE = 2
KINDS = ("auto", "heatmap", "curves")


def add_parser(subparsers):
    """Add the ``plot`` subcommand; returns its parser."""
    pp = subparsers.add_parser(
        "plot",
        help="figures from a sweep: heat maps over two axes, collapse curves against depth",
        description="Heat map of a metric over two axes of a sweep (others averaged, first, or fixed), or curves of "
        "a metric against one axis for each value of another (log axes).",
        epilog="examples:\n  posbias plot out/ushape\n  posbias plot out/ushape --metric argmin_relative\n"
        "  posbias plot out/collapse --x layers --series beta --metric p_first\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pp.add_argument("dir", type=Path, help="a sweep's output folder (with manifest.json and table/)")
    pp.add_argument("--kind", choices=KINDS, default="auto", help="heatmap or curves (default: from the axes)")
    pp.add_argument("--x", metavar="AXIS", help="axis on the x axis")
    pp.add_argument("--y", metavar="AXIS", help="heat map: axis on the y axis")
    pp.add_argument("--series", metavar="AXIS", help="curves: one curve per value of this axis")
    pp.add_argument(
        "--metric", metavar="NAME", help="column to show (default u_shape for heat maps, p_first for curves)"
    )
    pp.add_argument(
        "--reduce",
        choices=("mean", "first"),
        default="mean",
        help="what to do with the other axes: average over them, or take their first value",
    )
    pp.add_argument(
        "--at",
        action="append",
        default=[],
        metavar="AXIS=VALUE",
        help="fix another axis at (the grid value nearest to) VALUE; repeatable",
    )
    pp.add_argument("--out", type=argtypes.path, metavar="FILE", help="PNG file (default DIR/<kind>-<metric>.png)")
    return pp


def _load(folder: Path):
    from posbias.sweep import manifest as mf
    from posbias.sweep.table import read_table

    main = mf.read(folder)
    if main is None:
        raise UserError(f"{folder}: no sweep here (expected {mf.MAIN})")
    return main, read_table(folder, main)  # refuses mixed, foreign, truncated or unfinished sets


def _column(table, name: str) -> np.ndarray:
    col = table.column(name)
    if str(col.type).startswith("list"):
        raise UserError(f"column {name}: holds lists, expected numbers or labels")
    values = col.to_pylist()
    if all(isinstance(v, str) for v in values):
        return np.asarray(values, dtype=object)
    return np.asarray([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def _levels(values: np.ndarray) -> np.ndarray:
    if values.dtype == object:
        return np.asarray(list(dict.fromkeys(values.tolist())), dtype=object)
    return np.unique(values)


def resolve_at(main, table, used: list[str], at) -> tuple[list[tuple[str, object]], list[str]]:
    """``--at AXIS=VALUE`` items as (axis, grid value) pairs, and a note for each value that is not
    on the grid (the nearest grid value is used, and named in the note and the title). A
    non-finite number, an unknown axis, a plotted axis or a label not on the grid is refused."""
    axes = main["axes"]
    fixed, notes = [], []
    for item in at:
        name, sep, text = item.partition("=")
        if not sep or name not in axes:
            raise UserError(f"--at {item}: expected AXIS=VALUE with AXIS one of {', '.join(axes)}")
        if name in used:
            raise UserError(f"--at {name}: this axis is plotted; fix another one")
        if name in (n for n, _ in fixed):
            raise UserError(f"--at {name}: given twice")
        col = _column(table, name)
        levels = _levels(col)
        if col.dtype == object:
            if text not in levels.tolist():
                raise UserError(f"--at {item}: {name} takes {', '.join(map(str, levels))}")
            fixed.append((name, text))
            continue
        try:
            target = float(text)
        except ValueError:
            raise UserError(f"--at {item}: expected a number") from None
        if not np.isfinite(target):
            raise UserError(
                f"--at {item}: expected a finite number (grid values of {name}: {levels[0]:g} .. {levels[-1]:g})"
            )
        value = levels[int(np.argmin(np.abs(levels - target)))].item()
        if value != target:
            notes.append(f"--at {item}: not a grid value; using the nearest, {name} = {value!r}")
        fixed.append((name, value))
    return fixed, notes


def _select(main, table, used: list[str], reduce: str, fixed: list[tuple[str, object]]) -> np.ndarray:
    """Boolean mask of the rows kept: ``fixed`` (resolve_at) fixes axes; --reduce first keeps the
    first value of the rest."""
    keep = np.ones(table.num_rows, dtype=bool)
    for name, value in fixed:
        keep &= _column(table, name) == value
    if reduce == "first":
        first = {}
        for d in main["dims"]:
            for name in d:
                first[name] = d[0]
        names = {n for n, _ in fixed}
        for name in main["axes"]:
            if name in used or name in names or first.get(name) in used:
                continue
            col = _column(table, name)
            keep &= col == _levels_in_order(col)[0]
    return keep


def _fixed_text(fixed) -> str:
    return "; ".join(f"{n} = {v:g}" if isinstance(v, float) else f"{n} = {v}" for n, v in fixed)


def _levels_in_order(col: np.ndarray):
    return list(dict.fromkeys(col.tolist()))


def _check_axis(main, name: str, what: str) -> None:
    if name not in main["axes"]:
        raise UserError(f"--{what} {name}: not an axis of this sweep (axes: {', '.join(main['axes'])})")


def _metric(table, name: str) -> np.ndarray:
    if name not in table.column_names:
        numeric = [c for c in table.column_names if c not in ("notes", "profile")]
        raise UserError(f"--metric {name}: no such column (columns: {', '.join(numeric)})")
    values = _column(table, name)
    if values.dtype == object:
        raise UserError(f"--metric {name}: holds labels, expected numbers")
    return values


def _log_like(levels: np.ndarray) -> bool:
    if levels.dtype == object or len(levels) < 3 or np.any(levels <= 0):
        return False
    ratios = levels[1:] / levels[:-1]
    return bool(levels[-1] / levels[0] >= 100 and np.allclose(ratios, ratios[0], rtol=0.05))


def _edges(levels: np.ndarray, log: bool) -> np.ndarray:
    x = np.log10(levels) if log else levels.astype(np.float64)
    if len(x) == 1:
        e = np.array([x[0] - 0.5, x[0] + 0.5])
    else:
        mid = (x[1:] + x[:-1]) / 2
        e = np.concatenate([[x[0] - (mid[0] - x[0])], mid, [x[-1] + (x[-1] - mid[-1])]])
    return 10.0**e if log else e


def heatmap(main, table, x: str, y: str, metric: str, reduce: str, fixed: list):
    """A matplotlib Figure: ``metric`` over (x, y), other axes reduced."""
    from matplotlib.figure import Figure

    for name, what in ((x, "x"), (y, "y")):
        _check_axis(main, name, what)
    if x == y:
        raise UserError("--x and --y name the same axis")
    keep = _select(main, table, [x, y], reduce, fixed)
    xs, ys, vs = _column(table, x)[keep], _column(table, y)[keep], _metric(table, metric)[keep]
    xl, yl = _levels(xs), _levels(ys)
    ix = np.searchsorted(xl, xs) if xl.dtype != object else np.array([xl.tolist().index(v) for v in xs])
    iy = np.searchsorted(yl, ys) if yl.dtype != object else np.array([yl.tolist().index(v) for v in ys])
    total = np.zeros((len(yl), len(xl)))
    count = np.zeros((len(yl), len(xl)))
    ok = np.isfinite(vs)
    np.add.at(total, (iy[ok], ix[ok]), vs[ok])
    np.add.at(count, (iy[ok], ix[ok]), 1)
    with np.errstate(invalid="ignore"):
        grid = total / count
    fig = Figure(figsize=(6.4, 5.0), layout="constrained")
    ax = fig.subplots()
    xlog, ylog = _log_like(xl), _log_like(yl)
    xe = _edges(xl, xlog) if xl.dtype != object else np.arange(len(xl) + 1) - 0.5
    ye = _edges(yl, ylog) if yl.dtype != object else np.arange(len(yl) + 1) - 0.5
    boolean = str(table.schema.field(metric).type) == "bool"
    cmap = "RdBu_r" if boolean else "viridis"
    mesh = ax.pcolormesh(
        xe,
        ye,
        np.ma.masked_invalid(grid),
        cmap=cmap,
        shading="flat",
        vmin=0.0 if boolean else None,
        vmax=1.0 if boolean else None,
    )
    label = f"fraction {metric}" if boolean and (reduce == "mean" and count.max() > 1) else metric
    fig.colorbar(mesh, ax=ax, label=label)
    if xlog:
        ax.set_xscale("log")
    if ylog:
        ax.set_yscale("log")
    if xl.dtype == object:
        ax.set_xticks(range(len(xl)), [str(v) for v in xl])
    if yl.dtype == object:
        ax.set_yticks(range(len(yl)), [str(v) for v in yl])
    ax.set_xlabel(_axis_label(x))
    ax.set_ylabel(_axis_label(y))
    others = [a for a in main["axes"] if a not in (x, y)]
    how = (
        ""
        if not others
        else (
            f"; {', '.join(others)}: "
            + (_fixed_text(fixed) + " " if fixed else "")
            + ("" if fixed and len(fixed) == len(others) else ("averaged" if reduce == "mean" else "first value"))
        )
    )
    fig.suptitle(f"{main.get('name')}: {metric} over {x} and {y}\n{_base_text(main)}{how}", fontsize=10)
    return fig


def curves(main, table, x: str, series: str, metric: str, reduce: str, fixed: list, notes: list | None = None):
    """A Figure: ``metric`` against ``x``, one curve per ``series`` value, with decade ticks on log
    axes; for p_first a second panel with 1 - p(0). An axis is logarithmic only where every value
    shown on it is > 0 (a metric <= 0 somewhere, such as log p(0), gets a linear y axis, said in
    ``notes``); a metric with no finite value is refused."""
    from matplotlib.figure import Figure

    _check_axis(main, x, "x")
    _check_axis(main, series, "series")
    if x == series:
        raise UserError("--x and --series name the same axis")
    keep = _select(main, table, [x, series], reduce, fixed)
    xs, ss = _column(table, x)[keep], _column(table, series)[keep]
    vs = _metric(table, metric)[keep]
    if xs.dtype == object:
        raise UserError(f"--x {x}: holds labels; curves need a numeric x axis (use --series {x})")
    panels = [(metric, vs)]
    if metric == "p_first" and "log_p_first" in table.column_names:
        lp = _column(table, "log_p_first")[keep]
        panels.append(("1 - p_first (mass off the first token)", -np.expm1(lp)))
    if not np.any(np.isfinite(vs)):
        raise UserError(f"--metric {metric}: no finite value among the {int(keep.sum())} points shown")
    xlog = bool(np.all(xs > 0))
    fig = Figure(figsize=(5.2 * len(panels), 4.4), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (name, values) in zip(axes, panels):
        finite = values[np.isfinite(values)]
        ylog = finite.size > 0 and bool(np.all(finite > 0))
        if not ylog and notes is not None and finite.size:
            notes.append(f"{name}: values <= 0 (min {float(finite.min()):.4g}); linear y axis")
        for k, s in enumerate(_levels(ss)):
            rows = ss == s
            xl = _levels(xs[rows])
            mean = np.array(
                [
                    np.nanmean(values[rows][xs[rows] == v])
                    if np.any(np.isfinite(values[rows][xs[rows] == v]))
                    else np.nan
                    for v in xl
                ]
            )
            good = np.isfinite(mean) & ((mean > 0) if ylog else True)
            ax.plot(
                np.asarray(xl, float)[good],
                mean[good],
                marker="o",
                ms=3,
                lw=1.4,
                color=f"C{k}",
                label=f"{series} = {s:g}" if not isinstance(s, str) else f"{series} = {s}",
            )
        _decades(ax, xlog, ylog)
        ax.set_xlabel(_axis_label(x))
        ax.set_ylabel(name)
        ax.grid(alpha=0.3, which="major")
        ax.legend(fontsize=8, frameon=False)
    at = f"; {_fixed_text(fixed)}" if fixed else ""
    fig.suptitle(
        f"{main.get('name')}: {metric} against {x}, one curve per {series}\n{_base_text(main)}{at}", fontsize=10
    )
    return fig


def _decades(ax, xlog: bool = True, ylog: bool = True) -> None:
    """Log x and/or y axes, major ticks at whole decades (labelled 10^k), no minor labels."""
    from matplotlib.ticker import LogFormatterSciNotation, LogLocator, NullFormatter

    for axis, log, scale in ((ax.xaxis, xlog, ax.set_xscale), (ax.yaxis, ylog, ax.set_yscale)):
        if not log:
            continue
        scale("log")
        axis.set_major_locator(LogLocator(base=10.0, numticks=15))
        axis.set_major_formatter(LogFormatterSciNotation(base=10.0))
        axis.set_minor_locator(LogLocator(base=10.0, subs=np.arange(2, 10) * 0.1, numticks=15))
        axis.set_minor_formatter(NullFormatter())


_LABELS = {
    "lambda": "λ (constant)",
    "lambda0": "λ₀",
    "beta": "β",
    "layers": "depth T (layers)",
    "tokens": "N (tokens)",
    "slope_scale": "slope scale (× ALiBi slopes)",
    "content_diagonal": "content d",
    "window": "window W",
    "mask": "mask",
}


def _axis_label(name: str) -> str:
    return _LABELS.get(name, name)


def _base_text(main) -> str:
    base = (main.get("spec") or {}).get("base")
    if isinstance(base, dict):
        return ", ".join(f"{k} {v}" for k, v in base.items())
    return f"base {base}"


def make_figure(folder: Path, kind: str = "auto", x=None, y=None, series=None, metric=None, reduce="mean", at=()):
    """(figure, kind, metric, notes) for the sweep in ``folder``; notes: what was adapted (a nearest
    grid value for --at, a linear axis)."""
    main, table = _load(folder)
    dims = main["dims"]
    firsts = [d[0] for d in dims]
    if kind == "auto":
        kind = "curves" if len(dims) == 2 and "layers" in firsts else "heatmap"
    if kind == "curves":
        x = x or ("layers" if "layers" in firsts else firsts[0])
        series = series or next((a for a in firsts if a != x), None)
        if series is None:
            raise UserError("curves need two axes (--x and --series)")
        metric = metric or "p_first"
        fixed, notes = resolve_at(main, table, [x, series], at)
        return curves(main, table, x, series, metric, reduce, fixed, notes), kind, metric, notes
    if len(main["axes"]) < 2:
        raise UserError("a heat map needs two axes; this sweep has one (use --kind curves)")
    x = x or firsts[0]
    y = y or next(a for a in main["axes"] if a != x)
    metric = metric or "u_shape"
    fixed, notes = resolve_at(main, table, [x, y], at)
    return heatmap(main, table, x, y, metric, reduce, fixed), kind, metric, notes


def run(args) -> int:
    """Execute ``posbias plot`` from parsed arguments; returns the exit code."""
    from posbias.io.files import write_run

    try:
        if not args.dir.is_dir():
            raise UserError(f"{args.dir}: no such folder")
        if args.kind == "heatmap" and args.series:
            raise UserError("--series applies to --kind curves")
        fig, kind, metric, notes = make_figure(
            args.dir, args.kind, args.x, args.y, args.series, args.metric, args.reduce, args.at
        )
        target = args.out or args.dir / f"{kind}-{metric}.png"
        if target.suffix.lower() != ".png":
            raise UserError(f"--out {target}: expected a .png file name")
        written = write_run(target.parent, {}, {target.name: fig})
    except UserError as exc:
        print(f"posbias plot: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for note in notes:
        print(f"posbias plot: note: {note}", file=sys.stderr)
    print(f"wrote {written[0]}")
    return 0


def main(argv=None) -> int:
    """``python -m posbias.sweep.plot DIR ...``: ``posbias plot`` (the same parser and behaviour)."""
    from posbias.cli import main as posbias_main

    return posbias_main(["plot", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
