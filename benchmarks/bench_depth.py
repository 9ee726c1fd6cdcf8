"""Benchmark: one time-invariant profile at great depth (issue 10, section 3). Run on demand,
never as a test:

    .venv/bin/python benchmarks/bench_depth.py [--layers 1000000 1000000000] [--tokens 4096] [--heads 32]
                                               [--schedule constant:0.5] [--scan-layers 1000]

Whole ``posbias rollout`` processes (wall time and the child's peak RSS from getrusage):

1. each ``--layers T`` with a constant schedule: a compact stack, the power engine alone
   (``--engine power``: squarings of the N x N block product, numerics/power.py), and with
   ``--with-auto`` the default choice (auto re-runs the exact scan when power loses entries);
2. the plain per-layer scan (``--engine structured``, native C kernel) at ``--scan-layers`` and
   ten times that, extrapolated linearly to T (the difference of the two runs is the per-layer
   cost, so process start-up and JIT are not multiplied).

3. beside each power run, the BLAS limit (issue 21): a plain NumPy product of two N x N float64 matrices
   on the engine's thread count (numerics/blas_threads.py's ``blas_threads``: POSBIAS_BLAS_THREADS or the
   cores this process may use), median of three just before and just after the engine's process
   (their mean), gives this machine's GEMM rate now; the power
   engine's multiply-adds are N^3 / 6 per squaring (triangular), so its BLAS limit is
   squarings N^3 / 3 / rate and the reported ratio is whole-process wall / that limit (start-up, JAX
   and building B included: the strict reading). The load average is recorded before and after each.

4. with ``--phases``, the engine's phases in process at the first depth (benchmarks/power_phases.py).
5. with ``--with-numpy-panels``, each power run again with its W panels formed by NumPy
   (``POSBIAS_NATIVE=0``) right after it: the C panel kernel's speed-up (numerics/native_panel.py) in
   the same run, and how far the two routes' log p(N-1) lie apart.

Results go to ``--out`` (benchmarks/results-depth.json), written atomically. Timings are of this
machine and of whatever else runs on it (shared by several engineers): read them as orders of
magnitude, rerun; the ratio is measured within one run so that both sides see the same load.
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

from common import stamp

ROOT = Path(__file__).resolve().parents[1]


def gemm_rate(n: int, threads: int, repeats: int = 3) -> float:
    """FLOP/s of a plain float64 N x N NumPy product on ``threads`` BLAS threads (median of ``repeats``)."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    a, b = rng.random((n, n)), rng.random((n, n))
    times = []
    with threadpool_limits(limits=threads, user_api="blas"):
        for _ in range(repeats):
            t = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t)
    return 2.0 * n**3 / sorted(times)[len(times) // 2]


def run(args: list[str], out: Path, env: dict | None = None) -> tuple[float, float, dict]:
    """(wall seconds, peak RSS MiB, summary) of one ``posbias rollout`` process (``env``: extra variables)."""
    code = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "wall = time.perf_counter() - t\n"
        "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
        "print(json.dumps({'wall': wall, 'rss': rss, 'rc': p.returncode, 'out': p.stdout, 'err': p.stderr}))\n"
    )
    cmd = [sys.executable, "-m", "posbias.cli", "rollout", *args, "--out", str(out), "--json"]
    done = subprocess.run(
        [sys.executable, "-c", code, *cmd],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    result = json.loads(done.stdout)
    if result["rc"] != 0:
        raise SystemExit(f"failed: {' '.join(args)}: {result['err'].strip()}")
    return result["wall"], result["rss"], json.loads(result["out"])


def depth(layers: int, model: list[str], threads: int, tmp: Path, numpy_panels: bool = False) -> dict:
    """The power engine alone at ``layers``, beside the GEMM rate measured just before and just after
    it (their mean: both sides under the same load), and the ratio to the BLAS limit. With
    ``numpy_panels``, also the same process with the W panels formed by NumPy (POSBIAS_NATIVE=0), run
    right after: the C panel kernel's speed-up in one run."""
    tokens = int(model[model.index("--tokens") + 1])
    load_before = os.getloadavg()
    rate = gemm_rate(tokens, threads)
    wall, rss, s = run(["--layers", str(layers), *model, "--engine", "power"], tmp / f"power-{layers}")
    extra = {}
    if numpy_panels:
        plain, _, s_plain = run(
            ["--layers", str(layers), *model, "--engine", "power"], tmp / f"numpy-{layers}", {"POSBIAS_NATIVE": "0"}
        )
        extra = {
            "power_numpy_panels_process_s": plain,
            "panel_kernel_speedup": plain / wall,
            "numpy_panels_max_abs_log_p_last_diff": abs(s_plain["log_p_last"] - s["log_p_last"]),
        }
    rate = (rate + gemm_rate(tokens, threads)) / 2
    squarings = layers.bit_length() - 1
    flops = squarings * tokens**3 / 3  # N^3 / 6 multiply-adds per triangular squaring
    limit = flops / rate
    return {
        "layers": layers,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "gemm_flops_per_s": rate,
        "squarings": squarings,
        "power_flops": flops,
        "blas_limit_s": limit,
        "power_process_s": wall,
        "power_peak_rss_mb": rss,
        "ratio_power_to_blas_limit": wall / limit,
        "power_unresolved": s["unresolved"],
        **extra,
        "summary": s,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--layers",
        type=int,
        nargs="+",
        default=[1_000_000, 1_000_000_000],
        help="depths for the power engine (each beside its own GEMM rate); the first also for auto",
    )
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--schedule", default="constant:0.5")
    ap.add_argument("--scan-layers", type=int, default=1000, help="0: skip the per-layer scan")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results-depth.json")
    ap.add_argument("--with-auto", action="store_true", help="also the default engine choice (auto)")
    ap.add_argument(
        "--phases", action="store_true", help="also the engine's phases in process at the first depth (power_phases.py)"
    )
    ap.add_argument(
        "--with-numpy-panels",
        action="store_true",
        help="also each power run with its W panels formed by NumPy (POSBIAS_NATIVE=0): the C kernel's speed-up",
    )
    a = ap.parse_args(argv)
    model = ["--heads", str(a.heads), "--tokens", str(a.tokens), "--schedule", a.schedule]
    from posbias.io.files import atomic_write
    from posbias.numerics.blas_threads import blas_threads

    rows = []
    threads = blas_threads()
    with tempfile.TemporaryDirectory() as tmp:
        depths = [depth(t, model, threads, Path(tmp), a.with_numpy_panels) for t in a.layers]
        rows += [
            (f"power engine alone, T = {d['layers']}", d["power_process_s"], d["power_peak_rss_mb"], d["summary"])
            for d in depths
        ]
        if a.with_auto:
            wall, rss, s_auto = run(["--layers", str(a.layers[0]), *model], Path(tmp) / "auto")
            rows.append((f"auto (power, exact-scan retry if lost), T = {a.layers[0]}", wall, rss, s_auto))
    if a.scan_layers:
        with tempfile.TemporaryDirectory() as tmp:
            w1, r1, s1 = run(["--layers", str(a.scan_layers), *model, "--engine", "structured"], Path(tmp) / "s1")
            w2, r2, _ = run(["--layers", str(10 * a.scan_layers), *model, "--engine", "structured"], Path(tmp) / "s2")
            rows.append((f"plain scan, T = {a.scan_layers}", w1, r1, s1))
            rows.append((f"plain scan, T = {10 * a.scan_layers}", w2, r2, None))
            per_layer = (w2 - w1) / (9 * a.scan_layers)
            for t in a.layers:
                rows.append((f"plain scan extrapolated to T = {t}", w1 + per_layer * (t - a.scan_layers), None, None))
    print(
        f"H = {a.heads}, N = {a.tokens}, {a.schedule}, causal, paper slopes (BLOOM's for H = 32); "
        f"{os.cpu_count()} CPU cores, shared machine"
    )
    print(f"{'route':<44} {'wall s':>10} {'peak RSS MiB':>13}  engine [path], unresolved")
    for name, wall, rss, s in rows:
        extra = f"  {s['engine']} [{s['path']}], {s['unresolved']}" if s else ""
        print(f"{name:<44} {wall:>10.1f} {('-' if rss is None else f'{rss:.0f}'):>13}{extra}")
    for d in depths:
        power = d["summary"]
        print(
            f"T = {d['layers']}: BLAS limit {d['squarings']} squarings, {d['power_flops']:.3g} FLOP at "
            f"{d['gemm_flops_per_s'] / 1e9:.1f} GFLOP/s (NumPy {a.tokens} x {a.tokens} product, {threads} BLAS "
            f"thread{'s' if threads > 1 else ''}) = {d['blas_limit_s']:.1f} s; power engine whole process "
            f"{d['power_process_s']:.1f} s / BLAS limit = {d['ratio_power_to_blas_limit']:.2f}; load average "
            f"(1 min) {d['load_average_before'][0]:.1f} before, {d['load_average_after'][0]:.1f} after, "
            f"{os.cpu_count()} cores"
        )
        if "panel_kernel_speedup" in d:
            print(
                f"  W panels by NumPy (POSBIAS_NATIVE=0): {d['power_numpy_panels_process_s']:.1f} s, the C kernel "
                f"{d['panel_kernel_speedup']:.2f}x faster; |log p(N-1) difference| "
                f"{d['numpy_panels_max_abs_log_p_last_diff']:.3g}"
            )
        print("  power notes:", *power["notes"], sep="\n    ")
        print(
            f"  p(0) = {power['p_first']}, log p(N-1) = {power['log_p_last']}, argmin = {power['argmin']}, "
            f"sum lambda = {power['sum_lambda']}, last-token atom = {power['last_token_atom']}"
        )
    first = depths[0]
    keys = (
        "load_average_before",
        "load_average_after",
        "layers",
        "gemm_flops_per_s",
        "power_flops",
        "blas_limit_s",
        "power_process_s",
        "power_peak_rss_mb",
        "ratio_power_to_blas_limit",
        "power_unresolved",
    )
    phases = None
    if a.phases and not a.schedule.startswith("constant:"):
        raise SystemExit("--phases: only a constant schedule (power_phases.py takes one lambda)")
    if a.phases:
        done = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "power_phases.py"), "--layers", str(a.layers[0]), *model[:4]]
            + (["--lam", a.schedule.split(":", 1)[1]] if a.schedule.startswith("constant:") else []),
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        phases = json.loads(done.stdout)
        print(f"phases in process at T = {a.layers[0]} ({phases['profile_s']:.1f} s in all):")
        for name, seconds in phases["phases_s"].items():
            print(f"  {name:<16} {seconds:8.2f} s")
    optional = ("power_numpy_panels_process_s", "panel_kernel_speedup", "numpy_panels_max_abs_log_p_last_diff")
    keys += tuple(k for k in optional if k in first)
    result = {
        **stamp(load=False),  # the load averages are each depth's own
        "tokens": a.tokens,
        "heads": a.heads,
        "schedule": a.schedule,
        "blas_threads": threads,
        **{k: first[k] for k in keys},
        "depths": [{k: d[k] for k in keys} for d in depths],
        "routes": [{"route": name, "wall_s": wall, "peak_rss_mb": rss} for name, wall, rss, _ in rows],
        **(
            {}
            if phases is None
            else {
                "phases": {"profile_s": phases["profile_s"], "threads": phases["threads"], **phases["phases_s"]},
            }
        ),
    }
    atomic_write(a.out, lambda f: f.write(json.dumps(result, indent=2) + "\n"), binary=False)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
