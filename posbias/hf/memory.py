"""How many bytes a measurement of a Hugging Face checkpoint needs, from its shapes alone.

For a ``Spec`` (T layers, H heads, width D, MLP width F = ``spec.mlp`` (4 D but for some
Falcon and BERT checkpoints), vocabulary V), N tokens, a compute itemsize c (4 for float32,
8 for float64) and a weight itemsize w (2 for bfloat16 weights kept as stored, else c):

(a) parameters on the device: w (T L + V D + 2 D [+ 2 D embedding LayerNorm] [+ context D
    learned positions] [+ V D untied head]) with L = 4 D^2 + 2 D F + 9 D + F per layer
    (12 D^2 + 13 D for F = 4D), the canonical layout of ``posbias.hf.weights`` counted
    tensor by tensor (grouped keys and values are stored repeated per query head; the Llama
    family: L = 4 D A + 3 A + 3 D F + 2 F + 4 D with A = H d_head, RMSNorms without biases and
    a SwiGLU MLP, and D instead of 2 D for the final norm: ``_layer_weights``);
(b) the capture forward, per sequence: c (2 T H N^2 + 2 T N D + T N^2) for the stacked per-layer
    probabilities, content logits, block inputs, attention outputs and residual-norm kernels the scan
    returns, c (2 H N^2 + N H^2) for one layer's residual-norm kernel at work (the products A_hij A_h'ij
    summed over h', the Gram matrices of the heads' values),
    one block's activations ``block`` (below), c (2 N D + V) for the embeddings, the final
    hidden state and the last position's logits (``forward(..., last_only=True)``: the other
    positions are never unembedded);
(c) the influence gradient, per sequence: with rematerialisation (``jax.checkpoint`` on each
    block) c (T + 2) N D for the T block inputs the backward pass keeps (plus the input
    embeddings and x_0), two blocks' worth of activations (one block recomputed and its
    cotangents) and c 2 V for the last position's logits and their cotangent; without, the
    T blocks' saved residuals ``residuals`` instead of one recomputed block;
(d) the host accumulators: the sums of probabilities and content logits, 2 T H N^2 float64,
    plus one batch sum c T H N^2 while it is added.

``block`` = c (3 H N^2 + 9 N D + 2 N F): content logits, logits with the positional term and
probabilities; h, q, k, v, the heads' outputs, a_t, the residual sum, its LayerNorm and the
MLP output; the MLP's pre-activation and activation. ``residuals`` = c (2 H N^2 + 2 H N +
9 N D + 8 N F) per layer: what JAX's autodiff saves for one block (BLOOM's tanh GELU keeps
8 arrays of N F). The Llama family: 5 N D + 6 N A in place of 9 N D (A = H d_head; q and k
also rotated) and 4 N F (gate and up pre-activations, the SiLU, their product) in place of
2 N F in ``block``, 10 N F in ``residuals``. Every call also holds a ``workspace`` c (V D + L) (the output embedding
and one layer's weights in the compute dtype, upcast or sliced for the matrix products; an
encoder's influence adds the D x D identity it pulls back, k rows at a time: ``frobenius_chunk``, which adds
c (k - 1) ``block`` to (c), at most ``FROBENIUS_CHUNK_BYTES``) and, for a capture of
B > 1 sequences, its batch ``sums`` c 2 T H N^2 (for B = 1 XLA returns the one sequence's
arrays as the sum: no second buffer).

Where a language model's capture is read from the influence gradient's own forward (``one_forward``, one
function holding both), a sequence costs (b) + (c); else the larger of the two, as they run one after the other.

The counts are upper bounds on what XLA allocates: tests/product/test_hf_scale.py compiles the
jitted functions on the committed fixtures and reads XLA's own ``memory_analysis()``.
A batch of B sequences needs B times the per-sequence figure; ``batch_size`` fits B to a
budget.

    python -m posbias.hf.memory bloom-7b1 mpt-7b [CHECKPOINT_DIR ...] [--tokens 256 2048]

prints the figures as a Markdown table (float32 compute, bfloat16 or float32 weights) for the
two 7B models (the config.json fields they publish) or a checkpoint folder's config.json.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from posbias.errors import UserError
from posbias.hf.families import Spec, family_of, spec_of

FLOAT64 = 8
KNOWN = {  # the config.json fields spec_of reads, as published for these checkpoints
    "bloom-7b1": {
        "model_type": "bloom",
        "n_layer": 30,
        "n_head": 32,
        "hidden_size": 4096,
        "vocab_size": 250880,
        "layer_norm_epsilon": 1e-5,
    },
    "mpt-7b": {
        "model_type": "mpt",
        "n_layers": 32,
        "n_heads": 32,
        "d_model": 4096,
        "vocab_size": 50432,
        "attn_config": {"alibi": True, "alibi_bias_max": 8, "clip_qkv": None},
    },
    "falcon-rw-7b": {
        "model_type": "falcon",
        "n_layer": 36,
        "n_head": 64,
        "hidden_size": 4096,
        "vocab_size": 65024,
        "alibi": True,
        "bias": True,
        "multi_query": False,
        "parallel_attn": False,
        "new_decoder_architecture": False,
    },
    "smollm2-135m": {
        "model_type": "llama",
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "hidden_size": 576,
        "head_dim": 64,
        "intermediate_size": 1536,
        "vocab_size": 49152,
        "rms_norm_eps": 1e-5,
        "rope_theta": 100000.0,
        "tie_word_embeddings": True,
        "max_position_embeddings": 8192,
    },
    "mistral-7b": {
        "model_type": "mistral",
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "vocab_size": 32000,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "sliding_window": 4096,
        "tie_word_embeddings": False,
        "max_position_embeddings": 32768,
    },
}


@dataclass(frozen=True)
class Estimate:
    """Bytes of one measurement (module docstring): device parameters (a); per sequence, the
    capture (b) and the influence gradient with and without rematerialisation (c); per call,
    the ``workspace`` and the capture's batch ``sums``; the host accumulators (d)."""

    params: int
    capture: int
    gradient: int
    gradient_no_remat: int
    workspace: int
    sums: int
    host: int

    def per_sequence(self, influence: bool = True, remat: bool = True, one_forward: bool = False) -> int:
        """Device bytes one more sequence in a batch costs: the larger of the two functions (the gradient
        rematerialised or not), or with ``one_forward`` (the capture taken from the gradient's own forward,
        one function holding both) their sum."""
        if not influence:
            return self.capture
        gradient = self.gradient if remat else self.gradient_no_remat
        return self.capture + gradient if one_forward else max(self.capture, gradient)

    def device(self, batch: int, influence: bool = True, remat: bool = True, one_forward: bool = False) -> int:
        """Device bytes of a batch of B sequences: parameters, workspace, the batch sums when
        B > 1, and B times the per-sequence figure."""
        sums = self.sums if batch > 1 else 0
        return self.params + self.workspace + sums + batch * self.per_sequence(influence, remat, one_forward)


def _attention_width(spec: Spec) -> int:
    """A = H d_head, the width of the queries (= D but for a Llama-family head_dim given by the config)."""
    return spec.heads * spec.head_dim


def _layer_weights(spec: Spec) -> int:
    """One layer's canonical tensors: W_q, W_k, W_v (D, H, d_head) (grouped keys and values stored repeated),
    W_O, their biases and b_O; two LayerNorms (gain and bias) or RMSNorms (gain); the MLP's (2 or, with
    SwiGLU, 3) matrices and biases."""
    d, f, a = spec.width, spec.mlp, _attention_width(spec)
    norms = 2 * d if spec.norm == "rms" else 4 * d
    mlp = (3 * d * f + 2 * f if spec.glu else 2 * d * f + f) + d
    return 4 * d * a + 3 * a + d + norms + mlp


def params_bytes(spec: Spec, itemsize: int, *, tied: bool = False) -> int:
    """(a): the canonical parameters at ``itemsize`` bytes each; ``tied`` when the output projection
    is the embedding (else an untied head of V D is counted: an upper bound)."""
    d, v = spec.width, spec.vocab
    count = spec.layers * _layer_weights(spec) + v * d + (d if spec.norm == "rms" else 2 * d)
    count += 2 * d if spec.embed_norm else 0
    count += (spec.context or 0) * d
    count += 0 if tied else v * d
    return itemsize * count


def _vectors(spec: Spec, n: int) -> int:
    """One block's N-row arrays: h, a_t, the residual sum, its norm and the MLP output (N D each); q, k, v
    and the heads' outputs (N A each, A = H d_head), plus the rotated q and k of a rotary model."""
    a = _attention_width(spec)
    return 5 * n * spec.width + (6 if spec.rope is not None else 4) * n * a


def _block(spec: Spec, n: int) -> int:
    mlp = (4 if spec.glu else 2) * n * spec.mlp  # pre-activation(s), activation (and the SwiGLU product)
    return 3 * spec.heads * n * n + _vectors(spec, n) + mlp


def _residuals(spec: Spec, n: int) -> int:
    h = spec.heads
    return 2 * h * n * n + 2 * h * n + _vectors(spec, n) + (10 if spec.glu else 8) * n * spec.mlp


FROBENIUS_CHUNK_BYTES = 64 * 2**20
"""An encoder's influence pulls its D cotangent rows back ``frobenius_chunk`` at a time (one vmapped pullback:
products of k N rows instead of N); each row beyond the first is counted as one block's cotangents (XLA
allocates 0.34 to 0.42 of one on the BERT fixture), kept within this many bytes per sequence."""


def frobenius_chunk(spec: Spec, num_tokens: int, compute_itemsize: int) -> int:
    """k, the cotangent rows an encoder's Frobenius norm pulls back at once (``posbias.hf.measure.frobenius_fn``):
    1 + FROBENIUS_CHUNK_BYTES // (c block), at most D."""
    extra = compute_itemsize * _block(spec, num_tokens)
    return int(min(spec.width, 1 + FROBENIUS_CHUNK_BYTES // extra))


def estimate(
    spec: Spec, num_tokens: int, compute_itemsize: int = 4, weight_itemsize: int | None = None, *, tied: bool = False
) -> Estimate:
    """The figures of the module docstring for N = ``num_tokens`` (weights at ``weight_itemsize``,
    default the compute itemsize)."""
    if num_tokens < 1:
        raise UserError(f"memory estimate: N must be a positive integer, got {num_tokens}")
    c = compute_itemsize
    t, h, n, d, v = spec.layers, spec.heads, num_tokens, spec.width, spec.vocab
    stacked = t * h * n * n
    kept = (t + 2) * n * d
    logits = v  # the last position's row only (forward(..., last_only=True))
    weights = v * d + _layer_weights(spec)
    # an encoder's k cotangent rows at once: (k - 1) more rows' cotangents, a block's worth each
    chunk = 0 if spec.lm_head else (frobenius_chunk(spec, n, c) - 1) * _block(spec, n)
    return Estimate(
        params=params_bytes(spec, c if weight_itemsize is None else weight_itemsize, tied=tied),
        capture=c
        * (2 * stacked + 2 * t * n * d + t * n * n + 2 * h * n * n + n * h * h + _block(spec, n) + 2 * n * d + logits),
        gradient=c * (kept + 2 * _block(spec, n) + 2 * logits + chunk),
        gradient_no_remat=c * (kept + t * _residuals(spec, n) + 2 * _block(spec, n) + 2 * logits + chunk),
        workspace=c * (weights + (0 if spec.lm_head else d * d)),
        sums=c * 2 * stacked,
        host=FLOAT64 * 2 * stacked + c * stacked,
    )


def batch_size(est: Estimate, memory: int, samples: int, influence: bool = True) -> int:
    """Sequences per batch: as many as fit ``memory`` bytes of per-sequence work, between 1 and S."""
    return int(max(1, min(samples, memory // est.per_sequence(influence))))


def host_bytes(spec: Spec, num_tokens: int, compute_itemsize: int, stored: int, samples: int = 1) -> int:
    """(e) the host's bytes of one ``posbias measure`` run beyond the device's (module docstring), S T H N^2
    aside: the weights as read (``stored`` bytes: the safetensors files), the accumulators (d) with the
    capture's two batch sums c T H N^2 as they arrive, and what the outputs add: a float32 copy of the
    per-head kernels, the float64 head mean and row-sum check 8 T N^2 and its compute copy c T N^2,
    kernels.npz built in memory (per-head kernels at c, content logits at 8 and kernels at c, counted
    twice: the buffer and its growth), the value-norm-weighted kernels and the residual-norm kernels (each a
    float64 sum, the batch's sum at c and their copies at c and in kernels.npz: 2 (8 + 3 c) T N^2) and the
    S N float64 gradient
    norms. Phases are added, not overlapped: an upper bound (tests/hostile/test_hostile_measure_validate.py
    checks it against a process's peak resident memory)."""
    t, h, n, c = spec.layers, spec.heads, num_tokens, compute_itemsize
    stacked, kernels = t * h * n * n, t * n * n
    accumulate = FLOAT64 * 2 * stacked + 2 * c * stacked + 2 * (FLOAT64 + 3 * c) * kernels
    outputs = c * stacked + (FLOAT64 + c) * kernels + 2 * ((c + FLOAT64) * stacked + c * kernels)
    return stored + accumulate + outputs + FLOAT64 * samples * n


@dataclass(frozen=True)
class Plan:
    """A measurement's batch B and its bytes on the host (``host_bytes``) and on the device (``Estimate.device``)."""

    batch: int
    host: int
    device: int
    remat: bool = True  # the influence gradient rematerialised (else its batch fits the budget without)
    one_forward: bool = False  # the capture taken from the gradient's forward (its batch fits both at once)

    @property
    def total(self) -> int:
        return self.host + self.device


def run_budget(memory: int | None) -> tuple[int, str]:
    """(bytes, label) a run may use: ``--memory`` where given and within the machine's limit
    (``posbias.numerics.budget.memory_limit``: 80% of physical memory or POSBIAS_MEMORY_LIMIT), else
    that limit. Host and device are counted together: exact on the CPU, conservative on a GPU."""
    from posbias.numerics.budget import describe, memory_limit

    try:
        limit = memory_limit()
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if memory is not None and memory <= limit:
        return memory, f"--memory {describe(memory)}"
    above = f", below --memory {describe(memory)}" if memory is not None else ""
    return limit, f"the machine's limit {describe(limit)} (80% of physical memory or POSBIAS_MEMORY_LIMIT{above})"


def plan(
    spec: Spec,
    num_tokens: int,
    samples: int,
    compute_itemsize: int,
    stored: int,
    budget: tuple[int, str],
    *,
    influence: bool = True,
    tied: bool = True,
    what: str = "the measurement",
) -> Plan:
    """The largest batch B <= S whose host + device bytes fit ``budget`` (``run_budget``); UserError (one
    line, with the figures at B = 1) when even one sequence per batch does not. Weights on the device at
    the compute itemsize (the CPU casts them up: ``posbias.hf.measure.device_params``). B is sized for the
    capture and the rematerialised gradient run one after the other; then each saving that keeps the same B
    within the budget is taken, the larger first: the plain gradient (``remat`` false: it runs the forward
    once where the rematerialised one runs it twice) and the capture read from the gradient's own forward
    (``one_forward``: a language model's, ``posbias.hf.measure.influence_fn``), each a forward of the
    measurement's three saved."""
    from posbias.numerics.budget import describe

    budget, label = budget

    est = estimate(spec, num_tokens, compute_itemsize, tied=tied)
    host = host_bytes(spec, num_tokens, compute_itemsize, stored, samples)
    one = Plan(1, host, est.device(1, influence))
    if one.total > budget:
        raise UserError(
            f"{what} at N = {num_tokens} needs about {describe(one.total)} (host {describe(one.host)}, "
            f"device {describe(one.device)} at one sequence per batch), more than {label}: "
            f"lower the length" + (" or raise --memory" if label.startswith("--memory") else "")
        )
    room = budget - host - est.params - est.workspace - est.sums
    batch = int(max(1, min(samples, room // est.per_sequence(influence))))
    choices = [(False, True), (False, False), (True, True)] if influence else []
    fitting = (c for c in choices if (spec.lm_head or not c[1]) and batch * est.per_sequence(True, *c) <= room)
    remat, one_forward = next(fitting, (True, False))
    return Plan(batch, host, est.device(batch, influence, remat, one_forward), remat, one_forward)


COLUMNS = (
    "model",
    "N",
    "parameters bf16",
    "parameters f32",
    "capture / sequence",
    "gradient / sequence",
    "gradient / sequence, no remat",
    "device, B = 1, bf16 weights",
    "device, B = 1, f32 weights",
    "host accumulators",
)


def table_rows(name: str, spec: Spec, tokens, *, tied: bool) -> list[str]:
    """Markdown rows (``COLUMNS``) of ``estimate`` for float32 compute with bfloat16 or float32 weights."""
    from posbias.numerics.budget import describe

    rows = []
    for n in tokens:
        bf, f32 = estimate(spec, n, 4, 2, tied=tied), estimate(spec, n, 4, 4, tied=tied)
        values = (
            bf.params,
            f32.params,
            bf.capture,
            bf.gradient,
            bf.gradient_no_remat,
            bf.device(1),
            f32.device(1),
            bf.host,
        )
        rows.append("| " + " | ".join([name, str(n)] + [describe(v) for v in values]) + " |")
    return rows


def main(argv=None) -> int:
    """``python -m posbias.hf.memory MODEL ... [--tokens N ...]``: MODEL is bloom-7b1, mpt-7b or a
    checkpoint folder (its config.json)."""
    import json
    from pathlib import Path

    parser = argparse.ArgumentParser(
        prog="python -m posbias.hf.memory", description="Memory a posbias measurement of a Hugging Face model needs."
    )
    parser.add_argument("models", nargs="+", metavar="MODEL", help=f"{' or '.join(KNOWN)}, or a checkpoint folder")
    parser.add_argument("--tokens", type=int, nargs="+", default=[256, 2048], metavar="N")
    args = parser.parse_args(argv)
    rows = []
    try:
        for model in args.models:
            if model in KNOWN:
                config = KNOWN[model]
            elif (Path(model) / "config.json").is_file():
                try:
                    config = json.loads((Path(model) / "config.json").read_text())
                except (OSError, ValueError) as exc:
                    raise UserError(f"{model}/config.json: not readable JSON ({exc})") from None
            else:
                raise UserError(f"{model}: expected {' or '.join(KNOWN)} or a folder with a config.json")
            rows += table_rows(
                model, spec_of(config, model), args.tokens, tied=family_of(config.get("model_type"), model).tied(config)
            )
    except UserError as exc:
        print(f"python -m posbias.hf.memory: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS), *rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
