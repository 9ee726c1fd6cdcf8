"""Benchmark: sweeps as users run them (issue 10, section 7). On demand, never a test:

    .venv/bin/python benchmarks/bench_sweep.py [--repeats 3] [--devices 1,2,4] [--out FILE]

1. Whole process: ``posbias sweep examples/sweep-ushape.yaml`` (10,000 points, T = 32,
   H = 32, N = 256) in a fresh process with a fresh output folder, ``--repeats`` times
   (median, min, max), side by side in the same run with the baseline the issue names: a
   Python loop over single-profile calls (``posbias.numerics.profile`` + ``summarize``
   per point, in process, on a 1,000-point subset, scaled to 10,000).
2. Grid throughput on the XLA path (the route accelerators take; ``POSBIAS_NATIVE=0``)
   with 1, 2, 4 fake CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count``):
   a 512-point grid of the same model at N = 64, whole process, points per second. On a
   2-core machine more fake devices cannot add compute; the figure shows the overhead
   of the device split, not a speed-up.

Timings are of this machine and whatever else runs on it: report the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
POSBIAS = str(Path(sys.executable).parent / "posbias")

SMALL_GRID = """\
name: throughput grid
base: {layers: 32, heads: 32, tokens: 64, slopes: paper, content_diagonal: 2.0, mask: causal}
axes:
  lambda: {linspace: [0.05, 0.95, 32]}
  slope_scale: {geomspace: [0.01, 10, 16]}
"""


def _wall(cmd, env=None) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=REPO, env={**os.environ, **(env or {})})
    return time.perf_counter() - t


def loop_baseline(points: int = 1000) -> float:
    """Seconds for 10,000 single-profile calls, extrapolated from ``points`` of them."""
    import numpy as np

    import posbias.numerics as nx

    slopes = nx.alibi_slopes(32)
    lams = np.linspace(0.05, 0.95, 100)
    scales = np.geomspace(0.01, 10, 100)
    grid = [(lam, sc) for lam in lams for sc in scales][:: 10_000 // points]
    stacks = [nx.AlibiStack.build([lam] * 32, slopes * sc, 2.0) for lam, sc in grid]
    nx.summarize(nx.profile(stacks[0], 256), stacks[0])  # warm
    t = time.perf_counter()
    for s in stacks:
        nx.summarize(nx.profile(s, 256), s)
    return (time.perf_counter() - t) * 10_000 / len(stacks)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--devices", default="1,2,4")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results-sweep.json")
    args = ap.parse_args()
    results = {"machine": f"{os.cpu_count()} CPU cores", "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        times = []
        for k in range(args.repeats):
            times.append(_wall([POSBIAS, "sweep", "examples/sweep-ushape.yaml", "--out", f"{tmp}/u{k}", "--quiet"]))
        results["ushape_process_s"] = {"median": statistics.median(times), "min": min(times), "max": max(times)}
        results["loop_baseline_s"] = loop_baseline()
        spec = Path(tmp) / "grid.yaml"
        spec.write_text(SMALL_GRID)
        results["xla_devices"] = []
        for d in (int(x) for x in args.devices.split(",")):
            env = {"POSBIAS_NATIVE": "0", "XLA_FLAGS": f"--xla_force_host_platform_device_count={d}"}
            wall = _wall([POSBIAS, "sweep", str(spec), "--out", f"{tmp}/d{d}", "--devices", str(d), "--quiet"], env)
            results["xla_devices"].append({"devices": d, "seconds": wall, "points_per_s": 512 / wall})
    results["load_after"] = os.getloadavg()
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    u = results["ushape_process_s"]
    print(f"load average before / after: {results['load_before'][0]:.2f} / {results['load_after'][0]:.2f}")
    print("| measurement | seconds |\n|---|---|")
    print(f"| `posbias sweep examples/sweep-ushape.yaml` (10,000 points), whole process | "
          f"{u['median']:.2f} (min {u['min']:.2f}, max {u['max']:.2f}) |")
    print(f"| loop of single-profile calls + summaries, in process, 10,000 points | {results['loop_baseline_s']:.2f} |")
    print("\n| fake CPU devices (XLA path) | 512-point grid, s | points / s |\n|---|---|---|")
    for row in results["xla_devices"]:
        print(f"| {row['devices']} | {row['seconds']:.2f} | {row['points_per_s']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
