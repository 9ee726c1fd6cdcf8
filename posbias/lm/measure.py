"""The trained model's forward, captured: ``posbias.measure.quantities`` on ``posbias.lm.model``.

The quantities and their floating-point limits are ``posbias.measure.quantities``'s (THEORY.md Notation
and "Comparing with measured influence"); here the byte-level ALiBi model of ``posbias train`` provides
the capture (probabilities, raw content logits q_i . k_j without the ALiBi term, value norms, block
inputs and attention outputs) and the influence gradient ||d p_top1 / d e_j||_2 (``jax.grad`` vmapped
over sequences), in batches sized to a memory budget (``bytes_per_sequence``).
"""

from __future__ import annotations

import numpy as np

from posbias.lm.config import ModelConfig
from posbias.measure.influence import as_influence
from posbias.measure.quantities import (
    MeasureError,
    Measurement,
    accumulate,
    batch_capture,
    captured,
)


def bytes_per_sequence(config: ModelConfig, num_tokens: int, itemsize: int = 8) -> int:
    """A conservative count of what one sequence holds in the capture forward or the gradient:
    per layer about 6 (H, N, N) arrays (weights, logits and their cotangents) and 16 (N, D)
    plus 4 (N, 4D) activations."""
    t, h, n, d, f = config.layers, config.heads, num_tokens, config.width, config.mlp_ratio * config.width
    return itemsize * t * (6 * h * n * n + 16 * n * d + 4 * n * f) + itemsize * n * 256 * 4


def batch_size(config: ModelConfig, num_tokens: int, samples: int, memory: int, itemsize: int = 8) -> int:
    return int(max(1, min(samples, memory // bytes_per_sequence(config, num_tokens, itemsize))))


def _cast(params, dtype):
    import jax
    import jax.numpy as jnp

    return jax.tree_util.tree_map(lambda v: jnp.asarray(v, dtype), params)


def capture_fn(config: ModelConfig):
    """``batch_capture`` of the trained model's forward."""
    from posbias.lm.model import forward

    def one(params, tokens):
        _, cap = forward(params, tokens, config, capture=True)
        return captured(cap)

    return batch_capture(one)


def influence_fn(config: ModelConfig, influence=None, num_tokens: int = 0, batch: int = 1):
    """jit: (params, (B, N) tokens) -> name -> (B, N) scores of ``posbias.measure.influence`` at the last
    position (default: the gradient norm ||d p_top1 / d e_j||_2 alone)."""
    from posbias.lm.model import forward
    from posbias.measure.influence import Influence, batch_fn

    def last_logits(params, tokens, embedded):
        return forward(params, tokens, config, embedded=embedded)[-1]

    return batch_fn(last_logits, influence or Influence(), num_tokens, batch)


def measure(
    params_flat: dict,
    config: ModelConfig,
    sequences: np.ndarray,
    *,
    precision: str = "float64",
    memory: int = 2**30,
    progress=None,
    influence=True,
) -> Measurement:
    """Every measurement of the module docstring on (S, N) byte sequences; ``influence``: a
    ``posbias.measure.influence.Influence`` (True: the gradient norm alone; False: no influence)."""
    import jax

    from posbias.lm.model import slopes_of, unflatten

    sequences = np.asarray(sequences, np.int32)
    if sequences.ndim != 2 or sequences.shape[0] < 1 or sequences.shape[1] < 1:
        raise MeasureError(f"sequences: expected shape (S, N) with S, N >= 1, got {sequences.shape}")
    s, n = sequences.shape
    if n > config.context:
        raise MeasureError(f"N = {n} is longer than the model's context length {config.context}")
    x64 = precision == "float64"
    with jax.enable_x64(x64):
        import jax.numpy as jnp

        dtype = jnp.float64 if x64 else jnp.float32
        params = _cast(unflatten(params_flat), dtype)
        batch = batch_size(config, n, s, memory, 8 if x64 else 4)
        return accumulate(
            capture_fn(config),
            influence_fn(config, as_influence(influence), n, batch) if influence else None,
            params,
            sequences,
            batch=batch,
            precision=precision,
            slopes=slopes_of(config),
            scales=np.full(config.layers, 1.0 / np.sqrt(config.head_dim)),
            progress=progress,
        )
