"""The JAX forward of a Hugging Face checkpoint, in the canonical block of ``posbias.hf.families``.

``forward(params, ids, spec)`` is a pure function of the arrays ``posbias.hf.weights.params``
reads (one layout for all families; the blocks run in one ``lax.scan``, as in
``posbias.lm.model``), so ``jax.jit`` and ``jax.grad`` apply to it unchanged. It returns
the logits (N, V), or for an encoder without a language-model head (``Spec.lm_head``
false: BERT) the final hidden states (N, D).

With ``capture`` it also returns what the measurements read (THEORY.md Notation, lambda_t
and "Comparing with measured influence"):

* ``x`` (T, N, D): block inputs x_t (x_0 is the embedding after BLOOM's embedding LayerNorm,
  token plus position embedding for GPT-2, their sum with token type 0 after BERT's
  embedding LayerNorm);
* ``a`` (T, N, D): attention sub-layer outputs after the output projection (bias included);
* ``probs`` (T, H, N, N): per-head attention probabilities;
* ``content`` (T, H, N, N): raw content logits q_hi . k_hj (not scaled, no positional term;
  entries above the diagonal are meaningless). Rotary models (the Llama family): q and k are
  rotated first, so ``content`` is the full pre-softmax logit q_rot,i . k_rot,j before the
  1/sqrt(d_head) scaling: the rotation is not separable from it, as learned absolute
  positions are not (the positional term below is then the mask alone, the slopes 0);
* ``value_norms`` (T, H, N): ||W_O^h v_hj||, the norm of head h's value at key j after its slice of
  the output projection (no bias; Kobayashi et al. 2020);
* ``kernels_norm`` (T, N, N): the residual-norm kernels (``posbias.measure.quantities.residual_norm_kernel``):
  token j's share of the attention block's output at i, ||[i = j] r_i + sum_h A_hij W_O^h v_hj||, rows
  normalised, r_i the residual the attention output is added to (x_i; h_i for BLOOM's residual after the
  norm); a post-LN block (BERT) folds its LayerNorm's gain and centring into both;
* ``lambda_self`` (T, N): the MLP-as-self ratio ||a_i|| / (||x_i|| + ||a_i|| + ||m_i||)
  (``posbias.measure.quantities.attention_share``), m the MLP's output and x, a the residual and the
  attention output of the stream m is added to; where a norm sits between that stream and the sum x + a
  (a post-LN block's first LayerNorm, BLOOM's residual after the norm), x and a are taken through its
  linear map (``_norm_parts``);
* ``scale`` (T,): the factor s_t the softmax applies to ``content``;
* ``position`` (H, N, N): the ALiBi term -m_h (i - j) (Falcon: its bfloat16 form, see
  ``posbias.hf.families``; zeros for learned positions; -inf above the diagonal under a
  causal mask), so that probs = softmax_j(scale_t * content + position); under a sliding
  window (``Spec.windows``, ``windows``) layer t also masks the keys j <= i - W_t;
* ``hidden``: (N, D) the final hidden state after the last LayerNorm (BERT: the last
  block's output; transformers' last ``hidden_states`` entry).

Rotary tables are formed in float64 from ``inv_freq`` and cast to the compute dtype;
transformers forms the frequencies and angles in float32, so at position i its angles
differ by about i * 6e-8 (relative), below the fixtures' 1e-5 at N = 16 and 3e-6 at N = 64
for the largest frequency 1 (the float64 angles are the exact ones).
"""

from __future__ import annotations

import numpy as np

from posbias.errors import UserError
from posbias.hf.families import Spec
from posbias.measure.quantities import attention_share, capture_dict, residual_norm_kernel
from posbias.numerics.slopes import alibi_slopes

BLOOM_GELU = 0.79788456


def slopes(spec: Spec) -> np.ndarray:
    """(H,) float64 effective ALiBi slopes, the m_h of -m_h (i - j) as the softmax sees it: the
    transformers construction for BLOOM (``alibi_slopes(H, "hf")``), MPT's for MPT, for Falcon
    BLOOM's rounded to bfloat16 times ``spec.alibi_scale`` (1/sqrt(d_head)); zeros for learned
    absolute positions."""
    if spec.positions != "alibi":
        return np.zeros(spec.heads)
    if spec.slope_convention == "mpt":
        return mpt_slopes(spec.heads, spec.alibi_bias_max)
    return _base_slopes(spec) * spec.alibi_scale


def _base_slopes(spec: Spec) -> np.ndarray:
    base = alibi_slopes(spec.heads, "hf")
    if spec.alibi_rounding == "bfloat16":
        import ml_dtypes

        base = base.astype(ml_dtypes.bfloat16).astype(np.float64)
    return base


def mpt_slopes(heads: int, bias_max: float = 8.0) -> np.ndarray:
    """MPT's slopes: with P the smallest power of two >= H, 2^(-h B / P), h = 1..P (B = alibi_bias_max),
    then for H < P the even-indexed ones (h = 2, 4, ..) followed by the odd (h = 1, 3, ..), the first H kept.
    For H a power of two and B = 8 this is the paper's 2^(-8h/H)."""
    p = 1 << (heads - 1).bit_length()
    full = 2.0 ** (-np.arange(1, p + 1, dtype=np.float64) * (bias_max / p))
    if p != heads:
        full = np.concatenate([full[1::2], full[::2]])[:heads]
    return full


def _cast(tree, dtype):
    """Every array of ``tree`` in ``dtype`` (no copy where it already is)."""
    import jax

    return jax.tree_util.tree_map(lambda v: v if v.dtype == dtype else v.astype(dtype), tree)


def _layer_norm(x, g, b, eps):
    import jax.numpy as jnp

    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * g + b


def _rms_norm(x, g, eps):
    import jax.numpy as jnp

    return x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * g


def _norm_parts(parts, p: dict, name: str, spec: Spec):
    """Each part z of a sum x = sum(parts) (each (N, D)) through the linear map that the norm ``name`` applies at
    x: RMSNorm z g / sqrt(mean(x^2) + eps), LayerNorm (z - mean(z)) g / sqrt(var(x) + eps); the norm's bias,
    which belongs to no part, left out. Their sum plus the bias is the norm of x."""
    import jax.numpy as jnp

    total = sum(parts)
    g = p[name + "_g"]
    if spec.norm == "rms":
        scale = jnp.sqrt(jnp.mean(total * total, axis=-1, keepdims=True) + spec.eps)
        return tuple(z * g / scale for z in parts)
    centred = total - total.mean(axis=-1, keepdims=True)
    scale = jnp.sqrt(jnp.mean(centred**2, axis=-1, keepdims=True) + spec.eps)
    return tuple((z - z.mean(axis=-1, keepdims=True)) * g / scale for z in parts)


def _norm(x, p: dict, name: str, spec: Spec):
    """LayerNorm with gain and bias ``name_g``, ``name_b``, or RMSNorm with gain ``name_g`` (``spec.norm``)."""
    if spec.norm == "rms":
        return _rms_norm(x, p[name + "_g"], spec.eps)
    return _layer_norm(x, p[name + "_g"], p[name + "_b"], spec.eps)


def inv_freq(spec: Spec, num_tokens: int) -> np.ndarray:
    """(K/2,) float64 rotary inverse frequencies w_c of ``spec.rope`` for a sequence of N tokens
    (``posbias.hf.families.Rope`` states the four types; transformers forms them in float32, which
    differs by about 1e-7 relative)."""
    rope, dim = spec.rope, spec.head_dim
    exponents = np.arange(0, dim, 2, dtype=np.float64) / dim
    theta = rope.theta
    if rope.kind == "dynamic":
        length = max(num_tokens, rope.max_positions)
        theta = theta * (rope.factor * length / rope.max_positions - (rope.factor - 1)) ** (dim / (dim - 2))
    w = 1.0 / theta**exponents
    if rope.kind == "linear":
        return w / rope.factor
    if rope.kind == "llama3":
        wavelength = 2 * np.pi / w
        low, high = rope.low_freq_factor, rope.high_freq_factor
        longest, shortest = rope.original_max_positions / low, rope.original_max_positions / high
        scaled = np.where(wavelength > longest, w / rope.factor, w)
        smooth = (rope.original_max_positions / wavelength - low) / (high - low)
        medium = (wavelength >= shortest) & (wavelength <= longest)
        return np.where(medium, (1 - smooth) * scaled / rope.factor + smooth * scaled, scaled)
    return w


def rotary_tables(spec: Spec, num_tokens: int):
    """(cos, sin), each (N, K) float64: cos(i w_c) and sin(i w_c) at position i for channels c and
    c + K/2 (transformers' layout: the frequencies concatenated twice)."""
    w = inv_freq(spec, num_tokens)
    angles = np.arange(num_tokens, dtype=np.float64)[:, None] * np.concatenate([w, w])[None, :]
    return np.cos(angles), np.sin(angles)


def rotate(z, cos, sin):
    """z (H, N, K) rotated by rotate-half: z cos + [-z_{K/2:}, z_{:K/2}] sin."""
    import jax.numpy as jnp

    half = z.shape[-1] // 2
    return z * cos + jnp.concatenate([-z[..., half:], z[..., :half]], axis=-1) * sin


def windows(spec: Spec, num_tokens: int) -> np.ndarray:
    """(T,) int32: each layer's sliding window W (key j read by query i iff i - W < j <= i); N + 1
    (no restriction) where ``spec.windows`` has none."""
    full = num_tokens + 1
    per = spec.windows if spec.windows is not None else (None,) * spec.layers
    return np.asarray([full if w is None else min(w, full) for w in per], np.int32)


def _activation(u, kind: str):
    import jax
    import jax.numpy as jnp

    if kind == "silu":
        return jax.nn.silu(u)
    if kind == "gelu-bloom":
        return u * 0.5 * (1.0 + jnp.tanh(BLOOM_GELU * u * (1.0 + 0.044715 * u * u)))
    return jax.nn.gelu(u, approximate=(kind == "gelu-tanh"))


def bfloat16_alibi_row(spec: Spec, num_tokens: int) -> np.ndarray:
    """(H, N) float64: Falcon's ALiBi term alibi_scale bf16(bf16(m_h) bf16(j)) for keys j < N, the
    same for every query row (``position_term`` broadcasts it). Formed in NumPy with ml_dtypes, each
    product rounded to bfloat16 (8 significant bits: j itself rounds above 256); under jit XLA may
    keep a bfloat16 product in float32 when it is cast up at once."""
    import ml_dtypes

    m = _base_slopes(spec).astype(ml_dtypes.bfloat16)
    term = (m[:, None] * np.arange(num_tokens).astype(ml_dtypes.bfloat16)[None, :]).astype(np.float64)
    return term * spec.alibi_scale


def position_term(spec: Spec, num_tokens: int, dtype):
    """(H, N, N): -m_h (i - j) on j <= i (0 for learned positions), -inf above the diagonal under a
    causal mask. Falcon: alibi_scale bf16(bf16(m_h) bf16(j)) (its bfloat16 term, which differs from
    -m_h (i - j) by a row constant up to that rounding; ``posbias.hf.families``)."""
    import jax.numpy as jnp

    idx = jnp.arange(num_tokens)
    distance = (idx[:, None] - idx[None, :]).astype(dtype)
    if spec.positions == "alibi" and spec.alibi_rounding == "bfloat16":
        bias = jnp.broadcast_to(
            jnp.asarray(bfloat16_alibi_row(spec, num_tokens), dtype)[:, None, :], (spec.heads, num_tokens, num_tokens)
        )
    else:
        bias = -jnp.asarray(slopes(spec), dtype)[:, None, None] * distance[None]
    if not spec.causal:
        return bias
    return jnp.where(distance[None] >= 0, bias, -jnp.inf)


def softmax_scales(spec: Spec) -> np.ndarray:
    """(T,) the factor s_t the softmax applies to the raw q.k of layer t: MPT's softmax_scale, else
    1/sqrt(d_head) (1 without GPT-2's scale_attn_weights), divided by t + 1 under GPT-2's
    scale_attn_by_inverse_layer_idx."""
    if spec.softmax_scale is not None:
        return np.full(spec.layers, spec.softmax_scale)
    base = 1.0 / np.sqrt(spec.head_dim) if spec.scale_attn else 1.0
    t = np.arange(spec.layers, dtype=np.float64)
    return base / (t + 1.0) if spec.inverse_layer_scale else np.full(spec.layers, base)


def forward(  # noqa: C901 (embedding, blocks, capture; split the capture; issue 20 §4)
    params: dict,
    ids,
    spec: Spec,
    *,
    capture: bool = False,
    embedded=None,
    remat: bool = False,
    last_only: bool = False,
):
    """Logits (N, V) of one sequence of N token ids; with ``capture`` also the dict of the module
    docstring. ``embedded`` (N, D) replaces the token-embedding lookup e_j (for gradients with
    respect to the input embeddings; GPT-2's position embeddings are still added). ``remat``
    wraps each block in ``jax.checkpoint``: a gradient then keeps only the T block inputs and
    recomputes one block's activations at a time (memory per layer instead of per stack).
    ``last_only`` returns the last position's row only, (1, V) (or (1, D) for an encoder): the
    unembedding of the other N - 1 positions (N V values) is never formed."""
    import jax
    import jax.numpy as jnp

    e = params["embed"][ids] if embedded is None else embedded
    n, dtype = e.shape[0], e.dtype
    # Weights kept narrower than the compute dtype (bfloat16 on the device, ``device_params``) are
    # cast where they are used, each block's inside the layer step: the values standard promotion
    # gives, written out so that nothing depends on implicit promotion.
    params = {k: (v if k == "blocks" else _cast(v, dtype)) for k, v in params.items()}
    if spec.context is not None and n > spec.context:
        raise UserError(f"N = {n} tokens is longer than the model's {spec.context} learned positions")
    x0 = e
    if "positions" in params:
        x0 = x0 + params["positions"][:n]
    if "embn_g" in params:
        x0 = _layer_norm(x0, params["embn_g"], params["embn_b"], spec.eps)
    pos = position_term(spec, n, dtype)
    scales = jnp.asarray(softmax_scales(spec), dtype)
    if spec.rope is not None:
        cos, sin = (jnp.asarray(table, dtype) for table in rotary_tables(spec, n))
    distance = jnp.arange(n, dtype=jnp.int32)[:, None] - jnp.arange(n, dtype=jnp.int32)[None, :]  # as windows()

    repeat = spec.heads // spec.groups

    def grouped(h, w, b):
        """Keys or values (H, N, d_head) of weights stored repeated per query head (``posbias.hf.weights``): each of
        the G groups projected once (head i is group i // (H/G)), then repeated; the same numbers as projecting
        all H heads, with G/H of the products."""
        if repeat == 1:
            return jnp.einsum("nd,dhk->hnk", h, w) + b[:, None, :]
        return jnp.repeat(jnp.einsum("nd,dgk->gnk", h, w[:, ::repeat]) + b[::repeat, None, :], repeat, axis=0)

    def step(x, inputs):
        p, s, window = inputs
        p = _cast(p, dtype)
        h = x if spec.block == "post-ln" else _norm(x, p, "ln1", spec)
        q = jnp.einsum("nd,dhk->hnk", h, p["wq"]) + p["bq"][:, None, :]
        k, v = (grouped(h, p["w" + name], p["b" + name]) for name in "kv")
        if spec.clip_qkv is not None:
            q, k, v = (jnp.clip(z, -spec.clip_qkv, spec.clip_qkv) for z in (q, k, v))
        if spec.rope is not None:
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        content = jnp.einsum("hik,hjk->hij", q, k)
        logits = s * content + pos
        if spec.windows is not None:
            logits = jnp.where(distance < window, logits, -jnp.inf)
        probs = jax.nn.softmax(logits, axis=-1)
        a = jnp.einsum("hnk,hkd->nd", jnp.einsum("hij,hjk->hik", probs, v), p["wo"]) + p["bo"]

        def mlp(u):
            up = u @ p["w1"] + p["b1"]
            if spec.glu:
                return (_activation(u @ p["wg"] + p["bg"], spec.activation) * up) @ p["w2"] + p["b2"]
            return _activation(up, spec.activation) @ p["w2"] + p["b2"]

        # m: the MLP's output; parts: the residual and the attention output in the frame of the stream m is
        # added to (a norm between them folded in: ``_norm_parts``), for the MLP-as-self ratio
        if spec.block == "post-ln":
            y = _norm(x + a, p, "ln1", spec)
            m = mlp(y)
            out = _norm(y + m, p, "ln2", spec)
            parts = (x, a, "ln1")
        elif spec.block.startswith("parallel"):
            m = mlp(_norm(x, p, "ln2", spec))
            out = x + a + m
            parts = (x, a, None)
        else:
            y = (h if spec.residual_post_ln else x) + a
            u = _norm(y, p, "ln2", spec)
            m = mlp(u)
            out = (u if spec.residual_post_ln else y) + m
            parts = (h, a, "ln2") if spec.residual_post_ln else (x, a, None)
        if not capture:
            return out, None
        residual, attention, norm = parts
        if norm is not None:
            residual, attention = _norm_parts((residual, attention), p, norm, spec)
        own = attention_share(residual, attention, m)
        u = jnp.einsum("hjk,hkd->hjd", v, p["wo"])  # W_O^h v_hj, (H, N, D)
        value_norms = jnp.linalg.norm(u, axis=-1)  # (H, N)
        if spec.block == "post-ln":  # y = LN(x + a): the norm's gain times its centring, folded in

            def fold(z):
                return (z if spec.norm == "rms" else z - z.mean(axis=-1, keepdims=True)) * p["ln1_g"]

            kernel = residual_norm_kernel(probs, fold(u), fold(x))
        else:  # pre-norm and parallel blocks: a is added to x (to h with the residual after the norm)
            kernel = residual_norm_kernel(probs, u, h if spec.residual_post_ln else x)
        return out, (x, a, probs, content, value_norms, kernel, own)

    inputs = (params["blocks"], scales, jnp.asarray(windows(spec, n)))
    x, ys = jax.lax.scan(jax.checkpoint(step) if remat else step, x0, inputs)
    hidden = _norm(x, params, "lnf", spec) if "lnf_g" in params else x
    out = hidden[-1:] if last_only else hidden
    if not spec.lm_head:
        logits = out
    else:
        logits = out @ (params["unembed"] if "unembed" in params else params["embed"].T)
    if not capture:
        return logits
    return logits, {
        **capture_dict(ys),
        "scale": scales,
        "position": pos,
        "hidden": hidden,
    }
