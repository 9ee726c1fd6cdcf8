"""The per-family table: where each Hugging Face family keeps its weights and which conventions it follows.

Every supported family is read into one canonical decoder block (``posbias.hf.forward``):

    h = LN_1(x_t);  q, k, v = h W_q + b_q, h W_k + b_k, h W_v + b_v   (per head, d_head wide)
    logit_hij = s_t (q_hi . k_hj) + pos_hij,  s_t = 1/sqrt(d_head) (GPT-2: optionally / (t + 1))
    a_t = sum_h softmax_j(logit_h)_ij v_hj W_O,h + b_O                (attention output after W_O)
    x_{t+1} = r + a_t + MLP(LN_2(r + a_t))                            (r = x_t, or h for BLOOM's
                                                                       apply_residual_connection_post_layernorm)

with pos_hij = -m_h (i - j) on j <= i for ALiBi families (THEORY.md Notation; BLOOM adds
m_h j, which differs by the row constant m_h i and so gives the same softmax), 0 for
learned absolute positions (added to the embeddings instead), and -inf above the
diagonal. A ``Family`` says how the checkpoint's tensors map onto W_q ... b_2:

* ``qkv_layout``: ``per-head`` (BLOOM's fused query_key_value: output index
  h * 3 d_head + s * d_head + k, s = 0, 1, 2 for q, k, v) or ``blocks`` (GPT-2's c_attn:
  s * D + h * d_head + k);
* ``linear_layout``: ``out-in`` (torch.nn.Linear, weight (out, in): transposed on reading)
  or ``in-out`` (GPT-2's Conv1D, weight (in, out));
* ``embed_norm``: BLOOM's LayerNorm on the word embeddings (x_0 = LN(e));
* ``optional_biases``: MPT saves no biases (LayerNorms without bias, bias-free linears):
  an absent bias is zero; MPT also clamps q, k, v to [-clip_qkv, clip_qkv], may replace
  1/sqrt(d_head) by ``softmax_scale``, and builds its slopes with ``alibi_bias_max`` B:
  with P the smallest power of two >= H, 2^(-h B / P), h = 1..P, even-indexed first, the
  first H kept (for B = 8 the same slopes as BLOOM's construction, for every H);
* ``activation``: ``gelu-bloom`` (x/2 (1 + tanh(0.79788456 x (1 + 0.044715 x^2))), BLOOM's
  constant) the config's ``activation_function`` for GPT-2 (``gelu_new``,
  ``gelu_pytorch_tanh``: the tanh approximation; ``gelu``: the exact erf form), or the exact
  erf GELU for MPT.
"""

from __future__ import annotations

from dataclasses import dataclass

from posbias.errors import UserError


class UnsupportedModel(UserError):
    """A checkpoint whose model_type (or a setting of it) the JAX forward does not implement: one line."""


@dataclass(frozen=True)
class Family:
    """Weight names (relative to the layer prefix ``layer.format(i=t)``) and conventions of one family."""

    model_type: str
    summary: str
    base_prefixes: tuple          # where the base model's names start: "transformer." (a *ForCausalLM save) or ""
    embed: str
    embed_norm: tuple | None      # (gain, bias) of a LayerNorm on the embeddings
    position_embed: str | None    # learned absolute positions
    layer: str
    ln1: tuple
    qkv: tuple                    # (weight, bias)
    qkv_layout: str
    attn_out: tuple
    ln2: tuple
    mlp_in: tuple
    mlp_out: tuple
    final_norm: tuple
    lm_head: str                  # absent from the files when tied to ``embed``
    linear_layout: str
    positions: str                # "alibi" or "learned"
    layers_key: str
    heads_key: str
    width_key: str
    optional_biases: bool = False  # a bias absent from the files is zero (MPT saves none)


BLOOM = Family(
    model_type="bloom", summary="BLOOM (ALiBi, fused per-head QKV, embedding LayerNorm)",
    base_prefixes=("transformer.", ""), embed="word_embeddings.weight",
    embed_norm=("word_embeddings_layernorm.weight", "word_embeddings_layernorm.bias"), position_embed=None,
    layer="h.{i}.", ln1=("input_layernorm.weight", "input_layernorm.bias"),
    qkv=("self_attention.query_key_value.weight", "self_attention.query_key_value.bias"), qkv_layout="per-head",
    attn_out=("self_attention.dense.weight", "self_attention.dense.bias"),
    ln2=("post_attention_layernorm.weight", "post_attention_layernorm.bias"),
    mlp_in=("mlp.dense_h_to_4h.weight", "mlp.dense_h_to_4h.bias"),
    mlp_out=("mlp.dense_4h_to_h.weight", "mlp.dense_4h_to_h.bias"),
    final_norm=("ln_f.weight", "ln_f.bias"), lm_head="lm_head.weight", linear_layout="out-in",
    positions="alibi", layers_key="n_layer", heads_key="n_head", width_key="hidden_size")

GPT2 = Family(
    model_type="gpt2", summary="GPT-2 (learned absolute positions, Conv1D weights)",
    base_prefixes=("transformer.", ""), embed="wte.weight", embed_norm=None, position_embed="wpe.weight",
    layer="h.{i}.", ln1=("ln_1.weight", "ln_1.bias"), qkv=("attn.c_attn.weight", "attn.c_attn.bias"),
    qkv_layout="blocks", attn_out=("attn.c_proj.weight", "attn.c_proj.bias"), ln2=("ln_2.weight", "ln_2.bias"),
    mlp_in=("mlp.c_fc.weight", "mlp.c_fc.bias"), mlp_out=("mlp.c_proj.weight", "mlp.c_proj.bias"),
    final_norm=("ln_f.weight", "ln_f.bias"), lm_head="lm_head.weight", linear_layout="in-out",
    positions="learned", layers_key="n_layer", heads_key="n_head", width_key="n_embd")

MPT = Family(
    model_type="mpt", summary="MPT (ALiBi with MPT's slopes, bias-free layers, clip_qkv)",
    base_prefixes=("transformer.", ""), embed="wte.weight", embed_norm=None, position_embed=None,
    layer="blocks.{i}.", ln1=("norm_1.weight", "norm_1.bias"), qkv=("attn.Wqkv.weight", "attn.Wqkv.bias"),
    qkv_layout="blocks", attn_out=("attn.out_proj.weight", "attn.out_proj.bias"),
    ln2=("norm_2.weight", "norm_2.bias"), mlp_in=("ffn.up_proj.weight", "ffn.up_proj.bias"),
    mlp_out=("ffn.down_proj.weight", "ffn.down_proj.bias"), final_norm=("norm_f.weight", "norm_f.bias"),
    lm_head="lm_head.weight", linear_layout="out-in", positions="alibi", layers_key="n_layers",
    heads_key="n_heads", width_key="d_model", optional_biases=True)

FAMILIES = {f.model_type: f for f in (BLOOM, GPT2, MPT)}
ACTIVATIONS = {"gelu_new": "gelu-tanh", "gelu_pytorch_tanh": "gelu-tanh", "gelu_fast": "gelu-tanh", "gelu": "gelu-erf"}


def supported_line() -> str:
    return "supported model_type values: " + ", ".join(f"{k} ({f.summary})" for k, f in sorted(FAMILIES.items()))


def family_of(model_type, where: str = "config.json") -> Family:
    """The ``Family`` of a config's model_type, or UnsupportedModel with one line listing the supported ones."""
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        raise UnsupportedModel(f"{where}: model_type {model_type!r} is not supported; {supported_line()}")
    return family


@dataclass(frozen=True)
class Spec:
    """The static shape and settings of one checkpoint (hashable: a jit static argument)."""

    model_type: str
    layers: int
    heads: int
    width: int
    vocab: int
    eps: float
    activation: str               # "gelu-bloom", "gelu-tanh" or "gelu-erf"
    positions: str                # "alibi" or "learned"
    embed_norm: bool
    context: int | None           # learned positions: the longest input; ALiBi: None
    residual_post_ln: bool = False
    inverse_layer_scale: bool = False
    scale_attn: bool = True
    slope_convention: str = "hf"     # "hf" (BLOOM) or "mpt" (MPT's interleaved construction)
    alibi_bias_max: float = 8.0
    softmax_scale: float | None = None  # MPT: replaces 1/sqrt(d_head)
    clip_qkv: float | None = None       # MPT: q, k, v clamped to [-c, c]
    causal: bool = True                 # False for encoders (BERT): every token reads every token

    @property
    def head_dim(self) -> int:
        return self.width // self.heads


def _int(config: dict, key: str, where: str) -> int:
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserError(f"{where}: {key} must be a positive integer, got {value!r}")
    return value


def spec_of(config: dict, where: str = "config.json") -> Spec:
    """Read a family's ``Spec`` from a parsed config.json (refusing settings the forward does not implement)."""
    family = family_of(config.get("model_type"), where)
    layers = _int(config, family.layers_key, where)
    heads = _int(config, family.heads_key, where)
    width = _int(config, family.width_key, where)
    vocab = _int(config, "vocab_size", where)
    if width % heads:
        raise UserError(f"{where}: {family.width_key} = {width} is not a multiple of {family.heads_key} = {heads}")
    eps = config.get("layer_norm_epsilon", 1e-5)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps > 0:
        raise UserError(f"{where}: layer_norm_epsilon must be a positive number, got {eps!r}")
    if family is BLOOM:
        if config.get("pretraining_tp", 1) > 1 and config.get("slow_but_exact", False):
            raise UnsupportedModel(f"{where}: BLOOM with slow_but_exact tensor-parallel slicing is not supported")
        return Spec("bloom", layers, heads, width, vocab, float(eps), "gelu-bloom", "alibi", True, None,
                    residual_post_ln=bool(config.get("apply_residual_connection_post_layernorm", False)))
    if family is MPT:
        return _mpt_spec(config, layers, heads, width, vocab, float(eps), where)
    act = config.get("activation_function", "gelu_new")
    if act not in ACTIVATIONS:
        raise UnsupportedModel(f"{where}: GPT-2 activation_function {act!r} is not supported; "
                               f"expected one of {sorted(ACTIVATIONS)}")
    if config.get("n_inner") not in (None, 4 * width):
        raise UnsupportedModel(f"{where}: GPT-2 n_inner = {config['n_inner']} (only 4 * n_embd is supported)")
    if config.get("add_cross_attention", False):
        raise UnsupportedModel(f"{where}: GPT-2 with cross-attention is not supported")
    return Spec("gpt2", layers, heads, width, vocab, float(eps), ACTIVATIONS[act], "learned", False,
                _int(config, "n_positions", where),
                inverse_layer_scale=bool(config.get("scale_attn_by_inverse_layer_idx", False)),
                scale_attn=bool(config.get("scale_attn_weights", True)))


def _mpt_spec(config: dict, layers: int, heads: int, width: int, vocab: int, eps: float, where: str) -> Spec:
    attn = config.get("attn_config") or {}
    if not isinstance(attn, dict):
        raise UserError(f"{where}: attn_config must be an object, got {attn!r}")
    if attn.get("qk_ln", False):
        raise UnsupportedModel(f"{where}: MPT with qk_ln (LayerNorm on queries and keys) is not supported")
    if attn.get("alibi", True) is False:
        raise UnsupportedModel(f"{where}: MPT without ALiBi (attn_config.alibi = false) is not supported")
    if config.get("expansion_ratio", 4) != 4:
        raise UnsupportedModel(f"{where}: MPT expansion_ratio = {config['expansion_ratio']} (only 4 is supported)")
    numbers = {}
    for key in ("softmax_scale", "clip_qkv"):
        value = attn.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise UserError(f"{where}: attn_config.{key} must be a positive number or null, got {value!r}")
        numbers[key] = None if value is None else float(value)
    bias_max = attn.get("alibi_bias_max", 8)
    if isinstance(bias_max, bool) or not isinstance(bias_max, (int, float)) or bias_max <= 0:
        raise UserError(f"{where}: attn_config.alibi_bias_max must be a positive number, got {bias_max!r}")
    return Spec("mpt", layers, heads, width, vocab, eps, "gelu-erf", "alibi", False, None,
                slope_convention="mpt", alibi_bias_max=float(bias_max), **numbers)
