"""The byte-level ALiBi decoder, in plain JAX: parameters are a dict of arrays, ``forward`` a pure function.

One block t (pre-LayerNorm), for the block input x_t (N x D):

    a_t     = Attn(LN_1(x_t))                    (after the output projection W_O)
    x_{t+1} = x_t + a_t + MLP(LN_2(x_t + a_t)),  MLP(u) = GELU(u W_1 + b_1) W_2 + b_2

and head h of Attn reads with weights softmax_j(c_ij / sqrt(d_head) - m_h (i - j)) over
j <= i (causal), c_ij = q_i . k_j the content logit. This is THEORY.md's Notation with
b + d [i = j] replaced by the measured content logits: with c = 0 a head's kernel is the
ALiBi kernel of slope m_h (what ``posbias.numerics.alibi_kernels`` builds). x_0 is the
byte embedding (no position embedding: ALiBi is the only position signal).

``forward(params, tokens, config, capture=True)`` also returns, per layer, the tensors
the measurements read (THEORY.md "Comparing with measured influence" and lambda_t):
the block inputs x_t, the attention outputs a_t, the attention probabilities and the raw
content logits q_i . k_j. They are part of the forward's outputs, not hooks patched in.
``embedded`` lets a caller differentiate with respect to the input embeddings e_j.

The parameters of all T blocks are stacked (leading axis T) and the blocks run in one
``lax.scan``: compile time does not grow with depth.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from posbias.lm.config import ModelConfig
from posbias.lm.limits import VOCAB
from posbias.measure.quantities import attention_share, capture_dict, residual_norm_kernel
from posbias.numerics.slopes import alibi_slopes

LN_EPS = 1e-5
MATRICES = frozenset({"embed", "wq", "wk", "wv", "wo", "w1", "w2", "unembed"})
"""Parameter names that get weight decay (the matrices; gains and biases do not)."""


def slopes_of(config: ModelConfig) -> np.ndarray:
    """(H,) float64 ALiBi slopes of the model (``posbias.numerics.slopes.alibi_slopes``)."""
    return alibi_slopes(config.heads, config.slopes)


def init_params(config: ModelConfig, key, dtype=jnp.float32) -> dict:
    """Gaussian init (std 0.02; output projections W_O, W_2 scaled by 1/sqrt(2T)), LN gains 1."""
    t, h, d, k, f = config.layers, config.heads, config.width, config.head_dim, config.mlp_ratio * config.width
    keys = jax.random.split(key, 8)
    out_std = 0.02 / np.sqrt(2 * t)

    def normal(i, shape, std):  # std * z in the dtype JAX's standard promotion gives (float64 for out_std)
        z = jax.random.normal(keys[i], shape, jnp.float32)
        return (std * z.astype(jax.dtypes.canonicalize_dtype(np.result_type(std, np.float32)))).astype(dtype)

    blocks = {
        "ln1_g": jnp.ones((t, d), dtype),
        "ln1_b": jnp.zeros((t, d), dtype),
        "wq": normal(0, (t, d, h, k), 0.02),
        "wk": normal(1, (t, d, h, k), 0.02),
        "wv": normal(2, (t, d, h, k), 0.02),
        "wo": normal(3, (t, h, k, d), out_std),
        "ln2_g": jnp.ones((t, d), dtype),
        "ln2_b": jnp.zeros((t, d), dtype),
        "w1": normal(4, (t, d, f), 0.02),
        "b1": jnp.zeros((t, f), dtype),
        "w2": normal(5, (t, f, d), out_std),
        "b2": jnp.zeros((t, d), dtype),
    }
    return {
        "embed": normal(6, (VOCAB, d), 0.02),
        "blocks": blocks,
        "lnf_g": jnp.ones((d,), dtype),
        "lnf_b": jnp.zeros((d,), dtype),
        "unembed": normal(7, (d, VOCAB), 0.02),
    }


def param_shapes(config: ModelConfig) -> dict:
    """name -> shape of every parameter (flat names as in checkpoints), without allocating."""
    shapes = jax.eval_shape(lambda: init_params(config, jax.random.PRNGKey(0)))
    return {name: tuple(leaf.shape) for name, leaf in flatten(shapes).items()}


def flatten(params: dict) -> dict:
    """{"blocks/wq": array, "embed": array, ...}: the checkpoint's flat names."""
    out = {}
    for name, value in params.items():
        if isinstance(value, dict):
            out.update({f"{name}/{k}": v for k, v in flatten(value).items()})
        else:
            out[name] = value
    return out


def unflatten(flat: dict) -> dict:
    out: dict = {}
    for name, value in flat.items():
        node = out
        *path, leaf = name.split("/")
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def layer_norm(x, g, b):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + LN_EPS) * g + b


def alibi_bias(slopes, num_tokens: int, dtype):
    """(H, N, N): -m_h (i - j) on j <= i, -inf above the diagonal (masked: exactly 0 after softmax)."""
    idx = jnp.arange(num_tokens)
    distance = (idx[:, None] - idx[None, :]).astype(dtype)
    bias = -jnp.asarray(slopes, dtype)[:, None, None] * distance[None]
    return jnp.where(distance[None] >= 0, bias, -jnp.inf)


def _block(x, p, bias, head_dim):
    h = layer_norm(x, p["ln1_g"], p["ln1_b"])
    q = jnp.einsum("nd,dhk->hnk", h, p["wq"])
    k = jnp.einsum("nd,dhk->hnk", h, p["wk"])
    v = jnp.einsum("nd,dhk->hnk", h, p["wv"])
    content = jnp.einsum("hik,hjk->hij", q, k)
    probs = jax.nn.softmax(content / np.sqrt(head_dim).astype(x.dtype) + bias, axis=-1)
    a = jnp.einsum("hnk,hkd->nd", jnp.einsum("hij,hjk->hik", probs, v), p["wo"])
    y = x + a
    u = layer_norm(y, p["ln2_g"], p["ln2_b"])
    y = y + jax.nn.gelu(u @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return y, (a, probs, content, v)


def forward(params: dict, tokens, config: ModelConfig, *, capture: bool = False, embedded=None):
    """Logits (N, V) for one sequence of N <= context bytes; with ``capture`` also a dict of
    per-layer tensors: ``x`` (T, N, D) block inputs, ``a`` (T, N, D) attention outputs after
    W_O, ``probs`` (T, H, N, N) attention weights, ``content`` (T, H, N, N) raw q_i . k_j
    (ALiBi not included, not divided by sqrt(d_head); masked entries are meaningless),
    ``value_norms`` (T, H, N) ||W_O^h v_hj|| (Kobayashi et al. 2020), ``kernels_norm`` (T, N, N) the
    residual-norm kernels with the residual x (``posbias.measure.quantities.residual_norm_kernel``), ``lambda_self``
    (T, N) the MLP-as-self ratios (``posbias.measure.quantities.attention_share``).
    ``embedded`` (N, D) replaces the embedding lookup (for gradients with respect to e_j)."""
    x0 = params["embed"][tokens] if embedded is None else embedded
    n = x0.shape[0]
    bias = alibi_bias(slopes_of(config), n, x0.dtype)

    def step(x, p):
        y, (a, probs, content, v) = _block(x, p, bias, config.head_dim)
        if not capture:
            return y, None
        values = jnp.einsum("hjk,hkd->hjd", v, p["wo"])  # W_O^h v_hj
        return y, (
            x,
            a,
            probs,
            content,
            jnp.linalg.norm(values, axis=-1),
            residual_norm_kernel(probs, values, x),
            attention_share(x, a, y - (x + a)),  # the MLP's output: what the block adds beyond x + a
        )

    x, ys = jax.lax.scan(step, x0, params["blocks"])
    logits = layer_norm(x, params["lnf_g"], params["lnf_b"]) @ params["unembed"]
    if not capture:
        return logits
    return logits, capture_dict(ys)


def loss_nats(params: dict, batch, config: ModelConfig):
    """Mean next-byte cross-entropy (nats) of a (B, L + 1) batch: predict batch[:, 1:] from batch[:, :-1]."""
    inputs, targets = batch[:, :-1], batch[:, 1:]
    logits = jax.vmap(lambda s: forward(params, s, config))(inputs)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))
