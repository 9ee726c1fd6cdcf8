"""Measuring a Hugging Face checkpoint: ``posbias.measure.quantities``' definitions on ``posbias.hf.forward``.

The quantities are those of ``posbias.measure.quantities`` (its docstring has the math; THEORY.md
Notation and "Comparing with measured influence"), computed on S sequences of N token ids:

* lambda_t = mean over positions and sequences of ||a_t,i|| / (||x_t,i|| + ||a_t,i||)
  (denominator clamped at ``DENOMINATOR_FLOOR``), a_t the attention output after the
  output projection, x_t the block input; std over sequences of per-sequence means;
* kernels: the data-set mean of every head's attention probabilities and their head mean;
* value norms ||W_O^h v_hj|| (no bias) and the value-norm-weighted kernels (Kobayashi et al. 2020:
  per sequence and head A_hij ||W_O^h v_hj|| with rows renormalised, then the head mean; the
  data-set mean of that), ``posbias.measure.quantities.value_weighted``;
* content: the mean raw logits q.k fitted as b + d [i = j] (``posbias.measure.quantities.content_fit``
  with the family's per-layer softmax scale s_t and its mask: a decoder's causal entries, an
  encoder's every entry);
* influence: ||d p_top1 / d e_j||_2 at the last position, e_j the token embedding,
  averaged over sequences and normalised to sum 1 (an encoder without a language-model
  head: ||d y / d e_j||_F, y the final hidden state at the last position).

The result is a ``posbias.measure.quantities.Measurement`` (the same record and the same
``content_fit``), with the family's slopes (zeros for learned absolute positions).

Scale: the gradient runs the forward with rematerialisation (``jax.checkpoint`` on each
block: the backward pass keeps the T block inputs and recomputes one block at a time) unless the
batch fits the memory budget without it (``posbias.hf.memory.plan``, ``remat``), and a language model's
capture is read from the gradient's own forward (``one_forward``: ``jax.vjp`` with the capture as its
auxiliary output) where the batch holds both at once; the batch is the number of sequences whose
per-sequence work (``posbias.hf.memory``) fits the ``memory`` budget; the capture sums each batch's
probabilities and content logits on the device. Weights narrower than the compute dtype (bfloat16 or
float16 as stored, float32 under float64) stay so on a GPU or TPU: JAX's type promotion casts each layer's slice to the
compute dtype inside the scan (an exact cast: the results equal those of weights cast up
front), so LayerNorms, softmax and every product run in the compute dtype. On the CPU they
are cast up front (``device_params``): XLA's CPU backend converts the whole scanned stack
before the loop anyway (measured with ``memory_analysis()``: the temp grows by the stack's
float32 size).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from posbias.hf.families import Spec
from posbias.hf.memory import batch_size, estimate, frobenius_chunk
from posbias.measure.influence import as_influence
from posbias.measure.quantities import (
    MeasureError,
    Measurement,
    accumulate,
    batch_capture,
    captured,
)


def capture_fn(spec: Spec, dtype=np.float32):
    """``posbias.measure.quantities.batch_capture`` of the checkpoint's forward, in the compute ``dtype``."""
    from posbias.hf.forward import forward

    def one(params, ids):
        _, cap = forward(params, ids, spec, capture=True, embedded=params["embed"][ids].astype(dtype), last_only=True)
        return captured(cap)

    return batch_capture(one)


def influence_fn(
    spec: Spec,
    dtype=np.float32,
    influence=None,
    num_tokens: int = 0,
    batch: int = 1,
    remat: bool = True,
    one_forward: bool = False,
):
    """(params, (B, N) ids) -> name -> (B, N) influence scores per position j, in the compute ``dtype``,
    through rematerialised blocks (``remat``; else the plain gradient, which keeps every block's activations),
    with ``one_forward`` (a language model's) also "capture", the batch's ``capture_fn`` result taken from the
    gradient's own forward (``posbias.measure.influence.batch_fn``):
    for a language model the measures of ``posbias.measure.influence``
    (default: the gradient norm ||d p_top1 / d e_j||_2 at the last position alone); for an encoder without a
    language-model head (``spec.lm_head`` false) "grad" is the Frobenius norm ||d y / d e_j||_F of the
    final hidden state y (D,) at the last position, as sqrt(sum_d ||d y_d / d e_j||^2) over D
    vector-Jacobian products (``frobenius_fn``), and the other measures are those of an encoder in
    ``posbias.measure.influence`` (f = u . y; occlusion-shift), the occlusions of a distribution refused."""
    from posbias.hf.forward import forward
    from posbias.measure.influence import Influence, batch_fn

    influence = influence or Influence()
    last_output, embed = _last_output(spec, remat), _embedder(dtype)

    def captured_output(params, ids, embedded):  # the same forward, capturing: (logits (V,), captured tuple)
        logits, cap = forward(params, ids, spec, capture=True, embedded=embedded, remat=remat, last_only=True)
        return logits[-1], captured(cap)

    if spec.lm_head:  # batch_fn refuses a measure the output does not define
        capture = captured_output if one_forward else None
        return batch_fn(last_output, influence, num_tokens, batch, embed=embed, capture=capture)
    extra = batch_fn(last_output, influence, num_tokens, batch, embed=embed, encoder=True) if influence.extra else None

    frobenius_batch = frobenius_fn(spec, dtype, remat)

    def with_frobenius(params, ids):  # extra drives integrated gradients from the host: not jitted whole
        others = {} if extra is None else extra(params, ids)
        return {**others, "grad": frobenius_batch(params, ids)}

    return with_frobenius


def _last_output(spec: Spec, remat: bool):
    """(params, ids, embedded) -> the last position's next-token logits (V,), or an encoder's last hidden state (D,)."""
    from posbias.hf.forward import forward

    def last_output(params, ids, embedded):
        return forward(params, ids, spec, embedded=embedded, remat=remat, last_only=True)[-1]

    return last_output


def _embedder(dtype):
    """(params, ids) -> the token embeddings (N, D) in the compute dtype."""

    def embed(params, ids):
        return params["embed"][ids].astype(dtype)

    return embed


def frobenius_fn(spec: Spec, dtype=np.float32, remat: bool = True):
    """jit: (params, (B, N) ids) -> (B, N) an encoder's ||d y / d e_j||_F, y (D,) the final hidden state at the last
    position: sqrt(sum_d ||d y_d / d e_j||^2) from the D basis rows pulled back through one ``jax.vjp``,
    ``posbias.hf.memory.frobenius_chunk`` rows at a time (a vmapped pullback: products of k N rows; zero rows pad
    the last chunk, and a zero cotangent pulls back to 0 exactly). The D squared norms are summed in the compute
    dtype, a chunk at a time: relative error about D eps before the square root halves it."""
    import jax
    import jax.numpy as jnp

    last_output, embed = _last_output(spec, remat), _embedder(dtype)

    def frobenius(params, ids):
        embedded = embed(params, ids)
        y, pullback = jax.vjp(lambda e: last_output(params, ids, e), embedded)
        d = y.shape[0]
        k = frobenius_chunk(spec, embedded.shape[0], np.dtype(dtype).itemsize)
        basis = jnp.eye(-(-d // k) * k, d, dtype=dtype).reshape(-1, k, d)

        def add(total, rows):
            (g,) = jax.vmap(pullback)(rows)  # (k, N, D)
            return total + (g**2).sum(axis=(0, -1)), None

        total, _ = jax.lax.scan(add, jnp.zeros(embedded.shape[0], dtype), basis)
        return jnp.sqrt(total)

    return jax.jit(jax.vmap(frobenius, in_axes=(None, 0)))


def device_params(params_np: dict, dtype, *, keep_narrow: bool | None = None) -> dict:
    """The parameters as JAX arrays: those wider than the compute ``dtype`` cast down; narrower ones
    kept as given when ``keep_narrow`` (default: on every backend but the CPU, where XLA converts a
    scanned stack of narrow weights whole before the loop, so that keeping them would hold both
    copies), else cast up here. An array kept as given may be used in place rather than copied (on the
    CPU, where its data is 64-byte aligned: ``posbias.hf.weights.params``'s stacks): ``params_np`` must not
    be modified while the result is in use."""
    import jax
    import jax.numpy as jnp

    if keep_narrow is None:
        keep_narrow = jax.default_backend() != "cpu"
    itemsize = np.dtype(dtype).itemsize

    def place(v):
        wider, narrower = np.dtype(v.dtype).itemsize > itemsize, np.dtype(v.dtype).itemsize < itemsize
        if wider or (narrower and not keep_narrow):
            return jnp.asarray(v, dtype)
        try:
            return jax.device_put(v, may_alias=True)
        except TypeError:  # a JAX without may_alias: a copy
            return jnp.asarray(v)

    return jax.tree_util.tree_map(place, params_np)


def measure(
    params_np: dict,
    spec: Spec,
    sequences,
    *,
    precision: str = "float64",
    memory: int = 2**30,
    progress=None,
    influence=True,
    batch: int | None = None,
    remat: bool = True,
    one_forward: bool = False,
) -> Measurement:
    """Every measurement of the module docstring on (S, N) token ids; ``params_np`` from
    ``posbias.hf.weights.params`` (any dtype: see the module docstring); batches of as many
    sequences as fit ``memory`` bytes by ``posbias.hf.memory``, or of ``batch`` sequences where given;
    the influence gradient rematerialised unless ``remat`` is false, and with ``one_forward`` a language
    model's capture read from the gradient's forward rather than a forward of its own
    (``posbias.hf.memory.plan`` decides both; an encoder's capture runs on its own)."""
    import jax

    from posbias.hf.forward import slopes, softmax_scales

    sequences = np.asarray(sequences, np.int32)
    if sequences.ndim != 2 or sequences.shape[0] < 1 or sequences.shape[1] < 1:
        raise MeasureError(f"sequences: expected shape (S, N) with S, N >= 1, got {sequences.shape}")
    s, n = sequences.shape
    if spec.context is not None and n > spec.context:
        raise MeasureError(f"N = {n} is longer than the model's {spec.context} learned positions")
    if sequences.min() < 0 or sequences.max() >= spec.vocab:
        raise MeasureError(f"token ids must lie in [0, {spec.vocab}) (the model's vocab_size)")
    x64 = precision == "float64"
    dtype = np.float64 if x64 else np.float32
    if batch is None:  # else the caller's (posbias.hf.memory.plan)
        batch = batch_size(estimate(spec, n, np.dtype(dtype).itemsize), memory, s, bool(influence))
    batch = int(max(1, min(batch, s)))
    one_forward = bool(one_forward and influence and spec.lm_head)
    with jax.enable_x64(x64):
        m = accumulate(
            None if one_forward else capture_fn(spec, dtype),
            influence_fn(spec, dtype, as_influence(influence), n, batch, remat, one_forward) if influence else None,
            device_params(params_np, dtype),
            sequences,
            batch=batch,
            precision=precision,
            slopes=slopes(spec),
            scales=softmax_scales(spec),
            causal=spec.causal,
            progress=progress,
        )
    return dataclasses.replace(m, logits_note=window_note(spec, n))


def window_note(spec: Spec, num_tokens: int) -> str:
    """``Measurement.logits_note``: a sliding window shorter than N masks keys the causal mask allows, so the
    mean content on j <= i is not all the softmax reads ("" where no window binds at this N)."""
    from posbias.hf.forward import windows

    w = np.asarray(windows(spec, num_tokens))
    binding = np.flatnonzero(w < num_tokens)
    if binding.size == 0:
        return ""
    t = int(binding[0])
    return f"layer {t}'s sliding window of {int(w[t])} tokens is shorter than N = {num_tokens}"
