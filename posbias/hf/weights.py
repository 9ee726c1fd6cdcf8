"""A checkpoint's tensors in the canonical layout of ``posbias.hf.forward``.

``params(ckpt, dtype)`` reads every tensor once and rearranges it into one layout for all
families: per-layer arrays stacked on a leading axis T; linear weights (in, out); the QKV
projection split into W_q, W_k, W_v of shape (D, H, d_head) (grouped keys and values repeated
for the query heads of their group: ``posbias.hf.families.split_qkv``, or a Llama-family
checkpoint's separate k_proj and v_proj of G key/value heads); W_O as (H, d_head, D); a
SwiGLU MLP's gate as ``wg`` beside ``w1`` (the up projection) and ``w2`` (down); RMSNorm
gains without biases (no ``ln1_b``, ``ln2_b``, ``lnf_b``); an absent bias (MPT, Falcon without
biases, the Llama biases config.json does not enable) as zeros; BERT's token-type-0 embedding, which
every position adds, folded into ``positions`` (summed in float32 or wider).

Memory: the safetensors files are memory-mapped and a tensor is copied out only when read.
Each stacked (T, ...) array is allocated once (``ALIGNMENT``-byte aligned), when layer 0's tensor of
that name arrives, and filled layer by layer, so the peak is the result (one model copy) plus the few tensors
of one layer in flight (a fused QKV projection and its split), never a second stack.
``dtype=None`` keeps the stored dtype (bfloat16 and float16 stay as stored, NumPy /
``ml_dtypes`` arrays: a 7B bfloat16 checkpoint stays 14 GB; the forward promotes them to
its compute dtype layer by layer); absent biases are then zeros of the embedding's dtype.
"""

from __future__ import annotations

import numpy as np

from posbias.hf.checkpoint import Checkpoint, CheckpointError, read_tensor
from posbias.hf.families import layer_norm_names, split_qkv

ALIGNMENT = 64
"""Bytes the stacked arrays' data is aligned to: XLA's CPU client then uses a NumPy array of the compute dtype in
place instead of copying it (``posbias.hf.measure.device_params``)."""


def aligned_empty(shape: tuple, dtype) -> np.ndarray:
    """An uninitialised array whose data starts on an ``ALIGNMENT``-byte boundary (NumPy aligns to 16)."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.empty(size + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start : start + size].view(dtype).reshape(shape)


def _cast(value: np.ndarray, dtype) -> np.ndarray:
    return value if dtype is None else value.astype(dtype, copy=False)


def _finite(value: np.ndarray, ckpt: Checkpoint, name: str) -> np.ndarray:
    """``value`` if every entry is finite; a NaN or infinite weight is refused in one line (the forward
    would carry it into every measured number)."""
    if not np.all(np.isfinite(value)):
        raise CheckpointError(
            f"{ckpt.folder}: tensor {ckpt.prefix + name} has non-finite values (NaN or infinity): nothing to measure"
        )
    return value


def _linear(w: np.ndarray, layout: str) -> np.ndarray:
    """(in, out) of a stored linear weight."""
    return w.T if layout == "out-in" else w


def _getter(ckpt: Checkpoint, prefix: str, dtype, zeros_dtype):
    """get(name, shape, canonical): the tensor ``prefix + name`` cast to ``dtype``, its entry count
    checked against ``shape``; a bias the checkpoint has none of is zeros of ``shape``: where the
    ``Spec`` lists its biases (the Llama family, from config.json), a bias not listed (whatever the
    files hold: transformers does not read it either), else an absent bias of a family with
    optional biases."""
    fam, listed = ckpt.family, ckpt.spec.biases

    def get(name: str, shape: tuple, canonical: str | None = None) -> np.ndarray:
        if canonical is not None and listed is not None:
            absent = canonical not in listed
        else:
            absent = fam.optional_biases and name.endswith(".bias") and not ckpt.has(prefix + name)
        if absent:
            return np.zeros(shape, dtype if dtype is not None else zeros_dtype)
        value = _cast(np.asarray(ckpt.tensor(prefix + name)), dtype)
        if value.size != int(np.prod(shape)):
            raise CheckpointError(
                f"{ckpt.folder}: tensor {ckpt.prefix + prefix + name} has shape {value.shape}, "
                f"expected {int(np.prod(shape))} entries for shape {shape}"
            )
        return _finite(value, ckpt, prefix + name)

    return get


def _layer(ckpt: Checkpoint, t: int, dtype, zeros_dtype):
    """(name, array) for every canonical tensor of layer t, one at a time (nothing of the layer kept)."""
    fam, spec = ckpt.family, ckpt.spec
    get = _getter(ckpt, fam.layer.format(i=t), dtype, zeros_dtype)
    h, k, d, f, g = spec.heads, spec.head_dim, spec.width, spec.mlp, spec.groups
    ln1, ln2 = layer_norm_names(fam, spec)
    yield "ln1_g", get(ln1[0], (d,))
    if spec.norm == "layer":
        yield "ln1_b", get(ln1[1], (d,))
    if fam.qkv_layout == "separate":  # q (H K, D), k and v (G K, D): key/value head g repeated for its H/G queries
        for s, name in enumerate("qkv"):
            heads = h if name == "q" else g
            w = _linear(get(fam.qkv[2 * s], (heads * k, d)), fam.linear_layout).reshape(d, heads, k)
            b = get(fam.qkv[2 * s + 1], (heads * k,), "b" + name).reshape(heads, k)
            yield "w" + name, w if heads == h else np.repeat(w, h // g, axis=1)
            yield "b" + name, b if heads == h else np.repeat(b, h // g, axis=0)
    else:
        out = (h + 2 * spec.groups) * k if fam.qkv_layout == "grouped" else 3 * d
        w, b = split_qkv(
            fam, spec, _linear(get(fam.qkv[0], (d, out)), fam.linear_layout).reshape(d, out), get(fam.qkv[1], (out,))
        )
        for s, name in enumerate("qkv"):
            yield "w" + name, w[s]
            yield "b" + name, b[s]
        del w, b
    yield "wo", _linear(get(fam.attn_out[0], (h * k, d)), fam.linear_layout).reshape(h, k, d)
    yield "bo", get(fam.attn_out[1], (d,), "bo")
    yield "ln2_g", get(ln2[0], (d,))
    if spec.norm == "layer":
        yield "ln2_b", get(ln2[1], (d,))
    yield "w1", _linear(get(fam.mlp_in[0], (d, f)), fam.linear_layout).reshape(d, f)
    yield "b1", get(fam.mlp_in[1], (f,), "b1")
    if spec.glu:
        yield "wg", _linear(get(fam.mlp_gate[0], (d, f)), fam.linear_layout).reshape(d, f)
        yield "bg", get(fam.mlp_gate[1], (f,), "bg")
    yield "w2", _linear(get(fam.mlp_out[0], (f, d)), fam.linear_layout).reshape(f, d)
    yield "b2", get(fam.mlp_out[1], (d,), "b2")


def params(ckpt: Checkpoint, dtype=np.float32) -> dict:
    """Every tensor of ``ckpt`` in the canonical layout (module docstring), as NumPy arrays of ``dtype``
    (bfloat16 and float16 weights are cast up), or as stored when ``dtype`` is None."""
    fam, spec = ckpt.family, ckpt.spec
    d = spec.width
    embed = _cast(np.asarray(ckpt.tensor(fam.embed)), dtype)
    if embed.shape != (spec.vocab, spec.width):
        raise CheckpointError(
            f"{ckpt.folder}: {fam.embed} has shape {embed.shape}, expected "
            f"({spec.vocab}, {spec.width}) from config.json"
        )
    _finite(embed, ckpt, fam.embed)
    blocks = {}
    for t in range(spec.layers):
        for name, value in _layer(ckpt, t, dtype, embed.dtype):
            if t == 0:
                blocks[name] = aligned_empty((spec.layers, *value.shape), value.dtype)
            blocks[name][t] = value
    out = {"embed": embed, "blocks": blocks}
    get = _getter(ckpt, "", dtype, embed.dtype)
    if fam.final_norm is not None:
        out["lnf_g"] = get(fam.final_norm[0], (d,))
        if spec.norm == "layer":
            out["lnf_b"] = get(fam.final_norm[1], (d,))
    if fam.embed_norm is not None:
        out["embn_g"], out["embn_b"] = get(fam.embed_norm[0], (d,)), get(fam.embed_norm[1], (d,))
    if fam.position_embed is not None:
        positions = get(fam.position_embed, (spec.context, d)).reshape(spec.context, d)
        if fam.token_type_embed is not None:  # summed in float32 at least: a narrow sum would round
            wide = np.result_type(positions.dtype, np.float32)
            positions = positions.astype(wide) + np.asarray(ckpt.tensor(fam.token_type_embed))[0].astype(wide)
        out["positions"] = positions
    if fam.lm_head is not None and not fam.tied(ckpt.config):
        out["unembed"] = _finite(_cast(np.asarray(_top_level(ckpt, fam.lm_head)), dtype), ckpt, fam.lm_head).T
    return out


def _top_level(ckpt: Checkpoint, name: str) -> np.ndarray:
    """A tensor outside the base prefix (the untied lm_head of a *ForCausalLM save)."""
    if hasattr(ckpt, "top_level"):  # a GGUF file (posbias.hf.gguf.GGUFCheckpoint) dequantizes its own
        return ckpt.top_level(name)

    if name not in ckpt.files:
        raise CheckpointError(
            f"{ckpt.folder}: tensor {name} is missing and config.json says tie_word_embeddings is false"
        )
    return read_tensor(ckpt.files[name], name, ckpt.folder)
