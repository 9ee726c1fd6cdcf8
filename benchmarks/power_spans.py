"""How much range the power engine's matrices B^(2^k) need, and whether row and column scales could
hold it (issue 21, goal 2). Run on demand, never as a test:

    .venv/bin/python benchmarks/power_spans.py [--layers 1000000] [--tokens 1024] [--heads 32] [--lam 0.5]
                                               [--out benchmarks/results-power-spans.json]

For every power the engine squares (numerics/power.py: log M as ``log_entries`` gives it), on the
causal support:

* ``column_span``: the largest max - min of log M[i, j] down a column j: the range one scale per
  column would have to hold (float64 holds about 1400 nats from 2^-1022 to 2^1023, and a product needs
  its factors' and its own, so the engine keeps blocks within 300 nats: numerics/scaled.py);
* ``residual_span``: the same after the best row-and-column scale, log M[i, j] - a_i - b_j, with
  (a, b) from 30 rounds of alternating maxima (a_i = max_j (log M - b_j), b_j = max_i (log M - a_i));
  if it stayed within float64's range, the squarings could be a few large products with one diagonal
  scale per row and column, and the small row blocks that keep the engine above its BLAS limit would
  not be needed;
* ``block_rows``: the block height the engine chose for that squaring (none for the last power,
  which is only multiplied into the vector).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from common import add_power_model, power_stack, stamp

ROOT = Path(__file__).resolve().parents[1]


def spans(log_m: np.ndarray, rounds: int = 30) -> tuple[float, float]:
    """(column span, residual span after row and column scales) of log M on its finite entries."""
    finite = np.isfinite(log_m)
    top = np.where(finite, log_m, -np.inf).max(axis=0)
    bottom = np.where(finite, log_m, np.inf).min(axis=0)
    live = np.isfinite(top)
    column = float((top[live] - bottom[live]).max())
    a, b = np.zeros(log_m.shape[0]), np.zeros(log_m.shape[1])
    for _ in range(rounds):
        a = np.where(finite, log_m - b[None, :], -np.inf).max(axis=1)
        b = np.where(finite, log_m - np.where(np.isfinite(a), a, 0.0)[:, None], -np.inf).max(axis=0)
    a, b = np.where(np.isfinite(a), a, 0.0), np.where(np.isfinite(b), b, 0.0)
    residual = np.where(finite, log_m - a[:, None] - b[None, :], 0.0)
    return column, float(-residual.min())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_power_model(ap, tokens=1024)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results-power-spans.json")
    a = ap.parse_args(argv)
    import posbias.numerics.power as power
    from posbias.files import atomic_write

    rows, heights = [], []
    log_entries, block_rows = power.log_entries, power.block_rows

    def record(m, **kwargs):
        out = log_entries(m, **kwargs)
        column, residual = spans(out)
        rows.append({"power": f"2^{len(rows)}", "column_span": column, "residual_span": residual})
        return out

    def height(log_m, pool=None):
        rows_chosen = block_rows(log_m, pool)
        heights.append(rows_chosen)
        return rows_chosen

    power.log_entries, power.block_rows = record, height
    header = stamp(load=False)
    profile = power.Power().profile(power_stack(a), a.tokens)
    for k, row in enumerate(rows):  # the last power is multiplied into the vector, not squared
        row["block_rows"] = min(heights[k], a.tokens) if k < len(heights) else None
    result = {
        **header,
        "layers": a.layers,
        "tokens": a.tokens,
        "heads": a.heads,
        "lam": a.lam,
        "unresolved": int(profile.unresolved().sum()),
        "powers": rows,
    }
    for row in rows:
        print(
            f"{row['power']:>5}: column span {row['column_span']:9.1f}, after row and column scales "
            f"{row['residual_span']:9.1f}, block rows {row.get('block_rows', '-')}"
        )
    atomic_write(a.out, lambda f: f.write(json.dumps(result, indent=2) + "\n"), binary=False)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
