"""Scale for Hugging Face checkpoints: weights read layer by layer, the memory model, the measurement's fit.

Each claim against an independent route: the canonical layout against index formulas written
here from the safetensors tensors; the weight reader's peak against tracemalloc; the memory
model (posbias.hf.memory) against XLA's own ``memory_analysis()`` of the compiled capture and
gradient; rematerialisation against the plain gradient's XLA figure; bfloat16 weights kept on
the device against weights cast up front; content_fit against numpy.linalg.lstsq; an encoder's
influence against its dense Jacobian by forward-mode differentiation.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import tracemalloc
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posbias.hf import checkpoint, weights
from posbias.hf.forward import forward, softmax_scales
from posbias.hf.measure import capture_fn, device_params, frobenius_fn, influence_fn, measure
from posbias.hf.memory import estimate, params_bytes
from posbias.measure.quantities import content_fit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
FAMILIES = ("bloom", "gpt2", "mpt")


def _stored(folder: Path) -> dict:
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), framework="numpy") as f:
        return {k.removeprefix("transformer."): f.get_tensor(k) for k in f.keys()}


# Per family: (layer prefix, fused QKV weight and bias, output index of (s, h, k), whether stored
# (out, in), attention output, MLP in, MLP out, LN1, LN2) -- written from the families' source
# conventions, not from posbias.hf.families.
LAYOUT = {
    "bloom": (
        "h.{t}.",
        "self_attention.query_key_value",
        lambda s, h, k, d, kk: h * 3 * kk + s * kk + k,
        True,
        "self_attention.dense",
        "mlp.dense_h_to_4h",
        "mlp.dense_4h_to_h",
        "input_layernorm",
        "post_attention_layernorm",
    ),
    "gpt2": (
        "h.{t}.",
        "attn.c_attn",
        lambda s, h, k, d, kk: s * d + h * kk + k,
        False,
        "attn.c_proj",
        "mlp.c_fc",
        "mlp.c_proj",
        "ln_1",
        "ln_2",
    ),
    "mpt": (
        "blocks.{t}.",
        "attn.Wqkv",
        lambda s, h, k, d, kk: s * d + h * kk + k,
        True,
        "attn.out_proj",
        "ffn.up_proj",
        "ffn.down_proj",
        "norm_1",
        "norm_2",
    ),
}


def _reference_layer(family: str, t: int) -> dict:
    """Layer t in the canonical layout, element by element from the stored tensors."""
    folder = FIXTURES / family
    stored = _stored(folder)
    spec = checkpoint.load(folder).spec
    pre, qkv, index, out_in, attn_out, mlp_in, mlp_out, ln1, ln2 = LAYOUT[family]
    pre = pre.format(t=t)
    d, heads, kk, f = spec.width, spec.heads, spec.head_dim, 4 * spec.width

    def tensor(name, shape):
        return stored[pre + name] if pre + name in stored else np.zeros(shape, np.float32)

    def as_in_out(w):  # element (i, o) of the linear map
        return w.T if out_in else w

    ref = {}
    w_qkv, b_qkv = as_in_out(tensor(qkv + ".weight", None)), tensor(qkv + ".bias", (3 * d,))
    for s, name in enumerate("qkv"):
        ref["w" + name] = np.zeros((d, heads, kk), np.float32)
        ref["b" + name] = np.zeros((heads, kk), np.float32)
        for h in range(heads):
            for k in range(kk):
                ref["w" + name][:, h, k] = w_qkv[:, index(s, h, k, d, kk)]
                ref["b" + name][h, k] = b_qkv[index(s, h, k, d, kk)]
    w_o = as_in_out(tensor(attn_out + ".weight", None))
    ref["wo"] = np.stack([np.stack([w_o[h * kk + k] for k in range(kk)]) for h in range(heads)])
    ref["bo"] = tensor(attn_out + ".bias", (d,))
    ref["w1"], ref["b1"] = as_in_out(tensor(mlp_in + ".weight", None)), tensor(mlp_in + ".bias", (f,))
    ref["w2"], ref["b2"] = as_in_out(tensor(mlp_out + ".weight", None)), tensor(mlp_out + ".bias", (d,))
    for key, name in (("ln1", ln1), ("ln2", ln2)):
        ref[key + "_g"], ref[key + "_b"] = tensor(name + ".weight", (d,)), tensor(name + ".bias", (d,))
    return ref


@pytest.mark.parametrize("family", FAMILIES)
def test_params_layout_equals_index_formulas_bit_for_bit(family):
    ck = checkpoint.load(FIXTURES / family)
    for dtype in (np.float32, None):  # the fixtures are stored in float32: both keep it
        p = weights.params(ck, dtype)
        assert sorted(p["blocks"]) == sorted(_reference_layer(family, 0))
        for t in range(ck.spec.layers):
            for name, ref in _reference_layer(family, t).items():
                got = p["blocks"][name][t]
                assert got.dtype == np.float32 and got.shape == ref.shape, (name, got.dtype, got.shape)
                assert np.array_equal(got, ref), (family, t, name)
        assert np.array_equal(p["embed"], _stored(FIXTURES / family)[ck.family.embed])


@pytest.mark.parametrize("family", FAMILIES)
def test_params_peak_is_about_one_model_copy(family):
    """tracemalloc sees NumPy's allocations: the reader's peak stays below 1.5 copies (stacking a list of
    per-layer dicts, as before, holds two)."""
    ck = checkpoint.load(FIXTURES / family)
    weights.params(ck)  # safetensors' one-time setup outside the trace
    tracemalloc.start()
    try:
        p = weights.params(ck)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    total = sum(v.nbytes for v in jax.tree_util.tree_leaves(p))
    assert total <= peak < 1.5 * total, (peak, total)
    assert params_bytes(ck.spec, 4, tied=True) == total  # the memory model's (a), tensor by tensor


def _bfloat16_copy(family: str, folder: Path) -> Path:
    import ml_dtypes
    from safetensors import safe_open
    from safetensors.numpy import save_file

    with safe_open(str(FIXTURES / family / "model.safetensors"), framework="numpy") as f:
        save_file({k: f.get_tensor(k).astype(ml_dtypes.bfloat16) for k in f.keys()}, str(folder / "model.safetensors"))
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(FIXTURES / family / name, folder / name)
    return folder


def test_bfloat16_weights_kept_narrow_compute_as_cast_up_front(tmp_path):
    """dtype=None keeps bfloat16 (MPT's absent biases too); kept narrow on the device, the float64 capture
    and gradient equal those of the same weights cast to float64 before (the cast is exact)."""
    import ml_dtypes

    ck = checkpoint.load(_bfloat16_copy("mpt", tmp_path))
    kept = weights.params(ck, None)
    wide = weights.params(ck, np.float64)
    for a, b in zip(jax.tree_util.tree_leaves(kept), jax.tree_util.tree_leaves(wide)):
        assert a.dtype == ml_dtypes.bfloat16 and np.array_equal(a.astype(np.float64), b)
    assert np.all(kept["blocks"]["bq"] == 0)
    ids = np.load(FIXTURES / "mpt" / "expected.npz")["input_ids"][:7].astype(np.int32)
    seqs = np.stack([ids, ids[::-1]])
    with jax.enable_x64(True):
        narrow = device_params(kept, np.float64, keep_narrow=True)
        assert narrow["blocks"]["w1"].dtype == jnp.bfloat16
        assert device_params(kept, np.float64, keep_narrow=False)["blocks"]["w1"].dtype == jnp.float64
        assert device_params(wide, np.float32)["blocks"]["w1"].dtype == jnp.float32
        capture, grad = capture_fn(ck.spec, np.float64), influence_fn(ck.spec, np.float64)
        wide_params = device_params(wide, np.float64)
        ref = jax.tree_util.tree_leaves((capture(wide_params, seqs), grad(wide_params, seqs)["grad"]))
        got = jax.tree_util.tree_leaves((capture(narrow, seqs), grad(narrow, seqs)["grad"]))
    assert len(got) == len(ref) == 10  # lambda means and squares, probabilities, content, 5 further sums, grad
    for a, b in zip(got, ref):
        assert a.dtype == np.float64
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-15)


def test_stacks_aligned_and_used_in_place_on_the_cpu():
    """posbias.hf.weights.params allocates its stacks 64-byte aligned, and device_params uses a stack of the
    compute dtype in place on the CPU (the same data pointer: no second copy of the weights); every array's
    values are those given, and one cast (float32 -> float64) is a new array."""
    ck = checkpoint.load(FIXTURES / "llama")
    params = weights.params(ck, np.float32)
    assert all(v.ctypes.data % weights.ALIGNMENT == 0 for v in params["blocks"].values())
    placed = device_params(params, np.float32)
    for name, value in params["blocks"].items():
        assert placed["blocks"][name].unsafe_buffer_pointer() == value.ctypes.data, name
        np.testing.assert_array_equal(np.asarray(placed["blocks"][name]), value)
    np.testing.assert_array_equal(np.asarray(placed["embed"]), params["embed"])
    with jax.enable_x64(True):
        wide = device_params(params, np.float64)["blocks"]["wq"]
        assert wide.dtype == np.float64 and wide.unsafe_buffer_pointer() != params["blocks"]["wq"].ctypes.data
        np.testing.assert_array_equal(np.asarray(wide), params["blocks"]["wq"].astype(np.float64))


# ---------------------------------------------------------------- the memory model against XLA


@functools.cache
def _xla_bytes(family: str, kind: str, batch: int, n: int) -> tuple[int, int]:
    """(temp + output, argument) bytes XLA reports for a float32 function compiled for (B, N) ids:
    ``capture``, ``gradient`` (rematerialised) or ``plain`` (the gradient without rematerialisation)."""
    ck = checkpoint.load(FIXTURES / family)
    spec = ck.spec
    fn = {
        "capture": capture_fn,
        "gradient": influence_fn,
        "encoder gradient": frobenius_fn,
        "plain": _plain_gradient,
        "product plain": functools.partial(influence_fn, remat=False),
        "one forward": functools.partial(influence_fn, one_forward=True),
        "one forward plain": functools.partial(influence_fn, remat=False, one_forward=True),
    }[kind](spec)
    shapes = jax.tree_util.tree_map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), weights.params(ck, np.float32))
    stats = fn.lower(shapes, jax.ShapeDtypeStruct((batch, n), jnp.int32)).compile().memory_analysis()
    return stats.temp_size_in_bytes + stats.output_size_in_bytes, stats.argument_size_in_bytes


def _plain_gradient(spec):
    """The influence gradient without rematerialisation (the estimate's ``gradient_no_remat``)."""

    def top1(embedded, params, ids):
        probs = jax.nn.softmax(forward(params, ids, spec, embedded=embedded)[-1])
        return probs[jnp.argmax(jax.lax.stop_gradient(probs))]

    return jax.jit(
        jax.vmap(lambda p, ids: jnp.linalg.norm(jax.grad(top1)(p["embed"][ids], p, ids), axis=-1), in_axes=(None, 0))
    )


@pytest.mark.parametrize("family, sizes", [("bloom", ((16, 1), (32, 2))), ("mpt", ((16, 2), (32, 1)))])
def test_memory_estimate_bounds_xla_within_4x(family, sizes):
    """Capture and rematerialised gradient, float32: XLA's temp + output <= the estimate <= 4 x XLA's;
    XLA's arguments are the parameters (a) plus the ids."""
    spec = checkpoint.load(FIXTURES / family).spec
    for n, batch in sizes:
        est = estimate(spec, n, 4, tied=True)
        for kind, predicted in (
            ("capture", est.workspace + (est.sums if batch > 1 else 0) + batch * est.capture),
            ("gradient", est.workspace + batch * est.gradient),
        ):
            xla, arguments = _xla_bytes(family, kind, batch, n)
            assert xla <= predicted <= 4 * xla, (family, kind, n, batch, xla, predicted)
            # XLA drops the arguments a function does not read (the capture's final LayerNorm)
            assert est.params - 4 * 2 * spec.width <= arguments - 4 * batch * n <= est.params


@pytest.mark.parametrize("n, batch", [(8, 1), (16, 2)])
def test_encoder_gradient_estimate_bounds_xla_within_4x(n, batch):
    """BERT fixture, float32: the Frobenius norm's D cotangent rows pulled back frobenius_chunk at a time (here
    all D = 32 at once, and at a chunk of 5 with the budget lowered) stay within the rematerialised gradient's
    estimate: XLA's temp + output <= estimate <= 4 x XLA's."""
    from posbias.hf import memory

    spec = checkpoint.load(FIXTURES / "bert").spec
    assert not spec.lm_head and memory.frobenius_chunk(spec, n, 4) == spec.width
    for chunk_bytes in (memory.FROBENIUS_CHUNK_BYTES, 4 * memory._block(spec, n) * 4):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(memory, "FROBENIUS_CHUNK_BYTES", chunk_bytes)
            k = memory.frobenius_chunk(spec, n, 4)
            est = estimate(spec, n, 4, tied=True)
            xla, _ = _xla_bytes.__wrapped__("bert", "encoder gradient", batch, n)  # compiled under this chunk
        predicted = est.workspace + batch * est.gradient
        assert xla <= predicted <= 4 * xla, (k, n, batch, xla, predicted)
    assert k == 5


def test_remat_lowers_xla_gradient_memory():
    """BLOOM fixture, N = 32, B = 2: the rematerialised gradient needs under half the plain one's bytes
    (on CPU too), and the no-remat estimate bounds the plain gradient within 4x."""
    remat, _ = _xla_bytes("bloom", "gradient", 2, 32)
    plain, _ = _xla_bytes("bloom", "plain", 2, 32)
    assert remat < 0.5 * plain, (remat, plain)
    est = estimate(checkpoint.load(FIXTURES / "bloom").spec, 32, 4)
    assert plain <= est.workspace + 2 * est.gradient_no_remat <= 4 * plain
    product, _ = _xla_bytes("bloom", "product plain", 2, 32)  # what a plan without remat runs
    assert product <= est.workspace + 2 * est.gradient_no_remat <= 4 * product, (product, plain)


@pytest.mark.parametrize("family", ["bloom", "llama"])
def test_plain_and_rematerialised_gradients_agree(family):
    """The influence gradient with and without rematerialisation (float64, four sequences): the same
    values up to rounding, and the plain one against this file's own plain gradient."""
    ck = checkpoint.load(FIXTURES / family)
    spec = ck.spec
    ids = np.random.default_rng(3).integers(0, spec.vocab, (4, 12)).astype(np.int32)
    params = device_params(weights.params(ck, np.float64), np.float64)
    remat = np.asarray(influence_fn(spec, np.float64)(params, ids)["grad"])
    plain = np.asarray(influence_fn(spec, np.float64, remat=False)(params, ids)["grad"])
    np.testing.assert_allclose(plain, remat, rtol=1e-12, atol=0)
    np.testing.assert_allclose(plain, np.asarray(_plain_gradient(spec)(params, ids)), rtol=1e-12, atol=0)


@pytest.mark.parametrize("family, sizes", [("bloom", ((16, 1), (32, 2))), ("llama", ((16, 2), (32, 1)))])
def test_memory_estimate_bounds_xla_with_the_capture_in_the_gradient(family, sizes):
    """The capture read from the gradient's forward (``one_forward``), rematerialised and plain, float32: XLA's
    temp + output <= workspace + batch sums + B (capture + gradient) <= 4 x XLA's."""
    spec = checkpoint.load(FIXTURES / family).spec
    for n, batch in sizes:
        est = estimate(spec, n, 4, tied=True)
        sums = est.sums if batch > 1 else 0
        for kind, gradient in (("one forward", est.gradient), ("one forward plain", est.gradient_no_remat)):
            predicted = est.workspace + sums + batch * (est.capture + gradient)
            xla, _ = _xla_bytes(family, kind, batch, n)
            assert xla <= predicted <= 4 * xla, (family, kind, n, batch, xla, predicted)


def _fields_equal(a, b, rtol: float) -> None:
    """Every field of two Measurements equal: arrays within ``rtol`` of each entry or of the array's largest
    entry (a mean of terms of both signs, e.g. a content logit near 0, keeps the rounding of its terms), the
    rest exactly."""

    def close(x, y, name):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol * float(np.abs(y).max(initial=0)), err_msg=name)

    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if dataclasses.is_dataclass(x):
            _fields_equal(x, y, rtol)
        elif isinstance(x, dict):
            assert x.keys() == y.keys(), field.name
            for key in x:
                close(x[key], y[key], f"{field.name}[{key}]")
        elif isinstance(x, np.ndarray):
            close(x, y, field.name)
        else:
            assert x == y, field.name


@pytest.mark.parametrize("family", ["bloom", "llama"])
@pytest.mark.parametrize("remat", [True, False])
def test_capture_from_the_gradients_forward_equals_a_forward_of_its_own(family, remat):
    """``measure(one_forward=True)`` (the capture as the gradient's auxiliary output) against the capture's own
    forward, float64, three sequences in batches of two (a short last batch): every field of the Measurement
    the same up to rounding, with the gradient measures alone (vmapped) and with integrated gradients and
    both occlusions (the sequences mapped one by one)."""
    from posbias.measure.influence import Influence

    ck = checkpoint.load(FIXTURES / family)
    ids = np.random.default_rng(5).integers(0, ck.spec.vocab, (3, 12)).astype(np.int32)
    params = weights.params(ck, np.float64)
    for influence in (
        Influence(("grad", "gradxinput")),
        Influence(("grad", "ig", "occlusion-logp", "occlusion-kl"), ig_steps=32, baseline="mean"),
    ):
        separate, shared = (
            measure(params, ck.spec, ids, batch=2, influence=influence, remat=remat, one_forward=flag)
            for flag in (False, True)
        )
        assert set(shared.scores) == set(influence.measures)
        _fields_equal(shared, separate, 1e-12)


def test_plan_takes_each_saving_the_same_batch_fits():
    """posbias.hf.memory.plan picks, for the batch B sized with the rematerialised gradient beside the capture,
    the first of (plain gradient, capture in the gradient's forward), (plain, separate), (rematerialised, in the
    gradient's forward), (rematerialised, separate) whose B sequences fit; its device figure counts what it picked.
    The budgets and figures are the Estimate's fields, added up here."""
    from posbias.hf.memory import host_bytes, plan

    spec = checkpoint.load(FIXTURES / "bloom").spec
    n, s, c = 32, 4, 8
    est = estimate(spec, n, c, tied=True)
    host = host_bytes(spec, n, c, 0, s)
    fixed = host + est.params + est.workspace + est.sums
    both_plain = est.capture + est.gradient_no_remat
    plain = max(est.capture, est.gradient_no_remat)
    both_remat = est.capture + est.gradient
    remat = max(est.capture, est.gradient)
    assert both_plain > plain > both_remat > remat  # this fixture's figures: each case below is reachable
    for room, expected, per_sequence in (
        (both_plain, (False, True), both_plain),
        (both_plain - 1, (False, False), plain),
        (plain - 1, (True, True), both_remat),
        (both_remat - 1, (True, False), remat),
    ):
        got = plan(spec, n, s, c, 0, (fixed + s * room, "test"))
        assert (got.batch, got.remat, got.one_forward) == (s, *expected), room
        assert got.device == est.params + est.workspace + est.sums + s * per_sequence
    no_influence = plan(spec, n, s, c, 0, (fixed + s * both_plain, "test"), influence=False)
    assert (no_influence.remat, no_influence.one_forward) == (True, False)  # no gradient: the defaults
    encoder = dataclasses.replace(spec, lm_head=False)
    enc = estimate(encoder, n, c, tied=True)  # its gradient counts the Frobenius norm's chunk of cotangent rows
    room = host + enc.params + enc.workspace + enc.sums + s * (enc.capture + enc.gradient_no_remat)
    assert not plan(encoder, n, s, c, 0, (room, "test")).one_forward  # an encoder's: separate


def test_seven_billion_figures_from_shapes():
    """docs/huggingface.md's figures: (a) by hand for BLOOM-7b1 (tied head) and the quadratic terms of (b)-(d)."""
    from posbias.hf.families import spec_of
    from posbias.hf.memory import KNOWN

    bloom = spec_of(KNOWN["bloom-7b1"])
    d, v, t, h = 4096, 250880, 30, 32
    count = t * (12 * d * d + 13 * d) + v * d + 2 * d + 2 * d  # blocks, embedding, ln_f, embedding LayerNorm
    assert params_bytes(bloom, 2, tied=True) == 2 * count and count == 7_069_016_064
    e = estimate(bloom, 2048, 4)
    assert e.host == 8 * 2 * t * h * 2048**2 + 4 * t * h * 2048**2
    assert e.capture > 4 * 2 * t * h * 2048**2 > e.gradient  # the stacked kernels dominate the capture


# ---------------------------------------------------------------- content fit and the encoder


def _lstsq_fit(logits: np.ndarray, read: np.ndarray):
    """b, d, R^2 of b + d [i = j] over the entries ``read``, by numpy.linalg.lstsq per (t, h)."""
    n = logits.shape[-1]
    design = np.stack([np.ones((n, n))[read], np.eye(n)[read]], axis=1)
    t, h = logits.shape[:2]
    b, d, r2 = np.zeros((t, h)), np.zeros((t, h)), np.zeros((t, h))
    for i in range(t):
        for j in range(h):
            y = logits[i, j][read]
            (b[i, j], d[i, j]), *_ = np.linalg.lstsq(design, y, rcond=None)
            r2[i, j] = 1 - ((y - design @ [b[i, j], d[i, j]]) ** 2).sum() / ((y - y.mean()) ** 2).sum()
    return b, d, r2


@pytest.mark.parametrize("causal", [True, False])
def test_content_fit_is_least_squares_on_the_read_entries(causal):
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((3, 2, 6, 6)) + 2.0 * np.eye(6)
    scales = np.array([0.5, 0.25, 1 / 3])
    read = np.tril(np.ones((6, 6), bool)) if causal else np.ones((6, 6), bool)
    b, d, r2 = _lstsq_fit(logits, read)
    fit = content_fit(logits, scales, causal=causal)
    np.testing.assert_allclose(fit.background_raw, b, atol=1e-13)
    np.testing.assert_allclose(fit.diagonal_raw, d, atol=1e-13)
    np.testing.assert_allclose(fit.r2, r2, atol=1e-13)
    np.testing.assert_allclose(fit.background_scaled, b * scales[:, None], atol=1e-13)
    np.testing.assert_allclose(fit.diagonal_scaled, d * scales[:, None], atol=1e-13)
    # the masks differ: the other fit gives another answer on the same logits
    other = content_fit(logits, scales, causal=not causal)
    assert np.abs(other.background_raw - b).max() > 1e-3


def test_gpt2_inverse_layer_scale_reaches_the_content_fit():
    """scale_attn_by_inverse_layer_idx: s_t = 1/(sqrt(d_head)(t + 1)) in the forward and in the fit."""
    ck = checkpoint.load(FIXTURES / "gpt2")
    spec = dataclasses.replace(ck.spec, inverse_layer_scale=True)
    s = 1.0 / (np.sqrt(spec.head_dim) * (np.arange(spec.layers) + 1.0))
    np.testing.assert_allclose(softmax_scales(spec), s, rtol=1e-15)
    ids = np.load(FIXTURES / "gpt2" / "expected.npz")["input_ids"][:9].astype(np.int32)
    m = measure(weights.params(ck, np.float64), spec, ids[None], influence=False)
    b, d, _ = _lstsq_fit(m.content_mean, np.tril(np.ones((9, 9), bool)))
    np.testing.assert_allclose(m.content.diagonal_raw, d, atol=1e-12)
    np.testing.assert_allclose(m.content.diagonal_scaled, d * s[:, None], atol=1e-12)
    np.testing.assert_allclose(m.content.background_scaled, b * s[:, None], atol=1e-12)


def test_encoder_influence_is_the_jacobian_frobenius_norm_and_fit_reads_every_entry():
    """BERT: ||d y / d e_j||_F of the last position's hidden state (pulled back one row at a time)
    against the dense Jacobian by jax.jacfwd; the content fit over all entries."""
    ck = checkpoint.load(FIXTURES / "bert")
    spec = ck.spec
    p = weights.params(ck, np.float64)
    ids = np.arange(3, 9, dtype=np.int32)
    m = measure(p, spec, ids[None])
    with jax.enable_x64(True):
        jac = jax.jacfwd(lambda e: forward(p, ids, spec, embedded=e)[-1])(jnp.asarray(p["embed"][ids]))
    norms = np.sqrt((np.asarray(jac) ** 2).sum(axis=(0, 2)))  # (D, N, D) -> (N,)
    np.testing.assert_allclose(m.grad_norms[0], norms, rtol=1e-10)
    from posbias.hf import memory

    with pytest.MonkeyPatch.context() as mp:  # 5 rows at a time: 6 chunks and a last one padded with 3 zero rows
        mp.setattr(memory, "FROBENIUS_CHUNK_BYTES", 4 * 8 * memory._block(spec, 6))
        assert memory.frobenius_chunk(spec, 6, 8) == 5 and spec.width % 5 != 0
        chunked = measure(p, spec, ids[None])
    np.testing.assert_allclose(chunked.grad_norms[0], norms, rtol=1e-10)
    b, d, _ = _lstsq_fit(m.content_mean, np.ones((6, 6), bool))
    np.testing.assert_allclose(m.content.background_raw, b, atol=1e-12)
    np.testing.assert_allclose(m.content.diagonal_raw, d, atol=1e-12)


def test_readme_memory_table_is_the_memory_model():
    """docs/huggingface.md's table is what ``python -m posbias.hf.memory bloom-7b1 mpt-7b falcon-rw-7b`` prints."""
    import contextlib
    import io

    from posbias.hf import memory

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert memory.main(["bloom-7b1", "mpt-7b", "falcon-rw-7b"]) == 0
    readme = (Path(__file__).resolve().parents[2] / "docs" / "huggingface.md").read_text()
    assert buf.getvalue().strip() in readme
