"""What several benchmark scripts share: the header of a results file, and the power engine's model
(a compact ALiBi stack with a constant lambda, the paper's slopes). The scripts run as files
(``python benchmarks/NAME.py``), so they import this module by its plain name."""

from __future__ import annotations

import argparse
import os
import time


def stamp(*, load: bool = True) -> dict:
    """The date (UTC), the machine's cores and, with ``load``, the 1-minute load average now."""
    out = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": f"{os.cpu_count()} CPU cores"}
    if load:
        out["load_average_before"] = os.getloadavg()[0]
    return out


def add_power_model(ap: argparse.ArgumentParser, tokens: int) -> None:
    """--layers, --tokens, --heads, --lam: the power engine's benchmark model."""
    ap.add_argument("--layers", type=int, default=1_000_000)
    ap.add_argument("--tokens", type=int, default=tokens)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--lam", type=float, default=0.5)


def power_stack(a: argparse.Namespace):
    """The compact stack of ``add_power_model``'s arguments: one layer of ``heads`` ALiBi heads (the
    paper's slopes) with lambda = ``lam``, repeated ``layers`` times."""
    from posbias.numerics.periodic import PeriodicStack
    from posbias.numerics.slopes import alibi_slopes
    from posbias.numerics.stack import AlibiStack

    return PeriodicStack.build(AlibiStack.build([a.lam], list(alibi_slopes(a.heads, "hf"))), a.layers)
