"""Benchmark of the C whole-stack profile (numerics/native.py); run on demand:

    .venv/bin/python benchmarks/bench_native.py [--sizes 256 65536 1048576] [--threads 1 2]
                                                [--repeat 3] [--schedule power|constant]

A BLOOM-like stack: T = 70 layers, H = 112 heads with the paper slopes 2^(-8h/H), d = 0,
uniform head weights, causal mask, lambda_t = 0.6 / (t + 1)^0.5 (or 0.5 constant). Each
configuration runs in its own subprocess (so its peak RSS is its own) and prints the best
wall time of --repeat runs, the CPU time of that run (wall ~ CPU / threads on an idle
machine; a busy machine inflates wall, not CPU), the peak RSS, the final block size
(extended mode), the smallest log p and how many entries are below 1e-280.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
import numpy as np
from posbias.numerics import native
from posbias.numerics.slopes import alibi_slopes

n, threads, extended, repeat, schedule, mask = json.loads(sys.argv[1])
T, H = 70, 112
t = np.arange(T)
lam = 0.6 / np.sqrt(t + 1.0) if schedule == "power" else np.full(T, 0.5)
m = np.tile(alibi_slopes(H, "paper"), (T, 1))
d = np.zeros((T, H))
w = np.full((T, H), 1.0 / H)
window, k = {"causal": (None, 0), "window": (4096, 0), "full": (None, n)}[mask]
native.library()
best = None
for _ in range(repeat):
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    res = native.profile(lam, m, d, w, num_tokens=n, past_window=window, bidirectional_length=k,
                         extended=extended, threads=threads)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if best is None or wall < best[0]:
        best = (wall, cpu)
lp = res.log_probabilities
print(json.dumps({
    "wall": best[0], "cpu": best[1],
    "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "block": res.state.block_size if extended else None,
    "min_log10_p": float(np.min(lp) / np.log(10)),
    "below_1e-280": int(np.sum(lp < -280 * np.log(10))),
    "zeros": int(np.sum(res.probabilities == 0)),
}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 65536, 1 << 20])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--modes", nargs="+", default=["linear", "extended"], choices=["linear", "extended"])
    ap.add_argument("--mask", default="causal", choices=["causal", "window", "full"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--schedule", default="power", choices=["power", "constant"])
    ap.add_argument("--json", action="store_true", help="print one JSON line per configuration")
    args = ap.parse_args()

    header = (
        f"{'N':>8} {'thr':>3} {'mode':>8} {'wall':>10} {'cpu':>10} {'RSS MB':>7} {'block':>5} "
        f"{'min log10 p':>12} {'<1e-280':>8} {'zeros':>8}"
    )
    if not args.json:
        print(
            f"BLOOM-like stack: T=70, H=112 paper slopes, {args.mask}, "
            f"lambda={'0.6/(t+1)^0.5' if args.schedule == 'power' else '0.5'}"
        )
        print(header)
    for n in args.sizes:
        for threads in args.threads:
            for mode in args.modes:
                repeat = args.repeat if n <= 65536 else max(1, min(args.repeat, 2))
                cfg = json.dumps([n, threads, mode == "extended", repeat, args.schedule, args.mask])
                out = subprocess.run([sys.executable, "-c", CHILD, cfg], capture_output=True, text=True)
                if out.returncode != 0:
                    print(f"{n:>8} {threads:>3} {mode:>8} FAILED: {out.stderr.strip().splitlines()[-1]}")
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                if args.json:
                    print(json.dumps({"n": n, "threads": threads, "mode": mode, **r}))
                    continue
                fmt = (lambda s: f"{s * 1e3:8.1f}ms") if n <= 4096 else (lambda s: f"{s:9.2f}s")
                print(
                    f"{n:>8} {threads:>3} {mode:>8} {fmt(r['wall']):>10} {fmt(r['cpu']):>10} "
                    f"{r['rss_mb']:7.0f} {str(r['block'] or '-'):>5} {r['min_log10_p']:12.1f} "
                    f"{r['below_1e-280']:>8} {r['zeros']:>8}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
