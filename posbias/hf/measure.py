"""Measuring a Hugging Face checkpoint: ``posbias.lm.measure``'s definitions on ``posbias.hf.forward``.

The quantities are those of ``posbias.lm.measure`` (its docstring has the math; THEORY.md
Notation and "Comparing with measured influence"), computed on S sequences of N token ids:

* lambda_t = mean over positions and sequences of ||a_t,i|| / (||x_t,i|| + ||a_t,i||)
  (denominator clamped at ``DENOMINATOR_FLOOR``), a_t the attention output after the
  output projection, x_t the block input; std over sequences of per-sequence means;
* kernels: the data-set mean of every head's attention probabilities and their head mean;
* content: the mean raw logits q.k fitted as b + d [i = j] (``posbias.lm.measure.content_fit``);
* influence: ||d p_top1 / d e_j||_2 at the last position, e_j the token embedding,
  averaged over sequences and normalised to sum 1.

The result is a ``posbias.lm.measure.Measurement`` (the same record and the same
``content_fit``), with the family's slopes (zeros for learned absolute positions).
"""

from __future__ import annotations

import numpy as np

from posbias.hf.families import Spec
from posbias.lm.measure import DENOMINATOR_FLOOR, Measurement, MeasureError, accumulate


def bytes_per_sequence(spec: Spec, num_tokens: int, itemsize: int = 8) -> int:
    """A conservative count of one sequence's share of the capture forward or the gradient:
    per layer about 6 (H, N, N) arrays and 16 (N, D) plus 4 (N, 4D) activations, and the logits."""
    t, h, n, d = spec.layers, spec.heads, num_tokens, spec.width
    return itemsize * (t * (6 * h * n * n + 16 * n * d + 4 * n * 4 * d) + 4 * n * spec.vocab)


def params_bytes(spec: Spec, itemsize: int) -> int:
    """The canonical parameters in the compute dtype: 12 D^2 + 13 D per layer, the embeddings and an untied head."""
    d = spec.width
    return itemsize * (spec.layers * (12 * d * d + 13 * d) + 2 * spec.vocab * d + (spec.context or 0) * d)


def capture_fn(spec: Spec):
    """jit: (params, (B, N) ids) -> lambda means (B, T), lambda sums of squares (B, T),
    probabilities (B, T, H, N, N), raw content logits (B, T, H, N, N)."""
    import jax
    import jax.numpy as jnp

    from posbias.hf.forward import forward

    def one(params, ids):
        _, cap = forward(params, ids, spec, capture=True)
        an = jnp.linalg.norm(cap["a"], axis=-1)
        xn = jnp.linalg.norm(cap["x"], axis=-1)
        r = an / jnp.maximum(xn + an, DENOMINATOR_FLOOR)
        return r.mean(axis=-1), (r ** 2).sum(axis=-1), cap["probs"], cap["content"]

    return jax.jit(jax.vmap(one, in_axes=(None, 0)))


def influence_fn(spec: Spec):
    """jit: (params, (B, N) ids) -> (B, N) ||d p_top1 / d e_j||_2 at the last position."""
    import jax
    import jax.numpy as jnp

    from posbias.hf.forward import forward

    def top1(embedded, params, ids):
        probs = jax.nn.softmax(forward(params, ids, spec, embedded=embedded)[-1])
        return probs[jnp.argmax(jax.lax.stop_gradient(probs))]

    def one(params, ids):
        return jnp.linalg.norm(jax.grad(top1)(params["embed"][ids], params, ids), axis=-1)

    return jax.jit(jax.vmap(one, in_axes=(None, 0)))


def measure(params_np: dict, spec: Spec, sequences, *, precision: str = "float64", memory: int = 2**30,
            progress=None, influence: bool = True) -> Measurement:
    """Every measurement of the module docstring on (S, N) token ids; ``params_np`` from
    ``posbias.hf.forward.params`` (cast here to the precision)."""
    import jax

    from posbias.hf.forward import slopes

    sequences = np.asarray(sequences, np.int32)
    if sequences.ndim != 2 or sequences.shape[0] < 1 or sequences.shape[1] < 1:
        raise MeasureError(f"sequences: expected shape (S, N) with S, N >= 1, got {sequences.shape}")
    s, n = sequences.shape
    if spec.context is not None and n > spec.context:
        raise MeasureError(f"N = {n} is longer than the model's {spec.context} learned positions")
    if sequences.min() < 0 or sequences.max() >= spec.vocab:
        raise MeasureError(f"token ids must lie in [0, {spec.vocab}) (the model's vocab_size)")
    x64 = precision == "float64"
    batch = int(max(1, min(s, memory // bytes_per_sequence(spec, n, 8 if x64 else 4))))
    with jax.enable_x64(x64):
        import jax.numpy as jnp

        dtype = np.float64 if x64 else np.float32
        params = jax.tree_util.tree_map(lambda v: jnp.asarray(v, dtype), params_np)
        return accumulate(capture_fn(spec), influence_fn(spec) if influence else None, params, sequences,
                          batch=batch, precision=precision, slopes=slopes(spec), head_dim=spec.head_dim,
                          progress=progress)
