"""matrix.png of ``posbias validate``: for every length (rows of the figure) and view (all positions, and
positions 1..N-1 without the sink), a heat map of W1/(N-1) of each prediction (rows) against each
influence measure (columns) minus the flat profile's (``posbias.validate.matrix``): blue where the
prediction is closer to the measured profile than flat, red where farther; a cell whose whole bootstrap
interval of that difference lies below 0 is marked with a star."""

from __future__ import annotations

import numpy as np

from posbias.validate.matrix import VIEWS

TITLES = {"all": "all positions", "without_token_0": "without token 0 (sink), renormalised"}


def matrix_figure(matrices: dict[str, dict], title: str):
    """The figure (module docstring) for ``matrices``: N -> ``score_matrix``'s result."""
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.figure import Figure

    lengths = list(matrices)
    first = matrices[lengths[0]]["all"]
    measures = list(first)
    keys = [k for k in next(iter(first.values())) if k != "flat"]
    fig = Figure(
        figsize=(4.2 + 1.1 * len(measures) * len(VIEWS), 1.6 + (0.9 + 0.3 * len(keys)) * len(lengths)),
        layout="constrained",
    )
    axes = fig.subplots(len(lengths), len(VIEWS), squeeze=False)
    for r, n in enumerate(lengths):
        for c, view in enumerate(VIEWS):
            ax = axes[r][c]
            block = matrices[n][view]
            if not block:
                ax.set_axis_off()
                continue
            diff = np.array([[block[m][k]["w1_minus_flat"] for m in measures] for k in keys])
            wins = np.array([[bool(block[m][k].get("beats_flat")) for m in measures] for k in keys])
            span = max(float(np.abs(diff).max()), 1e-12)
            image = ax.imshow(diff, cmap="RdBu_r", norm=TwoSlopeNorm(0.0, -span, span), aspect="auto")
            for i, j in zip(*np.nonzero(wins)):
                ax.text(j, i, "*", ha="center", va="center", fontsize=12)
            ax.set_xticks(range(len(measures)), measures, rotation=30, ha="right", fontsize=8)
            ax.set_yticks(range(len(keys)), [f"({k})" for k in keys], fontsize=8)
            ax.set_title(f"N = {n}, {TITLES[view]}", fontsize=9)
            fig.colorbar(image, ax=ax, label="W1/(N-1) minus flat's")
    fig.suptitle(f"{title}\n* : beats flat (whole bootstrap interval below 0)", fontsize=10)
    return fig
