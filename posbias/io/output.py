"""What posbias shows: per-position CSV text and profile figures (posbias/io/files.py writes them)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROWS_PER_CHUNK = 1 << 16  # rows formatted at a time: a table of any N holds O(chunk) Python objects


@dataclass(frozen=True)
class PositionTable:
    """``token_position,<name>,...``: one row per token, floats at full repr precision (they read back
    bit for bit), produced ``ROWS_PER_CHUNK`` rows at a time by ``chunks()``, so that writing a profile of
    N = 10^8 tokens holds a few megabytes of text at once rather than gigabytes (posbias/io/files.py writes
    a table chunk by chunk). ``str(table)`` is the whole text."""

    columns: dict[str, np.ndarray]

    def chunks(self) -> Iterator[str]:
        yield ",".join(["token_position", *self.columns]) + "\n"
        row = ("{}," + ",".join(["{!r}"] * len(self.columns)) + "\n").format
        values = [np.asarray(c, dtype=np.float64) for c in self.columns.values()]
        size = len(values[0]) if values else 0
        for start in range(0, size, ROWS_PER_CHUNK):
            stop = min(size, start + ROWS_PER_CHUNK)
            yield "".join(map(row, range(start, stop), *(v[start:stop].tolist() for v in values)))

    def __str__(self) -> str:
        return "".join(self.chunks())


def position_table(**columns: np.ndarray) -> PositionTable:
    """The per-position CSV of ``columns`` (name -> values), to be written chunk by chunk."""
    return PositionTable(dict(columns))


def position_csv(**columns: np.ndarray) -> str:
    """``token_position,<name>,...`` as one string (``PositionTable``; for tables of any size pass
    ``position_table(...)`` to ``files.write_run`` instead).

    ``position_csv(probability=p)`` is the reference tool's profile format.
    """
    return str(position_table(**columns))


def config_label(path: str | os.PathLike) -> str:
    """The config's name for figure titles: its path below the nearest ``official-configs``
    (or else ``data``) folder above it, e.g. ``all_content/fineweb-edu/bloom.yaml`` (three
    official files are called ``bloom.yaml``); otherwise the path as given."""
    given = Path(path)
    for candidate in (given, Path(os.path.abspath(given))):
        parents = candidate.parts[:-1]
        for marker in ("official-configs", "data"):
            if marker in parents:
                k = len(parents) - 1 - parents[::-1].index(marker)
                return "/".join(candidate.parts[k + 1 :])
    return str(path)


def lambda_label(lambdas, spec: str | None = None) -> str:
    """A one-line description of a λ schedule for a figure subtitle.

    ``spec`` (e.g. ``"power_decay λ_0 = 0.8, β = 0.5"``) is shown as given; the values add
    their range and sum: ``λ_t = 0.5 (constant), Σλ_t = 16``, or
    ``λ_t: 0.544 (t=0) … 0.0556 (t=31), Σλ_t = 4.228``."""
    lam = np.asarray(lambdas, dtype=np.float64).ravel()
    parts = [spec] if spec else []
    if lam.size:
        if np.all(lam == lam[0]):
            parts.append(f"λ_t = {lam[0]:.3g} (constant)")
        else:
            parts.append(f"λ_t: {lam[0]:.3g} (t=0) … {lam[-1]:.3g} (t={lam.size - 1})")
        parts.append(f"Σλ_t = {lam.sum():.4g}")
    return ", ".join(parts)


_DECADE_STEPS = (1, 2, 3, 5, 10, 20, 25, 50, 100, 200, 500, 1000)


def _decade_axis(ax, values: list[np.ndarray]) -> None:
    """Log y axis for probabilities: limits at whole decades, the upper one at most 1;
    labelled ticks every 1, 2, 3, 5, 10, ... decades counted down from 1 (at most 9)."""
    from matplotlib.ticker import FixedLocator, LogFormatterSciNotation, LogLocator, NullFormatter, NullLocator

    finite = [v[np.isfinite(v) & (v > 0)] for v in values]
    positive = np.concatenate(finite) if finite else np.ones(1)
    if positive.size == 0:
        positive = np.ones(1)
    top = min(0, int(np.ceil(np.log10(positive.max()) - 1e-9)))
    lowest = int(np.floor(np.log10(positive.min()) + 1e-9))
    decades = max(1, top - lowest)
    step = next((s for s in _DECADE_STEPS if decades / s <= 8), _DECADE_STEPS[-1])
    bottom = top - decades
    ax.set_yscale("log")
    ax.set_ylim(10.0**bottom, 10.0**top)
    ax.yaxis.set_major_locator(FixedLocator([10.0 ** (top - k * step) for k in range(decades // step + 1)]))
    ax.yaxis.set_major_formatter(LogFormatterSciNotation(base=10.0))
    if step == 1 and decades <= 6:
        ax.yaxis.set_minor_locator(LogLocator(base=10.0, subs=np.arange(2, 10) * 0.1, numticks=12))
    elif step > 1 and decades <= 100:
        ax.yaxis.set_minor_locator(FixedLocator([10.0**e for e in range(bottom, top + 1)]))
    else:
        ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_minor_formatter(NullFormatter())


def profile_figure(
    panels: list[tuple[str, np.ndarray]],
    *,
    log_scale: bool = False,
    title: str | None = None,
    subtitle: str | None = None,
    panel_width: float = 4.4,
    panel_height: float = 3.4,
    log_values: bool = False,
):
    """One panel per (panel title, profile): p(j) against token position j.

    ``title`` names the figure (use ``config_label(path)`` for a config file), ``subtitle``
    goes on the next line (e.g. ``lambda_label(lambdas, spec)``); both are wrapped to the width. Each panel's
    y axis is logarithmic when ``log_scale`` is set or the profile spans more than four
    decades: ticks at whole decades, the upper limit at most 1 (these are probabilities).
    The legend (profile, argmin) sits below each panel, never on the data.
    ``log_values``: the panels hold natural-log profiles (entries below the float64 range,
    from an extended-range engine); they are drawn as log10 p(j) on a linear axis.
    Long profiles are drawn through ``envelope`` (per-pixel min and max), so a figure of
    N = 2^20 costs what one of a few thousand points costs and loses no extreme.
    """
    from matplotlib.figure import Figure  # no pyplot: no global figure registry, no GUI backend

    fig = Figure(
        figsize=(panel_width * len(panels), panel_height + 0.3 * bool(title) + 0.3 * bool(subtitle)),
        layout="constrained",
    )
    axes = fig.subplots(1, len(panels), squeeze=False)
    for ax, (name, p) in zip(axes[0], panels):
        p = np.asarray(p, dtype=np.float64)
        if log_values:
            _log_panel(ax, name, p)
            continue
        j, shown = envelope(p)
        ax.plot(j, shown, lw=1.4, color="C0", label="p(j)", marker="." if p.size <= 64 else None, ms=4)
        positive = p[p > 0]
        use_log = log_scale or bool(positive.size and positive.min() < 1e-4 * positive.max())
        if use_log:
            _decade_axis(ax, [p])
        else:
            peak = float(np.max(p[np.isfinite(p)], initial=0.0))
            ax.set_ylim(0, min(1.0, 1.08 * peak) if peak > 0 else 1.0)
        k = int(np.nanargmin(p)) if np.isfinite(p).any() else 0
        if use_log and not p[k] > 0:  # exact zeros have no place on a log axis: mark it at the bottom
            ax.plot(
                [k],
                [ax.get_ylim()[0]],
                "v",
                ms=6,
                color="C3",
                clip_on=False,
                zorder=3,
                label=f"argmin j = {k}, p = 0 (zeros not drawn)",
            )
        else:
            ax.plot(
                [k], [p[k]], "o", ms=5, color="C3", clip_on=False, zorder=3, label=f"argmin j = {k}, p = {p[k]:.3g}"
            )
        _label_axes(ax, name, "p(j)", p.size)
    if title or subtitle:
        import textwrap

        width = max(40, int(11 * panel_width * len(panels)))  # characters that fit at 11 pt
        lines = [*textwrap.wrap(title or "", width), *textwrap.wrap(subtitle or "", width)]
        fig.suptitle("\n".join(lines), fontsize=11)
    return fig


def envelope(values: np.ndarray, bins: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """(positions, values) to draw: all points up to 2 * ``bins``, else each bin's minimum and
    maximum in position order (what a pixel column would show)."""
    n = values.size
    if n <= 2 * bins:
        return np.arange(n), values
    edges = np.linspace(0, n, bins + 1).astype(int)
    xs, ys = [], []
    for a, b in zip(edges[:-1], edges[1:]):
        part = values[a:b]
        lo, hi = a + int(np.argmin(part)), a + int(np.argmax(part))
        for k in sorted((lo, hi)):
            xs.append(k)
            ys.append(values[k])
    return np.asarray(xs), np.asarray(ys)


def _log_panel(ax, name: str, log_p: np.ndarray) -> None:
    """log10 p(j) on a linear axis, for profiles that leave the float64 range."""
    log10 = log_p / np.log(10.0)
    j, shown = envelope(log10)
    ax.plot(j, shown, lw=1.4, color="C0", label="log10 p(j)")
    k = int(np.argmin(log10))
    ax.plot(
        [k], [log10[k]], "o", ms=5, color="C3", clip_on=False, zorder=3, label=f"argmin j = {k}, p = 10^{log10[k]:.6g}"
    )
    ax.set_ylim(top=min(0.0, float(np.max(log10)) + 0.05 * (float(np.max(log10)) - float(np.min(log10)) + 1)))
    _label_axes(ax, name, "log10 p(j)", log_p.size)


def _label_axes(ax, name: str, ylabel: str, num_tokens: int) -> None:
    """Title, axis labels, grid and the legend below the panel (never on the data)."""
    ax.set_title(name, fontsize=10)
    ax.set_xlabel("token position j")
    ax.set_ylabel(ylabel)
    ax.set_xlim(0, max(num_tokens - 1, 1))
    ax.grid(alpha=0.3, which="major")
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.2),
        ncol=2,
        fontsize=8,
        frameon=False,
        handlelength=1.5,
        columnspacing=1.2,
    )
