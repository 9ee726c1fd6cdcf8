"""A last-resort wall-clock guard: ``posbias derive --time-budget SECONDS``.

Answers never depend on it. Every derivation decides by deterministic work limits
(theorem.expr_guard's literal and size limits, cost estimates from the parameters,
bounded series terms); posbias.cli.derive runs the whole query under ``time_limit(budget)``
only so that an input those limits missed cannot hang the command: a query that
overruns raises ``TimeLimitExceeded`` and is refused, labelled "undecided: time
budget exceeded" (exit 2). Nothing inside a derivation reads the clock, so a loaded
machine either gives the same answer as an idle one or that labelled refusal.

The limit is a SIGALRM timer, so it only interrupts in the main thread; elsewhere
``time_limit`` runs the step unlimited (it cannot interrupt it safely).
``TimeLimitExceeded`` derives from BaseException so that SymPy's ``except Exception``
cannot swallow it.

Examples
--------
>>> clock = Clock(10.0)
>>> 0 < clock.left(cap=1.0) <= 1.0
True
>>> with time_limit(5.0):
...     sum(range(10))
45
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class TimeLimitExceeded(BaseException):
    """Raised when a ``time_limit`` runs out (BaseException: SymPy cannot swallow it)."""


class Clock:
    """The time left of one budget of ``total`` seconds, started at construction."""

    def __init__(self, total: float):
        self.end = time.monotonic() + total

    def left(self, cap: float = math.inf) -> float:
        """Seconds left, at most ``cap``."""
        return min(cap, self.end - time.monotonic())


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Run the block for at most ``seconds`` (main thread only), else raise ``TimeLimitExceeded``.

    Fewer than 0.05 s left raises at once.
    """
    if seconds <= 0.05:
        raise TimeLimitExceeded
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise TimeLimitExceeded

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
