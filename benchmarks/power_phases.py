"""Where the power engine's time goes, in process (issue 21, goal 2): one profile of a compact ALiBi stack
with the engine's phases timed, printed as JSON. Run on demand (``bench_depth.py --phases`` runs it for
its first depth), never as a test:

    .venv/bin/python benchmarks/power_phases.py [--layers 1000000] [--tokens 4096] [--heads 32] [--lam 0.5]

Phases (wall seconds, summed over calls): ``block_product`` (B from the kernels), ``scaled`` (B's scaled
form), ``normalise_rows`` (every power's rows divided by their sums), ``log_entries``, ``block_rows``,
``reblock``, ``vector_times`` and ``multiply`` (the squarings);
inside ``multiply`` the W panels' formation (``form_w``, numerics/native_panel.py) and their products by
BLAS (``panel_products``) are summed over the engine's threads, so they may add up to more than
``multiply`` itself. The timers wrap the modules' functions as the engine calls them.
"""

from __future__ import annotations

import argparse
import collections
import json
import time

from common import add_power_model, power_stack, stamp


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_power_model(ap, tokens=4096)
    a = ap.parse_args(argv)
    header = stamp()
    start = time.perf_counter()
    import posbias.numerics.power as power
    import posbias.numerics.scaled_product as products
    from posbias.numerics.blas_threads import blas_threads

    imports = time.perf_counter() - start
    spent: dict[str, float] = collections.defaultdict(float)

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - t

        return wrapper

    for name in (
        "block_product",
        "scaled",
        "normalise_rows",
        "log_entries",
        "block_rows",
        "reblock",
        "vector_times",
        "multiply",
    ):
        setattr(power, name, timed(name, getattr(power, name)))
    products.form_w = timed("form_w", products.form_w)
    products._panel_product = timed("panel_products", products._panel_product)
    stack = power_stack(a)
    t = time.perf_counter()
    profile = power.Power().profile(stack, a.tokens)
    total = time.perf_counter() - t
    print(
        json.dumps(
            {
                **header,
                "layers": a.layers,
                "tokens": a.tokens,
                "heads": a.heads,
                "threads": blas_threads(),
                "native_panels": products.native_panels(),
                "imports_s": imports,
                "profile_s": total,
                "phases_s": dict(spent),
                "unresolved": int(profile.unresolved().sum()),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
