"""The progress bar long commands draw on stderr (rollouts, sweeps, fits, measurements)."""

from __future__ import annotations

import sys
from contextlib import contextmanager


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
        TextColumn(f"{{task.completed}}/{{task.total}} {unit}"),
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
