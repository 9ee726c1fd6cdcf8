"""Benchmark: training throughput of the language model and influence throughput at N = 256.
Run on demand, never as a test:

    .venv/bin/python benchmarks/bench_lm.py [--preset default] [--steps 20] [--tokens 256]
                                            [--samples 32] [--precision float64] [--json]

1. Training: the preset's model and batch, one jit-compiled AdamW step per call (the
   ``posbias train`` step); compile time, then tokens per second over ``--steps`` steps
   (median of per-step times), and the projected wall time of the preset's whole run.
2. Influence: ||d p_top1 / d e_j|| by ``jax.grad`` vmapped over sequences in the batch
   ``posbias measure`` chooses, for ``--samples`` held-out sequences of ``--tokens`` bytes;
   compile time, then sequences per second (second pass), in ``--precision``.

Timings are of this machine and of whatever else runs on it (the load average is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def train_throughput(preset, steps: int) -> dict:
    import jax
    import jax.numpy as jnp
    import optax

    from posbias.lm.data import load_corpus, train_batch
    from posbias.lm.model import init_params, loss_nats
    from posbias.lm.train import optimizer

    model, cfg = preset.model, preset.train
    corpus = load_corpus()
    with jax.enable_x64(False):
        opt = optimizer(cfg)
        params = init_params(model, jax.random.PRNGKey(0))
        state = opt.init(params)

        @jax.jit
        def step(params, state, batch):
            loss, grads = jax.value_and_grad(loss_nats)(params, batch, model)
            updates, state = opt.update(grads, state, params)
            return optax.apply_updates(params, updates), state, loss

        def batch(s):
            return jnp.asarray(train_batch(corpus.train, cfg.batch, model.context + 1, cfg.seed, s))

        t0 = time.perf_counter()
        params, state, loss = step(params, state, batch(0))
        loss.block_until_ready()
        compile_s = time.perf_counter() - t0
        times = []
        for s in range(1, steps + 1):
            t0 = time.perf_counter()
            params, state, loss = step(params, state, batch(s))
            loss.block_until_ready()
            times.append(time.perf_counter() - t0)
    per_step = statistics.median(times)
    tokens = cfg.batch * model.context
    return {
        "preset": preset.name,
        "compile_s": compile_s,
        "step_s_median": per_step,
        "tokens_per_s": tokens / per_step,
        "projected_run_s": per_step * cfg.steps + compile_s,
    }


def influence_throughput(preset, tokens: int, samples: int, precision: str) -> dict:
    import jax
    import jax.numpy as jnp

    from posbias.lm.data import heldout_sequences, load_corpus
    from posbias.lm.measure import batch_size, influence_fn
    from posbias.lm.model import init_params

    model = preset.model
    seqs = heldout_sequences(load_corpus().validation, tokens, samples)
    x64 = precision == "float64"
    with jax.enable_x64(x64):
        dtype = jnp.float64 if x64 else jnp.float32
        params = jax.tree_util.tree_map(lambda v: v.astype(dtype), init_params(model, jax.random.PRNGKey(0)))
        batch = batch_size(model, tokens, samples, 2**30, 8 if x64 else 4)
        fn = influence_fn(model)
        first = jnp.asarray(seqs[:batch])
        t0 = time.perf_counter()
        fn(params, first).block_until_ready()
        compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        done = 0
        for i in range(0, samples - batch + 1, batch):
            fn(params, jnp.asarray(seqs[i : i + batch])).block_until_ready()
            done += batch
        elapsed = time.perf_counter() - t0
    return {
        "tokens": tokens,
        "samples": done,
        "batch": batch,
        "precision": precision,
        "compile_s": compile_s,
        "sequences_per_s": done / elapsed,
    }


def main() -> None:
    from posbias.lm.config import PRESETS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="default")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--precision", choices=("float64", "float32"), default="float64")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    preset = PRESETS[args.preset]
    load = os.getloadavg()[0]
    result = {
        "load_average_1min": load,
        "cpus": os.cpu_count(),
        "train": train_throughput(preset, args.steps),
        "influence": influence_throughput(preset, min(args.tokens, preset.model.context), args.samples, args.precision),
    }
    result["load_average_1min_after"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(result, indent=1))
        return
    tr, inf = result["train"], result["influence"]
    print(f"load average {load:.2f} -> {result['load_average_1min_after']:.2f} on {result['cpus']} CPUs")
    print(
        f"train ({tr['preset']}): compile {tr['compile_s']:.1f} s, {tr['step_s_median'] * 1e3:.0f} ms/step, "
        f"{tr['tokens_per_s']:.0f} tokens/s, projected run {tr['projected_run_s'] / 60:.1f} min"
    )
    print(
        f"influence (N = {inf['tokens']}, {inf['precision']}, batch {inf['batch']}): "
        f"compile {inf['compile_s']:.1f} s, {inf['sequences_per_s']:.2f} sequences/s"
    )


if __name__ == "__main__":
    main()
