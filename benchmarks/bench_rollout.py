"""Benchmark: posbias engines against the dense NumPy baseline on the BLOOM shape.

    python benchmarks/bench_rollout.py [--config PATH] [--sizes 1024,4096,65536,1048576] [--out FILE]

1. In one process, on the config (default ../shared/data/official-configs/no_content/bloom.yaml:
   T = 70, H = 112, N = 256): the dense baseline (benchmarks/dense_baseline.py) once
   and the engine's steady state (median of repeated calls after a warm-up call);
   both are checked against the reference profile.
2. Whole-process wall time: ``posbias rollout CONFIG`` against ``python dense_baseline.py CONFIG``.
3. The engine alone at each N (the config with --tokens N), each in a fresh process:
   first call (with compilation), steady-state call, and the process's peak RSS.

The baseline's NumPy runs with OMP/OPENBLAS/MKL_NUM_THREADS = 2 (both cores) in its own
processes, and with NumPy's default (all cores) in process. Results go to stdout as a
Markdown table and to --out as JSON. Timings are of
this machine; run it on demand, never as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import stamp

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO.parent / "shared/data/official-configs/no_content/bloom.yaml"
REFERENCE = REPO.parent / "shared/data/reference-profiles/no_content__bloom.csv"

CHILD = """
import json, resource, sys, time
import numpy as np
from posbias.config import load
from posbias.rollout import run_stack
loaded = load(sys.argv[1], tokens=int(sys.argv[2]))
engine = sys.argv[3]
t0 = time.perf_counter(); first = run_stack(loaded.stack, loaded.num_tokens, engine=engine); t1 = time.perf_counter()
again = run_stack(loaded.stack, loaded.num_tokens, engine=engine); t2 = time.perf_counter()
assert np.array_equal(first.profile, again.profile)
s = again.summary
print(json.dumps({"tokens": loaded.num_tokens, "engine": f"{engine}: {s.engine} [{s.path}]", "first_s": t1 - t0,
                  "steady_s": t2 - t1, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "mass_defect": s.mass_defect, "unresolved": s.unresolved, "argmin": s.argmin,
                  "log_p_min": s.log_p_min}))
"""
THREADS = {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def _wall(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=REPO, env={**os.environ, **THREADS})
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    ap.add_argument("--sizes", default="1024,4096,65536,1048576")
    ap.add_argument("--engines", default="auto,fft", help="engines for the size sweep (each N in a fresh process)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results.json")
    args = ap.parse_args()

    from rich.progress import Progress

    sys.path.insert(0, str(REPO))
    from benchmarks.dense_baseline import dense_profile
    from posbias.config import load
    from posbias.rollout import run_stack

    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict = {
        "config": str(args.config),
        **stamp(),
        "baseline_threads": THREADS,
    }
    with Progress(transient=True) as bar:
        engines = args.engines.split(",")
        task = bar.add_task("benchmark", total=4 + len(sizes) * len(engines))
        loaded = load(args.config)
        s = loaded.stack
        n = loaded.num_tokens
        t = time.perf_counter()
        base = dense_profile(s.lambdas, s.slopes, s.diagonal, s.head_weights, s.temperature, n)
        results["baseline_s"] = time.perf_counter() - t
        bar.advance(task)

        t = time.perf_counter()
        engine = run_stack(s, n)
        results["engine_first_s"] = time.perf_counter() - t
        results["engine_steady_s"] = _median_time(lambda: run_stack(s, n), 15)
        results["engine"] = f"{engine.summary.engine} [{engine.summary.path}]"
        results["speedup_steady"] = results["baseline_s"] / results["engine_steady_s"]
        if REFERENCE.exists() and args.config == DEFAULT_CONFIG:
            ref = np.loadtxt(REFERENCE, delimiter=",", skiprows=1)[:, 1]
            results["engine_max_abs_diff_vs_reference"] = float(np.max(np.abs(engine.profile - ref)))
            results["baseline_max_abs_diff_vs_reference"] = float(np.max(np.abs(base - ref)))
        bar.advance(task)

        with tempfile.TemporaryDirectory() as tmp:
            posbias = str(Path(sys.executable).with_name("posbias"))
            results["process_posbias_rollout_s"] = _wall([posbias, "rollout", str(args.config), "--out", tmp])
            bar.advance(task)
            results["process_baseline_s"] = _wall([sys.executable, "benchmarks/dense_baseline.py", str(args.config)])
            bar.advance(task)
        results["speedup_process"] = results["process_baseline_s"] / results["process_posbias_rollout_s"]

        results["sizes"] = []
        for size in sizes:
            for name in engines:
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, str(args.config), str(size), name],
                    check=True,
                    capture_output=True,
                    text=True,
                    cwd=REPO,
                    env={**os.environ, **THREADS},
                )
                results["sizes"].append(json.loads(out.stdout.strip().splitlines()[-1]))
                bar.advance(task)

    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    tmp.replace(args.out)

    r = results
    print(f"config: {r['config']} ({r['machine']})\n")
    print("| measurement | value |\n|---|---|")
    print(f"| dense NumPy baseline, N = 256 | {r['baseline_s']:.2f} s |")
    print(f"| posbias engine ({r['engine']}), steady state | {r['engine_steady_s'] * 1e3:.2f} ms |")
    print(f"| steady-state speed-up | {r['speedup_steady']:.0f}x |")
    print(f"| posbias engine, first call (compiles) | {r['engine_first_s']:.2f} s |")
    print(
        f"| whole process: `posbias rollout` vs baseline | {r['process_posbias_rollout_s']:.2f} s vs "
        f"{r['process_baseline_s']:.2f} s ({r['speedup_process']:.1f}x) |"
    )
    if "engine_max_abs_diff_vs_reference" in r:
        print(
            f"| max abs diff vs reference profile: engine / baseline | "
            f"{r['engine_max_abs_diff_vs_reference']:.1e} / {r['baseline_max_abs_diff_vs_reference']:.1e} |"
        )
    print("\n| N | engine | first call (s) | steady (s) | peak RSS (MB) | unresolved | argmin | log p_min |")
    print("|---|---|---|---|---|---|---|---|")
    for row in r["sizes"]:
        print(
            f"| {row['tokens']} | {row['engine']} | {row['first_s']:.2f} | {row['steady_s']:.3f} | "
            f"{row['peak_rss_mb']:.0f} | {row['unresolved']} | {row['argmin']} | "
            f"{'-' if row['log_p_min'] is None else format(row['log_p_min'], '.1f')} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
