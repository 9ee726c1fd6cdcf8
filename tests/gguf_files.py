"""Writing GGUF files in the tests: a Hugging Face Llama/Qwen2 folder converted as llama.cpp's
convert_hf_to_gguf.py converts it, with the ``gguf`` package's own ``GGUFWriter`` and quantizer.

This is the writer's side of the conventions ``posbias.hf.gguf`` undoes, written here from
llama.cpp's description and not from the reader: GGUF names (token_embd, blk.N.attn_q, ...),
metadata under the architecture's prefix, byte-level BPE vocabulary and merges, and for the
``llama`` architecture the rope permutation of the q and k rows: within head h (K rows),
Hugging Face row h K + s K/2 + c (s in {0, 1}, c < K/2) is stored at row h K + 2 c + s.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HF_TO_GGUF = {
    "embed_tokens": "token_embd",
    "norm": "output_norm",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def gguf_name(hf: str) -> str:
    """The GGUF name of a Hugging Face tensor name (model.layers.3.self_attn.q_proj.weight -> blk.3.attn_q.weight)."""
    base, suffix = hf.rsplit(".", 1)
    if base == "lm_head":
        return f"output.{suffix}"
    parts = base.split(".")
    assert parts[0] == "model", hf
    if parts[1] == "layers":
        return f"blk.{parts[2]}.{HF_TO_GGUF['.'.join(parts[3:])]}.{suffix}"
    return f"{HF_TO_GGUF['.'.join(parts[1:])]}.{suffix}"


def rope_permute(rows: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's storage order of q/k rows (module docstring), element by element."""
    k = rows.shape[0] // heads
    out = np.empty_like(rows)
    for h in range(heads):
        for s in range(2):
            for c in range(k // 2):
                out[h * k + 2 * c + s] = rows[h * k + s * (k // 2) + c]
    return out


def tokenizer_fields(folder: Path) -> tuple[list, list, list]:
    """(tokens, merges "a b", token types) of a folder's byte-level BPE tokenizer.json (special added
    tokens are control tokens, type 3; the rest normal, type 1)."""
    spec = json.loads((folder / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    tokens = [None] * len(vocab)
    for token, index in vocab.items():
        tokens[index] = token
    special = {t["id"] for t in spec["added_tokens"] if t["special"]}
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    return tokens, merges, [3 if i in special else 1 for i in range(len(tokens))]


def write(
    folder: Path,
    path: Path,
    qtype=None,
    *,
    arch: str | None = None,
    pre: str = "default",
    add_bos: bool = False,
    extra: dict | None = None,
    tokenizer_model: str = "gpt2",
    skip=(),
    omit=(),
    metadata: dict | None = None,
    replace: dict | None = None,
) -> Path:
    """Convert the Hugging Face folder ``folder`` to the GGUF file ``path``: 2-D weights in ``qtype``
    (a ``gguf.GGMLQuantizationType``; None: F32) where their rows split into whole blocks, F32 otherwise;
    ``extra``: GGUF name -> array added as is; ``skip``: Hugging Face names left out. For hostile files:
    ``omit``, names of ``GGUFWriter.add_*`` metadata calls left out (``"head_count_kv"``);
    ``metadata``, such a name -> the value written instead (``{"head_count_kv": 3}``); ``replace``,
    Hugging Face name -> the array written instead of its value (wrong shapes, NaN weights)."""
    import gguf
    from safetensors.numpy import load_file

    config = json.loads((folder / "config.json").read_text())
    arch = arch or config["model_type"]
    tensors = load_file(str(folder / "model.safetensors"))
    heads, kv = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    w = gguf.GGUFWriter(str(path), arch)
    tokens, merges, types = tokenizer_fields(folder)
    fields = {
        "name": "tiny " + arch,
        "block_count": config["num_hidden_layers"],
        "context_length": config["max_position_embeddings"],
        "embedding_length": config["hidden_size"],
        "feed_forward_length": config["intermediate_size"],
        "head_count": heads,
        "head_count_kv": kv,
        "layer_norm_rms_eps": config["rms_norm_eps"],
        "rope_freq_base": config["rope_parameters"]["rope_theta"],
        "rope_dimension_count": head_dim,
        "vocab_size": config["vocab_size"],
        "tokenizer_model": tokenizer_model,
        "tokenizer_pre": pre,
        "token_list": tokens,
        "token_merges": merges,
        "token_types": types,
        "bos_token_id": config["bos_token_id"],
        "eos_token_id": config["eos_token_id"],
        "add_bos_token": add_bos,
    }
    fields.update(metadata or {})
    for key, value in fields.items():
        if key not in omit:
            getattr(w, f"add_{key}")(value)
    for name, value in tensors.items():
        if name in skip or (name == "lm_head.weight" and config.get("tie_word_embeddings")):
            continue
        value = np.ascontiguousarray((replace or {}).get(name, value), np.float32)
        if arch == "llama" and (".q_proj." in name or ".k_proj." in name):
            value = rope_permute(value, heads if ".q_proj." in name else kv)
        if qtype is not None and value.ndim == 2 and value.shape[1] % gguf.GGML_QUANT_SIZES[qtype][0] == 0:
            w.add_tensor(gguf_name(name), gguf.quants.quantize(value, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(gguf_name(name), value)
    for name, value in (extra or {}).items():
        w.add_tensor(name, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
