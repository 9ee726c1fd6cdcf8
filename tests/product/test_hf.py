"""The JAX forward of Hugging Face checkpoints (posbias.hf) against transformers' own outputs.

The fixtures in tests/fixtures/hf/ were written by scripts/make_hf_fixtures.py with torch and
transformers (versions in each versions.json): tiny random BERT, BLOOM, Falcon (three
layouts), GPT-2 and MPT checkpoints and what transformers computed on fixed token ids. These tests
read them without torch; one test regenerates them on the spot where torch and transformers are installed.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from posbias.errors import UserError
from posbias.hf import checkpoint, forward, weights
from posbias.hf.families import UnsupportedModel
from posbias.io.reports import read_report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
FAMILIES = ("bert", "bloom", "falcon", "falcon-mq", "falcon-grouped", "gpt2", "mpt")
TOL = 1e-5


def _run(folder, dtype=np.float32):
    import jax

    ck = checkpoint.load(folder)
    expected = np.load(Path(folder) / "expected.npz")
    p = weights.params(ck, dtype)
    fn = jax.jit(lambda p, ids: forward.forward(p, ids, ck.spec, capture=True))
    logits, cap = fn(p, expected["input_ids"].astype(np.int32))
    return ck, expected, np.asarray(logits), {k: np.asarray(v) for k, v in cap.items()}


def _compare(expected, logits, cap, tol=TOL, causal=True):
    np.testing.assert_allclose(logits, expected["logits"], rtol=tol, atol=tol)
    np.testing.assert_allclose(cap["probs"], expected["attentions"], rtol=tol, atol=tol)
    np.testing.assert_allclose(cap["x"], expected["hidden_states"][:-1], rtol=tol, atol=tol)
    np.testing.assert_allclose(cap["hidden"], expected["hidden_states"][-1], rtol=tol, atol=tol)
    np.testing.assert_allclose(cap["a"], expected["attention_outputs"], rtol=tol, atol=tol)
    n = logits.shape[0]
    read = np.tril(np.ones((n, n), bool)) if causal else np.ones((n, n), bool)
    # content = q.k: a float32 sum whose rounding scales with the products' size, about the array's
    # largest magnitude (22 for Falcon, where one ulp is 1.9e-6): an entry near 0 after cancellation
    # carries that absolute error, so the absolute tolerance is 16 float32 ulps of the largest entry
    # (measured with jax 0.10.2: at most 7.8e-7 of it, Falcon 1.7e-5 absolute against torch's value)
    scale = float(np.abs(expected["content"][..., read]).max())
    atol = max(tol, 16 * float(np.finfo(np.float32).eps) * scale)
    np.testing.assert_allclose(cap["content"][..., read], expected["content"][..., read], rtol=tol, atol=atol)


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_matches_transformers_fixture(family):
    ck, expected, logits, cap = _run(FIXTURES / family)
    _compare(expected, logits, cap, causal=ck.spec.causal)
    # the probabilities are exactly the softmax of the separable logits the forward reports
    z = cap["scale"][:, None, None, None] * cap["content"].astype(np.float64) + cap["position"][None]
    z = z - z.max(axis=-1, keepdims=True)
    ref = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(cap["probs"], ref, atol=1e-6)
    assert np.abs(ref.sum(axis=-1) - 1).max() < 1e-12
    upper = ~np.tril(np.ones(ref.shape[-2:], bool))
    if ck.spec.causal:
        assert np.all(cap["probs"][..., upper] == 0)
    else:  # an encoder reads later tokens too
        assert ck.spec.model_type == "bert" and np.all(cap["probs"][..., upper] > 0)


def test_forward_imports_no_torch():
    import subprocess

    code = (
        "import sys, numpy as np; from posbias.hf import checkpoint, forward, weights; "
        f"ck = checkpoint.load({str(FIXTURES / 'gpt2')!r}); p = weights.params(ck); "
        "forward.forward(p, np.arange(4), ck.spec, capture=True); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_float64_forward_matches_fixture():
    import jax

    with jax.enable_x64(True):
        _, expected, logits, cap = _run(FIXTURES / "bloom", np.float64)
    assert logits.dtype == np.float64
    _compare(expected, logits, cap)


@pytest.mark.parametrize("family", FAMILIES)
def test_tokenizer_reproduces_fixture_ids(family):
    ck = checkpoint.load(FIXTURES / family)
    expected = np.load(FIXTURES / family / "expected.npz")
    ids = ck.tokenizer().encode(str(expected["text"])).ids
    assert ids[: len(expected["input_ids"])] == expected["input_ids"].tolist()


def test_a_saved_truncation_or_padding_does_not_cut_or_pad_the_text(tmp_path):
    """A tokenizer.json that truncates and pads (all-MiniLM-L6-v2's: 128 tokens, padded to 128) reads the whole
    text: the same ids as the fixture's plain tokenizer, with neither cut nor [PAD]; the transformers backend
    reads it the same way."""
    from posbias.hf.torch_backend import tokenizer_of as backend_tokenizer

    folder = tmp_path / "bert"
    shutil.copytree(FIXTURES / "bert", folder)
    saved = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    assert saved["truncation"] is None and saved["padding"] is None  # the fixture's own: plain
    saved["truncation"] = {"direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0}
    saved["padding"] = {
        "strategy": {"Fixed": 64},
        "direction": "Right",
        "pad_to_multiple_of": None,
        "pad_id": 0,
        "pad_type_id": 0,
        "pad_token": "[PAD]",
    }
    (folder / "tokenizer.json").write_text(json.dumps(saved), encoding="utf-8")
    text = " ".join(["the quick brown fox jumps over the lazy dog"] * 20)
    plain = checkpoint.load(FIXTURES / "bert").tokenizer().encode(text, add_special_tokens=False).ids
    assert len(plain) > 64
    assert checkpoint.load(folder).tokenizer().encode(text, add_special_tokens=False).ids == plain
    assert backend_tokenizer(folder).encode(text, add_special_tokens=False).ids == plain
    short = checkpoint.load(folder).tokenizer().encode("the fox").ids
    assert short == checkpoint.load(FIXTURES / "bert").tokenizer().encode("the fox").ids  # no [PAD] added


def test_bloom_slopes_and_position_term():
    ck = checkpoint.load(FIXTURES / "bloom")
    assert ck.spec.heads == 6
    # BLOOM's construction for H = 6: 2^(-8h/4), h = 1..4, then 2^(-4(2k-1)/4), k = 1, 2
    exact = [Fraction(1, 4), Fraction(1, 16), Fraction(1, 64), Fraction(1, 256), Fraction(1, 2), Fraction(1, 8)]
    assert forward.slopes(ck.spec).tolist() == [float(v) for v in exact]
    pos = np.asarray(forward.position_term(ck.spec, 5, np.float64))
    for h, m in enumerate(exact):
        for i in range(5):
            for j in range(5):
                assert pos[h, i, j] == (-float(m) * (i - j) if j <= i else -np.inf)
    gpt2 = checkpoint.load(FIXTURES / "gpt2")
    assert np.all(forward.slopes(gpt2.spec) == 0)


def _tensors(folder):
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), framework="numpy") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def test_sharded_base_model_checkpoint(tmp_path):
    """Two shards behind an index, names without the 'transformer.' prefix (a base-model save)."""
    from safetensors.numpy import save_file

    src = FIXTURES / "bloom"
    tensors = {k.removeprefix("transformer."): v for k, v in _tensors(src).items()}
    names = sorted(tensors)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    for file, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(tmp_path / file))
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": {k: file for file, keys in shards.items() for k in keys}})
    )
    for name in ("config.json", "tokenizer.json", "expected.npz"):
        shutil.copy(src / name, tmp_path / name)
    ck, expected, logits, cap = _run(tmp_path)
    assert ck.prefix == ""
    _compare(expected, logits, cap)
    # a shard named by the index but missing: one line naming it
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(checkpoint.CheckpointError, match="model-00002-of-00002.safetensors") as err:
        checkpoint.load(tmp_path)
    assert "\n" not in str(err.value)


def test_bfloat16_weights_are_cast_up(tmp_path):
    import ml_dtypes
    from safetensors.numpy import save_file

    src = FIXTURES / "gpt2"
    tensors = _tensors(src)
    save_file({k: v.astype(ml_dtypes.bfloat16) for k, v in tensors.items()}, str(tmp_path / "model.safetensors"))
    shutil.copy(src / "config.json", tmp_path / "config.json")
    bf = weights.params(checkpoint.load(tmp_path), np.float32)
    full = weights.params(checkpoint.load(src), np.float32)
    assert bf["embed"].dtype == np.float32
    # rounding to bfloat16 is elementwise, so it commutes with the canonical rearrangement
    rounded = np.asarray(tensors["transformer.wte.weight"]).astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(bf["embed"], rounded)
    assert np.abs(bf["blocks"]["wq"] - full["blocks"]["wq"]).max() <= 2.0**-8 * np.abs(full["blocks"]["wq"]).max()
    assert not np.array_equal(bf["blocks"]["wq"], full["blocks"]["wq"])


def test_unknown_model_type_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma", "num_hidden_layers": 2}))
    with pytest.raises(UnsupportedModel) as err:
        checkpoint.load(tmp_path)
    message = str(err.value)
    assert isinstance(err.value, UserError) and "\n" not in message
    assert "'gemma'" in message and "bloom" in message and "llama" in message


def test_bad_folders_are_one_line(tmp_path):
    with pytest.raises(checkpoint.CheckpointError, match="config.json is missing"):
        checkpoint.load(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(checkpoint.CheckpointError, match="not valid JSON"):
        checkpoint.load(tmp_path)
    shutil.copy(FIXTURES / "gpt2" / "config.json", tmp_path / "config.json")
    with pytest.raises(checkpoint.CheckpointError, match="no \\*.safetensors"):
        checkpoint.load(tmp_path)
    assert checkpoint.is_checkpoint(FIXTURES / "gpt2") and not checkpoint.is_checkpoint(tmp_path / "nothing")


def test_gpt2_refuses_more_tokens_than_positions():
    ck = checkpoint.load(FIXTURES / "gpt2")
    p = weights.params(ck)
    with pytest.raises(UserError, match="32 learned positions"):
        forward.forward(p, np.zeros(ck.spec.context + 1, np.int32), ck.spec)


def _fixture_script():
    path = Path(__file__).resolve().parents[2] / "scripts" / "make_hf_fixtures.py"
    spec = importlib.util.spec_from_file_location("make_hf_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("family", FAMILIES)
def test_regenerated_fixture_matches(family, tmp_path):
    """Where torch and transformers are installed: build the fixture anew with them and compare."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    folder = _fixture_script().make_fixture(family, tmp_path / family)
    ck, expected, logits, cap = _run(folder)
    _compare(expected, logits, cap, causal=ck.spec.causal)


def test_bloom_slopes_equal_transformers():
    pytest.importorskip("torch")
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    import torch

    from posbias.numerics.slopes import alibi_slopes

    for heads in range(1, 130):
        theirs = bloom._get_alibi_slopes(heads, torch.device("cpu")).numpy().astype(np.float64)
        np.testing.assert_allclose(alibi_slopes(heads, "hf"), theirs, rtol=1e-6, atol=0)


def test_measure_lambda_and_kernels_match_transformers_tensors():
    """S = 2 copies of the fixture's ids: lambda_t and the kernels from transformers' own tensors."""
    from posbias.hf.measure import measure

    ck = checkpoint.load(FIXTURES / "bloom")
    expected = np.load(FIXTURES / "bloom" / "expected.npz")
    ids = expected["input_ids"].astype(np.int32)
    m = measure(weights.params(ck, np.float64), ck.spec, np.stack([ids, ids]), influence=False)
    a = expected["attention_outputs"].astype(np.float64)
    x = expected["hidden_states"][:-1].astype(np.float64)
    an, xn = np.linalg.norm(a, axis=-1), np.linalg.norm(x, axis=-1)
    np.testing.assert_allclose(m.lambdas, (an / (xn + an)).mean(axis=-1), rtol=1e-5)
    assert np.all(m.lambda_std < 1e-12)
    np.testing.assert_allclose(m.kernels_per_head, expected["attentions"], atol=TOL)
    np.testing.assert_allclose(m.kernels, expected["attentions"].astype(np.float64).mean(axis=1), atol=TOL)
    assert np.abs(m.kernels.sum(axis=-1) - 1).max() < 1e-12
    assert m.slopes.tolist() == [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]


def test_measure_influence_equals_finite_differences():
    """||d p_top1 / d e_j|| by jax.grad against central differences of the (transformers-checked) forward."""
    import jax

    from posbias.hf.measure import measure

    ck = checkpoint.load(FIXTURES / "gpt2")
    ids = np.load(FIXTURES / "gpt2" / "expected.npz")["input_ids"][:8].astype(np.int32)
    p64 = weights.params(ck, np.float64)
    m = measure(p64, ck.spec, ids[None], precision="float64")
    with jax.enable_x64(True):
        logits = np.asarray(forward.forward(p64, ids, ck.spec))
        top = int(np.argmax(logits[-1]))
        e = p64["embed"][ids].copy()

        def p_top(emb):
            z = forward.forward(p64, ids, ck.spec, embedded=emb)[-1]
            return jax.nn.softmax(z)[top]

        h = 1e-6
        n, d = e.shape
        steps = np.eye(n * d).reshape(n * d, n, d) * h
        up = np.asarray(jax.jit(jax.vmap(p_top))(e[None] + steps))
        down = np.asarray(jax.jit(jax.vmap(p_top))(e[None] - steps))
        grad = ((up - down) / (2 * h)).reshape(n, d)
    norms = np.linalg.norm(grad, axis=-1)
    np.testing.assert_allclose(m.grad_norms[0], norms, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(m.influence, norms / norms.sum(), rtol=1e-5)
    assert abs(m.influence.sum() - 1) < 1e-12


@pytest.mark.parametrize("family", ["bloom", "mpt", "falcon", "bert"])
def test_measure_command_writes_the_set_rollout_reads(tmp_path, capsys, family):
    from posbias.cli import main as posbias_main
    from tests.hf_folders import measure_command as main

    data = tmp_path / "docs.jsonl"
    text = np.load(FIXTURES / "bloom" / "expected.npz")["text"]
    data.write_text("\n".join(json.dumps({"text": f"{text} {k}"}) for k in range(4)) + "\n")
    out = tmp_path / "m"
    assert (
        main(
            [
                str(FIXTURES / family),
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
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["config.yaml", "kernels.npz", "influence.csv", "lambdas.csv", "report.json", "bias_fit.json"]
    )
    lines = (out / "lambdas.csv").read_text().splitlines()
    assert lines[0] == "layer,mean,std" and len(lines) == 3
    report = read_report(out / "report.json", note=pytest.fail)
    spec = checkpoint.load(FIXTURES / family).spec
    assert report["model_type"] == family and report["num_tokens"] == 10 and report["samples"] == 3
    assert report["slopes"] == forward.slopes(spec).tolist()
    with np.load(out / "kernels.npz") as k:
        assert k["kernels"].shape == (2, 10, 10) and np.abs(k["kernels"].sum(axis=-1) - 1).max() < 1e-12
        upper = k["kernels"][:, ~np.tril(np.ones((10, 10), bool))]
        assert np.all(upper == 0) if spec.causal else np.all(upper > 0)
    assert f'mask_type: "{"causal" if spec.causal else "full"}"' in (out / "config.yaml").read_text()
    assert posbias_main(["rollout", str(out / "config.yaml"), "--out", str(tmp_path / "r")]) == 0
    causal = ["--causal"] if spec.causal else []
    assert posbias_main(["rollout", "--kernels", str(out / "kernels.npz"), *causal, "--out", str(tmp_path / "rk")]) == 0
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["num_tokens"] == 10


def test_measure_command_refusals_are_one_line(tmp_path, capsys):
    from tests.hf_folders import measure_command as main

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mystery"}))
    assert main([str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'mystery'" in err and "bloom" in err
    assert main([str(FIXTURES / "gpt2"), "--tokens", "33", "--out", str(tmp_path / "o")]) == 2
    assert "32 learned positions" in capsys.readouterr().err
    assert (
        main(
            [
                str(FIXTURES / "gpt2"),
                "--data",
                str(tmp_path / "absent.txt"),
                "--tokens",
                "8",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert "cannot read" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_mpt_slopes_coincide_with_bloom_construction_at_bias_max_8():
    from posbias.numerics.slopes import alibi_slopes

    for heads in range(1, 130):
        assert np.array_equal(forward.mpt_slopes(heads, 8.0), alibi_slopes(heads, "hf")), heads
    # another alibi_bias_max: 2^(-h B / H) for a power of two
    assert forward.mpt_slopes(4, 16.0).tolist() == [2.0**-4, 2.0**-8, 2.0**-12, 2.0**-16]


def test_mpt_clip_qkv_is_applied():
    """The fixture's clip_qkv is active: without it the forward no longer matches transformers."""
    import dataclasses

    ck = checkpoint.load(FIXTURES / "mpt")
    assert ck.spec.clip_qkv == 1.0 and not any(name.endswith(".bias") for name in ck.files)
    expected = np.load(FIXTURES / "mpt" / "expected.npz")
    p = weights.params(ck)
    ids = expected["input_ids"].astype(np.int32)
    unclipped = dataclasses.replace(ck.spec, clip_qkv=None)
    assert np.abs(np.asarray(forward.forward(p, ids, unclipped)) - expected["logits"]).max() > 1e-3


def test_mpt_slopes_equal_transformers():
    pytest.importorskip("torch")
    mpt = pytest.importorskip("transformers.models.mpt.modeling_mpt")

    for heads in (1, 2, 3, 6, 7, 8, 12, 32, 48):
        alibi = mpt.build_mpt_alibi_tensor(heads, 5, alibi_bias_max=8).numpy().astype(np.float64)  # (H, 1, 5)
        np.testing.assert_allclose(-alibi[:, 0, 0] / 4, forward.mpt_slopes(heads, 8.0), rtol=1e-6)


def _bfloat16(x: Fraction) -> Fraction:
    """x rounded to 8 significant bits, ties to even (bfloat16's rounding), by exact arithmetic."""
    if x == 0:
        return x
    e = x.numerator.bit_length() - x.denominator.bit_length()
    e += 1 if Fraction(2) ** e <= x else 0  # now 2^(e-1) <= x < 2^e
    ulp = Fraction(2) ** (e - 8)
    q, r = divmod(x, ulp)
    q += 1 if (r > ulp / 2 or (r == ulp / 2 and q % 2)) else 0
    return q * ulp


def test_falcon_position_term_is_the_bfloat16_alibi_once():
    """Falcon's term alibi_scale bf16(bf16(m_h) bf16(j)), checked by exact rounding, and the effective slopes."""
    import math

    from posbias.numerics.slopes import alibi_slopes

    ck = checkpoint.load(FIXTURES / "falcon")
    spec = ck.spec
    assert (spec.heads, spec.head_dim, spec.alibi_scale) == (16, 4, 0.5)
    exact = [_bfloat16(Fraction(float(m))) for m in alibi_slopes(16, "hf")]
    assert any(Fraction(float(m)) != b for m, b in zip(alibi_slopes(16, "hf"), exact))  # rounding is exercised
    assert forward.slopes(spec).tolist() == [float(b) / math.sqrt(spec.head_dim) for b in exact]
    n = 700
    pos = np.asarray(forward.position_term(spec, n, np.float64))
    for h in (0, 1, 7, 15):
        term = [float(_bfloat16(exact[h] * _bfloat16(Fraction(j)))) * spec.alibi_scale for j in range(n)]
        for i in (0, 5, 255, 256, 300, 699):
            assert pos[h, i, : i + 1].tolist() == term[: i + 1]
            assert np.all(pos[h, i, i + 1 :] == -np.inf)
    # beyond j = 256 bfloat16 no longer holds m_h j exactly: the term is not linear there
    assert np.abs(np.diff(pos[1, -1], 2)).max() > 0


def test_falcon_fixture_records_transformers_double_alibi():
    """transformers' FalconModel adds the term twice; alibi_scale x 2 reproduces it, and the fixture tells
    them apart."""
    import dataclasses

    import jax

    for family in ("falcon", "falcon-mq", "falcon-grouped"):
        ck = checkpoint.load(FIXTURES / family)
        expected = np.load(FIXTURES / family / "expected.npz")
        p = weights.params(ck)
        ids = expected["input_ids"].astype(np.int32)
        doubled = dataclasses.replace(ck.spec, alibi_scale=2 * ck.spec.alibi_scale)
        logits, cap = jax.jit(lambda p, ids, spec=doubled: forward.forward(p, ids, spec, capture=True))(p, ids)
        np.testing.assert_allclose(np.asarray(logits), expected["transformers_logits"], rtol=TOL, atol=TOL)
        np.testing.assert_allclose(np.asarray(cap["probs"]), expected["transformers_attentions"], rtol=TOL, atol=TOL)
        assert np.abs(expected["transformers_logits"] - expected["logits"]).max() > 1e-2


def test_falcon_layouts_read_from_config():
    specs = {f: checkpoint.load(FIXTURES / f).spec for f in ("falcon", "falcon-mq", "falcon-grouped")}
    assert (specs["falcon"].block, specs["falcon"].kv_groups) == ("pre-ln", 16)
    assert (specs["falcon-mq"].block, specs["falcon-mq"].kv_groups) == ("parallel", 1)
    assert (specs["falcon-grouped"].block, specs["falcon-grouped"].kv_groups) == ("parallel-2ln", 4)
    assert all(s.mlp == 96 for s in specs.values())
    assert not any(name.endswith("dense.bias") for name in checkpoint.load(FIXTURES / "falcon-mq").files)


def test_falcon_position_term_equals_transformers_alibi_tensor():
    pytest.importorskip("torch")
    falcon = pytest.importorskip("transformers.models.falcon.modeling_falcon")
    import dataclasses

    import torch

    spec = checkpoint.load(FIXTURES / "falcon").spec
    # The row term at N = 3000 (past Falcon's 2048 context: bfloat16 rounds j in steps up to 16), and
    # the whole (H, N, N) position term at N = 300 (the row broadcast to every query, the causal mask):
    # forming it at N = 3000 for 71 heads took 13.7 GiB for the one row compared (issue 34).
    for heads in (8, 12, 16, 64, 71):
        s = dataclasses.replace(spec, heads=heads, width=4 * heads)
        for n in (300, 3000):
            alibi = falcon.build_alibi_tensor(torch.ones((1, n), dtype=torch.long), heads, torch.float32)
            theirs = alibi[:, 0, :].numpy().astype(np.float64) * s.alibi_scale
            assert np.array_equal(forward.bfloat16_alibi_row(s, n), theirs), (heads, n)
        term = np.asarray(forward.position_term(s, 300, np.float64))
        causal = np.tril(np.ones((300, 300), dtype=bool))
        assert np.array_equal(term[:, causal], np.broadcast_to(theirs[:, None, :300], term.shape)[:, causal]), heads
        assert np.all(term[:, ~causal] == -np.inf), heads


def test_bert_reads_every_position_and_returns_hidden_states():
    ck = checkpoint.load(FIXTURES / "bert")
    spec = ck.spec
    assert not spec.causal and not spec.lm_head and spec.block == "post-ln" and spec.context == 32
    assert spec.mlp == 80 and np.all(forward.slopes(spec) == 0)
    assert np.all(np.asarray(forward.position_term(spec, 5, np.float64)) == 0)
    p = weights.params(ck)
    assert "lnf_g" not in p and "unembed" not in p
    out = np.asarray(forward.forward(p, np.arange(6, dtype=np.int32), spec))
    assert out.shape == (6, spec.width)


@pytest.mark.parametrize(
    "config, match",
    [
        ({"model_type": "falcon", "alibi": False}, "rotary"),
        ({"model_type": "falcon", "alibi": True, "activation": "relu"}, "activation 'relu'"),
        (
            {"model_type": "falcon", "alibi": True, "new_decoder_architecture": True, "num_kv_heads": 3},
            "not a multiple of num_kv_heads",
        ),
        ({"model_type": "bert", "position_embedding_type": "relative_key"}, "relative_key"),
        ({"model_type": "bert", "is_decoder": True}, "decoder"),
    ],
)
def test_unsupported_settings_are_one_line(tmp_path, config, match):
    from posbias.hf.families import spec_of

    base = {
        "falcon": {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 16, "vocab_size": 10},
        "bert": {
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "hidden_size": 16,
            "vocab_size": 10,
            "max_position_embeddings": 8,
            "intermediate_size": 32,
        },
    }[config["model_type"]]
    with pytest.raises(UserError, match=match) as err:
        spec_of({**base, **config})
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("family", ["bloom", "bert"])
def test_last_only_is_the_last_row(family):
    ck = checkpoint.load(FIXTURES / family)
    p = weights.params(ck)
    ids = np.load(FIXTURES / family / "expected.npz")["input_ids"].astype(np.int32)
    full = np.asarray(forward.forward(p, ids, ck.spec))
    last = np.asarray(forward.forward(p, ids, ck.spec, last_only=True))
    assert last.shape == (1, full.shape[1])
    np.testing.assert_allclose(last[0], full[-1], rtol=1e-6, atol=1e-6)
