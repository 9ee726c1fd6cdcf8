"""``posbias compare``: a measured influence profile against predicted ones (THEORY.md,
"Comparing with measured influence"), by the distances of ``posbias.distances`` (W1 / (N-1),
Spearman's rho, total variation), as a table and an overlay figure.

``posbias compare MEASURED.csv PRED.csv [PRED.csv ...]`` prints a table (best W1 marked),
``--json`` prints JSON instead, and an overlay figure (linear and log scale) is written
to ``--out`` (default ``posbias-out``). Files are ``token_position,<name>[,...]`` CSVs as
``posbias rollout`` and ``posbias measure`` write them (``posbias.io.profile_file``: the profile is
the first column after ``token_position``); profiles of different lengths or that do not sum to 1
within 1e-9 are refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from posbias.distances import Row


def profile_names(paths: list[Path]) -> list[str]:
    """Short distinct labels: the file stems, with parent folders added where stems repeat."""
    names = [p.stem for p in paths]
    depth = 1
    while len(set(names)) < len(names) and depth < 8:
        names = ["/".join(p.with_suffix("").parts[-depth - 1 :]) for p in paths]
        depth += 1
    return names if len(set(names)) == len(names) else [str(p) for p in paths]


def format_table(rows: list[Row]) -> str:
    """A plain-text table, the row with the smallest W1 marked with '*'."""
    best = min(range(len(rows)), key=lambda k: rows[k].w1)
    width = max(10, *(len(r.name) for r in rows))
    out = [f"  {'prediction':<{width}}  {'W1/(N-1)':>10}  {'Spearman':>9}  {'TV':>8}"]
    for k, r in enumerate(rows):
        rho = "n/a" if r.spearman is None else f"{r.spearman:.4f}"
        out.append(f"{'*' if k == best else ' '} {r.name:<{width}}  {r.w1:>10.5f}  {rho:>9}  {r.total_variation:>8.5f}")
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
    return np.arange(bins) * k + (k - 1) / 2, p[: bins * k].reshape(bins, k).mean(axis=1)


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
