"""``posbias measure --backend transformers``: the measurement of ``posbias.hf.measure`` through transformers.

The same definitions (``posbias.measure.quantities``'s docstring; THEORY.md Notation and "Comparing
with measured influence"), read from transformers' own eager forward by PyTorch hooks, for
architectures the JAX families do not cover (and side by side with them where they do):

* lambda_t from x_t, the block's input (a forward pre-hook on the block), and a_t, the
  attention sub-layer's addend to the residual stream (a forward hook on the module that
  produces it: the output projection W_O, bias included; Gemma-2's post-attention norm);
* kernels: ``output_attentions`` (the eager softmax), averaged over sequences, and their head mean;
* content: raw q_hi . k_hj as the attention function receives them (after rotary embeddings,
  grouped keys repeated), with the module's own softmax scale s_t;
* value norms ||W_O^h v_hj|| (no bias) and the value-norm-weighted kernels
  (Kobayashi et al. 2020: per head A_hij ||W_O^h v_hj||, rows renormalised, then the head mean);
* influence: ||d p_top1 / d e_j||_2 at the last position by autograd, e_j the token embedding
  passed as ``inputs_embeds``.

q, k, v are read where the attention function receives them: the architectures whose modelling
code dispatches through transformers' ``AttentionInterface`` run under a registered
implementation, ``posbias_eager``, that records its arguments and calls that modelling module's
own ``eager_attention_forward`` (so every model-specific detail, soft-capping or sliding windows,
is the model's); BLOOM (its own attention code) is read from its fused query_key_value output.
Which module is which is a per-architecture table (``LAYOUTS``); any other model_type is refused
in one line.

Floating point: the model is cast to the compute dtype (float64 by default), but transformers
computes the eager softmax in float32 and the rotary tables in float32 whatever the dtype, so the
kernels and everything downstream of a rotary embedding carry float32 rounding (relative ~1e-7):
kernel rows sum to 1 only within ~1e-7 here (the JAX route: ~1e-15).
"""

from __future__ import annotations

import contextlib
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from posbias.errors import UserError
from posbias.measure.influence import as_influence
from posbias.measure.quantities import DENOMINATOR_FLOOR, MeasureError, Measurement, accumulate

IMPLEMENTATION = "posbias_eager"


@dataclass(frozen=True)
class Layout:
    """Where one architecture keeps what the measurement reads (paths relative to the ``*ForCausalLM``
    model for ``blocks``, to a block for the others)."""

    blocks: str  # the ModuleList of decoder blocks
    attention: str  # the attention module of a block
    addend: str  # the module whose output is a_t (added to the residual stream)
    out_proj: str  # W_O
    out_layout: str = "out-in"  # torch.nn.Linear (out, in) or GPT-2's Conv1D (in, out)
    qkv: str = "interface"  # "interface" (AttentionInterface arguments) or "bloom" (fused per-head q, k, v)
    scale: str = "scaling"  # the attention module's attribute holding s_t


_ROTARY = Layout("model.layers", "self_attn", "self_attn.o_proj", "self_attn.o_proj")
LAYOUTS = {
    "llama": _ROTARY,
    "mistral": _ROTARY,
    "qwen2": _ROTARY,
    "qwen3": _ROTARY,
    "gemma": _ROTARY,
    "phi3": _ROTARY,
    "starcoder2": _ROTARY,
    "gemma2": Layout("model.layers", "self_attn", "post_attention_layernorm", "self_attn.o_proj"),
    "phi": Layout("model.layers", "self_attn", "self_attn.dense", "self_attn.dense"),
    "gpt_neox": Layout("gpt_neox.layers", "attention", "attention.dense", "attention.dense"),
    "opt": Layout("model.decoder.layers", "self_attn", "self_attn.out_proj", "self_attn.out_proj"),
    "gpt2": Layout("transformer.h", "attn", "attn.c_proj", "attn.c_proj", out_layout="in-out"),
    "bloom": Layout(
        "transformer.h",
        "self_attention",
        "self_attention.dense",
        "self_attention.dense",
        qkv="bloom",
        scale="inv_norm_factor",
    ),
}


def layout_of(model_type, where: str) -> Layout:
    layout = LAYOUTS.get(model_type) if isinstance(model_type, str) else None
    if layout is None:
        raise UserError(
            f"{where}: model_type {model_type!r} is not in the transformers backend's table; "
            f"supported: {', '.join(sorted(LAYOUTS))}"
        )
    return layout


def require_torch():
    """torch and transformers, or one line saying how to install them."""
    try:
        import torch
        import transformers
    except ImportError:
        raise UserError("--backend transformers needs torch and transformers: pip install 'posbias[hf]'") from None
    return torch, transformers


# The modules whose attention calls are being recorded: id(attention module) -> callback(q, k, v).
_RECORDING: dict = {}


def _posbias_eager(module, query, key, value, attention_mask, *args, **kwargs):
    """The registered attention implementation: the modelling module's own eager attention, its
    inputs handed to the active recorder first."""
    impl = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if impl is None:
        raise UserError(f"{type(module).__module__}: no eager_attention_forward to delegate to")
    callback = _RECORDING.get(id(module))
    if callback is not None:
        callback(query, key, value)
    return impl(module, query, key, value, attention_mask, *args, **kwargs)


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

    AttentionInterface.register(IMPLEMENTATION, _posbias_eager)
    ALL_MASK_ATTENTION_FUNCTIONS.register(IMPLEMENTATION, eager_mask)


@dataclass(frozen=True)
class Loaded:
    """A transformers model ready to measure, with its layout and shape."""

    model: object
    layout: Layout
    model_type: str
    layers: int
    heads: int
    width: int
    vocab: int
    source: str


# config.json keys that, where present, must be positive integers or positive numbers (what any family's
# forward divides by or counts with), checked before transformers reads the file
CONFIG_COUNTS = (
    "num_hidden_layers", "n_layer", "hidden_size", "n_embd", "num_attention_heads", "n_head",
    "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
)  # fmt: skip
CONFIG_EPSILONS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon")


def _check_config(config: dict, where: Path) -> None:
    """The family-independent part of posbias's config checks (the JAX route checks each family in full)."""
    for key in CONFIG_COUNTS:
        value = config.get(key)
        if key in config and value is not None and (type(value) is not int or value < 1):
            raise UserError(f"{where}: {key} must be a positive integer, got {value!r}")
    for key in CONFIG_EPSILONS:
        value = config.get(key)
        if key in config and not (type(value) in (int, float) and math.isfinite(value) and value > 0):
            raise UserError(f"{where}: {key} must be a positive number, got {value!r}")


def read_config(path: Path):
    """(transformers config, folder, from_pretrained keywords, stored dtypes) of a checkpoint folder or a
    .gguf file. A folder is checked by posbias first (config.json an object with sound counts, every
    safetensors header readable and consistent with the index: ``checkpoint.weight_dtypes``), so that
    transformers never meets a file it would crash on; the dtypes are None for a .gguf file."""
    from posbias.hf import checkpoint

    dtypes = None
    if path.is_file() and path.suffix.lower() == ".gguf":
        folder, kwargs = path.parent, {"gguf_file": path.name}
    elif path.is_dir() and (path / "config.json").is_file():
        folder, kwargs = path, {}
        _check_config(checkpoint.read_json(path / "config.json"), path / "config.json")
        dtypes = checkpoint.weight_dtypes(path)
    else:
        raise UserError(f"{path}: expected a checkpoint folder with config.json or a .gguf file")
    _, transformers = require_torch()  # after posbias's own checks: a bad folder is refused at once
    try:
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True, **kwargs)
    except Exception as exc:  # transformers' own checks raise many types (TypeError for a mistyped field)
        raise UserError(f"{path}: transformers cannot read its configuration ({_first_line(exc)})") from None
    return config, folder, kwargs, dtypes


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:300]


def load(path, precision: str = "float64", *, read=None) -> Loaded:
    """A local checkpoint folder (config.json, safetensors) or a .gguf file, through transformers, in
    eval mode, in the compute dtype, under ``posbias_eager`` (eager for BLOOM); ``read``: what
    ``read_config(path)`` returned, where the caller has it already."""
    torch, transformers = require_torch()
    from posbias.hf import checkpoint

    path = Path(path)
    config, folder, kwargs, dtypes = read if read is not None else read_config(path)
    layout = layout_of(config.model_type, str(path))
    _register()
    dtype = torch.float64 if precision == "float64" else torch.float32
    implementation = "eager" if layout.qkv == "bloom" else IMPLEMENTATION
    _check_weight_memory(config, 8 if precision == "float64" else 4, path)
    with _held_messages(transformers) as messages:
        try:
            model, info = transformers.AutoModelForCausalLM.from_pretrained(
                folder,
                dtype=dtype,
                attn_implementation=implementation,
                local_files_only=True,
                output_loading_info=True,
                **kwargs,
            )
        except RuntimeError as exc:  # a tensor whose shape the configuration contradicts (its load report)
            rows = [" ".join(r.split()) for m in messages for r in m.splitlines() if "MISMATCH |" in r]
            detail = rows[0] if rows else _first_line(exc)
            raise UserError(f"{path}: transformers cannot load it ({detail[:300]})") from None
        except Exception as exc:  # its readers raise many types on a file they cannot use
            raise UserError(f"{path}: transformers cannot load it ({_first_line(exc)})") from None
        missing = sorted(info.get("missing_keys") or ())
        if missing:  # transformers initialises them at random: a measurement of no trained model
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            raise UserError(
                f"{path}: tensor {missing[0]}{more} missing from the checkpoint (transformers would "
                "initialise it at random): not a complete model for this config.json"
            )
        for name, p in model.named_parameters():
            if dtypes is not None and name in dtypes:
                checkpoint.require_float(name, dtypes[name][1], path)
            if not bool(torch.isfinite(p).all()):
                raise UserError(f"{path}: tensor {name} has non-finite values (NaN or infinity): nothing to measure")
    for message in messages:  # a model that loads: transformers' own warnings, as it would print them
        print(f"[transformers] {message}", file=sys.stderr)
    model.eval()
    blocks = model.get_submodule(layout.blocks)
    attn = blocks[0].get_submodule(layout.attention)
    heads = int(getattr(attn, "num_heads", None) or config.num_attention_heads)
    return Loaded(
        model, layout, config.model_type, len(blocks), heads, int(config.hidden_size), int(config.vocab_size), str(path)
    )


@contextlib.contextmanager
def _held_messages(transformers):
    """transformers' log messages held back (and its loading progress bars, its GGUF reader's own tqdm bar
    among them, written to a discarded stderr) while a model loads, so that a refusal is one line; the
    caller prints the messages when the model loads."""
    import io
    import logging

    messages: list[str] = []

    class Hold(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger("transformers")
    handlers, propagate = logger.handlers[:], logger.propagate
    bars = transformers.utils.logging.is_progress_bar_enabled()
    logger.handlers, logger.propagate = [Hold()], False
    transformers.utils.logging.disable_progress_bar()
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield messages
    finally:
        logger.handlers, logger.propagate = handlers, propagate
        if bars:
            transformers.utils.logging.enable_progress_bar()


def weight_bytes(config, itemsize: int) -> int:
    """An estimate of the model's weights from its configuration, before anything is read: per layer the
    attention's four D x D projections and the MLP's three D x F (gated; two without a gate count
    less), and the embedding and output D x V, at ``itemsize`` bytes. For refusing a model that cannot
    fit (a file declaring 10^9 layers), not for batching."""
    layers = int(getattr(config, "num_hidden_layers", 0) or getattr(config, "n_layer", 0) or 0)
    width = int(getattr(config, "hidden_size", 0) or getattr(config, "n_embd", 0) or 0)
    mlp = int(getattr(config, "intermediate_size", 0) or getattr(config, "n_inner", 0) or 4 * width)
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    return itemsize * (layers * (4 * width * width + 3 * width * mlp) + 2 * vocab * width)


def _check_weight_memory(config, itemsize: int, path: Path) -> None:
    from posbias.numerics import budget

    reason = budget.check(f"the weights of {path.name} (transformers backend)", weight_bytes(config, itemsize))
    if reason is not None:
        raise UserError(f"{path}: {reason}")


def _head_out_proj(layer, layout: Layout, heads: int):
    """W_O per head, (H, d_head, D), from the output projection's weight."""
    w = layer.get_submodule(layout.out_proj).weight
    if layout.out_layout == "out-in":  # (D, H d_head)
        d = w.shape[0]
        return w.reshape(d, heads, -1).permute(1, 2, 0)
    return w.reshape(heads, -1, w.shape[1])


class _Recorder:
    """Hooks on every block: the block input x_t, its output, the addend a_t, and q, k, v per layer, for one
    batch."""

    def __init__(self, loaded: Loaded):
        self.loaded = loaded
        self.x, self.a, self.out, self.qkv = {}, {}, {}, {}
        self.handles = []

    def __enter__(self):
        layout = self.loaded.layout
        for t, block in enumerate(self.loaded.model.get_submodule(layout.blocks)):
            self.handles.append(block.register_forward_pre_hook(self._block_input(t), with_kwargs=True))
            self.handles.append(block.register_forward_hook(self._output_into(self.out, t)))
            addend = block.get_submodule(layout.addend)
            self.handles.append(addend.register_forward_hook(self._output_into(self.a, t)))
            attn = block.get_submodule(layout.attention)
            if layout.qkv == "interface":
                _RECORDING[id(attn)] = self._interface(t)
            else:
                self.handles.append(attn.query_key_value.register_forward_hook(self._bloom(t)))
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()
        for block in self.loaded.model.get_submodule(self.loaded.layout.blocks):
            _RECORDING.pop(id(block.get_submodule(self.loaded.layout.attention)), None)

    def _block_input(self, t):
        def hook(module, args, kwargs):
            self.x[t] = args[0] if args else kwargs["hidden_states"]

        return hook

    @staticmethod
    def _output_into(table: dict, t: int):
        """A forward hook that keeps a module's output (the first of a tuple) as ``table[t]``."""

        def hook(module, args, output):
            table[t] = output[0] if isinstance(output, tuple) else output

        return hook

    def _interface(self, t):
        def record(q, k, v):
            self.qkv[t] = (q, k, v)

        return record

    def _bloom(self, t):
        heads = self.loaded.heads

        def hook(module, args, fused):
            b, n, _ = fused.shape
            parts = fused.view(b, n, heads, 3, -1)
            self.qkv[t] = tuple(parts[..., i, :].transpose(1, 2) for i in range(3))

        return hook


def capture_fn(loaded: Loaded):
    """(params, (B, N) ids) -> the ``posbias.measure.quantities.accumulate`` capture tuple: lambda means and sums
    of squares (B, T); the batch's sums of probabilities and raw content logits (T, H, N, N); and the dict of
    the batch's sums of the value-norm-weighted head-mean kernels (T, N, N), the value norms (T, H, N), the
    per-position ratios r_t,i (T, N) and, where ``residual_norm_kernels`` (the block's output is then
    x + a + m, so the MLP's output m is the output minus x + a), the residual-norm kernels (T, N, N) and the
    MLP-as-self ratios (T, N) (``posbias.measure.quantities.attention_share``); NumPy float64."""
    import jax

    from posbias.measure.quantities import attention_share, residual_norm_kernel

    torch, _ = require_torch()
    layout, model, heads = loaded.layout, loaded.model, loaded.heads
    blocks = model.get_submodule(layout.blocks)
    norm_kernels = residual_norm_kernels(loaded)
    batched_kernel = jax.jit(jax.vmap(residual_norm_kernel))  # compiled once per shape and dtype
    batched_own = jax.jit(jax.vmap(attention_share))

    def capture(_params, ids):
        ids = torch.tensor(np.asarray(ids), dtype=torch.long)
        with torch.no_grad(), _Recorder(loaded) as rec:
            out = model(input_ids=ids, output_attentions=True, use_cache=False)
        lam, lam_sq, per_position, own, probs, content, weighted, norms, residual = ([] for _ in range(9))
        with torch.no_grad():
            for t, block in enumerate(blocks):
                x, a = rec.x[t], rec.a[t]
                an, xn = torch.linalg.vector_norm(a, dim=-1), torch.linalg.vector_norm(x, dim=-1)
                r = an / torch.clamp(xn + an, min=DENOMINATOR_FLOOR)  # (B, N)
                lam.append(r.mean(dim=-1))
                lam_sq.append((r**2).sum(dim=-1))
                per_position.append(r.sum(dim=0))
                p = out.attentions[t]  # (B, H, N, N)
                q, k, v = rec.qkv[t]
                k = k.repeat_interleave(heads // k.shape[1], dim=1)
                v = v.repeat_interleave(heads // v.shape[1], dim=1)
                content.append((q @ k.transpose(-1, -2)).sum(dim=0))
                u = torch.einsum("bhjk,hkd->bhjd", v, _head_out_proj(block, layout, heads))  # W_O^h v_hj
                vn = torch.linalg.vector_norm(u, dim=-1)  # (B, H, N)
                if norm_kernels:
                    kernel = batched_kernel(*(z.numpy() for z in (p, u, x)))  # in the compute dtype
                    residual.append(torch.from_numpy(np.asarray(kernel).sum(axis=0)))
                    m = rec.out[t] - x - a
                    own.append(torch.from_numpy(np.asarray(batched_own(*(z.numpy() for z in (x, a, m)))).sum(axis=0)))
                w = p * vn[:, :, None, :]
                w = w / w.sum(dim=-1, keepdim=True)
                weighted.append(w.mean(dim=1).sum(dim=0))
                norms.append(vn.sum(dim=0))
                probs.append(p.sum(dim=0))

        def host(z, axis=0):
            return torch.stack(z, dim=axis).to(torch.float64).numpy()

        extras = {"kernels_value": host(weighted), "value_norms": host(norms), "lambda_positions": host(per_position)}
        if norm_kernels:
            extras.update(kernels_norm=host(residual), lambda_self=host(own))
        return host(lam, 1), host(lam_sq, 1), host(probs), host(content), extras

    return capture


def residual_norm_kernels(loaded: Loaded) -> bool:
    """Whether this backend forms the residual-norm kernels (``posbias.measure.quantities.residual_norm_kernel``)
    for the model: where the attention output W_O's is what the block adds to its input x (pre-norm and
    parallel blocks). Not for a block that normalises before adding (Gemma 2's post-attention norm), adds to
    the normalised input (BLOOM's ``apply_residual_connection_post_layernorm``) or normalises after the sum
    (OPT's ``do_layer_norm_before`` false): there the kernel needs a norm folded in that the JAX route folds
    and this one does not."""
    config = loaded.model.config
    return (
        loaded.layout.addend == loaded.layout.out_proj
        and not getattr(config, "apply_residual_connection_post_layernorm", False)
        and getattr(config, "do_layer_norm_before", True)
    )


def influence_fn(loaded: Loaded, influence=None):
    """(params, (B, N) ids) -> name -> (B, N) scores of ``posbias.measure.influence`` at the last position (the
    top-1 token held fixed), and "ig_error" -> (B,) with integrated gradients (``posbias.measure.integrated``
    driving the points of the path); by autograd through
    ``inputs_embeds`` (the sequences of a batch are independent, so the gradient of the batch's summed p_top1
    is each sequence's own); occlusion one position at a time for the whole batch (B forwards at once)."""
    from posbias.measure.influence import OCCLUSION, Influence, check_for
    from posbias.measure.integrated import integrate

    torch, _ = require_torch()
    influence = influence or Influence()
    check_for(influence, encoder=False, model=loaded.model_type)
    names = influence.measures
    model = loaded.model
    embed = model.get_input_embeddings()

    def last_logits(e):
        return model(inputs_embeds=e, use_cache=False).logits[:, -1].to(torch.float64)

    def top_and_grad(e, top):
        e = e.detach().requires_grad_(True)
        p = torch.softmax(last_logits(e), dim=-1).gather(1, top[:, None])[:, 0]
        p.sum().backward()
        return p.detach(), e.grad

    def scores(_params, ids):
        ids = torch.tensor(np.asarray(ids), dtype=torch.long)
        e = embed(ids).detach()
        with torch.no_grad():
            logp = torch.log_softmax(last_logits(e), dim=-1)
        top = logp.argmax(dim=-1)
        if influence.baseline == "zero":
            b = torch.zeros_like(e)
        else:
            b = embed.weight.detach().mean(dim=0).to(e.dtype).expand_as(e)
        _, g = top_and_grad(e, top)
        out = {"grad": torch.linalg.vector_norm(g, dim=-1)}
        if "gradxinput" in names:
            out["gradxinput"] = (e * g).sum(dim=-1).abs()
        if "gradxinput-norm" in names:
            out["gradxinput-norm"] = torch.linalg.vector_norm(e * g, dim=-1)
        if "ig" in names:

            def at(alphas):
                a = torch.tensor(alphas, dtype=e.dtype)[:, None, None]
                value, g = top_and_grad(b + a * (e - b), top)
                return value.to(torch.float64).numpy(), ((e - b) * g).sum(dim=-1).to(torch.float64).numpy()

            attribution, out["ig_error"] = integrate(at, influence.ig_steps, e.shape[0])
            out["ig"] = np.abs(attribution)
        if set(OCCLUSION) & set(names):
            p = logp.exp()
            dlogp, kl = [], []
            with torch.no_grad():
                for j in range(e.shape[1]):
                    occluded = e.clone()
                    occluded[:, j] = b[:, j]
                    logq = torch.log_softmax(last_logits(occluded), dim=-1)
                    dlogp.append((logp.gather(1, top[:, None]) - logq.gather(1, top[:, None]))[:, 0].abs())
                    kl.append(torch.where(p > 0, p * (logp - logq), torch.zeros_like(p)).sum(dim=-1))
            if "occlusion-logp" in names:
                out["occlusion-logp"] = torch.stack(dlogp, dim=1)
            if "occlusion-kl" in names:
                out["occlusion-kl"] = torch.stack(kl, dim=1)
        return {name: np.asarray(v.detach().to(torch.float64) if torch.is_tensor(v) else v) for name, v in out.items()}

    return scores


def scales(loaded: Loaded) -> np.ndarray:
    """(T,) the softmax's factor s_t of each layer, as the attention modules hold it."""
    blocks = loaded.model.get_submodule(loaded.layout.blocks)
    return np.array([float(getattr(b.get_submodule(loaded.layout.attention), loaded.layout.scale)) for b in blocks])


def bytes_per_sequence(loaded: Loaded, n: int, itemsize: int) -> int:
    """Conservative per-sequence working memory: per layer ~10 (H, N, N) arrays (probabilities, content,
    weighted kernels, eager logits and their gradients) and ~24 (N, D) activations, plus the (N, V) logits."""
    t, h, d = loaded.layers, loaded.heads, loaded.width
    return itemsize * (t * (10 * h * n * n + 24 * n * max(d, 4 * d)) + 2 * n * loaded.vocab)


def measure(
    loaded: Loaded,
    sequences,
    *,
    precision: str = "float64",
    memory: int = 2**30,
    progress=None,
    influence=True,
    batch: int | None = None,
) -> Measurement:
    """The ``Measurement`` of ``posbias.hf.measure.measure``, through transformers (module docstring), in
    batches of as many sequences as ``bytes_per_sequence`` fits in ``memory`` (or of ``batch``)."""
    import jax

    torch, _ = require_torch()
    sequences = np.asarray(sequences, np.int32)
    if sequences.ndim != 2 or sequences.shape[0] < 1 or sequences.shape[1] < 1:
        raise MeasureError(f"sequences: expected shape (S, N) with S, N >= 1, got {sequences.shape}")
    s, n = sequences.shape
    if sequences.min() < 0 or sequences.max() >= loaded.vocab:
        raise MeasureError(f"token ids must lie in [0, {loaded.vocab}) (the model's vocab_size)")
    itemsize = 8 if precision == "float64" else 4
    if batch is None:
        batch = memory // bytes_per_sequence(loaded, n, itemsize)
    batch = int(max(1, min(s, batch)))
    with jax.enable_x64(precision == "float64"), torch.inference_mode(False):
        m = accumulate(
            capture_fn(loaded),
            influence_fn(loaded, as_influence(influence)) if influence else None,
            None,
            sequences,
            batch=batch,
            precision=precision,
            slopes=np.zeros(loaded.heads),
            scales=scales(loaded),
            causal=True,
            progress=progress,
        )
    return replace(m, logits_note=logits_note(loaded))


PLAIN_LOGITS = ("llama", "qwen3", "gemma", "phi3", "phi", "gpt_neox", "opt", "gpt2")
"""Model types whose eager softmax reads s_t q.k on the causal mask and nothing else. The others may add what
the hooks do not record: BLOOM's ALiBi term, Gemma-2's soft-capping, sliding windows (Mistral, Qwen2,
Starcoder2, Gemma-2), so their ``Measurement.logits_note`` refuses the bias fit (``posbias.fit.bias``)."""


def logits_note(loaded: Loaded) -> str:
    """``Measurement.logits_note`` of this backend ("" for ``PLAIN_LOGITS``)."""
    if loaded.model_type in PLAIN_LOGITS:
        return ""
    return (
        f"the transformers backend records only s_t q.k for {loaded.model_type}, which may add an ALiBi term, "
        "soft-capping or a sliding window to it (measure with the JAX route where it has the family)"
    )


def tokenizer_of(path):
    """The tokenizer the JAX route uses for ``path``: a .gguf file's own (``posbias.hf.checkpoint``), else the
    folder's tokenizer.json, so that both backends measure the same token ids."""
    from posbias.hf.checkpoint import read_tokenizer

    path = Path(path)
    if path.suffix.lower() == ".gguf":
        from posbias.hf.source import open_checkpoint

        return open_checkpoint(path).tokenizer()
    return read_tokenizer(path)


def notes(loaded: Loaded) -> list[str]:
    """What a reader of report.json must know about this backend's measurement."""
    _, transformers = require_torch()
    return [
        f"measured through transformers {transformers.__version__} ({loaded.model_type}, eager attention, "
        f"hooks on the block input and on {loaded.layout.addend}); transformers computes the eager softmax "
        f"(and rotary tables) in float32 whatever the dtype, so kernels carry float32 rounding",
        "no ALiBi term: the slopes in config.yaml are 0; positions (learned or rotary) act through the content logits"
        if loaded.model_type != "bloom"
        else "BLOOM's ALiBi slopes are not read by this backend: the slopes in config.yaml are 0 (the JAX route "
        "records them)",
    ]
