"""The Llama family (llama, mistral, qwen2) of posbias.hf against transformers' own outputs.

The fixtures tests/fixtures/hf/{llama,llama-linear,llama-dynamic,llama-llama3,mistral,qwen2} were
written by scripts/make_hf_fixtures.py with torch and transformers (versions in each
versions.json): tiny random models, eager attention, float32. These tests read them without
torch; the tests marked by ``importorskip`` compare with transformers where it is installed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from posbias.errors import UserError
from posbias.hf import checkpoint, forward, weights
from posbias.hf.families import Rope, UnsupportedModel, rope_of, spec_of
from posbias.io.reports import read_report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
LLAMAS = ("llama", "llama-linear", "llama-dynamic", "llama-llama3", "mistral", "qwen2")
TOL = 1e-5


def _run(folder, spec=None, dtype=np.float32):
    import jax

    ck = checkpoint.load(folder)
    spec = ck.spec if spec is None else spec
    expected = np.load(Path(folder) / "expected.npz")
    p = weights.params(ck, dtype)
    logits, cap = jax.jit(lambda p, ids: forward.forward(p, ids, spec, capture=True))(
        p, expected["input_ids"].astype(np.int32)
    )
    return ck, expected, np.asarray(logits), {k: np.asarray(v) for k, v in cap.items()}


def _read(spec, n):
    """(T, N, N) bool: the keys each layer's softmax reads (causal, within its sliding window), written
    here from the window's definition i - W < j <= i."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    per = spec.windows if spec.windows is not None else (None,) * spec.layers
    return np.stack([(j <= i) & (True if w is None else (i - j < w)) for w in per])


@pytest.mark.parametrize("name", LLAMAS)
def test_forward_matches_transformers_fixture(name):
    ck, expected, logits, cap = _run(FIXTURES / name)
    np.testing.assert_allclose(logits, expected["logits"], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(cap["probs"], expected["attentions"], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(cap["x"], expected["hidden_states"][:-1], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(cap["hidden"], expected["hidden_states"][-1], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(cap["a"], expected["attention_outputs"], rtol=TOL, atol=TOL)
    n = logits.shape[0]
    causal = np.tril(np.ones((n, n), bool))
    # the logits as the softmax sees them, s_t q.k (float32 rounding of the unscaled q.k, up to |q| |k| ~ 10
    # here, reaches 1.3e-5 on a near-zero entry)
    s = cap["scale"][:, None, None]
    np.testing.assert_allclose(
        s * cap["content"][..., causal], s * expected["content"][..., causal], rtol=TOL, atol=TOL
    )
    # content is the full pre-softmax logit: probs = softmax(s_t content + mask) on the keys read, 0 elsewhere
    assert np.all(cap["position"][:, causal] == 0) and np.all(cap["position"][:, ~causal] == -np.inf)
    read = _read(ck.spec, n)[:, None]
    z = np.where(read, cap["scale"][:, None, None, None] * cap["content"].astype(np.float64), -np.inf)
    ref = np.exp(z - z.max(axis=-1, keepdims=True))
    ref /= ref.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(cap["probs"], ref, atol=1e-6)
    assert np.all(cap["probs"][~np.broadcast_to(read, cap["probs"].shape)] == 0)
    assert np.all(forward.slopes(ck.spec) == 0)


def test_forward_imports_no_torch():
    import subprocess
    import sys

    code = (
        "import sys, numpy as np; from posbias.hf import checkpoint, forward, weights; "
        f"ck = checkpoint.load({str(FIXTURES / 'mistral')!r}); p = weights.params(ck); "
        "forward.forward(p, np.arange(7), ck.spec, capture=True); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_tied_default_follows_the_family():
    from posbias.hf.families import BLOOM, LLAMA, QWEN2

    assert LLAMA.tied({}) is False and QWEN2.tied({"tie_word_embeddings": True}) is True and BLOOM.tied({}) is True
    assert LLAMA.tied({"tie_word_embeddings": None}) is False


def test_float64_forward_matches_fixture():
    import jax

    with jax.enable_x64(True):
        _, expected, logits, cap = _run(FIXTURES / "llama-llama3", dtype=np.float64)
    assert logits.dtype == np.float64 and cap["probs"].dtype == np.float64
    np.testing.assert_allclose(logits, expected["logits"], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(cap["probs"], expected["attentions"], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(cap["hidden"], expected["hidden_states"][-1], rtol=TOL, atol=TOL)


def test_window_mask_per_layer():
    spec = checkpoint.load(FIXTURES / "qwen2").spec
    assert forward.windows(spec, 16).tolist() == [17, 6]  # layer 0 full, layer 1 the 6 latest keys
    assert forward.windows(spec, 4).tolist() == [5, 5]  # a window longer than N restricts nothing
    _, _, _, cap = _run(FIXTURES / "qwen2")
    probs = cap["probs"]
    assert np.all(probs[1][:, 10, :5] == 0) and np.all(probs[1][:, 10, 5:11] > 0)
    assert np.all(probs[0][:, 10, :11] > 0)


def test_fixtures_exercise_each_setting():
    """Each fixture's distinguishing setting matters: without it the forward no longer matches transformers."""
    specs = {name: checkpoint.load(FIXTURES / name).spec for name in LLAMAS}
    assert specs["llama"].groups == 2 and specs["llama"].heads == 4  # GQA, H / G = 2
    assert specs["llama-linear"].groups == 1 and specs["llama-linear"].head_dim == 12  # MQA, head_dim != D / H
    assert [specs[n].rope.kind for n in LLAMAS[:4]] == ["default", "linear", "dynamic", "llama3"]
    assert specs["mistral"].windows == (5, 5) and specs["qwen2"].windows == (None, 6)
    assert specs["qwen2"].biases == ("bq", "bk", "bv") and specs["mistral"].biases == ()
    assert set(specs["llama-linear"].biases) == {"bq", "bk", "bv", "bo", "b1", "bg", "b2"}
    changed = {
        "llama-linear": dataclasses.replace(specs["llama-linear"], rope=Rope(10000.0)),
        "llama-dynamic": dataclasses.replace(specs["llama-dynamic"], rope=Rope(10000.0)),
        "llama-llama3": dataclasses.replace(specs["llama-llama3"], rope=Rope(10000.0)),
        "mistral": dataclasses.replace(specs["mistral"], windows=None),
        "qwen2": dataclasses.replace(specs["qwen2"], windows=None),
        "llama": dataclasses.replace(specs["llama"], rope=None),
    }
    for name, spec in changed.items():
        _, expected, logits, _ = _run(FIXTURES / name, spec)
        assert np.abs(logits - expected["logits"]).max() > 1e-3, name


def test_grouped_keys_are_shared_by_their_query_heads():
    ck = checkpoint.load(FIXTURES / "llama")
    p = weights.params(ck)
    from safetensors import safe_open

    with safe_open(str(FIXTURES / "llama" / "model.safetensors"), framework="numpy") as f:
        k_proj = f.get_tensor("model.layers.1.self_attn.k_proj.weight")  # (G K, D), torch.nn.Linear layout
        lm_head = f.get_tensor("lm_head.weight")
    k = ck.spec.head_dim
    for h in range(ck.spec.heads):
        g = h // (ck.spec.heads // ck.spec.groups)
        assert np.array_equal(p["blocks"]["wk"][1][:, h, :], k_proj[g * k : (g + 1) * k].T)
    assert np.array_equal(p["unembed"], lm_head.T)  # tie_word_embeddings false: its own head
    assert "unembed" not in weights.params(checkpoint.load(FIXTURES / "qwen2"))  # tied


def test_biases_are_read_and_required(tmp_path):
    """Qwen2's q/k/v biases are non-zero and used; a bias the config promises but the files lack is refused."""
    import jax

    ck = checkpoint.load(FIXTURES / "qwen2")
    p = weights.params(ck)
    assert np.abs(p["blocks"]["bq"]).max() > 0.01 and np.all(p["blocks"]["bo"] == 0)
    expected = np.load(FIXTURES / "qwen2" / "expected.npz")
    ids = expected["input_ids"].astype(np.int32)
    zeroed = {**p, "blocks": {**p["blocks"], "bk": np.zeros_like(p["blocks"]["bk"])}}
    changed = np.asarray(jax.jit(lambda q: forward.forward(q, ids, ck.spec))(zeroed))
    assert np.abs(changed - expected["logits"]).max() > 1e-3
    from safetensors import safe_open
    from safetensors.numpy import save_file

    with safe_open(str(FIXTURES / "qwen2" / "model.safetensors"), framework="numpy") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys() if k != "model.layers.1.self_attn.v_proj.bias"}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    shutil.copy(FIXTURES / "qwen2" / "config.json", tmp_path / "config.json")
    with pytest.raises(checkpoint.CheckpointError, match="v_proj.bias is missing") as err:
        weights.params(checkpoint.load(tmp_path))
    assert "\n" not in str(err.value)


def _spec(rope: dict, **extra):
    return spec_of(
        {
            "model_type": "llama",
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "hidden_size": 16,
            "vocab_size": 10,
            "intermediate_size": 8,
            "max_position_embeddings": 64,
            "rope_parameters": rope,
            **extra,
        }
    )


def test_inverse_frequencies_closed_forms():
    """Each rope type's w_c from its definition, written here term by term with math (K = 8, so c = 0..3)."""
    k, theta = 8, 10000.0
    base = [theta ** (-2 * c / k) for c in range(k // 2)]
    spec = _spec({"rope_type": "default", "rope_theta": theta})
    np.testing.assert_allclose(forward.inv_freq(spec, 5), base, rtol=1e-15)
    np.testing.assert_allclose(
        forward.inv_freq(_spec({"rope_type": "linear", "factor": 4.0}), 5), [w / 4 for w in base], rtol=1e-15
    )
    dyn = _spec({"rope_type": "dynamic", "factor": 2.0})
    np.testing.assert_allclose(forward.inv_freq(dyn, 64), base, rtol=1e-15)  # up to max_position_embeddings
    grown = theta * (2.0 * 100 / 64 - 1.0) ** (k / (k - 2))
    np.testing.assert_allclose(forward.inv_freq(dyn, 100), [grown ** (-2 * c / k) for c in range(4)], rtol=1e-14)
    l3 = _spec(
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        }
    )
    # wavelengths 2 pi / w_c = 6.3, 62.8, 628, 6283 against the band edges 64 / 4 = 16 and 64 / 1 = 64
    s = (64 / (2 * math.pi / base[1]) - 1.0) / (4.0 - 1.0)
    want = [base[0], (1 - s) * base[1] / 8 + s * base[1], base[2] / 8, base[3] / 8]
    np.testing.assert_allclose(forward.inv_freq(l3, 5), want, rtol=1e-14)
    cos, sin = forward.rotary_tables(spec, 3)
    assert cos.shape == (3, 8) and np.allclose(cos[2, 1], math.cos(2 * base[1])) and cos[2, 5] == cos[2, 1]
    assert np.allclose(sin[1, 7], math.sin(base[3]))


def test_rope_config_formats():
    """transformers 5's rope_parameters and the older rope_scaling + rope_theta read alike."""
    new = rope_of(
        {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}, "max_position_embeddings": 64}
    )
    old = rope_of(
        {"rope_scaling": {"type": "linear", "factor": 2.0}, "rope_theta": 500.0, "max_position_embeddings": 64}
    )
    assert new == old == Rope(500.0, "linear", 2.0)
    assert rope_of({}) == Rope(10000.0)
    l3 = rope_of(
        {
            "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4},
            "max_position_embeddings": 128,
        }
    )
    assert l3.original_max_positions == 128  # defaults to max_position_embeddings, as transformers does


@pytest.mark.parametrize(
    "extra, match",
    [
        ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}, "rope type 'yarn'"),
        ({"rope_parameters": {"rope_type": "longrope"}}, "rope type 'longrope'"),
        ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
        ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
        ({"num_key_value_heads": 3}, "not a multiple of num_key_value_heads"),
        ({"rope_parameters": {"rope_type": "linear"}}, "linear rope factor"),
        ({"rope_parameters": {"full_attention": {"rope_type": "default"}}}, "per-layer-type"),
    ],
)
def test_unsupported_settings_are_one_line(extra, match):
    config = {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "hidden_size": 16,
        "vocab_size": 10,
        "intermediate_size": 8,
        "max_position_embeddings": 64,
        **extra,
    }
    with pytest.raises(UserError, match=match) as err:
        spec_of(config)
    assert "\n" not in str(err.value)


def test_qwen2_windows_from_max_window_layers():
    base = {
        "model_type": "qwen2",
        "num_hidden_layers": 4,
        "num_attention_heads": 2,
        "hidden_size": 8,
        "vocab_size": 10,
        "intermediate_size": 8,
    }
    assert spec_of({**base, "use_sliding_window": True, "sliding_window": 3, "max_window_layers": 2}).windows == (
        None,
        None,
        3,
        3,
    )
    assert spec_of({**base, "use_sliding_window": False, "sliding_window": 3}).windows is None
    with pytest.raises(UnsupportedModel, match="layer_types"):
        spec_of({**base, "use_sliding_window": True, "layer_types": ["chunked_attention"] * 4})


def _fixture_script():
    path = Path(__file__).resolve().parents[2] / "scripts" / "make_hf_fixtures.py"
    spec = importlib.util.spec_from_file_location("make_hf_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", LLAMAS)
def test_regenerated_fixture_matches(name, tmp_path):
    """Where torch and transformers are installed: build the fixture anew with them and compare."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    folder = _fixture_script().make_fixture(name, tmp_path / name)
    _, expected, logits, cap = _run(folder)
    np.testing.assert_allclose(logits, expected["logits"], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(cap["probs"], expected["attentions"], rtol=TOL, atol=TOL)


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_type": "default", "rope_theta": 500.0},
        {"rope_type": "linear", "factor": 3.0, "rope_theta": 10000.0},
        {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
            "rope_theta": 500000.0,
        },
    ],
)
def test_inverse_frequencies_equal_transformers(rope):
    pytest.importorskip("torch")
    utils = pytest.importorskip("transformers.modeling_rope_utils")
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(
        hidden_size=256, num_attention_heads=2, max_position_embeddings=128, rope_parameters=dict(rope)
    )
    spec = spec_of({"model_type": "llama", **json.loads(config.to_json_string())})
    for n in (16, 128, 300):
        if rope["rope_type"] == "default":
            theirs = LlamaRotaryEmbedding.compute_default_rope_parameters(config)[0]
        else:
            theirs = utils.ROPE_INIT_FUNCTIONS[rope["rope_type"]](config, None, seq_len=n)[0]
        np.testing.assert_allclose(forward.inv_freq(spec, n), theirs.numpy().astype(np.float64), rtol=1e-6)


def test_measure_matches_transformers_tensors_and_a_numpy_rollout():
    """S = 2 copies of the llama fixture's ids: lambda_t and the kernels from transformers' own tensors;
    the (e) rollout and the attention-only (a) panel (slopes 0: the uniform causal kernel) by NumPy."""
    from posbias.hf.measure import measure
    from posbias.validate.predict import predictions

    ck = checkpoint.load(FIXTURES / "llama")
    expected = np.load(FIXTURES / "llama" / "expected.npz")
    ids = expected["input_ids"].astype(np.int32)
    m = measure(weights.params(ck, np.float64), ck.spec, np.stack([ids, ids]), influence=False)
    a = expected["attention_outputs"].astype(np.float64)
    x = expected["hidden_states"][:-1].astype(np.float64)
    an, xn = np.linalg.norm(a, axis=-1), np.linalg.norm(x, axis=-1)
    np.testing.assert_allclose(m.lambdas, (an / (xn + an)).mean(axis=-1), rtol=1e-5)
    assert np.all((m.lambdas > 0) & (m.lambdas < 1))
    kernels = expected["attentions"].astype(np.float64).mean(axis=1)
    np.testing.assert_allclose(m.kernels, kernels, atol=TOL)
    assert np.abs(m.kernels.sum(axis=-1) - 1).max() < 1e-12 and np.all(np.triu(m.kernels, 1) == 0)
    assert np.all(m.slopes == 0)
    n = len(ids)
    panels = predictions(m, m.slopes, causal=True)
    row = np.eye(n)[-1]
    for t in reversed(range(ck.spec.layers)):  # p = e_{N-1}^T R^(T-1) ... R^(0), R = (1 - lambda) I + lambda K
        row = row @ ((1 - m.lambdas[t]) * np.eye(n) + m.lambdas[t] * m.kernels[t] / m.kernels[t].sum(-1, keepdims=True))
    np.testing.assert_allclose(panels["e"], row, atol=1e-12)
    uniform = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    np.testing.assert_allclose(panels["a"], np.eye(n)[-1] @ np.linalg.matrix_power(uniform, ck.spec.layers), atol=1e-12)


def test_influence_equals_finite_differences():
    """||d p_top1 / d e_j|| by jax.grad (rematerialised) against central differences of the checked forward,
    on the Qwen2 fixture (biases and a sliding window of 6 < N = 9)."""
    import jax

    from posbias.hf.measure import measure

    ck = checkpoint.load(FIXTURES / "qwen2")
    ids = np.load(FIXTURES / "qwen2" / "expected.npz")["input_ids"][:9].astype(np.int32)
    p64 = weights.params(ck, np.float64)
    m = measure(p64, ck.spec, ids[None], precision="float64")
    with jax.enable_x64(True):
        top = int(np.argmax(np.asarray(forward.forward(p64, ids, ck.spec))[-1]))
        e = p64["embed"][ids].copy()

        def p_top(emb):
            return jax.nn.softmax(forward.forward(p64, ids, ck.spec, embedded=emb)[-1])[top]

        h = 1e-6
        n, d = e.shape
        steps = np.eye(n * d).reshape(n * d, n, d) * h
        f = jax.jit(jax.vmap(p_top))
        grad = ((np.asarray(f(e[None] + steps)) - np.asarray(f(e[None] - steps))) / (2 * h)).reshape(n, d)
    norms = np.linalg.norm(grad, axis=-1)
    np.testing.assert_allclose(m.grad_norms[0], norms, rtol=1e-5, atol=1e-9)
    assert abs(m.influence.sum() - 1) < 1e-12


def test_measure_command_end_to_end(tmp_path):
    """``posbias measure FIXTURE``: the five files, lambda in [0, 1], stochastic causal kernels, influence
    summing to 1, the rotary note, and a rollout of the written kernels."""
    from posbias.cli import main as posbias_main

    data = tmp_path / "docs.jsonl"
    text = str(np.load(FIXTURES / "llama" / "expected.npz")["text"])
    data.write_text("\n".join(json.dumps({"text": f"{text} {k}"}) for k in range(4)) + "\n")
    out = tmp_path / "m"
    assert (
        posbias_main(
            [
                "measure",
                str(FIXTURES / "llama"),
                "--data",
                str(data),
                "--tokens",
                "10",
                "--samples",
                "3",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    report = read_report(out / "report.json", note=pytest.fail)
    assert report["model_type"] == "llama" and report["slopes"] == [0.0] * 4
    assert any("rotary" in note for note in report["notes"])
    lam = np.array([[float(v) for v in line.split(",")] for line in (out / "lambdas.csv").read_text().splitlines()[1:]])
    assert lam.shape == (2, 3) and np.all((lam[:, 1] >= 0) & (lam[:, 1] <= 1))
    with np.load(out / "kernels.npz") as k:
        kernels = k["kernels"]
    assert kernels.shape == (2, 10, 10) and np.abs(kernels.sum(axis=-1) - 1).max() < 1e-12
    assert np.all(kernels >= 0) and np.all(kernels[:, ~np.tril(np.ones((10, 10), bool))] == 0)
    rows = (out / "influence.csv").read_text().splitlines()
    influence = np.array([float(r.split(",")[1]) for r in rows[1:]])
    assert len(influence) == 10 and np.all(influence >= 0) and abs(influence.sum() - 1) < 1e-9
    assert (
        posbias_main(["rollout", "--kernels", str(out / "kernels.npz"), "--causal", "--out", str(tmp_path / "r")]) == 0
    )


@pytest.mark.parametrize("name, n, batch", [("llama", 16, 1), ("mistral", 16, 2), ("llama-linear", 12, 1)])
def test_memory_estimate_bounds_xla(name, n, batch):
    """Capture and rematerialised gradient, float32: XLA's temp + output <= the estimate <= 4 x XLA's, and
    XLA's arguments within the parameter count (a) (plus the ids)."""
    import jax
    import jax.numpy as jnp

    from posbias.hf.measure import capture_fn, influence_fn
    from posbias.hf.memory import estimate

    ck = checkpoint.load(FIXTURES / name)
    spec = ck.spec
    tied = ck.config.get("tie_word_embeddings", False)
    est = estimate(spec, n, 4, tied=tied)
    shapes = jax.tree_util.tree_map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), weights.params(ck, np.float32))
    ids = jax.ShapeDtypeStruct((batch, n), jnp.int32)
    for fn, predicted in (
        (capture_fn(spec), est.workspace + (est.sums if batch > 1 else 0) + batch * est.capture),
        (influence_fn(spec), est.workspace + batch * est.gradient),
    ):
        stats = fn.lower(shapes, ids).compile().memory_analysis()
        xla = stats.temp_size_in_bytes + stats.output_size_in_bytes
        assert xla <= predicted <= 4 * xla, (name, xla, predicted)
        assert stats.argument_size_in_bytes - 4 * batch * n <= est.params
