"""benchmarks/bench_hf.py's FLOP count of one forward against XLA's own count of the compiled forward
(``cost_analysis``: 2 m n k per matrix product, plus the elementwise work the count leaves out), on the
committed fixtures cut to one layer (XLA counts a loop's body once, so one layer is compared whole)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from tests.benchmark_scripts import load

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
BENCH = load("bench_hf.py")
FAMILIES = ["llama", "gpt2", "bloom", "falcon", "falcon-grouped", "mpt"]


def _one_layer(family: str, n: int):
    """(Spec, float32 parameters, N token ids) of a fixture cut to its first layer."""
    from posbias.hf import checkpoint, weights

    ck = checkpoint.load(FIXTURES / family)
    params = weights.params(ck, np.float32)
    params = {**params, "blocks": {k: v[:1] for k, v in params["blocks"].items()}}
    return dataclasses.replace(ck.spec, layers=1), params, np.arange(n, dtype=np.int32) % 50


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("n", [8, 32])
def test_forward_flops_match_xla_within_the_elementwise_share(family, n):
    import jax

    from posbias.hf import forward

    spec, params, ids = _one_layer(family, n)
    compiled = jax.jit(lambda p, ids: forward.forward(p, ids, spec, last_only=True)).lower(params, ids).compile()
    cost = compiled.cost_analysis()
    xla = (cost[0] if isinstance(cost, list) else cost)["flops"]
    # keys and values projected once per group (stored repeated per query head, posbias.hf.forward projects G)
    ours = BENCH.forward_flops(spec, n, spec.groups)
    assert ours <= xla <= 1.3 * ours, (xla, ours)  # at these tiny widths the elementwise work is up to 24%
    assert BENCH.forward_flops(spec, n, 1) < ours or spec.groups == 1


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("n", [8, 32])
def test_forward_and_pullback_flops_match_xla_within_the_elementwise_share(family, n):
    """F + B (one forward and its pullback to the input embeddings, what a measurement computes per sequence)
    against XLA's count of the compiled ``jax.vjp`` of the forward, pulled back from a cotangent on the logits."""
    import jax

    from posbias.hf import forward

    spec, params, ids = _one_layer(family, n)

    def pulled_back(p, ids, cotangent):
        out, pullback = jax.vjp(lambda e: forward.forward(p, ids, spec, embedded=e, last_only=True), p["embed"][ids])
        return pullback(cotangent)[0]

    cotangent = jax.ShapeDtypeStruct((1, spec.vocab if spec.lm_head else spec.width), np.float32)
    cost = jax.jit(pulled_back).lower(params, ids, cotangent).compile().cost_analysis()
    xla = (cost[0] if isinstance(cost, list) else cost)["flops"]
    ours = BENCH.forward_flops(spec, n, spec.groups) + BENCH.backward_flops(spec, n, spec.groups)
    assert ours <= xla <= 1.3 * ours, (xla, ours)
