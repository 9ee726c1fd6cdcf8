"""The transformers backend (posbias.hf.torch_backend) against the JAX route and against itself.

The JAX route (posbias.hf.measure: posbias's own forward, no torch) and the transformers route
(transformers' eager forward read by PyTorch hooks and autograd) share no code but the
reduction ``posbias.measure.quantities.accumulate``: their agreement on the same fixtures and token ids
(lambda_t, kernels, value-norm-weighted kernels, value norms, content, influence within 1e-5)
checks each against the other. Skipped only when torch or transformers is absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from posbias.cli import main  # noqa: E402
from posbias.hf import bos, checkpoint, data, torch_backend, weights  # noqa: E402
from posbias.hf.measure import measure as jax_measure  # noqa: E402
from posbias.io.reports import read_report
from posbias.measure.influence import LANGUAGE_MODEL, Influence  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
TOL = 1e-5
FAMILIES = [f for f in ("gpt2", "bloom", "llama", "mistral", "qwen2") if (FIXTURES / f).is_dir()]


def _sequences(folder, n=12, s=3):
    text, label = data.read_text(None)
    return bos.windows(checkpoint.load(folder).tokenizer(), text, (n,), s, label, None)[n]


@pytest.fixture(scope="module", params=FAMILIES)
def both(request):
    folder = FIXTURES / request.param
    ck = checkpoint.load(folder)
    seqs = _sequences(folder)
    every = Influence(LANGUAGE_MODEL, ig_steps=64, baseline="mean")  # from zero, RMSNorm makes the path steep near 0
    jax_m = jax_measure(weights.params(ck, None), ck.spec, seqs, influence=every)
    torch_m = torch_backend.measure(torch_backend.load(folder), seqs, batch=2, influence=every)  # 2 + 1: two batches
    return request.param, jax_m, torch_m


def test_backends_agree_on_the_fixture(both):
    family, a, b = both
    assert a.lambdas.min() > 0 and a.lambdas.max() < 1
    for name in (
        "lambdas",
        "lambda_std",
        "kernels",
        "kernels_per_head",
        "kernels_value",
        "value_norms",
        "kernels_norm",
        "lambda_positions",
        "lambda_self",  # JAX: the MLP's output itself; transformers: the block's output minus x + a
        "influence",
        "grad_norms",
    ):
        x, y = getattr(a, name), getattr(b, name)
        assert x.shape == y.shape, (family, name)
        np.testing.assert_allclose(y, x, rtol=0, atol=TOL, err_msg=f"{family} {name}")
    scale = np.abs(a.content_mean).max()
    np.testing.assert_allclose(b.content_mean, a.content_mean, rtol=0, atol=TOL * scale)
    np.testing.assert_allclose(
        b.content.diagonal_scaled,
        a.content.diagonal_scaled,
        rtol=0,
        atol=TOL * max(1.0, np.abs(a.content.diagonal_scaled).max()),
    )
    assert abs(b.influence.sum() - 1) < 1e-12
    assert np.abs(b.kernels_value.sum(axis=-1) - 1).max() < 1e-12
    for name in LANGUAGE_MODEL:  # every influence measure, each on its own scale
        scale = max(np.abs(a.scores[name]).max(), 1e-12)
        np.testing.assert_allclose(b.scores[name], a.scores[name], rtol=0, atol=TOL * scale, err_msg=f"{family} {name}")
    np.testing.assert_allclose(b.ig_error, a.ig_error, rtol=0, atol=TOL)


def _tiny_config(model_type: str):
    """A two-layer random model of ``model_type`` (4 heads, 2 key/value heads where it has them)."""
    from transformers import AutoConfig

    small = dict(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        head_dim=8,
    )
    names = {
        "gpt2": dict(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64),
        "bloom": dict(vocab_size=64, hidden_size=32, n_layer=2, n_head=4),
        "opt": dict(
            vocab_size=64,
            hidden_size=32,
            ffn_dim=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=64,
            word_embed_proj_dim=32,
        ),
        "gpt_neox": dict(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=64,
        ),
        "phi": dict(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=64,
        ),
    }
    return AutoConfig.for_model(
        model_type, **names.get(model_type, small), bos_token_id=0, eos_token_id=0, pad_token_id=0
    )


@pytest.mark.parametrize("model_type", sorted(torch_backend.LAYOUTS))
def test_layout_table_reads_the_attention_path(model_type, tmp_path):
    """Every table entry resolves on a random model of its model_type and measures a stochastic
    kernel, lambda in (0, 1) and an influence summing to 1. With every output projection W_O scaled by
    1e-6 (biases zeroed), every lambda_t falls below 1e-4 (the hooked addend is the attention path's,
    not another module's) and layer 0's value-weighted kernel is unchanged (its weights
    ||W_O^h v_hj|| all scale by 1e-6, and x_0 does not depend on W_O)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(_tiny_config(model_type), attn_implementation="eager")
    model.save_pretrained(tmp_path)
    loaded = torch_backend.load(tmp_path)
    seqs = np.random.default_rng(1).integers(0, 64, size=(2, 8))
    m = torch_backend.measure(loaded, seqs)
    assert np.all((m.lambdas > 1e-3) & (m.lambdas < 1)), m.lambdas
    assert np.abs(m.kernels_per_head.sum(axis=-1) - 1).max() < 1e-6
    assert np.allclose(np.triu(m.kernels, 1), 0)
    assert abs(m.influence.sum() - 1) < 1e-12
    with torch.no_grad():
        for block in loaded.model.get_submodule(loaded.layout.blocks):
            out = block.get_submodule(loaded.layout.out_proj)
            out.weight.mul_(1e-6)
            if getattr(out, "bias", None) is not None:
                out.bias.zero_()
    small = torch_backend.measure(loaded, seqs, influence=False)
    assert np.all(small.lambdas < 1e-4), small.lambdas
    np.testing.assert_allclose(small.kernels_value[0], m.kernels_value[0], rtol=0, atol=1e-9)


def test_value_norms_recomputed_in_numpy_from_the_fixture_weights():
    """GPT-2 fixture, layer 0, one sequence: ||W_O^h v_hj|| and the value-weighted kernel from the
    safetensors weights by NumPy alone (LayerNorm, Conv1D q/k/v, causal softmax), against both routes."""
    from safetensors.numpy import load_file

    folder = FIXTURES / "gpt2"
    w = load_file(folder / "model.safetensors")
    w = {k.removeprefix("transformer."): v.astype(np.float64) for k, v in w.items()}
    seqs = _sequences(folder, n=10, s=1)
    ids = seqs[0]
    x = w["wte.weight"][ids] + w["wpe.weight"][: len(ids)]
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    h = (x - mu) / np.sqrt(var + 1e-5) * w["h.0.ln_1.weight"] + w["h.0.ln_1.bias"]
    qkv = h @ w["h.0.attn.c_attn.weight"] + w["h.0.attn.c_attn.bias"]
    d, heads = 32, 4
    q, k, v = (qkv[:, i * d : (i + 1) * d].reshape(-1, heads, 8).transpose(1, 0, 2) for i in range(3))
    logits = np.einsum("hik,hjk->hij", q, k) / np.sqrt(8)
    n = len(ids)
    logits = np.where(np.tril(np.ones((n, n), bool)), logits, -np.inf)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    wo = w["h.0.attn.c_proj.weight"].reshape(heads, 8, d)
    norms = np.linalg.norm(np.einsum("hjk,hkd->hjd", v, wo), axis=-1)  # (H, N)
    weighted = probs * norms[:, None, :]
    kernel = (weighted / weighted.sum(-1, keepdims=True)).mean(0)
    ck = checkpoint.load(folder)
    for m in (
        jax_measure(weights.params(ck, None), ck.spec, seqs),
        torch_backend.measure(torch_backend.load(folder), seqs),
    ):
        np.testing.assert_allclose(m.value_norms[0], norms, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(m.kernels_value[0], kernel, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(m.kernels_per_head[0], probs, rtol=1e-10, atol=1e-12)


def test_mlp_as_self_ratio_of_a_post_ln_encoder_from_transformers_modules():
    """BERT (post-LN): y = LN1(x + a), out = LN2(y + m). The MLP-as-self ratio ||a~|| / (||x~|| + ||a~|| + ||m||),
    x~ and a~ the parts of LN1's input through its linear map (centring, gain, 1 / sigma of x + a), computed here
    from transformers' own modules by hooks (x the layer input, a the attention output's dense layer, m the
    output's dense layer), against the JAX route's forward, which forms m from its own MLP."""
    import torch
    from transformers import AutoModel

    folder = FIXTURES / "bert"
    seqs = _sequences(folder, n=10, s=2)
    model = AutoModel.from_pretrained(folder, dtype=torch.float64).eval()
    seen = {}
    for t, layer in enumerate(model.encoder.layer):
        layer.register_forward_pre_hook(lambda mod, args, t=t: seen.__setitem__(("x", t), args[0]))
        layer.attention.output.dense.register_forward_hook(lambda mod, i, o, t=t: seen.__setitem__(("a", t), o))
        layer.output.dense.register_forward_hook(lambda mod, i, o, t=t: seen.__setitem__(("m", t), o))
    ratios = []
    with torch.no_grad():
        for ids in seqs:
            model(input_ids=torch.tensor(np.asarray(ids))[None])
            per_layer = []
            for t, layer in enumerate(model.encoder.layer):
                x, a, m = (seen[(k, t)][0].numpy() for k in "xam")
                norm = layer.attention.output.LayerNorm
                total = x + a
                sigma = np.sqrt(total.var(axis=-1, keepdims=True) + norm.eps)
                g = norm.weight.numpy()
                x_, a_ = ((z - z.mean(axis=-1, keepdims=True)) * g / sigma for z in (x, a))
                an = np.linalg.norm(a_, axis=-1)
                per_layer.append(an / (np.linalg.norm(x_, axis=-1) + an + np.linalg.norm(m, axis=-1)))
            ratios.append(per_layer)
    ck = checkpoint.load(folder)
    m = jax_measure(weights.params(ck, None), ck.spec, seqs, influence=False)
    # within 1e-7, not 1e-12: transformers' attention rounds through float32 (the module docstring)
    np.testing.assert_allclose(m.lambda_self, np.mean(ratios, axis=0), rtol=0, atol=1e-7)
    assert np.all(m.lambda_self < m.lambda_positions)


def test_measure_command_writes_the_jax_set(tmp_path, capsys):
    folder = FIXTURES / "gpt2"
    args = ["--tokens", "12", "--samples", "2", "--quiet"]
    assert main(["measure", str(folder), *args, "--out", str(tmp_path / "jax")]) == 0
    assert main(["measure", str(folder), *args, "--backend", "transformers", "--out", str(tmp_path / "pt")]) == 0
    capsys.readouterr()
    names = sorted(p.name for p in (tmp_path / "jax").iterdir())
    assert sorted(p.name for p in (tmp_path / "pt").iterdir()) == names
    a, b = np.load(tmp_path / "jax" / "kernels.npz"), np.load(tmp_path / "pt" / "kernels.npz")
    assert sorted(a.files) == sorted(b.files)
    for key in ("kernels", "lambdas", "kernels_value", "value_norms", "kernels_norm", "per_head"):
        np.testing.assert_allclose(b[key], a[key], rtol=0, atol=TOL)
    ra, rb = (read_report(tmp_path / f / "report.json", note=pytest.fail) for f in ("jax", "pt"))
    assert rb["backend"] == "transformers" and "transformers" in rb["notes"][0]
    sa, sb = ra["diagnostics"]["sinks"], rb["diagnostics"]["sinks"]
    np.testing.assert_allclose(sb["key0_mass"], sa["key0_mass"], atol=TOL)


def test_refusals_are_one_line(tmp_path, capsys):
    """A model_type outside the table, and --backend on a posbias train model: exit 2, one line."""
    config = json.loads((FIXTURES / "mpt" / "config.json").read_text())
    folder = tmp_path / "mpt"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (folder / name).write_bytes((FIXTURES / "mpt" / name).read_bytes())
    assert config["model_type"] == "mpt"
    assert main(["measure", str(folder), "--backend", "transformers", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model_type 'mpt' is not in the transformers backend's table" in err
    assert not (tmp_path / "o").exists()


def test_validate_backends_agree_on_the_llama_fixture(tmp_path, capsys):
    """posbias validate on the Llama fixture: every row of the report (W1 and TV of each panel) and the
    sink diagnostics agree between the JAX and transformers backends within 1e-5."""
    folder = FIXTURES / ("llama" if (FIXTURES / "llama").is_dir() else "gpt2")
    args = ["validate", "--checkpoint", str(folder), "--lengths", "12", "--samples", "2", "--json"]
    assert main([*args, "--out", str(tmp_path / "jax")]) == 0
    assert main([*args, "--backend", "transformers", "--out", str(tmp_path / "pt")]) == 0
    capsys.readouterr()
    a, b = (read_report(tmp_path / k / "report.json", note=pytest.fail) for k in ("jax", "pt"))
    la, lb = a["lengths"], b["lengths"]
    assert sorted(la["12"]) == sorted(lb["12"])
    for key, row in la["12"].items():
        assert abs(row["w1"] - lb["12"][key]["w1"]) < TOL and abs(row["tv"] - lb["12"][key]["tv"]) < TOL, key
    for name, values in a["diagnostics"]["sinks"]["12"].items():
        np.testing.assert_allclose(b["diagnostics"]["sinks"]["12"][name], values, rtol=TOL, atol=TOL)
    assert "measured through transformers" in (tmp_path / "pt" / "report.md").read_text()
