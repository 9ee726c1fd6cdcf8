"""GGUF files (posbias.hf.gguf, posbias.hf.gguf_tokenizer) against the safetensors folders they were
converted from and, where torch and transformers are installed, against transformers' own GGUF loader.

The files are written here (tests/gguf_files.py: llama.cpp's conventions, gguf's GGUFWriter and
quantizer) from the tiny transformers fixtures of tests/fixtures/hf (llama: untied output, 4 query
heads, 2 key/value heads, head_dim 8; qwen2: tied, q/k/v biases).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")

import gguf as gguf_package  # noqa: E402

from posbias.hf import checkpoint, forward, gguf, weights  # noqa: E402
from posbias.hf.families import UnsupportedModel  # noqa: E402
from posbias.io.reports import read_report
from tests import gguf_files  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
LLAMA = FIXTURES / "llama"
Q8_0 = gguf_package.GGMLQuantizationType.Q8_0
Q4_1 = gguf_package.GGMLQuantizationType.Q4_1
TOL = 1e-5
HALF = 2.0**-11
HAS_TORCH = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers", "accelerate"))
TEXTS = [
    "The attention of a transformer reads earlier positions.",
    "  leading spaces,\ttabs\t\tand\n\n\nnewlines   \r\n trailing   ",
    "digits 0 12 345 6789 3.14159 1e-5 2026-12-01 +44 (0)20",
    "def f(x):\n    return {'a': [x ** 2 for x in range(10)]}  # comment\n",
    "unicode: café naïve Straße Ωμέγα 東京 😀🚀 — “quotes” …",
    "<eos>special<eos> in text <eos>",
    "",
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """GGUF files of the llama fixture: F32, Q8_0 (every 2-D weight whose rows split into 32-blocks) and Q4_1."""
    root = tmp_path_factory.mktemp("gguf")
    return {
        name: gguf_files.write(LLAMA, root / f"llama-{name}.gguf", q)
        for name, q in (("f32", None), ("q8_0", Q8_0), ("q4_1", Q4_1))
    }


def _safetensors(folder):
    from safetensors.numpy import load_file

    return load_file(str(folder / "model.safetensors"))


def _run(ck, ids):
    import jax

    p = weights.params(ck, np.float32)
    logits, cap = jax.jit(lambda p, ids: forward.forward(p, ids, ck.spec, capture=True))(p, ids)
    return np.asarray(logits), {k: np.asarray(v) for k, v in cap.items()}


def test_rope_permutation_is_undone_row_by_row():
    heads, k = 3, 6
    rows = np.arange(heads * k * 2, dtype=np.float32).reshape(heads * k, 2)
    stored = gguf_files.rope_permute(rows, heads)
    assert not np.array_equal(stored, rows)
    assert np.array_equal(gguf.unpermute(stored, heads), rows)
    assert np.array_equal(gguf.unpermute(stored[:, 0], heads), rows[:, 0])  # a bias
    # head 1, channel pair c = 2: Hugging Face rows 1*6 + 2 and 1*6 + 3 + 2 sit side by side in the file
    assert np.array_equal(stored[6 + 4], rows[6 + 2]) and np.array_equal(stored[6 + 5], rows[6 + 5])


def test_config_and_spec_from_metadata(files):
    ck, folder = gguf.load(files["f32"]), checkpoint.load(LLAMA)
    hf = json.loads((LLAMA / "config.json").read_text())
    for key in (
        "num_hidden_layers",
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "vocab_size",
        "max_position_embeddings",
        "tie_word_embeddings",
    ):
        assert ck.config[key] == hf[key], key
    assert ck.config["model_type"] == "llama" and ck.config["rope_theta"] == hf["rope_parameters"]["rope_theta"]
    assert ck.config["rms_norm_eps"] == float(np.float32(hf["rms_norm_eps"]))  # GGUF stores a float32
    assert ck.spec == dataclasses.replace(folder.spec, eps=ck.config["rms_norm_eps"])
    assert ck.folder == files["f32"] and ck.prefix == "model."


def test_f32_tensors_equal_the_folder(files):
    ck, ref = gguf.load(files["f32"]), _safetensors(LLAMA)
    assert set(ck.files) == set(ref)
    for name, value in ref.items():
        got = ck.top_level(name)
        assert got.dtype == np.float32 and got.shape == value.shape and np.array_equal(got, value), name


@pytest.mark.parametrize("kind", ["q8_0", "q4_1"])
def test_quantized_tensors_within_the_block_error(files, kind):
    """Q8_0: x = d q with d = max|x| / 127 per 32-block; Q4_1: x = d q + m, d = (max - min) / 15, m = min;
    d and m are stored as float16 (relative rounding HALF = 2^-11), so |error| <= d/2 + 127 d HALF (Q8_0),
    d/2 + 15 d HALF + |m| HALF (Q4_1); the 1-D norms and the 48-wide rows stay F32 and exact."""
    ck, ref = gguf.load(files[kind]), _safetensors(LLAMA)
    types = {t.name: t.tensor_type for t in gguf_package.GGUFReader(files[kind]).tensors}
    quantized = 0
    for name, value in ref.items():
        got = ck.top_level(name)
        if types[gguf_files.gguf_name(name)] == gguf_package.GGMLQuantizationType.F32:
            assert np.array_equal(got, value), name
            continue
        quantized += 1
        blocks = value.reshape(-1, 32)  # the rope permutation moves whole rows: each block stays one block
        lo, hi = blocks.min(axis=1, keepdims=True), blocks.max(axis=1, keepdims=True)
        if kind == "q8_0":
            d = np.maximum(-lo, hi) / 127
            bound = d / 2 + 127 * d * HALF
        else:
            d = (hi - lo) / 15
            bound = d / 2 + 15 * d * HALF + np.abs(lo) * HALF
        err = np.abs(got.reshape(-1, 32) - blocks)
        assert np.all(err <= bound * (1 + 1e-3) + 1e-7), name
        assert err.max() > 0, name
    assert quantized >= 10


def test_f32_forward_equals_the_folder_and_transformers_fixture(files):
    expected = np.load(LLAMA / "expected.npz")
    ids = expected["input_ids"].astype(np.int32)
    logits, cap = _run(gguf.load(files["f32"]), ids)
    ref_logits, ref_cap = _run(checkpoint.load(LLAMA), ids)
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(cap["probs"], ref_cap["probs"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(logits, expected["logits"], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(cap["probs"], expected["attentions"], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(cap["x"], expected["hidden_states"][:-1], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(cap["hidden"], expected["hidden_states"][-1], rtol=TOL, atol=TOL)


def test_q8_0_forward_is_close_to_the_folder(files):
    """A loose check (the exact one is against transformers on the same file, below): 8-bit weights move
    this random model's logits by a few percent of their size, never leave them unchanged."""
    expected = np.load(LLAMA / "expected.npz")
    ids = expected["input_ids"].astype(np.int32)
    logits, cap = _run(gguf.load(files["q8_0"]), ids)
    diff = np.abs(logits - expected["logits"])
    assert 0 < diff.mean() < 0.05 * np.abs(expected["logits"]).mean()
    assert np.abs(cap["probs"].sum(axis=-1) - 1).max() < 1e-5


def test_untied_output_and_tied_qwen2_biases(tmp_path):
    """llama: output.weight present -> tie_word_embeddings false and the head read from it; qwen2: no output
    tensor -> tied, q/k/v biases read as stored (no permutation: llama.cpp permutes llama's q/k only)."""
    ck = gguf.load(gguf_files.write(FIXTURES / "qwen2", tmp_path / "qwen2.gguf"))
    ref = _safetensors(FIXTURES / "qwen2")
    assert ck.config["tie_word_embeddings"] is True and ck.config["model_type"] == "qwen2" and not ck.permuted
    for name, value in ref.items():
        assert np.array_equal(ck.top_level(name), value), name
    p = weights.params(ck, np.float32)
    assert "unembed" not in p and np.array_equal(
        p["blocks"]["bq"][0].ravel(), ref["model.layers.0.self_attn.q_proj.bias"]
    )
    untied = weights.params(gguf.load(gguf_files.write(LLAMA, tmp_path / "llama.gguf")), np.float32)
    assert np.array_equal(untied["unembed"], _safetensors(LLAMA)["lm_head.weight"].T)


@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_ids_equal_the_folder_tokenizer(files, text):
    ours = gguf.load(files["f32"]).tokenizer()
    folder = checkpoint.load(LLAMA).tokenizer()
    assert ours.encode(text).ids == folder.encode(text).ids
    assert ours.decode(ours.encode(text).ids) == folder.decode(folder.encode(text).ids)


def test_tokenizer_adds_bos_where_the_file_says(tmp_path):
    tok = gguf.load(gguf_files.write(LLAMA, tmp_path / "bos.gguf", add_bos=True)).tokenizer()
    plain = checkpoint.load(LLAMA).tokenizer().encode("a text").ids
    assert tok.encode("a text").ids == [0, *plain]


def _refusal(tmp_path, capsys, path, *expected):
    from posbias.cli import main

    assert main(["measure", str(path), "--tokens", "8", "--samples", "1", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for part in expected:
        assert part in err, (part, err)
    assert not (tmp_path / "o").exists()


def test_refusals_are_one_line(tmp_path, capsys):
    bad = tmp_path / "garbage.gguf"
    bad.write_bytes(b"not a gguf file at all" * 10)
    _refusal(tmp_path, capsys, bad, "garbage.gguf", "not a readable GGUF file")
    f64 = gguf_files.write(
        LLAMA, tmp_path / "f64.gguf", skip=("model.norm.weight",), extra={"output_norm.weight": np.ones(32, np.float64)}
    )
    _refusal(tmp_path, capsys, f64, "output_norm.weight", "F64", "cannot dequantize")
    freqs = gguf_files.write(LLAMA, tmp_path / "freqs.gguf", extra={"rope_freqs.weight": np.ones(4, np.float32)})
    _refusal(tmp_path, capsys, freqs, "rope_freqs.weight")
    odd = gguf_files.write(LLAMA, tmp_path / "odd.gguf", extra={"blk.0.mystery.weight": np.ones(4, np.float32)})
    _refusal(tmp_path, capsys, odd, "blk.0.mystery.weight")
    deep = gguf_files.write(LLAMA, tmp_path / "deep.gguf", extra={"blk.2.attn_norm.weight": np.ones(32, np.float32)})
    _refusal(tmp_path, capsys, deep, "blk.2.attn_norm.weight", "block_count is 2")
    arch = gguf_files.write(LLAMA, tmp_path / "arch.gguf", arch="gemma2")
    _refusal(tmp_path, capsys, arch, "general.architecture 'gemma2'", "llama")
    spm = gguf_files.write(LLAMA, tmp_path / "spm.gguf", tokenizer_model="llama")
    _refusal(tmp_path, capsys, spm, "tokenizer.ggml.model", "SentencePiece")


def test_measure_and_validate_a_gguf_end_to_end(files, tmp_path, capsys):
    from posbias.cli import main

    text = np.load(LLAMA / "expected.npz")["text"]
    data = tmp_path / "docs.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"{text} {k}"}) for k in range(6)) + "\n")
    out = tmp_path / "m"
    assert (
        main(
            [
                "measure",
                str(files["q8_0"]),
                "--data",
                str(data),
                "--tokens",
                "12",
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
    assert report["model_type"] == "llama" and report["num_tokens"] == 12
    with np.load(out / "kernels.npz") as k:
        assert k["kernels"].shape == (2, 12, 12) and np.abs(k["kernels"].sum(axis=-1) - 1).max() < 1e-12
    lam = np.loadtxt(out / "lambdas.csv", delimiter=",", skiprows=1)[:, 1]
    assert np.all((lam > 0) & (lam < 1))
    influence = np.loadtxt(out / "influence.csv", delimiter=",", skiprows=1)[:, 1]
    assert abs(influence.sum() - 1) < 1e-12 and np.all(influence >= 0)
    v = tmp_path / "v"
    assert (
        main(
            [
                "validate",
                "--checkpoint",
                str(files["q8_0"]),
                "--data",
                str(data),
                "--lengths",
                "8,12",
                "--samples",
                "2",
                "--out",
                str(v),
            ]
        )
        == 0
    )
    assert (v / "report.json").is_file() and (v / "validate.png").is_file()


@pytest.mark.skipif(not HAS_TORCH, reason="torch, transformers and accelerate (the [hf] extra) are not installed")
@pytest.mark.parametrize("kind", ["f32", "q8_0"])
def test_transformers_loads_the_same_gguf_identically(files, tmp_path, kind):
    """transformers' own GGUF loader (AutoModelForCausalLM.from_pretrained(..., gguf_file=...), eager
    attention, float32) on the same file: logits, attentions and hidden states of our forward agree."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    shutil.copy(files[kind], tmp_path / "m.gguf")
    model = AutoModelForCausalLM.from_pretrained(
        tmp_path, gguf_file="m.gguf", dtype=torch.float32, attn_implementation="eager"
    ).eval()
    ids = np.load(LLAMA / "expected.npz")["input_ids"].astype(np.int32)
    with torch.no_grad():
        out = model(torch.tensor(ids[None].astype(np.int64)), output_attentions=True, output_hidden_states=True)
    logits, cap = _run(gguf.load(files[kind]), ids)
    np.testing.assert_allclose(logits, out.logits[0].numpy(), rtol=TOL, atol=TOL)
    np.testing.assert_allclose(cap["probs"], np.stack([a[0].numpy() for a in out.attentions]), rtol=TOL, atol=TOL)
    hidden = np.stack([h[0].numpy() for h in out.hidden_states])
    np.testing.assert_allclose(cap["x"], hidden[:-1], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(cap["hidden"], hidden[-1], rtol=TOL, atol=TOL)


@pytest.mark.skipif(not HAS_TORCH, reason="torch and transformers (the [hf] extra) are not installed")
@pytest.mark.parametrize("pre", ["default", "llama-bpe", "qwen2"])
def test_tokenizer_ids_equal_transformers_gguf_tokenizer(tmp_path, pre):
    from transformers import AutoTokenizer

    path = gguf_files.write(LLAMA, tmp_path / "t.gguf", pre=pre)
    theirs = AutoTokenizer.from_pretrained(tmp_path, gguf_file="t.gguf")
    ours = gguf.load(path).tokenizer()
    for text in TEXTS:
        assert ours.encode(text).ids == theirs(text)["input_ids"], (pre, text)


def test_unsupported_pre_tokenizer_is_refused(tmp_path):
    ck = gguf.load(gguf_files.write(LLAMA, tmp_path / "t.gguf", pre="tekken"))
    with pytest.raises(Exception, match="tokenizer.ggml.pre 'tekken'"):
        ck.tokenizer()
    with pytest.raises(UnsupportedModel, match="gemma2"):
        gguf.load(gguf_files.write(LLAMA, tmp_path / "g.gguf", arch="gemma2"))
