"""Build the tiny Hugging Face fixtures of tests/fixtures/hf/ (needs torch and transformers: the ``[hf]`` extra).

For each fixture (``FAMILIES``: BLOOM, GPT-2, MPT, three Falcon layouts with ALiBi, BERT, and
six of the Llama family, ``LLAMA_FIXTURES``: one of each rope_scaling type, GQA, biases, Mistral's
and Qwen2's sliding windows) this builds a randomly initialised model from its transformers config
class (2 layers, a few heads, width 32-64), saves it as a checkpoint folder (config.json, model.safetensors,
tokenizer.json: a byte-level BPE trained here on a few KB of CPython's pydoc_data text),
and records what transformers computes on fixed token ids, in float32, eval mode, eager
attention:

* ``expected.npz``: ``input_ids`` (N,), ``logits`` (N, V) (BERT, an encoder without a
  language-model head: the last hidden state (N, D)), ``attentions`` (T, H, N, N),
  ``hidden_states`` (T + 1, N, D) (transformers' convention: the T block inputs, then
  the final hidden state after the last LayerNorm), ``attention_outputs`` (T, N, D) (the
  output projection's output, bias included, hooked on the module), ``content`` (T, H, N, N)
  (raw q_i . k_j from the hooked QKV projections, split as transformers splits them; the Llama
  family: q_proj and k_proj rotated by the model's own rotary embedding, keys repeated per group);
* Falcon: transformers' FalconModel up to 5.24 adds the ALiBi term twice (in the attention and
  again folded into the mask; ``posbias.hf.families``); from 5.25 it adds it once, through the
  mask. The standard keys hold the checkpoints' own semantics (the term once, as RefinedWeb's
  modelling code adds it): with a transformers that adds it twice, computed with its
  FalconDecoderLayer modules called in turn with the ALiBi tensor and a plain causal mask;
  otherwise FalconForCausalLM's own outputs. ``transformers_logits`` and
  ``transformers_attentions`` hold what FalconForCausalLM itself returns (the committed
  fixtures were made with 5.24: the doubled term);
* ``versions.json``: the torch, transformers, tokenizers and safetensors versions used.

The weights are the config class's initialisation with a larger range (0.2), then every
LayerNorm gain, LayerNorm bias and linear bias perturbed by N(0, 0.1^2): a forward that
dropped a bias or a gain would not match.

    python scripts/make_hf_fixtures.py [--out tests/fixtures/hf] [--family bloom falcon]

``make_fixture(family, folder)`` is what tests/product/test_hf.py calls to regenerate a fixture on
the spot where torch is installed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

FAMILIES = (
    "bert",
    "bloom",
    "falcon",
    "falcon-mq",
    "falcon-grouped",
    "gpt2",
    "mpt",
    "llama",
    "llama-linear",
    "llama-dynamic",
    "llama-llama3",
    "mistral",
    "qwen2",
)
# The Llama family's fixtures (model_type, config fields): grouped-query attention with H/G = 2 and an untied
# head; one of each rope_scaling type (dynamic with max_position_embeddings < NUM_TOKENS, so the NTK base is
# recomputed; llama3 with a frequency in each of its three bands), with biases, multi-query keys, a head_dim
# that is not width / heads and tied embeddings among them; Mistral's sliding window and Qwen2's biases with a
# sliding window on its second layer only, both windows shorter than NUM_TOKENS.
LLAMA_FIXTURES = {
    "llama": ("llama", dict(num_key_value_heads=2, rope_parameters={"rope_type": "default", "rope_theta": 500.0})),
    "llama-linear": (
        "llama",
        dict(
            num_key_value_heads=1,
            head_dim=12,
            attention_bias=True,
            mlp_bias=True,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
        ),
    ),
    "llama-dynamic": (
        "llama",
        dict(
            num_key_value_heads=4,
            max_position_embeddings=8,
            rope_parameters={"rope_type": "dynamic", "factor": 3.0, "rope_theta": 10000.0},
        ),
    ),
    "llama-llama3": (
        "llama",
        dict(
            num_key_value_heads=2,
            max_position_embeddings=256,
            rope_parameters={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
                "rope_theta": 10000.0,
            },
        ),
    ),
    "mistral": (
        "mistral",
        dict(num_key_value_heads=2, sliding_window=5, rope_parameters={"rope_type": "default", "rope_theta": 1000.0}),
    ),
    "qwen2": (
        "qwen2",
        dict(
            num_key_value_heads=2,
            use_sliding_window=True,
            sliding_window=6,
            max_window_layers=1,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
        ),
    ),
}
MPT_CLIP = 1.0
TEXT = (
    "The attention of a transformer reads earlier positions; ALiBi subtracts a slope times the "
    "distance from each logit, so nearby tokens weigh more than distant ones."
)
NUM_TOKENS = 16
VOCAB = 320
SEED = 1234


def corpus_text(limit: int = 8000) -> str:
    """A few KB of CPython's reference text (pydoc_data.topics, sorted topic names)."""
    from pydoc_data.topics import topics

    out, size = [], 0
    for name in sorted(topics):
        out.append(topics[name])
        size += len(topics[name])
        if size >= limit:
            break
    return "".join(out)[:limit]


def build_tokenizer(vocab_size: int = VOCAB):
    """A byte-level BPE (the tokenizers library) trained on ``corpus_text``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<eos>"],
        show_progress=False,
    )
    tok.train_from_iterator([corpus_text()], trainer=trainer)
    return tok


def _config(family: str, vocab: int):
    if family == "bloom":
        from transformers import BloomConfig

        # 6 heads: not a power of two, so the extra-slope branch of BLOOM's construction is exercised
        return BloomConfig(
            vocab_size=vocab,
            hidden_size=48,
            n_layer=2,
            n_head=6,
            layer_norm_epsilon=1e-5,
            initializer_range=0.2,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            bos_token_id=0,
            eos_token_id=0,
        )
    if family == "gpt2":
        from transformers import GPT2Config

        return GPT2Config(
            vocab_size=vocab,
            n_positions=32,
            n_embd=32,
            n_layer=2,
            n_head=4,
            activation_function="gelu_new",
            initializer_range=0.2,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=0,
            eos_token_id=0,
        )
    if family == "mpt":
        from transformers import MptConfig

        # 6 heads: MPT's interleaved slopes for a head count that is not a power of two; clip_qkv active
        return MptConfig(
            vocab_size=vocab,
            d_model=48,
            n_heads=6,
            n_layers=2,
            max_seq_len=32,
            expansion_ratio=4,
            layer_norm_epsilon=1e-5,
            initializer_range=0.2,
            resid_pdrop=0.0,
            emb_pdrop=0.0,
            attn_config={"clip_qkv": MPT_CLIP, "alibi_bias_max": 8, "attn_pdrop": 0},
        )
    if family.startswith("falcon"):
        from transformers import FalconConfig

        # 16 heads: 2^(-h/2) slopes, not exact in bfloat16, so Falcon's rounding is exercised
        layout = {
            "falcon": dict(parallel_attn=False, multi_query=False, bias=True),  # Falcon-RW
            "falcon-mq": dict(parallel_attn=True, multi_query=True, bias=False),
            "falcon-grouped": dict(
                new_decoder_architecture=True, num_kv_heads=4, bias=False, num_ln_in_parallel_attn=2
            ),
        }[family]
        return FalconConfig(
            vocab_size=vocab,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=16,
            alibi=True,
            ffn_hidden_size=96,
            layer_norm_epsilon=1e-5,
            initializer_range=0.2,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            bos_token_id=0,
            eos_token_id=0,
            **layout,
        )
    if family == "bert":
        from transformers import BertConfig

        return BertConfig(
            vocab_size=vocab,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=80,
            hidden_act="gelu",
            max_position_embeddings=32,
            initializer_range=0.2,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            layer_norm_eps=1e-12,
            pad_token_id=0,
        )
    if family in LLAMA_FIXTURES:
        from transformers import AutoConfig

        model_type, fields = LLAMA_FIXTURES[family]
        base = dict(
            vocab_size=vocab,
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=32,
            rms_norm_eps=1e-5,
            initializer_range=0.2,
            hidden_act="silu",
            attention_dropout=0.0,
            tie_word_embeddings=False,
            bos_token_id=0,
            eos_token_id=0,
        )
        return AutoConfig.for_model(model_type, **{**base, **fields})
    raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}")


def _content(family: str, attn, fused, config, rotary=None) -> np.ndarray:
    """(H, N, N) raw q_i . k_j from the hooked QKV projection output(s), split as transformers splits them
    (the Llama family: after the rotary embedding, so the full pre-softmax logits before 1/sqrt(d_head))."""
    import torch

    if family in LLAMA_FIXTURES:  # q_proj, k_proj outputs rotated by the model's own rotary embedding, keys repeated
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv

        heads, kv, dim = config.num_attention_heads, config.num_key_value_heads, attn.head_dim
        n = fused[0].shape[0]
        q = fused[0].reshape(1, n, heads, dim).transpose(1, 2)
        k = fused[1].reshape(1, n, kv, dim).transpose(1, 2)
        cos, sin = rotary(q, torch.arange(n)[None])
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        return (q @ repeat_kv(k, heads // kv).transpose(2, 3))[0].numpy()
    if family == "bert":  # separate query and key linears: (N, D) each, viewed (N, H, K)
        q, k = (t.reshape(t.shape[0], config.num_attention_heads, -1) for t in fused[:2])
        return (q.permute(1, 0, 2) @ k.permute(1, 2, 0)).numpy()
    fused = fused[0]
    n = fused.shape[0]
    if family.startswith("falcon"):  # FalconAttention's three layouts of the fused projection (N, (H + 2G) K)
        heads, dim = config.num_attention_heads, attn.head_dim
        if config.new_decoder_architecture:  # G groups, each: its H/G queries, then its key, then its value
            groups = config.num_kv_heads
            grouped = fused.view(n, groups, heads // groups + 2, dim)
            q = grouped[:, :, :-2].reshape(n, heads, dim)
            k = grouped[:, :, -2].repeat_interleave(heads // groups, dim=1)  # group g serves queries g H/G ...
        elif config.multi_query:  # H queries, then one key and one value shared by every head
            q, k = (
                fused[:, : heads * dim].view(n, heads, dim),
                fused[:, heads * dim : (heads + 1) * dim].view(n, 1, dim),
            )
        else:  # Falcon-RW: query, key, value interleaved per head, (N, H, 3, K)
            view = fused.view(n, heads, 3, dim)
            q, k = view[:, :, 0], view[:, :, 1]
        return (q.permute(1, 0, 2) @ k.permute(1, 2, 0)).numpy()
    heads = config.n_heads if family == "mpt" else config.n_head
    dim = fused.shape[1] // 3 // heads
    if family == "mpt":  # MptAttention: clamp, then chunk into q | k | v
        fused = fused.clamp(-MPT_CLIP, MPT_CLIP)
    if family == "bloom":  # BloomAttention._reshape: view (N, H, 3, K)
        view = fused.view(n, heads, 3, dim)
        q, k = view[:, :, 0], view[:, :, 1]
    else:  # GPT2Attention: split into q | k | v, each viewed (N, H, K)
        q, k, _ = fused.split(heads * dim, dim=1)
        q, k = q.reshape(n, heads, dim), k.reshape(n, heads, dim)
    return (q.permute(1, 0, 2) @ k.permute(1, 2, 0)).numpy()


def _modules(family: str, model):
    """Per block: (attention module, output projection, [QKV projection(s)])."""
    if family == "bert":
        return [
            (lay.attention.self, lay.attention.output.dense, [lay.attention.self.query, lay.attention.self.key])
            for lay in model.encoder.layer
        ]
    if family in LLAMA_FIXTURES:
        return [
            (lay.self_attn, lay.self_attn.o_proj, [lay.self_attn.q_proj, lay.self_attn.k_proj])
            for lay in model.model.layers
        ]
    out = []
    for block in model.transformer.blocks if family == "mpt" else model.transformer.h:
        attn = block.attn if family in ("gpt2", "mpt") else block.self_attention
        names = {"bloom": ("dense", "query_key_value"), "gpt2": ("c_proj", "c_attn"), "mpt": ("out_proj", "Wqkv")}.get(
            family, ("dense", "query_key_value")
        )
        out.append((attn, getattr(attn, names[0]), [getattr(attn, names[1])]))
    return out


def _falcon_adds_alibi_twice(model) -> bool:
    """Whether this transformers' Falcon adds the ALiBi term twice: up to 5.24 FalconDecoderLayer took an
    ``alibi`` argument that FalconAttention added to q.k, and FalconModel also folded the term into the
    mask; from 5.25 the term reaches the attention through the mask alone (once), and the argument is gone."""
    import inspect

    return "alibi" in inspect.signature(type(model.transformer.h[0]).forward).parameters


def _falcon_single_alibi(model, ids):
    """Falcon with the ALiBi term once: transformers' own embedding, FalconDecoderLayer modules, final
    LayerNorm and head, called in turn with the ALiBi tensor and a plain causal mask."""
    import torch
    from transformers.models.falcon.modeling_falcon import build_alibi_tensor

    tr = model.transformer
    x = tr.word_embeddings(ids)
    n = ids.shape[1]
    alibi = build_alibi_tensor(torch.ones((1, n), dtype=torch.long), model.config.num_attention_heads, x.dtype)
    mask = torch.full((n, n), torch.finfo(x.dtype).min).triu(1)[None, None]
    hidden, attentions = [], []
    for block in tr.h:
        hidden.append(x)
        x, probs = block(x, alibi=alibi, attention_mask=mask, output_attentions=True)
        attentions.append(probs)
    x = tr.ln_f(x)
    hidden.append(x)
    return model.lm_head(x), tuple(attentions), tuple(hidden)


def make_fixture(family: str, folder) -> Path:
    """Build, save and record one family's fixture in ``folder`` (module docstring); returns it."""
    import safetensors
    import tokenizers
    import torch
    import transformers
    from transformers import AutoModel, AutoModelForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()
    ids = tok.encode(TEXT).ids[:NUM_TOKENS]
    if len(ids) < NUM_TOKENS:
        raise RuntimeError(f"the fixture text encodes to {len(ids)} tokens, fewer than {NUM_TOKENS}")
    torch.manual_seed(SEED)
    config = _config(family, tok.get_vocab_size())
    auto = AutoModel if family == "bert" else AutoModelForCausalLM
    model = auto.from_config(config, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for _name, p in model.named_parameters():
            if p.ndim == 1:  # LayerNorm gains and biases, linear biases
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
    model.save_pretrained(folder, safe_serialization=True)
    tok.save(str(folder / "tokenizer.json"))
    attn_out, qkv, hooks = [], [], []
    modules = _modules(family, model)
    for _, out_proj, projections in modules:
        hooks.append(out_proj.register_forward_hook(lambda mod, inp, out: attn_out.append(out[0].detach())))
        for proj in projections:
            hooks.append(proj.register_forward_hook(lambda mod, inp, out: qkv.append(out[0].detach())))
    inputs = torch.tensor([ids])
    extra = {}
    with torch.no_grad():
        out = model(inputs, output_attentions=True, output_hidden_states=True)
        if family == "bert":
            logits, attentions, hidden = out.last_hidden_state, out.attentions, out.hidden_states
        elif family.startswith("falcon"):
            extra = {
                "transformers_logits": out.logits[0].numpy().astype(np.float32),
                "transformers_attentions": np.stack([a[0].numpy() for a in out.attentions]).astype(np.float32),
            }
            if _falcon_adds_alibi_twice(model):
                attn_out.clear()
                qkv.clear()
                logits, attentions, hidden = _falcon_single_alibi(model, inputs)
            else:
                logits, attentions, hidden = out.logits, out.attentions, out.hidden_states
        else:
            logits, attentions, hidden = out.logits, out.attentions, out.hidden_states
    for hook in hooks:
        hook.remove()
    per = len(modules[0][2])
    rotary = model.model.rotary_emb if family in LLAMA_FIXTURES else None
    with torch.no_grad():
        content = np.stack(
            [
                _content(family, attn, qkv[per * t : per * (t + 1)], config, rotary)
                for t, (attn, _, _) in enumerate(modules)
            ]
        ).astype(np.float32)
    np.savez_compressed(
        folder / "expected.npz",
        input_ids=np.asarray(ids, np.int64),
        text=np.asarray(TEXT),
        logits=logits[0].numpy().astype(np.float32),
        attentions=np.stack([a[0].numpy() for a in attentions]).astype(np.float32),
        hidden_states=np.stack([h[0].numpy() for h in hidden]).astype(np.float32),
        attention_outputs=np.stack([a.numpy() for a in attn_out]).astype(np.float32),
        content=content,
        **extra,
    )
    versions = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "safetensors": safetensors.__version__,
        "numpy": np.__version__,
        "seed": SEED,
        "dtype": "float32",
        "attn_implementation": "eager",
    }
    (folder / "versions.json").write_text(json.dumps(versions, indent=1) + "\n")
    return folder


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests/fixtures/hf")
    parser.add_argument("--family", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    args = parser.parse_args(argv)
    for family in args.family:
        folder = make_fixture(family, args.out / family)
        size = sum(p.stat().st_size for p in folder.iterdir())
        print(f"{family}: {folder} ({size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
