"""How much range the power engine's matrices B^(2^k) need, and whether row and column scales could
hold it (issue 21, goal 2). Run on demand, never as a test:

    .venv/bin/python benchmarks/power_spans.py [--layers 1000000] [--tokens 1024] [--heads 32] [--lam 0.5]
                                               [--out benchmarks/results-power-spans.json]

For every power the engine squares (numerics/power.py: log M as ``log_entries`` gives it), on the
causal support:

* ``column_span``: the largest max - min of log M[i, j] down a column j: the range one scale per
  column would have to hold (float64 holds about 1400 nats from 2^-1022 to 2^1023, and a product needs
  its factors' and its own, so the engine keeps blocks within 300 nats: numerics/scaled.py);
* ``residual_span``: the range left after one scale per row and per column of the whole matrix,
  log M[i, j] - a_i - b_j, fitted by 30 rounds of alternating maxima (a range such scales achieve),
  and ``residual_span_at_least``: a lower bound on what any such scales leave (``span_at_least``).
  If it stayed within float64's range, the squarings could be a few large products with one diagonal
  scale per row and column, and the small row blocks that keep the engine above its BLAS limit would
  not be needed;
* ``tile_<b>``, ``tile_<b>_at_least``: the same with a row and a column scale of their own in every
  b x b tile (the worst tile, b = 64, 128, 256, 512): could the squarings be a 2-D grid of large tile
  products (each tile's scales folded into its factors, one GEMM per tile triple) instead of row
  blocks of a few dozen rows? Only where these stay well within float64's range;
* ``block_64``: the engine's own form with blocks of 64 rows (a scale per block and column: each
  column's range within a block, exact), ``block_64_row_scales`` and ``..._at_least``: the same with a
  scale per row added: would row scales let the engine's row blocks grow?
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
TILES = (64, 128, 256, 512)


def fitted_span(groups: np.ndarray, row_scales: bool = True, rounds: int = 10) -> float:
    """The largest range over a stack of matrices (G, R, C) of log-entries (-inf: zero, ignored) left
    after a scale per column of each and, with ``row_scales``, per row too, fitted by alternating maxima
    (a_i = max_j (L - b_j), b_j = max_i (L - a_i)): a range these scales achieve. Without row scales it
    is each column's own range, the best there is."""
    finite = np.isfinite(groups)
    row = np.zeros(groups.shape[:-1] + (1,))
    for _ in range(rounds if row_scales else 1):
        col = np.where(finite, groups - row, -np.inf).max(axis=-2, keepdims=True)
        col = np.where(np.isfinite(col), col, 0.0)
        if row_scales:
            row = np.where(finite, groups - col, -np.inf).max(axis=-1, keepdims=True)
            row = np.where(np.isfinite(row), row, 0.0)
    return float(-np.where(finite, groups - row - col, 0.0).min())


def span_at_least(groups: np.ndarray, references: int = 64) -> float:
    """A lower bound on the range any row and column scales leave in the worst of a stack of matrices
    (G, R, C): for rows i, k and columns j, l, Q = L_ij - L_il - L_kj + L_kl is the same after any
    scales, and a residual within [m, m + s] has |Q| <= 2 s, so s >= max |Q| / 2 (taken over the
    column pairs (j, l) with l among ``references`` evenly spaced columns, and every row pair)."""
    worst = 0.0
    for ref in range(0, groups.shape[-1], max(1, groups.shape[-1] // references)):
        with np.errstate(invalid="ignore"):
            d = groups - groups[..., ref : ref + 1]  # L_ij - L_il; nan or inf where either entry is zero
        ok = np.isfinite(d)
        top = np.where(ok, d, -np.inf).max(axis=-2)
        bottom = np.where(ok, d, np.inf).min(axis=-2)
        live = np.isfinite(top)
        if live.any():
            worst = max(worst, float((top[live] - bottom[live]).max()) / 2.0)
    return worst


def tiles(log_m: np.ndarray, b: int) -> np.ndarray:
    """The b x b tiles of log M (N a multiple of b) as a stack (G, b, b)."""
    n = log_m.shape[0]
    return log_m.reshape(n // b, b, n // b, b).transpose(0, 2, 1, 3).reshape(-1, b, b)


def measures(log_m: np.ndarray) -> dict:
    """Every span of the module docstring for one power."""
    n = log_m.shape[0]
    out = {
        "column_span": fitted_span(log_m[None], row_scales=False),
        "residual_span": fitted_span(log_m[None], rounds=30),
        "residual_span_at_least": span_at_least(log_m[None]),
    }
    for b in TILES:
        if n % b == 0:
            out[f"tile_{b}"] = fitted_span(tiles(log_m, b))
            out[f"tile_{b}_at_least"] = span_at_least(tiles(log_m, b), references=32)
    if n % 64 == 0:
        blocks = log_m.reshape(n // 64, 64, n)
        out["block_64"] = fitted_span(blocks, row_scales=False)
        out["block_64_row_scales"] = fitted_span(blocks)
        out["block_64_row_scales_at_least"] = span_at_least(blocks)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_power_model(ap, tokens=1024)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results-power-spans.json")
    a = ap.parse_args(argv)
    import posbias.numerics.power as power
    from posbias.io.files import atomic_write

    rows, heights = [], []
    log_entries, block_rows = power.log_entries, power.block_rows

    def record(m, **kwargs):
        out = log_entries(m, **kwargs)
        rows.append({"power": f"2^{len(rows)}", **measures(out)})
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
            f"{row['power']:>5}:", ", ".join(f"{k} {v:.0f}" for k, v in row.items() if k != "power" and v is not None)
        )
    atomic_write(a.out, lambda f: f.write(json.dumps(result, indent=2) + "\n"), binary=False)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
