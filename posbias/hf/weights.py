"""A checkpoint's tensors in the canonical layout of ``posbias.hf.forward``.

``params(ckpt, dtype)`` reads every tensor once and rearranges it into one layout for all
families: per-layer arrays stacked on a leading axis T; linear weights (in, out); the fused
QKV split into W_q, W_k, W_v of shape (D, H, d_head); W_O as (H, d_head, D).
"""

from __future__ import annotations

import numpy as np

from posbias.hf.checkpoint import Checkpoint, CheckpointError


def _linear(w: np.ndarray, layout: str) -> np.ndarray:
    """(in, out) of a stored linear weight."""
    return w.T if layout == "out-in" else w


def _layer(ckpt: Checkpoint, t: int, dtype) -> dict:
    fam, spec = ckpt.family, ckpt.spec
    pre = fam.layer.format(i=t)
    h, k, d = spec.heads, spec.head_dim, spec.width

    def get(name, shape=None):
        if fam.optional_biases and name.endswith(".bias") and not ckpt.has(pre + name):
            return np.zeros(shape, dtype)
        value = np.asarray(ckpt.tensor(pre + name)).astype(dtype)
        if shape is not None and value.size != int(np.prod(shape)):
            raise CheckpointError(f"{ckpt.folder}: tensor {ckpt.prefix + pre + name} has shape {value.shape}, "
                                  f"expected {int(np.prod(shape))} entries for shape {shape}")
        return value

    w = _linear(get(fam.qkv[0], (d, 3 * d)), fam.linear_layout)  # (D, 3D)
    b = get(fam.qkv[1], (3 * d,))
    if fam.qkv_layout == "per-head":   # output index h * 3K + s * K + k
        w = w.reshape(d, h, 3, k).transpose(2, 0, 1, 3)
        b = b.reshape(h, 3, k).transpose(1, 0, 2)
    else:                              # output index s * D + h * K + k
        w = w.reshape(d, 3, h, k).transpose(1, 0, 2, 3)
        b = b.reshape(3, h, k)
    f = 4 * d
    return {
        "ln1_g": get(fam.ln1[0], (d,)), "ln1_b": get(fam.ln1[1], (d,)),
        "wq": w[0], "wk": w[1], "wv": w[2], "bq": b[0], "bk": b[1], "bv": b[2],
        "wo": _linear(get(fam.attn_out[0], (d, d)), fam.linear_layout).reshape(h, k, d),
        "bo": get(fam.attn_out[1], (d,)),
        "ln2_g": get(fam.ln2[0], (d,)), "ln2_b": get(fam.ln2[1], (d,)),
        "w1": _linear(get(fam.mlp_in[0], (d, f)), fam.linear_layout).reshape(d, f), "b1": get(fam.mlp_in[1], (f,)),
        "w2": _linear(get(fam.mlp_out[0], (f, d)), fam.linear_layout).reshape(f, d), "b2": get(fam.mlp_out[1], (d,)),
    }


def params(ckpt: Checkpoint, dtype=np.float32) -> dict:
    """Every tensor of ``ckpt`` in the canonical layout (module docstring), as NumPy arrays of ``dtype``
    (bfloat16 and float16 weights are cast up)."""
    fam, spec = ckpt.family, ckpt.spec
    d = spec.width

    def optional(name):
        if fam.optional_biases and name.endswith(".bias") and not ckpt.has(name):
            return np.zeros(d, dtype)
        return np.asarray(ckpt.tensor(name)).astype(dtype)

    embed = np.asarray(ckpt.tensor(fam.embed)).astype(dtype)
    if embed.shape != (spec.vocab, spec.width):
        raise CheckpointError(f"{ckpt.folder}: {fam.embed} has shape {embed.shape}, expected "
                              f"({spec.vocab}, {spec.width}) from config.json")
    layers = [_layer(ckpt, t, dtype) for t in range(spec.layers)]
    out = {"embed": embed, "blocks": {name: np.stack([lay[name] for lay in layers]) for name in layers[0]},
           "lnf_g": optional(fam.final_norm[0]), "lnf_b": optional(fam.final_norm[1])}
    if fam.embed_norm is not None:
        out["embn_g"] = np.asarray(ckpt.tensor(fam.embed_norm[0])).astype(dtype)
        out["embn_b"] = np.asarray(ckpt.tensor(fam.embed_norm[1])).astype(dtype)
    if fam.position_embed is not None:
        out["positions"] = np.asarray(ckpt.tensor(fam.position_embed)).astype(dtype)
    if not ckpt.config.get("tie_word_embeddings", True):
        out["unembed"] = np.asarray(_top_level(ckpt, fam.lm_head)).astype(dtype).T
    return out


def _top_level(ckpt: Checkpoint, name: str) -> np.ndarray:
    """A tensor outside the base prefix (the untied lm_head of a *ForCausalLM save)."""
    from safetensors import safe_open

    if name not in ckpt.files:
        raise CheckpointError(f"{ckpt.folder}: tensor {name} is missing and config.json says "
                              f"tie_word_embeddings is false")
    with safe_open(str(ckpt.files[name]), framework="numpy") as f:
        return f.get_tensor(name)
