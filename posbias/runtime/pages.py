"""How a ``posbias`` process asks the kernel for memory: NumPy's transparent-huge-page advice off by default.

NumPy marks every large array it allocates with ``madvise(MADV_HUGEPAGE)`` on Linux. Where the kernel's
transparent huge pages are set to ``madvise`` with ``defrag`` also ``madvise`` (a common default; this
project's machine), each first write to such an array makes the kernel try to compact memory into a 2 MiB
page, synchronously, and where it cannot (a virtual machine whose memory is fragmented or ballooned) every
page fault pays for the attempt. Measured on this project's machine (2026-12-08, `AnonHugePages` 0 kB: no huge
page was ever obtained): filling a fresh 480 MB float32 array took 0.87 s with the advice and 0.27 s without it,
and a ``posbias measure`` of SmolLM2 allocates its weights (0.5 GB in float32, 1 GB in float64) afresh in every
process. Where huge pages are granted the advice mainly saves TLB misses (not measured here: this machine
grants none); the command turns it off unless the user has chosen (``NUMPY_MADVISE_HUGEPAGE``, NumPy's own
switch: ``1`` keeps the advice).

The switch is read when NumPy is imported, so :func:`prefer_small_pages` must run before it (the console
script, ``posbias.entry``, calls it first). A Python program that imports posbias is left as NumPy set it up:
a library does not change its caller's process. Standard library only.
"""

from __future__ import annotations

import os

NUMPY_SWITCH = "NUMPY_MADVISE_HUGEPAGE"


def prefer_small_pages() -> None:
    """Set ``NUMPY_MADVISE_HUGEPAGE=0`` unless the environment sets it (no effect on a NumPy already imported)."""
    os.environ.setdefault(NUMPY_SWITCH, "0")
