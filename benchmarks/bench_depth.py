"""Benchmark: one time-invariant profile at great depth (issue 10, section 3). Run on demand,
never as a test:

    .venv/bin/python benchmarks/bench_depth.py [--layers 1000000] [--tokens 4096] [--heads 32]
                                               [--schedule constant:0.5] [--scan-layers 1000]

Whole ``posbias rollout`` processes (wall time and the child's peak RSS from getrusage):

1. ``--layers T`` with a constant schedule: a compact stack, the power engine alone
   (``--engine power``: squarings of the N x N block product, numerics/power.py), and with
   ``--with-auto`` the default choice (auto re-runs the exact scan when power loses entries);
2. the plain per-layer scan (``--engine structured``, native C kernel) at ``--scan-layers`` and
   ten times that, extrapolated linearly to T (the difference of the two runs is the per-layer
   cost, so process start-up and JIT are not multiplied).

Timings are of this machine and of whatever else runs on it (shared by several engineers):
read them as orders of magnitude, rerun.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(args: list[str], out: Path) -> tuple[float, float, dict]:
    """(wall seconds, peak RSS MiB, summary) of one ``posbias rollout`` process."""
    code = ("import resource, subprocess, sys, time, json\n"
            "t = time.perf_counter()\n"
            "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
            "wall = time.perf_counter() - t\n"
            "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
            "print(json.dumps({'wall': wall, 'rss': rss, 'rc': p.returncode, 'out': p.stdout, 'err': p.stderr}))\n")
    cmd = [sys.executable, "-m", "posbias.cli", "rollout", *args, "--out", str(out), "--json"]
    done = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True, check=True, cwd=ROOT)
    result = json.loads(done.stdout)
    if result["rc"] != 0:
        raise SystemExit(f"failed: {' '.join(args)}: {result['err'].strip()}")
    return result["wall"], result["rss"], json.loads(result["out"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=1_000_000)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--schedule", default="constant:0.5")
    ap.add_argument("--scan-layers", type=int, default=1000)
    ap.add_argument("--with-auto", action="store_true", help="also the default engine choice (auto)")
    a = ap.parse_args(argv)
    model = ["--heads", str(a.heads), "--tokens", str(a.tokens), "--schedule", a.schedule]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        wall, rss, s = run(["--layers", str(a.layers), *model, "--engine", "power"], Path(tmp) / "power")
        rows.append((f"power engine alone, T = {a.layers}", wall, rss, s))
        if a.with_auto:
            wall, rss, s_auto = run(["--layers", str(a.layers), *model], Path(tmp) / "auto")
            rows.append((f"auto (power, exact-scan retry if lost), T = {a.layers}", wall, rss, s_auto))
        w1, r1, s1 = run(["--layers", str(a.scan_layers), *model, "--engine", "structured"], Path(tmp) / "s1")
        w2, r2, _ = run(["--layers", str(10 * a.scan_layers), *model, "--engine", "structured"], Path(tmp) / "s2")
        rows.append((f"plain scan, T = {a.scan_layers}", w1, r1, s1))
        rows.append((f"plain scan, T = {10 * a.scan_layers}", w2, r2, None))
        per_layer = (w2 - w1) / (9 * a.scan_layers)
        rows.append((f"plain scan extrapolated to T = {a.layers}", w1 + per_layer * (a.layers - a.scan_layers),
                     None, None))
    print(f"H = {a.heads}, N = {a.tokens}, {a.schedule}, causal, paper slopes (BLOOM's for H = 32); "
          f"{os.cpu_count()} CPU cores, shared machine")
    print(f"{'route':<44} {'wall s':>10} {'peak RSS MiB':>13}  engine [path], unresolved")
    for name, wall, rss, s in rows:
        extra = f"  {s['engine']} [{s['path']}], {s['unresolved']}" if s else ""
        print(f"{name:<44} {wall:>10.1f} {('-' if rss is None else f'{rss:.0f}'):>13}{extra}")
    power = rows[0][3]
    print("power notes:", *power["notes"], sep="\n  ")
    print(f"p(0) = {power['p_first']}, log p(N-1) = {power['log_p_last']}, argmin = {power['argmin']}, "
          f"sum lambda = {power['sum_lambda']}, last-token atom = {power['last_token_atom']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
