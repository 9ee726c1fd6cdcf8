"""A GGUF file (llama.cpp's format) read as a Hugging Face checkpoint: ``load(path)``.

The file's metadata and tensor index are read by ``posbias.hf.gguf_file`` (the tensor data stay
memory-mapped; the types and dequantizers are the ``gguf`` package's, maintained with llama.cpp),
and the file becomes a ``GGUFCheckpoint``: the same interface as a checkpoint folder
(``posbias.hf.checkpoint.Checkpoint``: ``config``, ``spec``, ``family``, ``has(name)``, ``tensor(name)``,
``tokenizer()``), so ``posbias.hf.weights`` reads it as it reads safetensors. What is converted, and how
(as transformers' own GGUF loader converts it:
modeling_gguf_pytorch_utils.py, integrations/ggml.py, integrations/gguf/ of transformers 5.24):

* config: ``config_of`` builds the config.json of the model from the metadata, under the
  architecture's key prefix A (``general.architecture``: ``llama`` or ``qwen2``; Mistral files
  say ``llama``, and carry no sliding window): A.block_count -> num_hidden_layers,
  A.embedding_length -> hidden_size, A.feed_forward_length -> intermediate_size,
  A.attention.head_count(_kv) -> num_attention_heads (num_key_value_heads),
  A.attention.layer_norm_rms_epsilon -> rms_norm_eps, A.rope.freq_base -> rope_theta (default
  10000), A.context_length -> max_position_embeddings, A.vocab_size (or the token count) ->
  vocab_size, A.rope.dimension_count (or A.attention.key_length) -> head_dim, and
  tie_word_embeddings true exactly when there is no ``output.weight`` tensor. A linear
  A.rope.scaling.type becomes rope_scaling {linear, factor}; any other scaling, and a
  ``rope_freqs.weight`` tensor (Llama 3.1's frequency factors, which transformers' loader
  ignores), are refused in one line, as are partial rotary dimensions;
* tensor names: ``token_embd`` -> model.embed_tokens, ``output_norm`` -> model.norm,
  ``output`` -> lm_head, ``blk.{i}.attn_norm`` / ``ffn_norm`` -> the layer's input_layernorm /
  post_attention_layernorm, ``attn_q|k|v|output`` -> self_attn.q|k|v|o_proj, ``ffn_gate|up|down``
  -> mlp.gate|up|down_proj (``.weight``, ``.bias``); any other tensor is refused in one line;
* values: each tensor is dequantized when asked for, one at a time, with
  ``gguf.quants.dequantize`` (float32; every type that routine implements: with gguf 0.19 F32,
  F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K ... Q6_K, the IQ and TQ types, MXFP4, NVFP4, but
  not Q8_1, Q8_K, the integer types or F64), so the float32 model is only ever held once, in the
  caller's stacked arrays; a type it does not implement is refused in one line naming the
  type and the tensor, when the file is opened (one block of each type present is decoded then);
* layout: GGUF's numpy shape is the reverse of its ggml ``ne``, i.e. a linear weight comes out
  (out, in) as torch.nn.Linear stores it; for ``llama`` files llama.cpp's converter stored the
  rows of q (per query head) and k (per key/value head) interleaved for its rope layout: within
  head h (K = head_dim rows) stored row h K + 2 c + s is Hugging Face row h K + s K/2 + c
  (c < K/2, s in {0, 1}), which ``unpermute`` undoes, weight and bias (transformers'
  LlamaTensorProcessor; Qwen2 files are not permuted).

Exact: dequantization, renaming and row permutation move or decode values without rounding
beyond the dequantizer's own float32 arithmetic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from posbias.hf import gguf_blocks, gguf_file
from posbias.hf.checkpoint import Checkpoint, CheckpointError
from posbias.hf.families import UnsupportedModel, family_of, spec_of

ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2"}  # general.architecture -> model_type
# metadata keys (under the architecture's prefix) that llama.cpp requires of these architectures
REQUIRED = (
    "block_count",
    "context_length",
    "embedding_length",
    "feed_forward_length",
    "attention.head_count",
    "attention.layer_norm_rms_epsilon",
)
PERMUTED = ("llama",)  # architectures whose q/k rows llama.cpp interleaved

TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK = re.compile(r"blk\.(\d+)\.([a-z_]+)\.(weight|bias)")
_TOP = re.compile(r"([a-z_]+)\.(weight|bias)")


def hf_name(name: str, where: str) -> str:
    """The Hugging Face name of GGUF tensor ``name`` (module docstring), or one line refusing it."""
    if name == "rope_freqs.weight":
        raise UnsupportedModel(
            f"{where}: tensor rope_freqs.weight (Llama 3.1-style rope frequency factors) is not supported"
        )
    block = _BLOCK.fullmatch(name)
    if block and block.group(2) in BLOCK_NAMES:
        return f"model.layers.{block.group(1)}.{BLOCK_NAMES[block.group(2)]}.{block.group(3)}"
    top = _TOP.fullmatch(name)
    if top and top.group(1) in TOP_NAMES:
        return f"{TOP_NAMES[top.group(1)]}.{top.group(2)}"
    raise UnsupportedModel(
        f"{where}: tensor {name} is not part of a Llama-family model this reader maps "
        f"(expected token_embd, output_norm, output and blk.N.{{{', '.join(BLOCK_NAMES)}}})"
    )


def unpermute(rows: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's rope permutation of a q or k projection (weight (heads K, in) or bias (heads K,)):
    stored row h K + 2 c + s -> row h K + s K/2 + c (module docstring)."""
    k = rows.shape[0] // heads
    if k * heads != rows.shape[0] or k % 2:
        raise CheckpointError(
            f"a q/k projection with {rows.shape[0]} rows does not split into {heads} heads of an even head_dim"
        )
    return rows.reshape(heads, k // 2, 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def config_of(meta: dict, tensor_names, where: str) -> dict:
    """The Hugging Face config.json of a GGUF file's metadata ``meta`` and tensor names (module docstring)."""
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise UnsupportedModel(
            f"{where}: general.architecture {arch!r} is not supported; supported GGUF "
            f"architectures: {', '.join(sorted(ARCHITECTURES))}"
        )

    def get(key, default=None):
        return meta.get(f"{arch}.{key}", default)

    for key in REQUIRED:  # llama.cpp refuses a file without them; a default would change the numbers
        if get(key) is None:
            raise CheckpointError(f"{where}: metadata key {arch}.{key} is missing (llama.cpp requires it)")
    heads = get("attention.head_count")
    hidden = get("embedding_length")
    config = {
        "model_type": ARCHITECTURES[arch],
        "architectures": ["LlamaForCausalLM" if arch == "llama" else "Qwen2ForCausalLM"],
        "num_hidden_layers": get("block_count"),
        "hidden_size": hidden,
        "intermediate_size": get("feed_forward_length"),
        "num_attention_heads": heads,
        "num_key_value_heads": get("attention.head_count_kv", heads),
        "rms_norm_eps": get("attention.layer_norm_rms_epsilon"),
        "rope_theta": get("rope.freq_base", 10000.0),
        "max_position_embeddings": get("context_length"),
        "hidden_act": "silu",
        "tie_word_embeddings": "output.weight" not in tensor_names,
    }
    tokens = meta.get("tokenizer.ggml.tokens")
    config["vocab_size"] = get("vocab_size", len(tokens) if isinstance(tokens, list) else None)
    key_length, rope_dim = get("attention.key_length"), get("rope.dimension_count")
    if get("attention.value_length", key_length) != key_length:
        raise UnsupportedModel(f"{where}: {arch}.attention.value_length differs from key_length (not supported)")
    head_dim = key_length if key_length is not None else rope_dim
    if head_dim is None and isinstance(heads, int) and isinstance(hidden, int) and heads > 0:
        head_dim = hidden // heads
    if rope_dim is not None and rope_dim != head_dim:
        raise UnsupportedModel(
            f"{where}: {arch}.rope.dimension_count = {rope_dim} rotates part of head_dim = "
            f"{head_dim} (partial rotary embeddings are not supported)"
        )
    config["head_dim"] = head_dim
    scaling = get("rope.scaling.type", "none")
    if scaling == "linear":
        config["rope_scaling"] = {"rope_type": "linear", "factor": get("rope.scaling.factor")}
    elif scaling != "none":
        raise UnsupportedModel(f"{where}: {arch}.rope.scaling.type {scaling!r} is not supported (only none, linear)")
    if arch == "llama" and any(n.startswith("blk.") and n.endswith(".attn_q.bias") for n in tensor_names):
        config["attention_bias"] = True
    if arch == "llama" and any(n.startswith("blk.") and n.endswith(".ffn_up.bias") for n in tensor_names):
        config["mlp_bias"] = True
    for key, name in (("bos_token_id", "bos"), ("eos_token_id", "eos"), ("pad_token_id", "padding")):
        value = meta.get(f"tokenizer.ggml.{name}_token_id")
        if value is not None:
            config[key] = value
    return {k: v for k, v in config.items() if v is not None}


def _check_types(tensors, where: str) -> None:
    """Decode one block of every tensor type present: a type ``gguf.quants.dequantize`` does not
    implement is refused here, naming the type and the first tensor stored in it."""
    from gguf import GGML_QUANT_SIZES
    from gguf.quants import dequantize

    seen = {}
    for t in tensors:
        seen.setdefault(t.tensor_type, t.name)
    for qtype, name in seen.items():
        block, size = GGML_QUANT_SIZES.get(qtype, (None, None))
        try:
            if block is None:
                raise NotImplementedError
            dequantize(np.zeros((1, size), np.uint8), qtype)
        except NotImplementedError:
            raise UnsupportedModel(
                f"{where}: tensor {name} is stored as {qtype.name}, a type gguf {_gguf_version()} cannot dequantize"
            ) from None


def _gguf_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gguf")
    except PackageNotFoundError:
        return "(unknown version)"


@dataclass(frozen=True)
class GGUFCheckpoint(Checkpoint):
    """A GGUF file as a checkpoint (module docstring): ``folder`` is the file's path, ``files`` maps
    Hugging Face names to the file's tensors (``posbias.hf.gguf_file.Tensor``), ``meta`` holds the raw metadata."""

    meta: dict = field(default_factory=dict, compare=False, repr=False)
    permuted: bool = False

    def tensor(self, name: str) -> np.ndarray:
        """The tensor ``name`` (relative to the base prefix), dequantized to float32 in the Hugging Face layout."""
        return self.top_level(self.prefix + name)

    def top_level(self, full: str) -> np.ndarray:
        """The tensor of full Hugging Face name ``full`` (module docstring: dequantized, un-permuted)."""
        from gguf.quants import dequantize

        if full not in self.files:
            raise CheckpointError(
                f"{self.folder}: tensor {full} is missing (a {self.spec.model_type} checkpoint should have it)"
            )
        t = self.files[full]
        self.read.add(full)
        shape = tuple(reversed(t.shape))
        # a quantized type dequantizes to a new float32 array (Q8_0, Q4_0, Q4_1 whole by posbias.hf.gguf_blocks, the
        # rest by gguf), kept as it is; F32 comes back as a read-only view of the memory map and F16 (and BF16) in its
        # own dtype: copied, so that every tensor is a float32 array of its own
        values = gguf_blocks.dequantize(t.data, t.tensor_type.name)
        if values is None:
            values = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        if not values.flags.writeable or not values.flags.c_contiguous:
            values = values.copy()
        values = values.reshape(shape)
        if self.permuted and (".self_attn.q_proj." in full or ".self_attn.k_proj." in full):
            q = ".self_attn.q_proj." in full
            values = unpermute(values, self.spec.heads if q else self.spec.groups)
        return values

    def tokenizer(self):
        """The tokenizer of the file's metadata (``posbias.hf.gguf_tokenizer``)."""
        from posbias.hf import gguf_tokenizer

        return gguf_tokenizer.build(self.meta, str(self.folder))


def load(path) -> GGUFCheckpoint:
    """Open a GGUF file: metadata, config, ``Spec`` and the tensor index (no tensor is dequantized yet)."""
    path = Path(path)
    where = str(path)
    try:
        import gguf  # noqa: F401 (the types and dequantizers)
    except ImportError:
        raise CheckpointError(f"{where}: reading GGUF files needs the gguf package (pip install gguf)") from None
    if not path.is_file():
        raise CheckpointError(f"{where}: not a file (expected a .gguf file)")
    try:
        file = gguf_file.read(path)
    except (ValueError, OSError) as exc:
        raise CheckpointError(f"{where}: not a readable GGUF file ({exc})") from None
    meta = file.meta
    names = [t.name for t in file.tensors]
    config = config_of(meta, names, where)
    family = family_of(config["model_type"], where)
    spec = spec_of(config, where)
    files = {}
    for t in file.tensors:
        name = hf_name(t.name, where)
        if name in files:
            raise CheckpointError(f"{where}: tensor {t.name} appears twice")
        files[name] = t
        block = _BLOCK.fullmatch(t.name)
        if block and int(block.group(1)) >= spec.layers:
            raise CheckpointError(
                f"{where}: tensor {t.name} belongs to layer {block.group(1)}, but "
                f"{meta['general.architecture']}.block_count is {spec.layers} (refusing to measure a "
                f"truncated model)"
            )
    _check_types(file.tensors, where)
    prefix = next((p for p in family.base_prefixes if p + family.embed in files), None)
    if prefix is None:
        raise CheckpointError(f"{where}: no token_embd.weight tensor: not a {family.model_type} model")
    return GGUFCheckpoint(
        path, config, spec, family, files, prefix, meta=meta, permuted=meta.get("general.architecture") in PERMUTED
    )
