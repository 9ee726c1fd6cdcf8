"""How many threads the BLAS libraries run on during posbias's dense products (issue 21).

NumPy's BLAS (OpenBLAS here) starts as many threads as the machine has cores, or what
OPENBLAS_NUM_THREADS says, whatever else runs: on a shared machine its spinning threads
oversubscribe the cores (measured on 2 cores: a power-engine run at N = 4096 took 112 s with
BLAS's own threads, 42 s with one). The engines that multiply N x N matrices set the count
themselves for the duration of their work, through threadpoolctl:

* the ``threads`` option of the engine (``Power(threads=k)``), else
* the environment variable ``POSBIAS_BLAS_THREADS`` (a positive integer), else
* the number of cores this process may run on (``os.sched_getaffinity``; ``os.cpu_count``
  where the platform has no affinity), so that BLAS never runs more threads than that.

Examples
--------
>>> blas_threads(3)
3
>>> with blas_limit(1):
...     pass
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from functools import lru_cache
from typing import Any

from posbias.errors import UserError

THREADS_ENV = "POSBIAS_BLAS_THREADS"  # overrides the default thread count (the cores this process may use)


def blas_threads(requested: int | None = None) -> int:
    """Threads for an engine: ``requested`` if given, else ``POSBIAS_BLAS_THREADS``, else the number of
    cores this process may run on (os.sched_getaffinity), so that BLAS never oversubscribes them.
    A count below 1 (or an environment value that is not an integer) is refused (``UserError``)."""
    if requested is None:
        raw = os.environ.get(THREADS_ENV)
        if raw is None:
            return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        try:
            requested = int(raw)
        except ValueError:
            requested = 0
        if requested < 1:
            raise UserError(f"environment variable {THREADS_ENV}={raw!r}: expected a positive integer (threads)")
    if requested < 1:
        raise UserError(f"power engine threads = {requested}: expected a positive integer")
    return requested


@lru_cache(maxsize=1)
def _controller() -> Any:
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def blas_limit(threads: int) -> AbstractContextManager[Any]:
    """A context in which the BLAS libraries loaded in this process use ``threads`` threads (restored
    on exit)."""
    return _controller().limit(limits=threads, user_api="blas")
