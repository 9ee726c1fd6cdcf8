"""The per-family table: where each Hugging Face family keeps its weights and which conventions it follows.

Every supported family is read into one canonical transformer block (``posbias.hf.forward``):

    attention input h = LN_1(x_t) (pre-LN and parallel blocks) or x_t itself (post-LN)
    q, k, v = h W_q + b_q, h W_k + b_k, h W_v + b_v              (per head, d_head wide)
    logit_hij = s_t (q_hi . k_hj) + pos_hij,  s_t = 1/sqrt(d_head) (GPT-2: optionally / (t + 1))
    a_t = sum_h softmax_j(logit_h)_ij v_hj W_O,h + b_O            (attention output after W_O)
    pre-LN   (BLOOM, GPT-2, MPT, Falcon-RW): y = r + a_t,  x_{t+1} = y + MLP(LN_2(y))
             (r = x_t, or h for BLOOM's apply_residual_connection_post_layernorm)
    parallel (Falcon parallel_attn):        x_{t+1} = x_t + a_t + MLP(LN_2(x_t))
             (LN_2 = LN_1 with one LayerNorm; Falcon's new architecture has its own ln_mlp)
    post-LN  (BERT):                         y = LN_1(x_t + a_t),  x_{t+1} = LN_2(y + MLP(y))

with pos_hij = -m_h (i - j) on j <= i for ALiBi families (THEORY.md Notation; BLOOM adds
m_h j, which differs by the row constant m_h i and so gives the same softmax), 0 for
learned absolute positions (added to the embeddings instead), and -inf above the
diagonal under a causal mask (encoders: every j). A ``Family`` says how the checkpoint's
tensors map onto W_q ... b_2:

* ``qkv_layout``: ``grouped`` (a fused projection whose output is (G, H/G + 2, d_head):
  per key/value group g its H/G queries, then its key and value: BLOOM's and Falcon-RW's
  query_key_value is G = H, i.e. h * 3 d_head + s * d_head + k; Falcon's multi_query is
  G = 1; its new architecture G = num_kv_heads; a key/value head is shared by the H/G query
  heads of its group), ``blocks`` (GPT-2's c_attn, MPT's Wqkv: s * D + h * d_head + k) or
  ``separate`` (BERT's query, key and value linears);
* ``linear_layout``: ``out-in`` (torch.nn.Linear, weight (out, in): transposed on reading)
  or ``in-out`` (GPT-2's Conv1D, weight (in, out));
* ``embed_norm``: a LayerNorm on the embeddings (BLOOM: x_0 = LN(e); BERT: x_0 = LN(e + pos + type_0));
* ``optional_biases``: MPT saves no biases (LayerNorms without bias, bias-free linears),
  Falcon none with ``bias: false``: an absent bias is zero; MPT also clamps q, k, v to
  [-clip_qkv, clip_qkv], may replace 1/sqrt(d_head) by ``softmax_scale``, and builds its slopes
  with ``alibi_bias_max`` B: with P the smallest power of two >= H, 2^(-h B / P), h = 1..P,
  even-indexed first, the first H kept (for B = 8 the same slopes as BLOOM's construction,
  for every H);
* Falcon's ALiBi (``Spec.alibi_scale``, ``Spec.alibi_rounding``): the slopes of BLOOM's
  construction rounded to bfloat16, the term m_h j formed in bfloat16 (j rounded to
  bfloat16 first, as torch multiplies a bfloat16 tensor by an integer one) and added to the
  raw q.k *before* the 1/sqrt(d_head) scaling: pos_hij = bf16(bf16(m_h) bf16(j)) / sqrt(d_head),
  so the effective slope the softmax sees is bf16(m_h) / sqrt(d_head) (1/8 of BLOOM's for
  d_head = 64), exact up to the bfloat16 rounding of m_h j. This is the term of the
  checkpoints' own modelling code (RefinedWeb's modelling_RW.py) and of transformers'
  FalconAttention up to transformers 5.24, whose FalconModel also folds the same term into
  the attention mask, so its eager forward adds it twice: ``alibi_scale`` = 2 / sqrt(d_head)
  reproduces that, and the committed Falcon fixture (made with 5.24) records both; from 5.25
  transformers adds it once, through the mask, as the checkpoints' own code does;
* ``activation``: ``gelu-bloom`` (x/2 (1 + tanh(0.79788456 x (1 + 0.044715 x^2))), BLOOM's
  constant), the config's ``activation_function`` for GPT-2 or ``hidden_act`` for BERT
  (``gelu_new``, ``gelu_pytorch_tanh``: the tanh approximation; ``gelu``: the exact erf form),
  or the exact erf GELU for MPT and Falcon.

The Llama family (``model_type`` llama, mistral, qwen2; ``Spec.positions`` "rotary") is the
pre-LN block with RMSNorm(x) = x / sqrt(mean_d x_d^2 + eps) * g (no mean, no bias) for both
norms and the final one, a SwiGLU MLP (``Spec.glu``): MLP(u) = (silu(u W_gate) * (u W_up)) W_down,
separate q/k/v/o projections with ``num_key_value_heads`` G key/value heads (GQA: key/value
head g serves query heads g H/G .. (g + 1) H/G - 1, transformers' repeat_kv), ``head_dim``
from the config where it is given (else D / H), and rotary position embeddings on q and k
(``Rope``; transformers' rotate-half layout: the pair (x_c, x_{c + K/2}) of channel c < K/2
is rotated by the angle i w_c at position i, w_c = theta^(-2c/K) before scaling). The
positional term is then not separable from the content logits: ``content`` is the full
pre-softmax q_rot . k_rot and the position term is the mask alone (slopes 0, as for learned
absolute positions). Biases: Llama's q/k/v/o have one each when ``attention_bias`` (its MLP
when ``mlp_bias``), Qwen2's q/k/v always and its o_proj never, Mistral none; an expected bias
missing from the files is an error, an absent one is zero. Sliding windows (Mistral's
``sliding_window``, Qwen2's ``use_sliding_window`` with ``layer_types`` or, without it, the
layers t >= ``max_window_layers``) restrict query i to the W keys i - W < j <= i
(``Spec.windows``, transformers' sliding_window_overlay).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from posbias.errors import UserError


class UnsupportedModel(UserError):
    """A checkpoint whose model_type (or a setting of it) the JAX forward does not implement: one line."""


@dataclass(frozen=True)
class Family:
    """Weight names (relative to the layer prefix ``layer.format(i=t)``) and conventions of one family."""

    model_type: str
    summary: str
    base_prefixes: tuple  # where the base model's names start: "transformer." (a *ForCausalLM save) or ""
    embed: str
    embed_norm: tuple | None  # (gain, bias) of a LayerNorm on the embeddings
    position_embed: str | None  # learned absolute positions
    layer: str
    ln1: tuple
    qkv: tuple  # fused: (weight, bias); separate: (w_q, b_q, w_k, b_k, w_v, b_v)
    qkv_layout: str
    attn_out: tuple
    ln2: tuple
    mlp_in: tuple
    mlp_out: tuple
    final_norm: tuple | None  # None: the last block's output is the final hidden state (BERT)
    lm_head: str | None  # absent from the files when tied to ``embed``; None: an encoder without one
    linear_layout: str
    positions: str  # "alibi" or "learned"
    layers_key: tuple  # config keys, first present wins
    heads_key: tuple
    width_key: tuple
    eps_key: str = "layer_norm_epsilon"
    optional_biases: bool = False  # a bias absent from the files is zero (MPT saves none)
    token_type_embed: str | None = None  # BERT: type 0 is added at every position
    mlp_gate: tuple | None = None  # SwiGLU: (weight, bias) of the gate projection (``mlp_in`` is the up projection)
    tied_default: bool = True  # tie_word_embeddings when config.json does not say
    eps_default: float = 1e-5  # the norm epsilon when config.json does not say

    def tied(self, config: dict) -> bool:
        """Whether the output projection is the token embedding: config.json's tie_word_embeddings, else
        the family's default (true for BLOOM, GPT-2, MPT, Falcon; false for Llama, Mistral, Qwen2, as in
        their transformers configs)."""
        value = config.get("tie_word_embeddings")
        return self.tied_default if value is None else bool(value)


BLOOM = Family(
    model_type="bloom",
    summary="BLOOM (ALiBi, fused per-head QKV, embedding LayerNorm)",
    base_prefixes=("transformer.", ""),
    embed="word_embeddings.weight",
    embed_norm=("word_embeddings_layernorm.weight", "word_embeddings_layernorm.bias"),
    position_embed=None,
    layer="h.{i}.",
    ln1=("input_layernorm.weight", "input_layernorm.bias"),
    qkv=("self_attention.query_key_value.weight", "self_attention.query_key_value.bias"),
    qkv_layout="grouped",
    attn_out=("self_attention.dense.weight", "self_attention.dense.bias"),
    ln2=("post_attention_layernorm.weight", "post_attention_layernorm.bias"),
    mlp_in=("mlp.dense_h_to_4h.weight", "mlp.dense_h_to_4h.bias"),
    mlp_out=("mlp.dense_4h_to_h.weight", "mlp.dense_4h_to_h.bias"),
    final_norm=("ln_f.weight", "ln_f.bias"),
    lm_head="lm_head.weight",
    linear_layout="out-in",
    positions="alibi",
    layers_key=("n_layer",),
    heads_key=("n_head",),
    width_key=("hidden_size",),
)

GPT2 = Family(
    model_type="gpt2",
    summary="GPT-2 (learned absolute positions, Conv1D weights)",
    base_prefixes=("transformer.", ""),
    embed="wte.weight",
    embed_norm=None,
    position_embed="wpe.weight",
    layer="h.{i}.",
    ln1=("ln_1.weight", "ln_1.bias"),
    qkv=("attn.c_attn.weight", "attn.c_attn.bias"),
    qkv_layout="blocks",
    attn_out=("attn.c_proj.weight", "attn.c_proj.bias"),
    ln2=("ln_2.weight", "ln_2.bias"),
    mlp_in=("mlp.c_fc.weight", "mlp.c_fc.bias"),
    mlp_out=("mlp.c_proj.weight", "mlp.c_proj.bias"),
    final_norm=("ln_f.weight", "ln_f.bias"),
    lm_head="lm_head.weight",
    linear_layout="in-out",
    positions="learned",
    layers_key=("n_layer",),
    heads_key=("n_head",),
    width_key=("n_embd",),
)

MPT = Family(
    model_type="mpt",
    summary="MPT (ALiBi with MPT's slopes, bias-free layers, clip_qkv)",
    base_prefixes=("transformer.", ""),
    embed="wte.weight",
    embed_norm=None,
    position_embed=None,
    layer="blocks.{i}.",
    ln1=("norm_1.weight", "norm_1.bias"),
    qkv=("attn.Wqkv.weight", "attn.Wqkv.bias"),
    qkv_layout="blocks",
    attn_out=("attn.out_proj.weight", "attn.out_proj.bias"),
    ln2=("norm_2.weight", "norm_2.bias"),
    mlp_in=("ffn.up_proj.weight", "ffn.up_proj.bias"),
    mlp_out=("ffn.down_proj.weight", "ffn.down_proj.bias"),
    final_norm=("norm_f.weight", "norm_f.bias"),
    lm_head="lm_head.weight",
    linear_layout="out-in",
    positions="alibi",
    layers_key=("n_layers",),
    heads_key=("n_heads",),
    width_key=("d_model",),
    optional_biases=True,
)

# Falcon keeps BLOOM's tensor names (its code descends from BLOOM's); no embedding LayerNorm, optional biases
FALCON = replace(
    BLOOM,
    model_type="falcon",
    summary="Falcon with ALiBi (Falcon-RW; sequential or parallel attention/MLP, multi-query or grouped keys)",
    embed_norm=None,
    layers_key=("num_hidden_layers", "n_layer"),
    heads_key=("num_attention_heads", "n_head"),
    width_key=("hidden_size", "n_embed"),
    optional_biases=True,
)

BERT = Family(
    model_type="bert",
    summary="BERT (encoder: full attention, post-LN, learned absolute positions)",
    base_prefixes=("bert.", ""),
    embed="embeddings.word_embeddings.weight",
    embed_norm=("embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias"),
    position_embed="embeddings.position_embeddings.weight",
    layer="encoder.layer.{i}.",
    ln1=("attention.output.LayerNorm.weight", "attention.output.LayerNorm.bias"),
    qkv=(
        "attention.self.query.weight",
        "attention.self.query.bias",
        "attention.self.key.weight",
        "attention.self.key.bias",
        "attention.self.value.weight",
        "attention.self.value.bias",
    ),
    qkv_layout="separate",
    attn_out=("attention.output.dense.weight", "attention.output.dense.bias"),
    ln2=("output.LayerNorm.weight", "output.LayerNorm.bias"),
    mlp_in=("intermediate.dense.weight", "intermediate.dense.bias"),
    mlp_out=("output.dense.weight", "output.dense.bias"),
    final_norm=None,
    lm_head=None,
    linear_layout="out-in",
    positions="learned",
    layers_key=("num_hidden_layers",),
    heads_key=("num_attention_heads",),
    width_key=("hidden_size",),
    eps_key="layer_norm_eps",
    token_type_embed="embeddings.token_type_embeddings.weight",
)

LLAMA = Family(
    model_type="llama",
    summary="Llama (RoPE with default/linear/dynamic/llama3 scaling, RMSNorm, SwiGLU, GQA)",
    base_prefixes=("model.", ""),
    embed="embed_tokens.weight",
    embed_norm=None,
    position_embed=None,
    layer="layers.{i}.",
    ln1=("input_layernorm.weight", None),
    qkv=(
        "self_attn.q_proj.weight",
        "self_attn.q_proj.bias",
        "self_attn.k_proj.weight",
        "self_attn.k_proj.bias",
        "self_attn.v_proj.weight",
        "self_attn.v_proj.bias",
    ),
    qkv_layout="separate",
    attn_out=("self_attn.o_proj.weight", "self_attn.o_proj.bias"),
    ln2=("post_attention_layernorm.weight", None),
    mlp_in=("mlp.up_proj.weight", "mlp.up_proj.bias"),
    mlp_out=("mlp.down_proj.weight", "mlp.down_proj.bias"),
    final_norm=("norm.weight", None),
    lm_head="lm_head.weight",
    linear_layout="out-in",
    positions="rotary",
    layers_key=("num_hidden_layers",),
    heads_key=("num_attention_heads",),
    width_key=("hidden_size",),
    eps_key="rms_norm_eps",
    optional_biases=True,
    mlp_gate=("mlp.gate_proj.weight", "mlp.gate_proj.bias"),
    tied_default=False,
    eps_default=1e-6,
)
MISTRAL = replace(LLAMA, model_type="mistral", summary="Mistral (Llama with a sliding window)")
QWEN2 = replace(LLAMA, model_type="qwen2", summary="Qwen2 (Llama with q/k/v biases and optional sliding windows)")

FAMILIES = {f.model_type: f for f in (BERT, BLOOM, FALCON, GPT2, LLAMA, MISTRAL, MPT, QWEN2)}
ROPE_TYPES = ("default", "linear", "dynamic", "llama3")
BIASES = ("bq", "bk", "bv", "bo", "b1", "bg", "b2")  # the canonical biases (``posbias.hf.weights``)
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
class Rope:
    """Rotary position embeddings as transformers' modeling_rope_utils computes their inverse
    frequencies w_c, c = 0 .. K/2 - 1 (K = head_dim; ``posbias.hf.forward.inv_freq``):

    * default: w_c = theta^(-2c/K);
    * linear: w_c / factor (positions interpolated by the factor);
    * dynamic (NTK): for N tokens, L = max(N, max_positions) and theta' =
      theta ((factor L / max_positions) - (factor - 1))^(K / (K - 2)), w_c = theta'^(-2c/K)
      (so the default frequencies up to N = max_position_embeddings; transformers recomputes
      them when a sequence grows past it, and keeps the grown ones for later sequences longer than
      max_position_embeddings: its result then depends on the longest sequence seen before, ours is
      that of a fresh model on each sequence);
    * llama3: with wavelength l_c = 2 pi / w_c, l_lo = original / low_freq_factor and
      l_hi = original / high_freq_factor: w_c / factor where l_c > l_lo, w_c where l_c < l_hi,
      and in between (1 - s) w_c / factor + s w_c, s = (original / l_c - low) / (high - low).

    Every type here has attention scaling 1 (yarn and longrope, which scale cos and sin, are refused)."""

    theta: float = 10000.0
    kind: str = "default"
    factor: float = 1.0
    max_positions: int | None = None  # dynamic: max_position_embeddings
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    original_max_positions: int | None = None  # llama3


@dataclass(frozen=True)
class Spec:
    """The static shape and settings of one checkpoint (hashable: a jit static argument)."""

    model_type: str
    layers: int
    heads: int
    width: int
    vocab: int
    eps: float
    activation: str  # "gelu-bloom", "gelu-tanh" or "gelu-erf"
    positions: str  # "alibi" or "learned"
    embed_norm: bool
    context: int | None  # learned positions: the longest input; ALiBi: None
    residual_post_ln: bool = False
    inverse_layer_scale: bool = False
    scale_attn: bool = True
    slope_convention: str = "hf"  # "hf" (BLOOM, Falcon) or "mpt" (MPT's interleaved construction)
    alibi_bias_max: float = 8.0
    softmax_scale: float | None = None  # MPT: replaces 1/sqrt(d_head)
    clip_qkv: float | None = None  # MPT: q, k, v clamped to [-c, c]
    causal: bool = True  # False for encoders (BERT): every token reads every token
    block: str = "pre-ln"  # "pre-ln", "parallel", "parallel-2ln" (Falcon ln_mlp) or "post-ln"
    kv_groups: int | None = None  # grouped QKV layout: G key/value groups (None: one per head)
    mlp_width: int | None = None  # None: 4 D
    alibi_scale: float = 1.0  # Falcon: 1/sqrt(d_head) (module docstring)
    alibi_rounding: str | None = None  # Falcon: "bfloat16"
    lm_head: bool = True  # False: an encoder whose output is the final hidden state
    norm: str = "layer"  # "layer" (LayerNorm) or "rms" (RMSNorm: no mean, no bias)
    glu: bool = False  # SwiGLU MLP: (act(u W_gate) * u W_up) W_down
    head_width: int | None = None  # head_dim given by the config (None: width / heads)
    rope: Rope | None = None  # rotary positions
    windows: tuple | None = None  # per layer: sliding window W (None: the full causal mask)
    biases: tuple | None = None  # canonical biases the files must hold (None: the family's rule)

    @property
    def head_dim(self) -> int:
        return self.head_width if self.head_width is not None else self.width // self.heads

    @property
    def groups(self) -> int:
        """Key/value groups G of a grouped QKV layout (one per head unless the config says fewer)."""
        return self.kv_groups if self.kv_groups is not None else self.heads

    @property
    def mlp(self) -> int:
        return self.mlp_width if self.mlp_width is not None else 4 * self.width


def _int(config: dict, keys, where: str) -> int:
    keys = (keys,) if isinstance(keys, str) else keys
    key = next((k for k in keys if k in config), keys[0])
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserError(f"{where}: {key} must be a positive integer, got {value!r}")
    return value


def _flag(config: dict, key: str, default: bool, where: str) -> bool:
    value = config.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise UserError(f"{where}: {key} must be true or false, got {value!r}")
    return value


def spec_of(config: dict, where: str = "config.json") -> Spec:
    """Read a family's ``Spec`` from a parsed config.json (refusing settings the forward does not implement)."""
    family = family_of(config.get("model_type"), where)
    layers = _int(config, family.layers_key, where)
    heads = _int(config, family.heads_key, where)
    width = _int(config, family.width_key, where)
    vocab = _int(config, "vocab_size", where)
    if width % heads and not (family.positions == "rotary" and config.get("head_dim") is not None):
        raise UserError(
            f"{where}: {family.width_key[0]} = {width} is not a multiple of {family.heads_key[0]} = {heads}"
        )
    eps = config.get(family.eps_key, family.eps_default)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps > 0:
        raise UserError(f"{where}: {family.eps_key} must be a positive number, got {eps!r}")
    shape = (layers, heads, width, vocab, float(eps))
    if family is BLOOM:
        if config.get("pretraining_tp", 1) > 1 and config.get("slow_but_exact", False):
            raise UnsupportedModel(f"{where}: BLOOM with slow_but_exact tensor-parallel slicing is not supported")
        return Spec(
            "bloom",
            *shape,
            "gelu-bloom",
            "alibi",
            True,
            None,
            residual_post_ln=bool(config.get("apply_residual_connection_post_layernorm", False)),
        )
    if family is MPT:
        return _mpt_spec(config, *shape, where)
    if family is FALCON:
        return _falcon_spec(config, *shape, where)
    if family is BERT:
        return _bert_spec(config, *shape, where)
    if family.positions == "rotary":
        return _llama_spec(family, config, *shape, where)
    act = config.get("activation_function", "gelu_new")
    if act not in ACTIVATIONS:
        raise UnsupportedModel(
            f"{where}: GPT-2 activation_function {act!r} is not supported; expected one of {sorted(ACTIVATIONS)}"
        )
    if config.get("n_inner") not in (None, 4 * width):
        raise UnsupportedModel(f"{where}: GPT-2 n_inner = {config['n_inner']} (only 4 * n_embd is supported)")
    if config.get("add_cross_attention", False):
        raise UnsupportedModel(f"{where}: GPT-2 with cross-attention is not supported")
    return Spec(
        "gpt2",
        *shape,
        ACTIVATIONS[act],
        "learned",
        False,
        _int(config, "n_positions", where),
        inverse_layer_scale=bool(config.get("scale_attn_by_inverse_layer_idx", False)),
        scale_attn=bool(config.get("scale_attn_weights", True)),
    )


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
    return Spec(
        "mpt",
        layers,
        heads,
        width,
        vocab,
        eps,
        "gelu-erf",
        "alibi",
        False,
        None,
        slope_convention="mpt",
        alibi_bias_max=float(bias_max),
        **numbers,
    )


def _falcon_spec(config: dict, layers: int, heads: int, width: int, vocab: int, eps: float, where: str) -> Spec:
    if not _flag(config, "alibi", False, where):
        raise UnsupportedModel(
            f"{where}: Falcon with rotary position embeddings (alibi: false, e.g. falcon-7b) is "
            f"not supported: its positional term is not separable from the content logits; "
            f"the ALiBi Falcons (falcon-rw-*) are"
        )
    if config.get("activation", "gelu") != "gelu":
        raise UnsupportedModel(f"{where}: Falcon activation {config['activation']!r} is not supported (only 'gelu')")
    new = _flag(config, "new_decoder_architecture", False, where)
    parallel = _flag(config, "parallel_attn", True, where)
    if new:
        groups = _int(config, "num_kv_heads", where) if config.get("num_kv_heads") is not None else heads
        lns = config.get("num_ln_in_parallel_attn") or 2
        if lns not in (1, 2):
            raise UserError(f"{where}: num_ln_in_parallel_attn must be 1 or 2, got {lns!r}")
        block = "parallel-2ln" if lns == 2 else "parallel"
    else:
        groups = 1 if _flag(config, "multi_query", True, where) else heads
        block = "parallel" if parallel else "pre-ln"
    if heads % groups:
        raise UserError(f"{where}: num_attention_heads = {heads} is not a multiple of num_kv_heads = {groups}")
    ffn = config.get("ffn_hidden_size")
    mlp = _int(config, "ffn_hidden_size", where) if ffn is not None else 4 * width
    return Spec(
        "falcon",
        layers,
        heads,
        width,
        vocab,
        eps,
        "gelu-erf",
        "alibi",
        False,
        None,
        block=block,
        kv_groups=groups,
        mlp_width=mlp,
        alibi_scale=1.0 / math.sqrt(width // heads),
        alibi_rounding="bfloat16",
    )


def _bert_spec(config: dict, layers: int, heads: int, width: int, vocab: int, eps: float, where: str) -> Spec:
    act = config.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise UnsupportedModel(
            f"{where}: BERT hidden_act {act!r} is not supported; expected one of {sorted(ACTIVATIONS)}"
        )
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise UnsupportedModel(
            f"{where}: BERT position_embedding_type {config['position_embedding_type']!r} "
            f"is not supported (only 'absolute')"
        )
    if _flag(config, "is_decoder", False, where) or _flag(config, "add_cross_attention", False, where):
        raise UnsupportedModel(f"{where}: BERT as a decoder (is_decoder / add_cross_attention) is not supported")
    return Spec(
        "bert",
        layers,
        heads,
        width,
        vocab,
        eps,
        ACTIVATIONS[act],
        "learned",
        True,
        _int(config, "max_position_embeddings", where),
        causal=False,
        block="post-ln",
        mlp_width=_int(config, "intermediate_size", where),
        lm_head=False,
    )


def _number(value, what: str, where: str, *, minimum: float = 0.0) -> float:
    """A number > ``minimum`` (booleans refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > minimum:
        raise UserError(f"{where}: {what} must be a number > {minimum:g}, got {value!r}")
    return float(value)


def rope_of(config: dict, where: str = "config.json") -> Rope:
    """The ``Rope`` of a Llama-family config: transformers 5's ``rope_parameters`` or the older
    ``rope_scaling`` (key ``rope_type`` or ``type``) with a top-level ``rope_theta`` (default 10000);
    llama3's original_max_position_embeddings defaults to max_position_embeddings, as transformers'
    standardize_rope_params sets it."""
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if not isinstance(params, dict):
        raise UserError(f"{where}: rope_parameters must be an object, got {params!r}")
    if any(isinstance(v, dict) for v in params.values()):
        raise UnsupportedModel(f"{where}: per-layer-type rope_parameters are not supported")
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise UnsupportedModel(f"{where}: rope type {kind!r} is not supported; expected one of {list(ROPE_TYPES)}")
    partial = params.get("partial_rotary_factor", config.get("partial_rotary_factor"))
    if partial not in (None, 1, 1.0):
        raise UnsupportedModel(f"{where}: partial_rotary_factor = {partial!r} is not supported (only 1)")
    theta = _number(params.get("rope_theta", config.get("rope_theta", 10000.0)), "rope_theta", where)
    if kind == "default":
        return Rope(theta)
    factor = _number(params.get("factor"), f"the {kind} rope factor", where)
    max_positions = _int(config, "max_position_embeddings", where)
    if kind == "linear":
        return Rope(theta, kind, factor)
    if kind == "dynamic":
        return Rope(theta, kind, factor, max_positions=max_positions)
    low = _number(params.get("low_freq_factor"), "llama3 low_freq_factor", where)
    high = _number(params.get("high_freq_factor"), "llama3 high_freq_factor", where)
    if not high > low:
        raise UserError(f"{where}: llama3 high_freq_factor = {high} must exceed low_freq_factor = {low}")
    original = params.get("original_max_position_embeddings", config.get("original_max_position_embeddings"))
    original = (
        max_positions
        if original is None
        else _int({"original_max_position_embeddings": original}, "original_max_position_embeddings", where)
    )
    return Rope(theta, kind, factor, low_freq_factor=low, high_freq_factor=high, original_max_positions=original)


def _windows(family: Family, config: dict, layers: int, where: str) -> tuple | None:
    """Per-layer sliding windows (module docstring), None when no layer has one."""
    if family is MISTRAL:
        window = config.get("sliding_window")
        per_layer = [window] * layers
    elif family is QWEN2:
        window = config.get("sliding_window", 4096) if _flag(config, "use_sliding_window", False, where) else None
        kinds = config.get("layer_types")
        if kinds is None:
            first = config.get("max_window_layers", 28)
            kinds = [
                "sliding_attention" if window is not None and t >= first else "full_attention" for t in range(layers)
            ]
        if (
            not isinstance(kinds, list)
            or len(kinds) != layers
            or any(k not in ("sliding_attention", "full_attention") for k in kinds)
        ):
            raise UnsupportedModel(
                f"{where}: layer_types must list {layers} of 'full_attention' or 'sliding_attention', got {kinds!r}"
            )
        per_layer = [window if k == "sliding_attention" else None for k in kinds]
    else:
        return None
    if all(w is None for w in per_layer):
        return None
    return tuple(None if w is None else _int({"sliding_window": w}, "sliding_window", where) for w in per_layer)


def _llama_spec(
    family: Family, config: dict, layers: int, heads: int, width: int, vocab: int, eps: float, where: str
) -> Spec:
    act = config.get("hidden_act", "silu")
    if act != "silu":
        raise UnsupportedModel(f"{where}: {family.model_type} hidden_act {act!r} is not supported (only 'silu')")
    kv = _int(config, "num_key_value_heads", where) if config.get("num_key_value_heads") is not None else heads
    if heads % kv:
        raise UserError(f"{where}: num_attention_heads = {heads} is not a multiple of num_key_value_heads = {kv}")
    head_dim = _int(config, "head_dim", where) if config.get("head_dim") is not None else width // heads
    if family is QWEN2:
        biases = ("bq", "bk", "bv")
    elif family is MISTRAL:
        biases = ()
    else:
        biases = (("bq", "bk", "bv", "bo") if _flag(config, "attention_bias", False, where) else ()) + (
            ("b1", "bg", "b2") if _flag(config, "mlp_bias", False, where) else ()
        )
    return Spec(
        family.model_type,
        layers,
        heads,
        width,
        vocab,
        eps,
        "silu",
        "rotary",
        False,
        None,
        kv_groups=kv,
        mlp_width=_int(config, "intermediate_size", where),
        norm="rms",
        glu=True,
        head_width=head_dim,
        rope=rope_of(config, where),
        windows=_windows(family, config, layers, where),
        biases=biases,
    )


def layer_norm_names(family: Family, spec: Spec) -> tuple[tuple, tuple]:
    """(LN_1, LN_2) weight names of a block: Falcon's parallel block with one LayerNorm feeds the MLP
    from LN_1; its new architecture names them ln_attn and ln_mlp."""
    if family is FALCON and spec.block == "parallel":
        return family.ln1, family.ln1
    if family is FALCON and spec.block == "parallel-2ln":
        return ("ln_attn.weight", "ln_attn.bias"), ("ln_mlp.weight", "ln_mlp.bias")
    return family.ln1, family.ln2


def split_qkv(family: Family, spec: Spec, weight, bias):
    """A fused QKV projection ((D, out) weight in (in, out) layout and (out,) bias) as
    (3, D, H, d_head) weights and (3, H, d_head) biases for q, k, v (module docstring, ``qkv_layout``);
    grouped keys and values are repeated for the H/G query heads of their group."""
    d, h, k = spec.width, spec.heads, spec.head_dim
    if family.qkv_layout == "blocks":  # output index s * D + h * K + k
        return weight.reshape(d, 3, h, k).transpose(1, 0, 2, 3), bias.reshape(3, h, k)
    g = spec.groups
    per = h // g  # output index (g, per + 2, K)
    w = weight.reshape(d, g, per + 2, k)
    b = bias.reshape(g, per + 2, k)
    q_w, q_b = w[:, :, :per].reshape(d, h, k), b[:, :per].reshape(h, k)
    k_w, k_b = np.repeat(w[:, :, per], per, axis=1), np.repeat(b[:, per], per, axis=0)
    v_w, v_b = np.repeat(w[:, :, per + 1], per, axis=1), np.repeat(b[:, per + 1], per, axis=0)
    return np.stack([q_w, k_w, v_w]), np.stack([q_b, k_b, v_b])
