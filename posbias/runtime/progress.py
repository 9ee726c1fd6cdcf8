"""The progress bar long commands draw on stderr (rollouts, sweeps, fits, measurements)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import contextmanager
from contextvars import ContextVar

_WITHIN: ContextVar[Callable[[float], None] | None] = ContextVar("posbias_progress_within", default=None)


@contextmanager
def progress_bar(enabled: bool, label: str, unit: str = "layers"):
    """A rich progress bar with ETA; yields ``update(done, total)`` or None when disabled."""
    if not (enabled and sys.stderr.isatty()):  # rich draws nothing useful without a terminal
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(
        TextColumn(label),
        BarColumn(),
        TextColumn(f"{{task.completed:.4g}}/{{task.total}} {unit}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        transient=True,
        console=Console(stderr=True),  # stdout stays the results' (pipes, --json)
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done, total):
            bar.update(task, completed=done, total=total)

        yield update


@contextmanager
def within(report: Callable[[float], None] | None):
    """While the block runs, ``step_done(fraction)`` calls ``report(fraction)``: a long inner loop (the nodes of
    integrated gradients within one batch) moves the enclosing bar by the fraction of its step it has done.
    ``report`` None: nothing is reported."""
    token = _WITHIN.set(report)
    try:
        yield
    finally:
        _WITHIN.reset(token)


def step_done(fraction: float) -> None:
    """Report ``fraction`` (0..1) of the enclosing step done (``within``); a no-op outside one."""
    report = _WITHIN.get()
    if report is not None:
        report(fraction)
