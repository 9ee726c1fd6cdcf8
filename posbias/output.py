"""Files posbias writes. Every file is written to a temporary name in its
directory and renamed into place, so a reader never sees half a file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np


def atomic_write(path: Path, write) -> None:
    """Call ``write(tmp_path)`` then rename tmp_path to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json(path: Path, data) -> None:
    write_text(path, json.dumps(data, indent=2) + "\n")


def position_csv(**columns: np.ndarray) -> str:
    """``token_position,<name>,...``: one row per token, floats at full repr precision.

    ``position_csv(probability=p)`` is the reference tool's profile format.
    """
    values = np.column_stack([np.asarray(c, dtype=np.float64) for c in columns.values()])
    header = ",".join(["token_position", *columns])
    return header + "\n" + "".join(
        f"{j}," + ",".join(repr(x) for x in row) + "\n" for j, row in enumerate(values.tolist())
    )


def write_figure(path: Path, fig) -> None:
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=150, bbox_inches="tight", format="png"))


def profile_figure(panels: list[tuple[str, np.ndarray]], *, log_scale: bool = False):
    """One panel per (title, profile): p(j) against token position j."""
    from matplotlib.figure import Figure  # no pyplot: no global figure registry, no GUI backend

    fig = Figure(figsize=(4.2 * len(panels), 3.3))
    axes = fig.subplots(1, len(panels), squeeze=False)
    for ax, (title, p) in zip(axes[0], panels):
        ax.plot(np.arange(p.size), p, lw=1.4)
        k = int(np.argmin(p))
        ax.plot([k], [p[k]], "o", ms=4, color="C3", label=f"argmin {k}")
        ax.legend(loc="upper center", fontsize=8, frameon=False)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("token position j")
        ax.set_ylabel("p(j)")
        if log_scale or (p.max() > 0 and p[p > 0].min() < 1e-4 * p.max()):
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
