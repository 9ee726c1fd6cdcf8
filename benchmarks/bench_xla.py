"""Benchmark of the structured engine's XLA path (``Structured(native=False)``); run on demand:

    python benchmarks/bench_xla.py [--sizes 4096 65536 1048576] [--forms chunked blocked]
                                   [--layers K] [--repeat 3] [--check] [--out FILE]

The BLOOM stack (default ../shared/data/official-configs/no_content/bloom.yaml: T = 70,
H = 112, paper slopes, d = 0, causal, its 70 lambdas); where that file is absent (a device
machine gets only the repository) the same shape with the paper slopes m_h = 2^(-8h/H) and
lambda_t = 0.6 / (t + 1)^0.5 (the time per layer does not depend on the lambda values).

Each (N, formulation) runs in its own subprocess on the default JAX backend, over the
first K layers of the stack (default: all 70 for N <= 65536, 7 above), and reports:
the first call (compilation included), the steady-state seconds per layer (best of
--repeat), the peak host RSS, the model's floating-point operations and bytes per layer
(the formulas below), XLA's own cost analysis of one compiled layer (flops, bytes
accessed; what its HLO cost model counts), the backend's measured streaming bandwidth
(one sum over 1 GiB of float64: bytes read / time) and the roofline
time bytes / bandwidth, max(that, flops / --peak-flops) when a peak is given. --check
compares the profile with the native C kernel (CPU, float64) and prints max |dp|.

The model (chunked, per layer; H heads, P = N padded to C, chunk C): flops
2 H P C (within-chunk Toeplitz matmul) + 6 H P (chunk sums, carry matmul, u) + ~20 H P
(row weights); bytes 24 H P (u written once, read by the matmul and the chunk sums) +
8 H P (the stored normalisers S, only when H P <= 2^24) + 40 P (v, the off-diagonal sum,
alpha-bar, the new v). The blocked form: about 10 (G, P) float64 arrays per head group
pass through memory, 80 H P bytes, and ~4 H P flops of recurrence plus the row weights;
its cost on accelerators is latency (the sequential steps), not bytes.
Results are JSON (--out, and $OUT/bench_xla.json when OUT is set) and a table.
Timings are of the machine it runs on (shared machines inflate wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO.parent / "shared/data/official-configs/no_content/bloom.yaml"

CHILD = r"""
import json, os, resource, sys, time
import numpy as np
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
import posbias.numerics as nx
from posbias.numerics import _recurrence as rec
from posbias.numerics import _chunked as ch

cfg = json.loads(sys.argv[1])
n, form, layers, repeat = cfg["n"], cfg["form"], cfg["layers"], cfg["repeat"]
lam = np.asarray(cfg["lambdas"])[:layers]
slopes = np.asarray(cfg["slopes"])
stack = nx.AlibiStack.build(lam, slopes, 0.0, mask=nx.Causal())
# the blocked form runs with its own former default budget (heads in groups of 2^22 / P)
engine = nx.Structured(native=False, xla_scan=form, **({} if form == "chunked" else {"group_budget": 1 << 22}))
h = stack.num_heads

def run():
    res = engine.profile(stack, n)
    jax.block_until_ready(res.probabilities)
    return res

t0 = time.perf_counter(); first = run(); t_first = time.perf_counter() - t0
best = None
for _ in range(repeat):
    t0 = time.perf_counter(); res = run(); dt = time.perf_counter() - t0
    best = dt if best is None else min(best, dt)
p = res.probabilities
out = {"n": n, "form": form, "layers": layers, "heads": h, "backend": jax.default_backend(),
       "device": str(jax.devices()[0].device_kind), "first_s": t_first, "steady_s": best,
       "s_per_layer": best / layers, "mass_defect": float(abs(p.sum() - 1.0)),
       "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}

# the plan and the model figures
if form == "chunked":
    plan = ch.chunk_plan(n, h, stack.mask, engine.group_budget, moderate=True)
    pp, c = plan.padded, plan.chunk
    shared = h * pp <= (1 << 24)
    out.update(chunk=c, groups=plan.groups,
               model_flops=2 * h * pp * c + 26 * h * pp,
               model_bytes=24 * h * pp + (8 * h * pp if shared else 0) + 40 * pp)
else:
    plan = rec.plan(n, h, stack.mask, engine.group_budget)
    pp = plan.padded
    out.update(chunk=plan.block, groups=-(-h // plan.group), model_flops=24 * h * pp, model_bytes=80 * h * pp)

# XLA's cost analysis of one compiled layer
try:
    one = rec.LayerParams(*(jnp.asarray(a) for a in (lam[:1], *(np.asarray(x)[:1] for x in
                           (stack.scaled()[0], stack.scaled()[1], stack.head_weights)))))
    if form == "chunked":
        heads = plan.groups * plan.group
        one = rec.LayerParams(one.lam, *(jnp.pad(a, ((0, 0), (0, heads - h))) for a in one[1:]))
        v = jnp.zeros(pp).at[n - 1].set(1.0)
        compiled = ch.chunked_layers_scan.lower(v, one, None, plan=plan).compile()
    else:
        heads = -(-h // plan.group) * plan.group
        one = rec.LayerParams(one.lam, *(jnp.pad(a, ((0, 0), (0, heads - h))) for a in one[1:]))
        v = jnp.zeros(pp).at[n - 1].set(1.0)
        compiled = rec.layers_scan.lower(v, one, None, ring=rec.LINEAR, geometry=plan).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    out["xla_flops"] = float(cost.get("flops", float("nan")))
    out["xla_bytes"] = float(cost.get("bytes accessed", float("nan")))
except Exception as exc:  # cost analysis is advisory; never fail the benchmark on it
    out["xla_cost_error"] = f"{type(exc).__name__}: {exc}"[:200]

# streaming (read) bandwidth of this backend: a sum over 2^27 float64 (1 GiB), best of 5
size = cfg["stream_elements"]
f = jax.jit(jnp.sum)
x = jnp.ones(size)
jax.block_until_ready(f(x))
bw = None
for _ in range(5):
    t0 = time.perf_counter(); jax.block_until_ready(f(x)); dt = time.perf_counter() - t0
    bw = max(bw or 0.0, 8.0 * size / dt)
out["bandwidth_Bps"] = bw
out["roofline_s_per_layer"] = out["model_bytes"] / bw
if cfg["peak_flops"]:
    out["roofline_s_per_layer"] = max(out["roofline_s_per_layer"], out["model_flops"] / cfg["peak_flops"])

if cfg["check"] and n <= cfg["check_max"]:
    from posbias.numerics import native  # the C kernel on this machine's CPU, whatever JAX's backend
    if native.available():
        m_s, d_s = stack.scaled()
        ref = native.profile(stack.lambdas, m_s, d_s, stack.head_weights, num_tokens=n, past_window=None,
                             bidirectional_length=0)
        out["max_abs_diff_vs_native"] = float(np.max(np.abs(p - ref.probabilities)))
print("RESULT " + json.dumps(out))
"""


def load_stack_numbers(path: Path) -> tuple[list[float], list[float], str]:
    """(lambdas (T,), slopes (H,), source) from a rollout config, or the synthetic BLOOM shape."""
    if path.is_file():
        import yaml

        data = yaml.safe_load(path.read_text())
        slopes = data["attention_config"]["alibi_slopes"][0]
        lambdas = data["lambda_schedule_config"]["lambdas_custom"]
        return [float(x) for x in lambdas], [float(x) for x in slopes], str(path)
    t, h = 70, 112
    lambdas = [0.6 / (i + 1.0) ** 0.5 for i in range(t)]
    slopes = [2.0 ** (-8.0 * (i + 1) / h) for i in range(h)]
    return lambdas, slopes, "synthetic BLOOM shape (T=70, H=112, paper slopes, lambda=0.6/(t+1)^0.5)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, default=Path(os.environ.get("BLOOM_CONFIG", DEFAULT_CONFIG)))
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 65536, 1 << 20])
    ap.add_argument("--forms", nargs="+", default=["chunked", "blocked"], choices=["chunked", "blocked"])
    ap.add_argument("--layers", type=int, default=None, help="layers timed (default 70 for N <= 65536, else 7)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--peak-flops", type=float, default=0.0, help="device float64 peak (flop/s) for the roofline")
    ap.add_argument("--stream-elements", type=int, default=1 << 27)
    ap.add_argument("--check", action="store_true", help="compare with the native C kernel (CPU)")
    ap.add_argument("--check-max", type=int, default=1 << 20)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per configuration")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    lambdas, slopes, source = load_stack_numbers(args.config)
    print(f"stack: {source}; T = {len(lambdas)}, H = {len(slopes)}", flush=True)
    results = []
    for n in args.sizes:
        for form in args.forms:
            layers = args.layers or (len(lambdas) if n <= 65536 else max(1, len(lambdas) // 10))
            layers = min(layers, len(lambdas))
            cfg = {
                "n": n,
                "form": form,
                "layers": layers,
                "repeat": args.repeat,
                "lambdas": lambdas,
                "slopes": slopes,
                "peak_flops": args.peak_flops,
                "stream_elements": args.stream_elements,
                "check": args.check,
                "check_max": args.check_max,
            }
            try:
                proc = subprocess.run(
                    [sys.executable, "-c", CHILD, json.dumps(cfg)], capture_output=True, text=True, timeout=args.timeout
                )
                line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
                if proc.returncode != 0 or not line:
                    err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                    row = {"n": n, "form": form, "layers": layers, "error": err[:300]}
                else:
                    row = json.loads(line[-1][len("RESULT ") :])
            except subprocess.TimeoutExpired:
                row = {"n": n, "form": form, "layers": layers, "error": f"timed out after {args.timeout:g} s"}
            row["stack"] = source
            results.append(row)
            print(_line(row), flush=True)

    print()
    print(_table(results))
    targets = [args.out] if args.out else []
    if os.environ.get("OUT"):
        targets.append(Path(os.environ["OUT"]) / "bench_xla.json")
    for target in dict.fromkeys(t.resolve() for t in targets):
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.with_name(target.name + ".tmp")
        staging.write_text(json.dumps(results, indent=1))
        os.replace(staging, target)  # the file appears whole or not at all
        print(f"wrote {target}")
    return 1 if any("error" in r for r in results) else 0


def _line(r: dict) -> str:
    if "error" in r:
        return f"N={r['n']} {r['form']}: ERROR {r['error']}"
    return (
        f"N={r['n']} {r['form']} [{r['backend']}, {r['device']}]: {r['s_per_layer']:.4g} s/layer "
        f"(first call {r['first_s']:.3g} s for {r['layers']} layers), C={r['chunk']}, groups={r['groups']}"
    )


def _table(rows: list[dict]) -> str:
    head = (
        f"| {'N':>8} | {'form':7} | {'layers':>6} | {'first s':>8} | {'s/layer':>9} | {'C':>4} | {'grp':>3} | "
        f"{'model GB/layer':>14} | {'model GF/layer':>14} | {'XLA GB':>7} | {'XLA GF':>7} | {'BW GB/s':>7} | "
        f"{'roofline s/layer':>16} | {'RSS MB':>7} | {'dp vs C':>9} |"
    )
    out = [head, "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['n']:>8} | {r['form']:7} | {r['layers']:>6} | ERROR: {r['error'][:120]}")
            continue
        dp = r.get("max_abs_diff_vs_native")
        out.append(
            f"| {r['n']:>8} | {r['form']:7} | {r['layers']:>6} | {r['first_s']:>8.3g} | {r['s_per_layer']:>9.4g} | "
            f"{r['chunk']:>4} | {r['groups']:>3} | {r['model_bytes'] / 1e9:>14.3g} | {r['model_flops'] / 1e9:>14.3g} | "
            f"{r.get('xla_bytes', float('nan')) / 1e9:>7.3g} | {r.get('xla_flops', float('nan')) / 1e9:>7.3g} | "
            f"{r['bandwidth_Bps'] / 1e9:>7.3g} | {r['roofline_s_per_layer']:>16.3g} | {r['rss_mb']:>7.0f} | "
            f"{'-' if dp is None else f'{dp:.1e}':>9} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
