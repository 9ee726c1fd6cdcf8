"""The residual-norm kernels (posbias.measure.quantities.residual_norm_kernel; validate's panel (k)).

Independent routes: the (N, N, D) contribution vectors z_ij formed explicitly in NumPy and their norms
taken directly (the module never forms them: it sums Gram matrices); on the committed Hugging Face fixtures,
z_ij built from transformers' own attention weights and hidden states (expected.npz) with the values
recomputed in NumPy from the weights, checked first for completeness against transformers' attention output
(sum_j z_ij + b_O = x_i + a_i: the decomposition is the forward's) and then against the kernels the JAX
forward captures; the trained model's kernels the same way from its own parameters.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from posbias.measure.quantities import residual_norm_kernel

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf"


def _explicit(probs, values, residual, fold=lambda z: z):
    """K_ij = ||fold(z_ij)|| / sum_j' ||fold(z_ij')|| with z_ij = [i = j] r_i + sum_h A_hij u_hj, formed."""
    n = probs.shape[-1]
    z = np.einsum("hij,hjd->ijd", probs, values) + np.eye(n)[:, :, None] * residual[:, None, :]
    norms = np.linalg.norm(fold(z), axis=-1)
    return norms / norms.sum(axis=-1, keepdims=True), z


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_gram_route_equals_the_explicit_vectors(seed, causal):
    import jax

    rng = np.random.default_rng(seed)
    h, n, d = int(rng.integers(1, 5)), int(rng.integers(1, 12)), int(rng.integers(2, 9))
    logits = rng.normal(size=(h, n, n)) + (np.where(np.tril(np.ones((n, n))) > 0, 0, -np.inf) if causal else 0)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    values, residual = rng.normal(size=(h, n, d)), rng.normal(size=(n, d))
    with jax.enable_x64(True):
        got = np.asarray(residual_norm_kernel(probs, values, residual))
    want, _ = _explicit(probs, values, residual)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    assert np.abs(got.sum(-1) - 1).max() < 1e-12
    if causal:
        assert np.all(got[np.triu_indices(n, 1)] == 0)


def _norm(x, g, b, spec):
    if spec.norm == "rms":
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + spec.eps) * g
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + spec.eps) * g + b


@pytest.mark.parametrize("family", ["bert", "bloom", "falcon", "gpt2", "mpt", "llama", "qwen2"])
def test_fixture_kernels_equal_the_explicit_decomposition_of_transformers_tensors(family):
    import jax

    from posbias.hf import checkpoint, forward, weights

    folder = FIXTURES / family
    ck, expected = checkpoint.load(folder), np.load(folder / "expected.npz")
    spec, p = ck.spec, weights.params(ck, np.float64)
    with jax.enable_x64(True):
        _, cap = jax.jit(lambda p, ids: forward.forward(p, ids, spec, capture=True))(
            p, expected["input_ids"].astype(np.int32)
        )
    captured = np.asarray(cap["kernels_norm"])
    for t in range(spec.layers):
        b = {k: np.asarray(v[t], np.float64) for k, v in p["blocks"].items()}
        x = expected["hidden_states"][t].astype(np.float64)
        probs = expected["attentions"][t].astype(np.float64)
        h = x if spec.block == "post-ln" else _norm(x, b["ln1_g"], b.get("ln1_b"), spec)
        v = np.einsum("nd,dhk->hnk", h, b["wv"]) + b["bv"][:, None, :]
        if spec.clip_qkv is not None:  # MPT clips q, k and v
            v = np.clip(v, -spec.clip_qkv, spec.clip_qkv)
        u = np.einsum("hjk,hkd->hjd", v, b["wo"])
        residual = h if spec.residual_post_ln else x
        want, z = _explicit(probs, u, residual)
        if spec.block == "post-ln":  # BERT: y = LN(x + a); the gain and the centring folded in
            want, _ = _explicit(probs, u, residual, lambda z, g=b["ln1_g"]: (z - z.mean(-1, keepdims=True)) * g)
        # completeness: the contributions and the output bias add up to transformers' x_i + a_i
        np.testing.assert_allclose(
            z.sum(axis=1) + b["bo"], residual + expected["attention_outputs"][t], rtol=1e-5, atol=1e-5
        )
        np.testing.assert_allclose(captured[t], want, rtol=1e-5, atol=1e-5, err_msg=f"{family} layer {t}")


def test_trained_model_kernels_equal_the_explicit_decomposition():
    import jax

    from posbias.lm.config import ModelConfig
    from posbias.lm.model import forward, init_params, layer_norm

    config = ModelConfig(layers=2, heads=2, width=16, context=16)
    with jax.enable_x64(True):
        params = init_params(config, jax.random.PRNGKey(3), dtype=np.float64)
        tokens = np.arange(10) * 7 % 256
        _, cap = jax.jit(lambda p, ids: forward(p, ids, config, capture=True))(params, tokens)
        for t in range(config.layers):
            b = {k: np.asarray(v[t]) for k, v in params["blocks"].items()}
            x = np.asarray(cap["x"][t])
            h = np.asarray(layer_norm(x, b["ln1_g"], b["ln1_b"]))
            u = np.einsum("hjk,hkd->hjd", np.einsum("nd,dhk->hnk", h, b["wv"]), b["wo"])
            want, z = _explicit(np.asarray(cap["probs"][t]), u, x)
            np.testing.assert_allclose(z.sum(axis=1), x + np.asarray(cap["a"][t]), rtol=0, atol=1e-12)
            np.testing.assert_allclose(np.asarray(cap["kernels_norm"][t]), want, rtol=0, atol=1e-12)
